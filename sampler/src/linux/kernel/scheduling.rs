//! Getting the sampler thread onto a CPU on time, without privileges.
//!
//! When the profiled threads keep every core busy, a sampler thread that
//! wakes at its deadline still has to wait for the scheduler to preempt
//! one of them. Under EEVDF (Linux 6.6+) a task may ask for a shorter time
//! slice through `sched_setattr` (`sched_runtime` for `SCHED_OTHER`, Linux
//! 6.12+); a shorter slice gives an earlier virtual deadline, and a waking
//! task with a shorter slice preempts the running one at once. This needs
//! no privilege and does not raise the thread's share of CPU. On older
//! kernels the call fails or is ignored and nothing changes.

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

/// Asks for a short scheduler slice for the calling thread; returns whether
/// the kernel accepted it.
pub(crate) fn request_short_slice() -> bool {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_runtime: SLICE_NS,
        ..SchedAttr::default()
    };
    // SAFETY: a fully initialised sched_attr whose `size` matches; pid 0 is
    // the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    rc == 0
}

/// The nice value the sampler thread asks for where it may: raising its
/// weight needs `CAP_SYS_NICE` or room under `RLIMIT_NICE`.
const SAMPLER_NICE: i32 = -10;

/// Raises the calling thread's scheduling weight where the process may
/// (root, `CAP_SYS_NICE`, `RLIMIT_NICE`); returns whether it did.
///
/// The sampler thread needs about 1-2% of a CPU at 1000 Hz (reading the
/// rings, unwinding, listing threads). With 500 threads runnable on two
/// CPUs its fair share is a 250th of one: under EEVDF a thread that used
/// more than its share waits until every other runnable thread has caught
/// up, a second and more, while the kernel's rings fill and drop samples.
/// Nice -10 weighs it about 10 times a normal thread; it sleeps between
/// wakeups, so it never takes more than its work needs. Only on the perf
/// clock: the sampler-thread clock signals threads from its wakeups, and
/// with its thread weighted up those preempt the threads at once (beside
/// two hogs a share came out 3.6 points off).
pub(crate) fn raise_weight() -> bool {
    // SAFETY: setpriority on the calling thread (who 0: its own tid).
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SAMPLER_NICE) == 0 }
}
