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

/// Which floor a worker sets up for itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    Interrupt,
    Signal,
}

/// The first 64 bytes of `struct perf_event_attr` (`PERF_ATTR_SIZE_VER0`):
/// every field the floor needs, and a size every kernel since 2.6.31 takes.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `exclude_kernel` and `exclude_hv`: required for unprivileged use.
const FLAGS_EXCLUDE_KERNEL_HV: u64 = (1 << 5) | (1 << 6);
/// From `<linux/perf_event.h>`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// From `<fcntl.h>`; the same on x86_64 and aarch64.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
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

/// A per-thread CPU-time timer, closed on drop.
pub struct Timer {
    fd: libc::c_int,
}

impl Timer {
    /// Starts a 1 ms task-clock timer on the calling thread.
    pub fn start(floor: Floor) -> std::io::Result<Timer> {
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: 1_000_000,
            flags: FLAGS_EXCLUDE_KERNEL_HV,
            wakeup_events: 1,
            ..PerfEventAttr::default()
        };
        // SAFETY: `attr` is a valid, fully initialised perf_event_attr
        // prefix whose `size` says how much of it there is; pid 0 and cpu
        // -1 mean "the calling thread, on any CPU".
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let timer = Timer {
            fd: fd as libc::c_int,
        };
        if floor == Floor::Signal {
            // SAFETY: plain syscalls on our own descriptor; `owner` lives
            // across the call.
            unsafe {
                let owner = FOwnerEx {
                    kind: F_OWNER_TID,
                    pid: libc::gettid(),
                };
                check(libc::fcntl(
                    timer.fd,
                    F_SETOWN_EX,
                    &owner as *const FOwnerEx,
                ))?;
                check(libc::fcntl(timer.fd, F_SETSIG, signal()))?;
                let flags = libc::fcntl(timer.fd, libc::F_GETFL);
                check(libc::fcntl(timer.fd, libc::F_SETFL, flags | libc::O_ASYNC))?;
            }
        }
        Ok(timer)
    }

    /// Timer expiries so far (CPU time on the clock / period).
    pub fn expiries(&self) -> u64 {
        let mut ns = 0u64;
        // SAFETY: reading a counter from our own perf descriptor into a u64
        // (no read_format flags: the value is one u64).
        let n = unsafe { libc::read(self.fd, (&mut ns as *mut u64).cast(), 8) };
        if n == 8 {
            ns / 1_000_000
        } else {
            0
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor this timer owns.
        unsafe { libc::close(self.fd) };
    }
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
