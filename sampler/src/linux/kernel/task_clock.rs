//! One thread's task clock: a perf software event counting its user-space CPU time and
//! overflowing once per period, optionally signalling it. The per-thread timers and the
//! overhead benchmark's floor share it, so both measure the same event.

use std::io;

use super::perf_attr::{PerfEventAttr, FLAGS_EXCLUDE_KERNEL_HV, FLAG_DISABLED};

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_REFRESH: libc::c_ulong = 0x2402;
/// From `<fcntl.h>`; the same on x86_64 and aarch64.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// What btprof's tests add to every task-clock read, as time a VM host stole; else zero.
pub(crate) fn stolen_for_tests() -> u64 {
    #[cfg(feature = "test-hooks")]
    return crate::linux::test_hooks::TEST_STOLEN_NS.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    0
}

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
    /// Opens a disabled task clock on thread `tid` (0: the caller) that overflows every
    /// `period_ns` of its CPU time; enabled only once the signal is routed.
    pub fn open(tid: i32, period_ns: u64) -> io::Result<TaskClock> {
        let mut attr =
            PerfEventAttr::task_clock(period_ns, FLAG_DISABLED | FLAGS_EXCLUDE_KERNEL_HV);
        attr.wakeup_events = 1;
        let fd = attr.open(tid, -1)?;
        Ok(TaskClock { fd })
    }

    /// Makes each overflow raise `signal` in `tid`, the counted thread.
    /// Call before [`Self::enable`].
    pub fn signal_thread(&self, tid: i32, signal: libc::c_int) -> io::Result<()> {
        let owner = FOwnerEx {
            kind: F_OWNER_TID,
            pid: tid,
        };
        // SAFETY: fcntls on our own descriptor; `owner` outlives the call. Owner and signal
        // are set before `O_ASYNC`, so an overflow never raises `SIGIO` (fatal) elsewhere.
        unsafe {
            check(libc::fcntl(self.fd, F_SETOWN_EX, &owner as *const FOwnerEx))?;
            check(libc::fcntl(self.fd, F_SETSIG, signal))?;
            let flags = check(libc::fcntl(self.fd, libc::F_GETFL))?;
            check(libc::fcntl(self.fd, libc::F_SETFL, flags | libc::O_ASYNC))?;
        }
        Ok(())
    }

    /// Counts until the next overflow, which signals once and disables the event.
    pub fn enable_for_one_overflow(&self) -> io::Result<()> {
        // SAFETY: an ioctl with an integer argument on our perf descriptor.
        check(unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_REFRESH, 1) }).map(drop)
    }

    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: an ioctl without argument on our own perf descriptor.
        check(unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0) }).map(drop)
    }

    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// CPU nanoseconds counted since enabled (readable after thread exit).
    pub fn cpu_ns(&self) -> Option<u64> {
        let mut ns = 0u64;
        // SAFETY: reading one u64 counter (no read_format) into a u64.
        let n = unsafe { libc::read(self.fd, (&mut ns as *mut u64).cast(), 8) };
        (n == 8).then(|| ns + stolen_for_tests())
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
