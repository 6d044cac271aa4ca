//! Keeps the kernel from passing one thread's inherited events to another.
//!
//! When a thread creates another, the kernel gives the new thread copies of
//! the creator's inherited events, and if every event of the creator was
//! inherited it marks the new thread's set as a clone of the creator's.
//! Two threads with cloned sets that follow each other on a CPU then swap
//! their sets instead of stopping one thread's events and starting the
//! other's: the events keep running, and a sampling period that one
//! thread began ends on the other. Each sample still carries the thread
//! that was running, but the periods no longer follow each thread's own
//! CPU time. `perf record -e task-clock -c 1000000` of a program whose two
//! threads burn 1.0 and 0.5 CPU-seconds gave them 1040 and 460 samples, or
//! 979 and 521, beside a busy test suite; with one more event that is not
//! inherited (`-e dummy/no-inherit/`) 999 and 500 in five runs of five.
//!
//! So each thread the ring clock opens its inherited events on also gets
//! an anchor: a dummy software event, not inherited, that counts nothing.
//! The threads it creates are then not clones, and each keeps its own
//! events. Threads those threads create are clones of their creator's set
//! again (btprof opens nothing on a thread born while sampling).

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
