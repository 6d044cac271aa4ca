//! Opening the inherited events at start: one ring per CPU, owned by the
//! first thread whose events open, other threads' events redirected into
//! them. A ring holds what a busy machine keeps the sampler from reading, in
//! few enough pages (each allocated and locked) for unprivileged limits.

use std::os::fd::{FromRawFd, OwnedFd};

use super::*;
use crate::linux::signal::stack_copy::COPY_WORDS;

/// Descriptors the inherited events may take (one per CPU per thread, plus
/// its [`ContextAnchor`]), capped by [`fd_budget`] so the application keeps its own.
pub(super) const FD_BUDGET: usize = 4096;
/// `PERF_EVENT_IOC_SET_OUTPUT`: write into another event's ring.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// Bytes of user stack a ring sample copies for CFI: as a handler ([`COPY_WORDS`]).
const STACK_BYTES: u32 = (COPY_WORDS * 8) as u32;
/// The copy in rings too small to hold [`MIN_RING_RECORDS`] of those.
const SMALL_STACK_BYTES: u32 = 8 << 10;
/// Fewest records a ring holds, so at slow rates the sampler has time to read it.
const MIN_RING_RECORDS: usize = 64;
/// Data pages per CPU's ring, largest first; where locked memory is short
/// (`perf_event_mlock_kb`, then `RLIMIT_MEMLOCK`), the next is tried.
const RING_PAGES: [usize; 9] = [2048, 1024, 512, 256, 128, 64, 32, 16, 8];
/// How long (ns) of samples a ring holds; no longer, as mapping allocates every page.
const RING_HOLDS_NS: u64 = 500_000_000;
/// The most memory all the rings may take together.
const RING_MEMORY: usize = 16 << 20;

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
            stack_bytes: STACK_BYTES,
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
        let mut sizes = candidates(period_ns, max_stack, page, cpu_count).peekable();
        while let (Some(pages), Some(tid)) = (sizes.peek().copied(), tids.clone().next()) {
            let mut short_of_memory = false;
            born.stack_bytes = stack_bytes(pages * page);
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

/// The most frames a call chain may ask for (`kernel.perf_event_max_stack`).
fn kernel_max_stack() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
}

/// A dummy event on one thread, not inherited. Without it the kernel marks the
/// inherited events of the threads it creates as clones, which swap events on a
/// CPU instead of stopping them (`docs/decisions/context-anchor.md`).
pub(crate) struct ContextAnchor {
    _event: OwnedFd,
}

impl ContextAnchor {
    pub(crate) fn open(tid: i32) -> io::Result<ContextAnchor> {
        let fd = PerfEventAttr::dummy().open(tid, -1)?;
        // SAFETY: `fd` was just opened, is valid and owned by nothing else.
        let _event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ContextAnchor { _event })
    }
}

/// The ring sizes to try in pages per CPU, largest first: from what
/// [`ring_pages_for`] needs (within [`RING_MEMORY`]) down to the smallest.
fn candidates(
    period_ns: u64,
    max_stack: usize,
    page: usize,
    cpus: usize,
) -> impl Iterator<Item = usize> + Clone {
    let smallest = RING_PAGES[RING_PAGES.len() - 1];
    let largest = ring_pages_for(period_ns, max_stack, page);
    RING_PAGES.into_iter().filter(move |&pages| {
        pages == smallest || (pages <= largest && pages * page * cpus <= RING_MEMORY)
    })
}

/// The most a sample record takes: stack copy, registers, longest call chain.
pub(super) fn record_bytes(stack_bytes: u32, max_stack: usize) -> usize {
    stack_bytes as usize + 8 * (max_stack + 32)
}

/// The fewest of [`RING_PAGES`] that hold [`RING_HOLDS_NS`] of records at
/// one per `period_ns`, and at least [`MIN_RING_RECORDS`].
fn ring_pages_for(period_ns: u64, max_stack: usize, page: usize) -> usize {
    let records = (RING_HOLDS_NS / period_ns.max(1)).max(MIN_RING_RECORDS as u64) as usize;
    let bytes = records.saturating_mul(record_bytes(STACK_BYTES, max_stack));
    RING_PAGES
        .iter()
        .rev()
        .copied()
        .find(|&pages| pages * page >= bytes)
        .unwrap_or(RING_PAGES[0])
}

/// Bytes of stack each sample copies in rings of `ring_bytes`.
pub(super) fn stack_bytes(ring_bytes: usize) -> u32 {
    if ring_bytes / STACK_BYTES as usize >= MIN_RING_RECORDS {
        STACK_BYTES
    } else {
        SMALL_STACK_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_sized_by_the_rate() {
        let at = |hz: u64| ring_pages_for(1_000_000_000 / hz, 127, 4096);
        // 500 ms of 1000 Hz is more than the largest ring holds.
        assert_eq!(at(1000), 2048);
        assert_eq!(at(250), 1024);
        // 64 records at least, whatever the rate.
        assert_eq!(at(100), 512);
        assert_eq!(at(1), 512);
    }

    #[test]
    fn all_the_rings_fit_in_their_memory_whatever_the_cpus() {
        let tried: Vec<usize> = candidates(1_000_000, 127, 4096, 4).collect();
        // 8 MiB per CPU on four CPUs is over 16 MiB: 4 MiB first.
        assert_eq!(tried, [1024, 512, 256, 128, 64, 32, 16, 8]);
        let tried: Vec<usize> = candidates(10_000_000, 127, 4096, 64).collect();
        assert_eq!(tried, [64, 32, 16, 8]);
        let tried: Vec<usize> = candidates(10_000_000, 127, 4096, 1024).collect();
        // The smallest is tried however many CPUs there are.
        assert_eq!(tried, [8]);
    }
}
