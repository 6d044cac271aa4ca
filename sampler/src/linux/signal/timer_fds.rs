//! Which perf descriptors are btprof's signal timers, so the handler takes only their
//! poll-band signals as samples. Registered before the signal is enabled, removed after.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Timer descriptors below this number can be registered (a bit each).
pub(crate) const MAX_FD: usize = 1 << 16;
static OURS: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];

/// Whether `fd` is one of our timers. Async-signal-safe.
pub(crate) fn is_ours(fd: i32) -> bool {
    let Ok(fd) = usize::try_from(fd) else {
        return false;
    };
    fd < MAX_FD && OURS[fd / 64].load(Relaxed) & (1 << (fd % 64)) != 0
}

pub(crate) fn set_ours(fd: i32, on: bool) {
    let fd = fd as usize;
    let bit = 1u64 << (fd % 64);
    if on {
        OURS[fd / 64].fetch_or(bit, Relaxed);
    } else {
        OURS[fd / 64].fetch_and(!bit, Relaxed);
    }
}
