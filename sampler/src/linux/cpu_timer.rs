//! One sampled thread's kernel CPU-time timer, of either kind the kernel
//! offers: a perf task-clock event ([`ThreadTimer`]) or a POSIX CPU timer
//! ([`PosixTimer`]). Both raise the profiling signal in their own thread
//! once per period of its CPU time, so the sampler opens, reads and closes
//! them the same way whichever clock runs.

use std::io;

use super::posix_timers::PosixTimer;
use super::thread_timers::ThreadTimer;
use crate::SampleClock;

/// A thread's timer; closed (and its signal stopped) on drop.
#[derive(Debug)]
pub(crate) enum CpuTimer {
    Perf(ThreadTimer),
    Posix(PosixTimer),
}

impl CpuTimer {
    /// Opens the timer `clock` uses on thread `tid`, raising `signal` every
    /// `period_ns` of its CPU time. `clock` must be a kernel-paced one.
    pub(crate) fn open(
        clock: SampleClock,
        tid: i32,
        period_ns: u64,
        signal: libc::c_int,
    ) -> io::Result<CpuTimer> {
        match clock {
            SampleClock::ThreadTimers => ThreadTimer::open(tid, period_ns, signal).map(Self::Perf),
            SampleClock::PosixTimers => PosixTimer::open(tid, period_ns, signal).map(Self::Posix),
            SampleClock::SamplerThread => Err(io::Error::from(io::ErrorKind::Unsupported)),
        }
    }

    /// The CPU time the thread used since the timer was opened, in
    /// nanoseconds (`None` where it can no longer be read).
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        match self {
            CpuTimer::Perf(timer) => timer.cpu_ns(),
            CpuTimer::Posix(timer) => timer.cpu_ns(),
        }
    }

    /// For a thread that exited: what the kernel counted since the timer
    /// was opened, which may include time stolen from it
    /// ([`ThreadTimer::counted_ns`]); `None` for a POSIX timer, whose clock
    /// is gone with its thread.
    pub(crate) fn counted_ns(&self) -> Option<u64> {
        match self {
            CpuTimer::Perf(timer) => timer.counted_ns(),
            CpuTimer::Posix(_) => None,
        }
    }
}
