//! Per-thread CPU-time timers: a task-clock perf event per thread whose
//! overflow signals that thread (`F_OWNER_TID`) once per period of its CPU
//! time, in user code (`exclude_kernel`). A descriptor is in
//! `signal::timer_fds` from before its signal is enabled until after it is
//! disabled: the handler takes a poll-band signal only from one in it.

use std::io;

use crate::linux::kernel::task_clock::TaskClock;
use crate::linux::kernel::threads;
use crate::linux::signal::timer_fds::{set_ours, MAX_FD};

#[derive(Debug)]
pub(crate) struct ThreadTimer {
    clock: TaskClock,
    tid: i32,
    /// The thread's CPU clock when the timer was enabled.
    cpu_at_open: u64,
}

impl ThreadTimer {
    /// Opens a timer on thread `tid` raising `signal` every `period_ns` of its CPU time.
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

    /// CPU time (ns) since the timer opened by the thread's CPU clock, which
    /// leaves out time a VM's host stole; `None` once it exited.
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        threads::thread_cpu_ns(self.tid).map(|now| now.saturating_sub(self.cpu_at_open))
    }

    /// The timer's own count (ns): readable after the exit, stolen time in.
    pub(crate) fn counted_ns(&self) -> Option<u64> {
        self.clock.cpu_ns()
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // Disabled, unregistered, then closed (as `clock` drops): a signal
        // taken after this is counted as stray.
        self.clock.disable();
        set_ours(self.clock.fd(), false);
    }
}

/// Whether this process may open per-thread CPU timers (opens a disabled one).
pub(crate) fn available() -> io::Result<()> {
    TaskClock::open(0, 1_000_000).map(drop)
}
