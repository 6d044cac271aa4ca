//! Opening the inherited events at start: one ring per CPU, owned by the
//! first thread whose events open, then other threads' events redirected
//! into them, within the descriptor budget.

use std::os::fd::{FromRawFd, OwnedFd};

use super::*;

/// Descriptors the inherited events may take (one per CPU per thread, plus
/// its [`ContextAnchor`]), capped by [`fd_budget`] so the application keeps its own.
pub(super) const FD_BUDGET: usize = 4096;
/// `PERF_EVENT_IOC_SET_OUTPUT`: write into another event's ring.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

impl BornThreads {
    /// Opens the inherited events on `tids` (not `own_tid`), in order, within
    /// [`FD_BUDGET`]. Fails when the kernel refuses them.
    pub(crate) fn open(
        tids: &[i32],
        own_tid: i32,
        period_ns: u64,
        max_depth: usize,
        seed: u64,
    ) -> io::Result<BornThreads> {
        let max_stack = kernel_max_stack()
            .min(max_depth)
            .clamp(1, u16::MAX as usize);
        let mut attr = PerfEventAttr::task_clock(
            period_ns,
            FLAG_EXCLUDE_HV
                | FLAG_INHERIT
                | FLAG_INHERIT_THREAD
                | FLAG_REMOVE_ON_EXEC
                | FLAG_INHERIT_STAT
                | FLAG_TASK
                | FLAG_COMM
                | FLAG_SAMPLE_ID_ALL
                | FLAG_EXCLUDE_CALLCHAIN_KERNEL
                | FLAG_USE_CLOCKID,
        );
        attr.sample_type = PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CALLCHAIN
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER;
        attr.sample_regs_user = USER_REGS_MASK;
        attr.clockid = libc::CLOCK_MONOTONIC;
        attr.sample_max_stack = max_stack as u16;
        // SAFETY: sysconf and getpid have no preconditions.
        let (cpus, pid) = unsafe { (libc::sysconf(libc::_SC_NPROCESSORS_CONF), libc::getpid()) };
        let mut born = BornThreads {
            rings: Vec::new(),
            redirected: Vec::new(),
            parents: HashMap::new(),
            sampled_threads: 0,
            young: HashMap::new(),
            pid,
            own_tid,
            period_ns: period_ns.max(1),
            max_stack,
            stack_bytes: ring_size::STACK_BYTES,
            pass: 0,
            births: 0,
            exits: 0,
            anchors: Vec::new(),
            rng: SplitMix64::new(seed),
            stopped_at_ns: None,
        };
        // Kernel code too where allowed: a system call's time lands on the
        // user stack that made it. Unprivileged, user code only.
        if attr.open(0, -1).map(close).is_err() {
            attr.flags |= FLAGS_EXCLUDE_KERNEL_HV;
        }
        let mut ring_cpus = Vec::new();
        let mut tids = tids.iter().copied().filter(|&t| t != own_tid);
        // The first thread whose events open owns the rings, one per CPU.
        let mut first_error = None;
        let mut first = None;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
        let cpu_count = cpus.max(1) as usize;
        let mut sizes = ring_size::candidates(period_ns, max_stack, page, cpu_count).peekable();
        while let (Some(pages), Some(tid)) = (sizes.peek().copied(), tids.clone().next()) {
            let mut short_of_memory = false;
            born.stack_bytes = ring_size::stack_bytes(pages * page);
            attr.sample_stack_user = born.stack_bytes;
            for cpu in 0..cpus.max(1) as i32 {
                let mapped = match attr.open(tid, cpu) {
                    Ok(fd) => PerfRing::map(fd, pages).inspect_err(|e| {
                        // Out of locked memory: smaller rings for every CPU.
                        short_of_memory |=
                            matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM));
                    }),
                    // An offline CPU refuses; another error refuses on all.
                    Err(e) => Err(e),
                };
                match mapped {
                    Ok(ring) => {
                        born.rings.push(ring);
                        ring_cpus.push(cpu);
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if short_of_memory {
                // Never rings on some CPUs only: a thread's samples on the
                // others would be lost without a trace.
                born.rings.clear();
                ring_cpus.clear();
                sizes.next();
                continue;
            }
            tids.next();
            if !born.rings.is_empty() {
                first = Some(tid);
                break;
            }
            // Refused on every CPU: the next thread if this one exited,
            // else the kernel refuses the events altogether.
            if first_error.as_ref().and_then(io::Error::raw_os_error) != Some(libc::ESRCH) {
                break;
            }
        }
        let Some(first) = first else {
            return Err(first_error.unwrap_or_else(|| io::Error::other("no thread to open on")));
        };
        let mut parent = Parent::opened(first);
        parent.fds = born.rings.iter().map(PerfRing::fd).collect();
        born.parents.insert(first, parent);
        born.anchor(first);
        let per_thread = born.rings.len();
        let budget = fd_budget();
        for tid in tids {
            let taken = born.redirected.len() + born.rings.len() + born.anchors.len();
            if taken + per_thread + 1 > budget {
                break;
            }
            let mut opened = Vec::with_capacity(per_thread);
            for (ring, &cpu) in born.rings.iter().zip(&ring_cpus) {
                let Ok(fd) = attr.open(tid, cpu) else {
                    break;
                };
                opened.push(fd);
                // SAFETY: our new descriptor, redirected to another of ours
                // on the same CPU with the same clock.
                if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring.fd()) } != 0 {
                    break;
                }
            }
            if opened.len() == per_thread {
                let mut parent = Parent::opened(tid);
                parent.fds = opened.clone();
                born.parents.insert(tid, parent);
                born.redirected.extend(opened);
                born.anchor(tid);
            } else {
                // Exited meanwhile, or refused: none of its events stay.
                for fd in opened {
                    // SAFETY: closing a descriptor we just opened.
                    unsafe { libc::close(fd) };
                }
            }
        }
        Ok(born)
    }

    /// Gives thread `tid`'s events their anchor; without one (refused, or
    /// the thread gone) the threads it creates may swap events.
    fn anchor(&mut self, tid: i32) {
        if let Ok(anchor) = ContextAnchor::open(tid) {
            self.anchors.push(anchor);
        }
    }
}

/// Closes a descriptor this module opened.
fn close(fd: libc::c_int) {
    // SAFETY: `fd` is ours and used nowhere else.
    unsafe { libc::close(fd) };
}

/// [`FD_BUDGET`], or an eighth of `RLIMIT_NOFILE` when that is less.
fn fd_budget() -> usize {
    #[cfg(feature = "test-hooks")]
    if crate::linux::test_hooks::NO_FD_BUDGET.load(std::sync::atomic::Ordering::Relaxed) {
        return 0;
    }
    FD_BUDGET.min(crate::linux::kernel::threads::nofile_limit() / 8)
}

/// `/proc/sys/kernel/perf_event_max_stack`: the most frames a call chain
/// may ask for.
fn kernel_max_stack() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
}

/// A dummy event on one thread, not inherited; closed on drop. It keeps
/// the kernel from passing one thread's inherited events to another.
///
/// If all of a creator's events are inherited, the kernel marks the new
/// thread's copies as a clone of its set, and cloned sets that follow each
/// other on a CPU are swapped instead of stopped: a period one thread began
/// ends on the other. So each thread the perf clock opens inherited events
/// on gets an anchor, a dummy event that is not inherited, and the threads
/// it creates keep their own events. (Their children are clones again;
/// btprof opens nothing on threads born while sampling.)
pub(crate) struct ContextAnchor {
    _event: OwnedFd,
}

impl ContextAnchor {
    /// Opens the anchor on thread `tid` of this process.
    pub(crate) fn open(tid: i32) -> io::Result<ContextAnchor> {
        let fd = PerfEventAttr::dummy().open(tid, -1)?;
        // SAFETY: `fd` was just opened, is valid and owned by nothing else.
        let _event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ContextAnchor { _event })
    }
}
