//! Naming one thread ahead of time, and taking its backtrace.

use btprof_sampler::one_shot::CapturedThread;

use crate::Error;

use super::ThreadBacktrace;

/// A thread of this process, named by its OS thread id, for [`backtrace`].
///
/// Take it from the thread itself ([`Thread::current`]) or from a
/// `pthread_t`, and keep it: the handle is a plain id, valid from any
/// thread. Once the thread exits its backtrace comes back as
/// [`super::ThreadState::Gone`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thread {
    tid: u64,
}

impl Thread {
    /// The calling thread.
    pub fn current() -> Thread {
        Thread {
            tid: btprof_sampler::current_thread_id(),
        }
    }

    /// The process's main thread (the one `main` runs on).
    #[cfg(target_os = "linux")]
    pub fn main() -> Thread {
        // The main thread's id is the process id.
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        Thread { tid: pid as u64 }
    }

    /// The process's main thread (the one `main` runs on).
    #[cfg(target_vendor = "apple")]
    pub fn main() -> Thread {
        extern "C" {
            /// libSystem: the main thread's `pthread_t`.
            fn pthread_main_thread_np() -> libc::pthread_t;
        }
        // SAFETY: no arguments; returns the main thread, which exists for
        // the process's life.
        Thread::from_pthread(unsafe { pthread_main_thread_np() })
    }

    /// The thread a `pthread_t` of this process names. The `pthread_t`
    /// must belong to a thread that has not been joined or detached and
    /// exited (POSIX makes any use of one undefined after that).
    #[cfg(target_os = "linux")]
    pub fn from_pthread(thread: libc::pthread_t) -> Thread {
        // glibc and musl both build a thread's CPU clock id from its
        // kernel id as `((!tid) << 3) | 6`, so the public
        // `pthread_getcpuclockid` gives the id back without reaching into
        // the C library's private thread structure.
        let mut clock: libc::clockid_t = 0;
        // SAFETY: `thread` is a live thread of this process (the caller's
        // promise) and `clock` is a valid out-pointer.
        let rc = unsafe { libc::pthread_getcpuclockid(thread, &mut clock) };
        let tid = if rc == 0 { !(clock >> 3) } else { 0 };
        Thread {
            tid: u64::try_from(tid).unwrap_or(0),
        }
    }

    /// The thread a `pthread_t` of this process names. The `pthread_t`
    /// must belong to a thread that has not been joined or detached and
    /// exited.
    #[cfg(target_vendor = "apple")]
    pub fn from_pthread(thread: libc::pthread_t) -> Thread {
        let mut tid = 0u64;
        // SAFETY: `thread` is a live thread of this process (the caller's
        // promise) and `tid` is a valid out-pointer.
        unsafe { libc::pthread_threadid_np(thread, &mut tid) };
        Thread { tid }
    }

    /// The thread with OS thread id `tid` (the kernel tid on Linux, the
    /// 64-bit thread id on macOS).
    pub fn from_tid(tid: u64) -> Thread {
        Thread { tid }
    }

    /// Its OS thread id.
    pub fn tid(&self) -> u64 {
        self.tid
    }
}

/// The backtrace of one thread, taken now; symbolised after the thread
/// runs again. A thread that has exited comes back as
/// [`super::ThreadState::Gone`], not as an error. Refused like
/// [`super::ThreadDump::capture`] under Rosetta 2.
pub fn backtrace(thread: &Thread) -> Result<ThreadBacktrace, Error> {
    symbolize_captured(&capture(thread)?)
}

/// The first step of [`backtrace`]: the thread stopped, walked and
/// running again. Apart from the second so that a caller can time them
/// apart: only this one holds the thread.
pub(crate) fn capture(thread: &Thread) -> Result<CapturedThread, Error> {
    Ok(btprof_sampler::one_shot::capture_thread(thread.tid)?)
}

/// The second step of [`backtrace`]: `raw`'s frames symbolised, which
/// the first time in a process includes loading the symbol tables.
pub(crate) fn symbolize_captured(raw: &CapturedThread) -> Result<ThreadBacktrace, Error> {
    let mut threads = super::symbolize(std::slice::from_ref(raw))?;
    Ok(threads.remove(0))
}
