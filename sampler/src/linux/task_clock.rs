//! One thread's task clock: a `perf_event_open` software event that counts
//! a thread's own CPU time in user space and overflows once per period,
//! optionally raising a real-time signal in that thread on each overflow.
//!
//! [`super::thread_timers`] builds the sampler's per-thread timers on it;
//! the overhead benchmark's floor (`benches/support/floor.rs`) uses it to
//! measure what the bare interrupt costs, so both measure the same event.

use std::io;

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

/// A task-clock perf event on one thread; disabled and closed on drop.
#[derive(Debug)]
pub struct TaskClock {
    fd: libc::c_int,
}

impl TaskClock {
    /// Opens a disabled task clock on thread `tid` of this process (0: the
    /// calling thread) that overflows every `period_ns` of its CPU time.
    pub fn open(tid: i32, period_ns: u64) -> io::Result<TaskClock> {
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
        Ok(TaskClock {
            fd: fd as libc::c_int,
        })
    }

    /// Makes each overflow raise `signal` in thread `tid` (which must be
    /// the thread the clock counts). Call before [`Self::enable`].
    pub fn signal_thread(&self, tid: i32, signal: libc::c_int) -> io::Result<()> {
        let owner = FOwnerEx {
            kind: F_OWNER_TID,
            pid: tid,
        };
        // SAFETY: plain fcntls on our own descriptor; `owner` outlives the
        // call. Order matters: the owner and the signal are set before
        // `O_ASYNC`, so an overflow can never raise `SIGIO` (which would
        // terminate the process) or go to another thread.
        unsafe {
            check(libc::fcntl(self.fd, F_SETOWN_EX, &owner as *const FOwnerEx))?;
            check(libc::fcntl(self.fd, F_SETSIG, signal))?;
            let flags = check(libc::fcntl(self.fd, libc::F_GETFL))?;
            check(libc::fcntl(self.fd, libc::F_SETFL, flags | libc::O_ASYNC))?;
        }
        Ok(())
    }

    /// Starts counting.
    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: an ioctl without argument on our own perf descriptor.
        check(unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0) }).map(drop)
    }

    /// The descriptor, as a signal's `si_fd` names it.
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// The CPU time counted since it was enabled, in nanoseconds (readable
    /// after the thread exited too).
    pub fn cpu_ns(&self) -> Option<u64> {
        let mut ns = 0u64;
        // SAFETY: reading one u64 counter (no read_format flags) from our own
        // perf descriptor into a u64.
        let n = unsafe { libc::read(self.fd, (&mut ns as *mut u64).cast(), 8) };
        (n == 8).then_some(ns)
    }

    /// Stops counting and raising signals; the descriptor stays open.
    pub fn disable(&self) {
        // SAFETY: an ioctl without argument on our own perf descriptor.
        unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0) };
    }
}

impl Drop for TaskClock {
    fn drop(&mut self) {
        self.disable();
        // SAFETY: closing the descriptor this clock owns.
        unsafe { libc::close(self.fd) };
    }
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
