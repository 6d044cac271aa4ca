//! The system calls the handler makes besides its reads: clocks and the thread id, each
//! async-signal-safe.

/// `clock` in nanoseconds, 0 if it is gone. Async-signal-safe.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    try_clock_ns(clock).unwrap_or(0)
}

/// `clock` in nanoseconds; `None` if it is gone (a thread's clock). Async-signal-safe.
pub(crate) fn try_clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The calling thread's id. Async-signal-safe.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}
