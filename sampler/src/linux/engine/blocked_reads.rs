//! Wall mode's threads off CPU: counted without being interrupted, on the
//! stack they are blocked on, read from outside within a share of the
//! sampler's time, or on their last known stack.

use crate::labels::NO_LABELS;
use crate::walker::WalkEnd;

use super::super::kernel::threads;
use super::super::unwind::blocked_stack::{self, BlockedRead, BlockedStackReader, Syscall};
use super::collect::OwnedWalk;
use super::pacing::IDLE_SLACK_NS;
use super::{monotonic_ns, SamplerLoop};

/// Wall mode: the share of wall time the sampler may spend reading blocked
/// threads' stacks; each read is costly (a `/proc` file, a stack copy and
/// an unwind). Past it, the thread is counted on its last known stack.
const BLOCKED_READ_SHARE: f64 = 0.02;

/// The most of that budget saved up while no thread blocks.
const BLOCKED_READ_BURST_NS: u64 = 2_000_000;

/// Wall mode: reads the stacks of threads found blocked after they ran,
/// within [`BLOCKED_READ_SHARE`], saved up to [`BLOCKED_READ_BURST_NS`].
#[derive(Default)]
pub(super) struct BlockedReads {
    /// Created at the first read.
    reader: Option<BlockedStackReader>,
    budget_ns: u64,
    /// The tick up to which the budget was earned.
    tick: u64,
}

impl SamplerLoop {
    /// Wall mode with requests, at the run's or thread's end: running ticks
    /// no sample stood for, counted on its last stack, else as skipped.
    pub(super) fn count_running_ticks_left(&mut self, tid: i32) {
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let ticks = std::mem::take(&mut state.paced.running_ticks);
        match &state.paced.last_walk {
            Some(walk) if ticks > 0 => {
                let (key, walk) = (state.key, walk.clone());
                self.stats.reused_samples += ticks;
                self.intern(key, &walk, ticks);
            }
            _ => self.stats.skipped_samples += ticks,
        }
    }

    /// Wall mode: counts a thread that ran since its last sample but is off
    /// CPU now, without interrupting it: on its blocked stack read from
    /// outside, else its last known stack (or the system call's pc).
    pub(super) fn count_blocked(&mut self, tid: i32, cpu: u64) {
        let read = self.read_blocked_stack(tid);
        // Off CPU now, so the labels it has now are the ones it had when it blocked.
        let labels = self.labels.now(tid as u64);
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let last = state.paced.last_walk.as_ref().map(OwnedWalk::off_cpu);
        let (mut walk, whole) = match (read, last) {
            (Some(walk), _) => (walk, true),
            (None, Some(walk)) => (walk, state.paced.last_walk_whole),
            (None, None) => match threads::blocked_syscall_pc(tid) {
                Some(pc) => {
                    let walk = OwnedWalk {
                        frames: vec![pc],
                        lr: 0,
                        end: WalkEnd::Blocked,
                        time: monotonic_ns(),
                        labels,
                    };
                    (walk, false)
                }
                None => {
                    self.stats.skipped_samples += 1;
                    return;
                }
            },
        };
        walk.labels = labels;
        state.paced.walk_cpu_ns = cpu;
        state.paced.last_walk = Some(walk.clone());
        state.paced.last_walk_whole = whole;
        let weight = self.tick.saturating_sub(state.paced.counted_tick).max(1);
        state.paced.counted_tick = self.tick;
        let key = state.key;
        self.intern(key, &walk, weight);
    }

    /// Wall mode: counts `tid` again on its last (whole) stack, off CPU, if
    /// its CPU clock (`cpu` now) has not moved by [`IDLE_SLACK_NS`] since;
    /// returns whether it did.
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
        self.intern(key, &walk, weight);
        true
    }

    /// Wall mode: the stack of `tid` if it is blocked in the kernel and the
    /// budget allows; `None` if it waits for a CPU, moved, or the budget is spent.
    pub(super) fn read_blocked_stack(&mut self, tid: i32) -> Option<OwnedWalk> {
        // Before the modules are first read, CFI cannot get past the C
        // library's system call wrapper.
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
                time: started,
                labels: NO_LABELS,
            }),
            BlockedRead::Moved | BlockedRead::Gone => None,
        };
        let spent = monotonic_ns().saturating_sub(started);
        self.blocked_reads.budget_ns = self.blocked_reads.budget_ns.saturating_sub(spent);
        walk
    }
}
