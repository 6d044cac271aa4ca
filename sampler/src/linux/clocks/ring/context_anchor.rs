//! Keeps the kernel from passing one thread's inherited events to another.
//!
//! If all of a creator's events are inherited, the kernel marks the new
//! thread's copies as a clone of its set, and cloned sets that follow each
//! other on a CPU are swapped instead of stopped: a period one thread began
//! ends on the other. So each thread the ring clock opens inherited events
//! on gets an anchor, a dummy event that is not inherited, and the threads
//! it creates keep their own events. (Their children are clones again;
//! btprof opens nothing on threads born while sampling.)

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::linux::kernel::perf_attr::PerfEventAttr;

/// A dummy event on one thread, not inherited; closed on drop.
pub(crate) struct ContextAnchor {
    _event: OwnedFd,
}

impl ContextAnchor {
    /// Opens the anchor on thread `tid` of this process.
    pub(crate) fn open(tid: i32) -> io::Result<ContextAnchor> {
        let fd = PerfEventAttr::dummy().open(tid, -1)?;
        // SAFETY: `fd` was just opened, is valid and owned by nothing else.
        let _event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ContextAnchor { _event })
    }
}
