//! One-shot captures: the raw stack of every thread, or of one thread, at
//! one moment, with no profiler needed ("what is this thread doing right
//! now?").
//!
//! The platform captures ([`capture_threads`], [`capture_thread`]) hand
//! back addresses only: a thread is held just long enough to copy its
//! registers and the top of its stack, and everything that may allocate or
//! lock (unwinding with call frame information, symbolising) runs after it
//! is going again. On Linux a running thread is walked by the profiling
//! signal's handler and a thread blocked in a system call is read from
//! outside, never signalled, so a capture never makes a blocking call fail
//! with `EINTR`; on macOS each thread is suspended for its register read
//! and stack copy by the shared control loop. See `docs/architecture.md`.

pub use crate::capture::{CapturedThread, NotTaken, RunState, Taken};
pub use crate::error::trace_refused_message;

#[cfg(target_os = "linux")]
pub use crate::linux::dump::one_shot::{capture_thread, capture_threads};
#[cfg(target_os = "linux")]
pub use crate::linux::dump::remote::capture_process;
#[cfg(target_os = "linux")]
pub use crate::linux::signal::dump_slot::capture_signal;

/// Another process's threads: only Linux has a backend (`ptrace`). On
/// macOS it would need `task_for_pid`, which takes root or the debugger
/// entitlement; a program dumps its own threads with [`capture_threads`].
#[cfg(not(target_os = "linux"))]
pub fn capture_process(_pid: u32) -> Result<Vec<CapturedThread>, crate::Error> {
    Err(crate::Error::Unsupported)
}

#[cfg(target_os = "macos")]
pub use crate::macos::one_shot::{capture_thread, capture_threads, captures_allowed};

/// Whether one-shot captures may run in this process. Only macOS refuses:
/// under Rosetta 2 without `BTPROF_ALLOW_ROSETTA=1` it is
/// [`Error::Rosetta`](crate::Error::Rosetta), as every capture there
/// would be. For callers that take captures later (the stall watchdog) and
/// should refuse when they start, not fail each capture in silence.
#[cfg(not(target_os = "macos"))]
pub fn captures_allowed() -> Result<(), crate::Error> {
    Ok(())
}

/// No capture backend on this platform.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn capture_threads() -> Result<Vec<CapturedThread>, crate::Error> {
    Err(crate::Error::Unsupported)
}

/// No capture backend on this platform.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn capture_thread(_tid: u64) -> Result<CapturedThread, crate::Error> {
    Err(crate::Error::Unsupported)
}
