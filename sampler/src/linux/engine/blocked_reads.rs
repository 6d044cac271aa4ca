//! Wall mode's threads off CPU: counted without being interrupted, on the
//! stack they are blocked on, read from outside within a share of the
//! sampler's time, or on their last known stack.

use crate::walker::WalkEnd;

use super::super::kernel::threads;
use super::super::unwind::blocked_stack::{self, BlockedRead, BlockedStackReader, Syscall};
use super::collect::OwnedWalk;
use super::pacing::IDLE_SLACK_NS;
use super::{monotonic_ns, SamplerLoop};

/// Wall mode: the share of wall time the sampler may spend reading the
/// stacks of threads found blocked after they ran (each read: a `/proc`
/// file, up to 32 KiB of stack and a CFI unwind, tens of microseconds).
/// Past it, such a thread is counted on its last known stack, as where
/// the read fails.
const BLOCKED_READ_SHARE: f64 = 0.02;

/// The most of that budget saved up while no thread blocks.
const BLOCKED_READ_BURST_NS: u64 = 2_000_000;

/// Wall mode: the reader of the stacks of threads found blocked after
/// they ran, and the sampler time it may still spend on them
/// ([`BLOCKED_READ_SHARE`], saved up to [`BLOCKED_READ_BURST_NS`]).
#[derive(Default)]
pub(super) struct BlockedReads {
    /// Created at the first read.
    reader: Option<BlockedStackReader>,
    budget_ns: u64,
    /// The tick up to which the budget was earned.
    tick: u64,
}

impl SamplerLoop {
    /// Wall mode with requests, at the end (the run's or the thread's): the
    /// ticks that found the thread running and that no sample stood for,
    /// counted on its last stack, or as skipped if it has none.
    pub(super) fn count_running_ticks_left(&mut self, tid: i32) {
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let ticks = std::mem::take(&mut state.paced.running_ticks);
        match &state.paced.last_walk {
            Some(walk) if ticks > 0 => {
                let (key, walk) = (state.key, walk.clone());
                self.stats.reused_samples += ticks;
                self.intern(key, &walk.as_collected(), ticks);
            }
            _ => self.stats.skipped_samples += ticks,
        }
    }

    /// Wall mode: counts a thread that ran since its last sample but is
    /// off CPU now, without interrupting it: the stack it is blocked on,
    /// read from outside, or else its last known stack (or the blocked
    /// system call's pc), marked off CPU. That stack is then counted again
    /// while its CPU clock stays put.
    pub(super) fn count_blocked(&mut self, tid: i32, cpu: u64) {
        let read = self.read_blocked_stack(tid);
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let last = state.paced.last_walk.as_ref().map(OwnedWalk::off_cpu);
        let (walk, whole) = match (read, last) {
            (Some(walk), _) => (walk, true),
            (None, Some(walk)) => (walk, state.paced.last_walk_whole),
            (None, None) => match threads::blocked_syscall_pc(tid) {
                Some(pc) => {
                    let walk = OwnedWalk {
                        frames: vec![pc],
                        lr: 0,
                        end: WalkEnd::Blocked,
                    };
                    (walk, false)
                }
                None => {
                    self.stats.skipped_samples += 1;
                    return;
                }
            },
        };
        state.paced.walk_cpu_ns = cpu;
        state.paced.last_walk = Some(walk.clone());
        state.paced.last_walk_whole = whole;
        let weight = self.tick.saturating_sub(state.paced.counted_tick).max(1);
        state.paced.counted_tick = self.tick;
        let key = state.key;
        self.intern(key, &walk.as_collected(), weight);
    }

    /// Wall mode: counts thread `tid` again on its last stack, off CPU, if
    /// its CPU clock (`cpu` now) has not moved since that stack was taken,
    /// so that is still its stack, and the stack is whole; returns whether
    /// it did. Being sampled costs a thread some CPU (the handler): less
    /// than [`IDLE_SLACK_NS`] of progress is not running.
    pub(super) fn count_unmoved(&mut self, tid: i32, cpu: u64) -> bool {
        let Some(state) = self.threads.get_mut(&tid) else {
            return false;
        };
        let ran = cpu >= state.paced.walk_cpu_ns + IDLE_SLACK_NS;
        let whole = state.paced.last_walk_whole;
        let (false, true, Some(walk)) = (ran, whole, &state.paced.last_walk) else {
            return false;
        };
        let weight = self.tick.saturating_sub(state.paced.counted_tick).max(1);
        state.paced.counted_tick = self.tick;
        let (key, walk) = (state.key, walk.off_cpu());
        self.stats.reused_samples += weight;
        self.intern(key, &walk.as_collected(), weight);
        true
    }

    /// Wall mode: the stack of thread `tid` if it is blocked in the kernel
    /// and the budget allows reading it; `None` if it is waiting for a CPU
    /// (nothing to read from outside), moved meanwhile, or the budget is
    /// spent.
    pub(super) fn read_blocked_stack(&mut self, tid: i32) -> Option<OwnedWalk> {
        // Before the module list is first read (at the end of the first
        // tick), CFI cannot get past the C library's system call wrapper:
        // such a read would give one frame.
        let cfi = self.cfi.as_mut().filter(|cfi| cfi.modules_read())?;
        let tick_ns = self.period_ns;
        let earned = (tick_ns as f64 * BLOCKED_READ_SHARE) as u64;
        let since = self.tick.saturating_sub(self.blocked_reads.tick);
        self.blocked_reads.tick = self.tick;
        self.blocked_reads.budget_ns =
            (self.blocked_reads.budget_ns + since * earned).min(BLOCKED_READ_BURST_NS);
        if self.blocked_reads.budget_ns == 0 {
            return None;
        }
        let started = monotonic_ns();
        let Some(Syscall::At { nr, sp, pc }) = blocked_stack::read_syscall(tid) else {
            return None;
        };
        let reader = self
            .blocked_reads
            .reader
            .get_or_insert_with(BlockedStackReader::new);
        let walk = match reader.read(tid, cfi, nr, sp, pc) {
            BlockedRead::Read(done) => Some(OwnedWalk {
                frames: done.frames.to_vec(),
                lr: 0,
                end: WalkEnd::Blocked,
            }),
            BlockedRead::Moved | BlockedRead::Gone => None,
        };
        let spent = monotonic_ns().saturating_sub(started);
        self.blocked_reads.budget_ns = self.blocked_reads.budget_ns.saturating_sub(spent);
        walk
    }
}
