//! The floor: what interrupting a busy thread 1000 times a second costs on
//! this machine before any profiler does any work.
//!
//! A sampler cannot be cheaper than the interrupt that stops the thread. On
//! bare metal that interrupt costs about a microsecond; in a virtual machine
//! every timer interrupt and every signal delivery can exit to the
//! hypervisor, which multiplies it. So the benchmark measures the floor in
//! the same run and reports btprof against it, not only against absolute
//! targets that a VM may put out of reach.
//!
//! Each worker asks the kernel for a per-thread timer on its own CPU time
//! (`perf_event_open`, `PERF_COUNT_SW_TASK_CLOCK`, period 1 ms: the event
//! `perf record -e task-clock` uses), so the timer fires only while the
//! thread runs, on the CPU it runs on. Two variants:
//!
//! - [`Floor::Interrupt`]: the timer fires and nothing else happens — the
//!   cost of being interrupted at all.
//! - [`Floor::Signal`]: each expiry also delivers a real-time signal to the
//!   thread (`F_SETSIG` + `F_SETOWN_EX`) whose handler only counts — the
//!   cheapest possible signal-based sampler.
//!
//! Self-monitoring with `exclude_kernel` works unprivileged up to
//! `perf_event_paranoid` 2; where the call is refused (paranoid 3, or a
//! seccomp filter) the floor is reported as not measured.

use std::sync::atomic::{AtomicU64, Ordering};

use btprof_sampler::bench_support::TaskClock;

/// Which floor a worker sets up for itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    Interrupt,
    Signal,
}

/// Signals the [`Floor::Signal`] handler received, all threads.
static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// The signal the floor uses: not btprof's default, so the two never meet.
pub fn signal() -> libc::c_int {
    libc::SIGRTMAX() - 5
}

/// Installs the counting handler for the run's duration.
pub struct Handler {
    previous: libc::sigaction,
}

impl Handler {
    pub fn install() -> Handler {
        // SAFETY: a zeroed sigaction is a valid "no handler, no flags"
        // value; the handler only touches an atomic, so it is async-signal
        // safe; `previous` is writable.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = count_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            let rc = libc::sigaction(signal(), &action, &mut previous);
            assert_eq!(rc, 0, "sigaction: {}", std::io::Error::last_os_error());
            Handler { previous }
        }
    }

    /// Signals counted so far.
    pub fn count() -> u64 {
        SIGNALS.load(Ordering::Relaxed)
    }
}

impl Drop for Handler {
    fn drop(&mut self) {
        // SAFETY: restores the action saved by `install`. Every timer was
        // closed with its worker, so no floor signal is still coming.
        unsafe { libc::sigaction(signal(), &self.previous, std::ptr::null_mut()) };
    }
}

/// A per-thread CPU-time timer (btprof's own [`TaskClock`], so the floor
/// measures the very event the sampler uses), closed on drop.
pub struct Timer {
    clock: TaskClock,
}

impl Timer {
    /// Starts a 1 ms task-clock timer on the calling thread.
    pub fn start(floor: Floor) -> std::io::Result<Timer> {
        let clock = TaskClock::open(0, 1_000_000)?;
        if floor == Floor::Signal {
            // SAFETY: gettid has no preconditions.
            clock.signal_thread(unsafe { libc::gettid() }, signal())?;
        }
        clock.enable()?;
        Ok(Timer { clock })
    }

    /// Timer expiries so far (CPU time on the clock / period).
    pub fn expiries(&self) -> u64 {
        self.clock.cpu_ns().unwrap_or(0) / 1_000_000
    }
}
