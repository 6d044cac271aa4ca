//! Per-thread CPU-time timers: a `perf_event_open` task-clock event per
//! sampled thread whose overflow raises the profiling signal in that same
//! thread.
//!
//! The event counts the thread's own CPU time (`pid` = its tid, `cpu` =
//! -1) and overflows once per period of it, from the kernel's high-
//! resolution timer while the thread is on a CPU. With `exclude_kernel` an
//! overflow that falls in kernel code is skipped (the period restarts), so
//! every sample lands in user code, at the instruction where the CPU time
//! was spent, as `perf record -e cpu-clock` samples do. `F_SETOWN_EX`
//! with `F_OWNER_TID`, `F_SETSIG` and `O_ASYNC` make the overflow a
//! real-time signal to that thread rather than `SIGIO` to the process.
//!
//! Unprivileged self-monitoring with `exclude_kernel` is allowed up to
//! `perf_event_paranoid` 2; where the call is refused (paranoid 3 and up,
//! a seccomp filter, no perf support) the sampler falls back to pacing
//! samples from its own thread.
//!
//! Descriptors are recorded in a static bitmap (`signal::timer_fds`) before their
//! signal is enabled and removed after it is disabled: the signal handler
//! takes a poll-band signal as a sample only from a descriptor in it.

use std::io;

use crate::linux::kernel::task_clock::TaskClock;
use crate::linux::kernel::threads;
use crate::linux::signal::timer_fds::{set_ours, MAX_FD};

/// One thread's CPU-time timer; disabled, unregistered and closed on drop.
#[derive(Debug)]
pub(crate) struct ThreadTimer {
    clock: TaskClock,
    tid: i32,
    /// The thread's CPU clock when the timer was enabled.
    cpu_at_open: u64,
}

impl ThreadTimer {
    /// Opens a task-clock timer on thread `tid` of this process that raises
    /// `signal` in that thread every `period_ns` of its CPU time.
    pub(crate) fn open(tid: i32, period_ns: u64, signal: libc::c_int) -> io::Result<ThreadTimer> {
        let clock = TaskClock::open(tid, period_ns)?;
        clock.signal_thread(tid, signal)?;
        let fd = clock.fd();
        if fd as usize >= MAX_FD {
            return Err(io::Error::other(format!(
                "timer descriptor {fd} is above the {MAX_FD} btprof can register"
            )));
        }
        set_ours(fd, true);
        let cpu_at_open = threads::thread_cpu_ns(tid).unwrap_or(0);
        let timer = ThreadTimer {
            clock,
            tid,
            cpu_at_open,
        };
        timer.clock.enable()?;
        Ok(timer)
    }

    /// The CPU time the thread used since the timer was opened, in
    /// nanoseconds, by its CPU clock; `None` once the thread exited.
    ///
    /// Not the timer's own count: on a virtual machine the task clock runs
    /// on while the host has stopped the virtual CPU under the thread
    /// (stolen time, which the CPU clock leaves out), so its count can
    /// exceed the thread's CPU time by whatever the host stole (seen: 100
    /// ms more than the 120 ms a thread ran).
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        threads::thread_cpu_ns(self.tid).map(|now| now.saturating_sub(self.cpu_at_open))
    }

    /// The timer's own count since it was opened, in nanoseconds: readable
    /// after the thread exited too, but with any time stolen from it
    /// ([`Self::cpu_ns`]).
    pub(crate) fn counted_ns(&self) -> Option<u64> {
        self.clock.cpu_ns()
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // Disabled first, then unregistered, then closed (when `clock`
        // drops): a signal already queued is discarded when the handler is
        // removed (SIG_IGN), and one taken before that finds the
        // descriptor unregistered and is counted as stray.
        self.clock.disable();
        set_ours(self.clock.fd(), false);
    }
}

/// Whether this process may open per-thread CPU timers: opens a disabled
/// one on the calling thread and closes it.
pub(crate) fn available() -> io::Result<()> {
    TaskClock::open(0, 1_000_000).map(drop)
}
