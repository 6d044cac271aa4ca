//! Keeps the kernel from passing one thread's inherited events to another.
//!
//! A new thread gets copies of its creator's inherited events, and if all
//! the creator's events were inherited the kernel marks the two sets as
//! clones. Cloned sets that follow each other on a CPU are swapped instead
//! of stopped and started, so a sampling period one thread began ends on
//! the other, and periods no longer follow each thread's own CPU time.
//!
//! So each thread the ring clock opens inherited events on also gets an
//! anchor: a dummy software event, not inherited, that counts nothing. The
//! threads it creates are then not clones and keep their own events.
//! Threads those create are clones of their creator's again (btprof opens
//! nothing on a thread born while sampling).

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
