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
//! Descriptors are recorded in a static bitmap ([`is_ours`]) before their
//! signal is enabled and removed after it is disabled: the signal handler
//! takes a poll-band signal as a sample only from a descriptor in it.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Timer descriptors below this number can be registered (a bit each).
const MAX_FD: usize = 1 << 16;
static OURS: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];

/// Whether `fd` is one of our timers. Async-signal-safe.
pub(crate) fn is_ours(fd: i32) -> bool {
    let Ok(fd) = usize::try_from(fd) else {
        return false;
    };
    fd < MAX_FD && OURS[fd / 64].load(Relaxed) & (1 << (fd % 64)) != 0
}

fn set_ours(fd: i32, on: bool) {
    let fd = fd as usize;
    let bit = 1u64 << (fd % 64);
    if on {
        OURS[fd / 64].fetch_or(bit, Relaxed);
    } else {
        OURS[fd / 64].fetch_and(!bit, Relaxed);
    }
}

/// The first 64 bytes of `struct perf_event_attr` (`PERF_ATTR_SIZE_VER0`):
/// every field needed here, and a size every kernel since 2.6.31 takes.
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
/// `disabled`: enabled only once the signal is routed to the thread.
const FLAG_DISABLED: u64 = 1;
/// `exclude_kernel` and `exclude_hv`: user-space samples only, and what
/// unprivileged use requires.
const FLAGS_EXCLUDE_KERNEL_HV: u64 = (1 << 5) | (1 << 6);
/// From `<linux/perf_event.h>`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// From `<fcntl.h>`; the same on x86_64 and aarch64.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// One thread's CPU-time timer; disabled and closed on drop.
#[derive(Debug)]
pub(crate) struct ThreadTimer {
    fd: libc::c_int,
}

impl ThreadTimer {
    /// Opens a task-clock timer on thread `tid` of this process that raises
    /// `signal` in that thread every `period_ns` of its CPU time.
    pub(crate) fn open(tid: i32, period_ns: u64, signal: libc::c_int) -> io::Result<ThreadTimer> {
        let timer = ThreadTimer {
            fd: perf_open(tid, period_ns)?,
        };
        let owner = FOwnerEx {
            kind: F_OWNER_TID,
            pid: tid,
        };
        // SAFETY: plain fcntls on our own descriptor; `owner` outlives the
        // call. Order matters: the owner and the signal are set before
        // `O_ASYNC`, so an overflow can never raise `SIGIO` (which would
        // terminate the process) or go to another thread.
        unsafe {
            check(libc::fcntl(
                timer.fd,
                F_SETOWN_EX,
                &owner as *const FOwnerEx,
            ))?;
            check(libc::fcntl(timer.fd, F_SETSIG, signal))?;
            let flags = check(libc::fcntl(timer.fd, libc::F_GETFL))?;
            check(libc::fcntl(timer.fd, libc::F_SETFL, flags | libc::O_ASYNC))?;
        }
        if timer.fd as usize >= MAX_FD {
            return Err(io::Error::other(format!(
                "timer descriptor {} is above the {MAX_FD} btprof can register",
                timer.fd
            )));
        }
        set_ours(timer.fd, true);
        // SAFETY: an ioctl without argument on our own perf descriptor.
        check(unsafe { libc::ioctl(timer.fd, PERF_EVENT_IOC_ENABLE, 0) })?;
        Ok(timer)
    }

    /// The CPU time the timer has counted since it was opened, in
    /// nanoseconds (readable after the thread exited too).
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        let mut ns = 0u64;
        // SAFETY: reading one u64 counter (no read_format flags) from our own
        // perf descriptor into a u64.
        let n = unsafe { libc::read(self.fd, (&mut ns as *mut u64).cast(), 8) };
        (n == 8).then_some(ns)
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: an ioctl and a close on the descriptor this timer owns.
        // Disabled first, then unregistered, then closed: a signal already
        // queued is discarded when the handler is removed (SIG_IGN), and
        // one taken before that finds the descriptor unregistered and is
        // counted as stray.
        unsafe {
            libc::ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0);
        }
        if (self.fd as usize) < MAX_FD {
            set_ours(self.fd, false);
        }
        // SAFETY: see above.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Whether this process may open per-thread CPU timers: opens a disabled
/// one on the calling thread and closes it.
pub(crate) fn available() -> io::Result<()> {
    let fd = perf_open(0, 1_000_000)?;
    // SAFETY: closing the descriptor just opened.
    unsafe { libc::close(fd) };
    Ok(())
}

fn perf_open(tid: i32, period_ns: u64) -> io::Result<libc::c_int> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: period_ns.max(1),
        flags: FLAG_DISABLED | FLAGS_EXCLUDE_KERNEL_HV,
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr prefix
    // whose `size` says how much of it there is; `tid` is a thread of this
    // process (0: the calling thread), cpu -1 means any CPU, no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            tid,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd as libc::c_int)
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
