//! Getting the sampler thread onto a CPU on time. With every core busy a
//! waking sampler still waits to preempt someone; under EEVDF a shorter
//! slice (`sched_setattr`'s `sched_runtime`) gives an earlier virtual
//! deadline, so it preempts at once. This needs no privilege and does not
//! raise its CPU share; older kernels refuse or ignore it.

/// `struct sched_attr`, first version (48 bytes) as the kernel accepts it.
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

/// The slice asked for: the kernel's minimum is 0.1 ms.
const SLICE_NS: u64 = 100_000;

/// Asks for a short slice for the calling thread; returns whether granted.
pub(crate) fn request_short_slice() -> bool {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_runtime: SLICE_NS,
        ..SchedAttr::default()
    };
    // SAFETY: an initialised sched_attr of matching `size`; pid 0: caller.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    rc == 0
}

/// The nice value asked for where allowed (`CAP_SYS_NICE`, `RLIMIT_NICE`).
const SAMPLER_NICE: i32 = -10;

/// Raises the calling thread's scheduling weight where the process may;
/// returns whether it did. With many runnable threads its fair share is
/// below its work and the rings would overflow; it sleeps between wakeups,
/// so it takes no more than it needs. Perf clock only: on the other clock
/// its signals would preempt the profiled threads and skew their shares.
pub(crate) fn raise_weight() -> bool {
    // SAFETY: setpriority on the calling thread (who 0: its own tid).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SAMPLER_NICE) == 0 }
}
