//! Getting the sampler thread onto a CPU on time. Under EEVDF a shorter slice
//! (`sched_setattr`'s `sched_runtime`) gives an earlier virtual deadline, so a waking sampler
//! preempts at once even with every core busy, without privilege or a larger CPU share.

/// `struct sched_attr`, first version (48 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// Asks for the kernel's shortest slice for the calling thread; returns whether granted (older
/// kernels refuse or ignore it).
pub(crate) fn request_short_slice() -> bool {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_runtime: 100_000,
        ..SchedAttr::default()
    };
    // SAFETY: an initialised sched_attr of matching `size`; pid 0: caller.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    rc == 0
}

/// Raises the calling thread to nice -10 where the process may (`CAP_SYS_NICE`,
/// `RLIMIT_NICE`); returns whether it did. Perf clock only: with many runnable threads a fair
/// share is below its work and the rings overflow, while on the other clock its signals would
/// preempt the profiled threads and skew their shares.
pub(crate) fn raise_weight() -> bool {
    // SAFETY: setpriority on the calling thread (who 0: its own tid).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) == 0 }
}
