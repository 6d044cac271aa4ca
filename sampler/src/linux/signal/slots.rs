//! Sample slots, where the handler ([`super::handler`]) leaves one thread's walk for the
//! sampler thread. A slot's state word holds the arming generation above a 2-bit phase:
//! - `Idle -> Armed`: the sampler ([`SlotOwner::arm`]), before signalling the thread with slot
//!   and generation in `si_value`; `Armed -> Idle` cancels, so a late handler writes nothing.
//! - `Armed -> Writing`: that thread's handler, by compare-and-swap on the generation.
//! - `Idle -> Writing`, fresh generation: a per-thread timer's handler
//!   ([`thread_timers`](crate::linux::clocks::timers::thread_timers)), which nobody arms.
//! - `Writing -> Done` (`Release`): the handler, once the walk is written.
//! - `Done -> Idle`: the sampler, after copying the walk out.
//!
//! All static, so a handler running after the profiler stopped touches memory that exists.

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::WalkEnd;

use super::checked_memory::WINDOW_WORDS;
use super::stack_copy::{CopiedStack, StackCopy};

/// Slots in flight at once: the index travels in the low 8 bits of `si_value`.
pub(crate) const SLOTS: usize = 256;
/// The hard cap on frames per sample; `max_depth` may only lower it.
pub const MAX_DEPTH: usize = 512;

pub(crate) const IDLE: u64 = 0;
pub(crate) const ARMED: u64 = 1;
pub(crate) const WRITING: u64 = 2;
pub(crate) const DONE: u64 = 3;

/// A slot's state word: its generation and its phase.
#[inline]
pub(crate) const fn state(generation: u64, phase: u64) -> u64 {
    generation << 2 | phase
}

pub(super) struct FrameBuf(pub(super) UnsafeCell<[u64; MAX_DEPTH]>);

// SAFETY: only the handler that won `-> Writing` writes; the sampler reads
// only after an `Acquire` load of `Done`, which the writer stored `Release`.
unsafe impl Sync for FrameBuf {}

/// The stack copy a handler walks through; static, as the thread's stack may be nearly full.
pub(super) struct WindowBuf(pub(super) UnsafeCell<[u64; WINDOW_WORDS]>);

// SAFETY: as for `FrameBuf`: only the `Writing` handler touches it; the sampler never does.
unsafe impl Sync for WindowBuf {}

pub(super) struct Slot {
    pub(super) state: AtomicU64,
    pub(super) max_depth: AtomicU32,
    pub(super) depth: AtomicU32,
    pub(super) end: AtomicU32,
    pub(super) lr: AtomicU64,
    /// The thread that wrote the walk (timer samples).
    pub(super) tid: AtomicI32,
    /// Armed in cpu mode: `CLOCK_MONOTONIC` and the target's CPU clock before the signal
    /// (0: no check), for the handler's lateness test (`handler::SYSCALL_EXIT_LATE_NS`).
    pub(super) sent_ns: AtomicU64,
    pub(super) sent_cpu_ns: AtomicU64,
    /// The handler found the signal late and walked nothing.
    pub(super) late: AtomicU32,
    /// When the handler took the sample (`CLOCK_MONOTONIC` ns), which decides its labels.
    pub(super) taken_ns: AtomicU64,
    pub(super) frames: FrameBuf,
    pub(super) window: WindowBuf,
    /// Registers and stack top for CFI unwinding in the sampler thread.
    pub(super) copy: StackCopy,
}

impl Slot {
    /// All zeros, so the table is `.bss`, not file data; `max_depth` is set at each arming.
    const fn new() -> Self {
        Slot {
            state: AtomicU64::new(IDLE),
            max_depth: AtomicU32::new(0),
            depth: AtomicU32::new(0),
            end: AtomicU32::new(0),
            lr: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            sent_ns: AtomicU64::new(0),
            taken_ns: AtomicU64::new(0),
            sent_cpu_ns: AtomicU64::new(0),
            late: AtomicU32::new(0),
            frames: FrameBuf(UnsafeCell::new([0; MAX_DEPTH])),
            window: WindowBuf(UnsafeCell::new([0; WINDOW_WORDS])),
            copy: StackCopy::new(),
        }
    }
}

pub(super) static SLOT_TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Never repeats in the process's life, so a signal from an earlier arming cannot claim a slot.
pub(super) static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
/// Our pid, to reject queued signals sent by other processes.
pub(crate) static OWN_PID: AtomicI32 = AtomicI32::new(0);
/// Handler runs that found no slot to fill (late, stray or foreign).
pub(crate) static STRAY_SIGNALS: AtomicU64 = AtomicU64::new(0);
/// Walks that found no mapping around sp: the region snapshot is stale.
pub(crate) static MISSING_REGIONS: AtomicU64 = AtomicU64::new(0);
/// Timer samples lost because every slot was full.
pub(crate) static NO_FREE_SLOT: AtomicU64 = AtomicU64::new(0);
/// Slots timer handlers claimed, one bit each, set after the claim; taken by
/// [`SlotOwner::collect_claimed`].
pub(super) static CLAIMED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];
const _: () = assert!(SLOTS % 64 == 0);
/// Frames a timer sample keeps (slots armed by the sampler carry their own).
pub(crate) static TIMER_MAX_DEPTH: AtomicU32 = AtomicU32::new(MAX_DEPTH as u32);

/// In a forked child, where only the forking thread exists: frees every slot.
/// Async-signal-safe.
pub(crate) fn reset_after_fork() {
    for slot in &SLOT_TABLE {
        slot.state.store(IDLE, Release);
    }
    for word in &CLAIMED {
        word.store(0, Release);
    }
}

/// What `arm` hands back: the slot and the value to send with the signal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Armed {
    pub slot: usize,
    generation: u64,
}

impl Armed {
    /// The `si_value` payload naming this arming.
    pub fn signal_value(&self) -> usize {
        (self.generation as usize) << 8 | self.slot
    }
}

/// A finished walk, read out of a slot.
pub(crate) struct Collected<'a> {
    pub frames: &'a [u64],
    pub lr: u64,
    pub end: WalkEnd,
    /// When it was taken (`CLOCK_MONOTONIC` ns).
    pub time: u64,
    /// The handler's registers and stack copy, for CFI unwinding.
    pub copy: Option<CopiedStack<'a>>,
}

/// The sampler side of the slots: tracks which slots it armed, never touching another's.
pub(crate) struct SlotOwner {
    armed: [Option<Armed>; SLOTS],
    scratch: Vec<u64>,
    /// Every slot was looked at once, for walks a previous profiler left.
    scanned_all: bool,
    /// Slots a timer handler was still writing at the last look, one bit per slot.
    writing: [u64; SLOTS / 64],
}

/// What a slot the sampler armed looks like now.
pub(crate) enum Poll {
    /// The handler has not run yet.
    Pending,
    /// The handler is walking right now.
    Busy,
    /// The walk is done and was handed to the callback; the slot is free.
    Collected,
    /// The signal came late, at a system call's exit: nothing walked; the slot is free.
    Late,
}

impl SlotOwner {
    pub fn new() -> Self {
        SlotOwner {
            armed: [None; SLOTS],
            scratch: Vec::with_capacity(MAX_DEPTH),
            scanned_all: false,
            writing: [0; SLOTS / 64],
        }
    }

    /// Arms a free slot for one signal, or `None` when all are in flight. Skips `Writing` slots
    /// and, after the first full scan, `Done` ones (timer walks awaiting
    /// [`Self::collect_claimed`]); before it, `Armed` and `Done` are an earlier profiler's.
    pub fn arm(&mut self, max_depth: usize) -> Option<Armed> {
        let generation = NEXT_GENERATION.fetch_add(1, Relaxed);
        for (slot, s) in SLOT_TABLE.iter().enumerate() {
            if self.armed[slot].is_some() {
                continue;
            }
            let current = s.state.load(Acquire);
            if current & 3 == WRITING || (current & 3 == DONE && self.scanned_all) {
                continue;
            }
            s.max_depth
                .store(max_depth.clamp(1, MAX_DEPTH) as u32, Relaxed);
            // A compare-and-swap: a late handler may claim the old arming meanwhile.
            if s.state
                .compare_exchange(current, state(generation, ARMED), Release, Relaxed)
                .is_ok()
            {
                let armed = Armed { slot, generation };
                self.armed[slot] = Some(armed);
                return Some(armed);
            }
        }
        None
    }

    /// Takes back an armed slot whose handler has not started; `false`: poll again.
    pub fn cancel(&mut self, slot: usize) -> bool {
        let Some(armed) = self.armed[slot] else {
            return true;
        };
        let s = &SLOT_TABLE[slot];
        let cancelled = s
            .state
            .compare_exchange(state(armed.generation, ARMED), IDLE, Relaxed, Relaxed)
            .is_ok();
        if cancelled {
            self.armed[slot] = None;
        }
        cancelled
    }

    /// Checks an armed slot; a finished walk is passed to `collect`.
    pub fn poll(&mut self, slot: usize, collect: impl FnOnce(Collected<'_>)) -> Poll {
        let Some(armed) = self.armed[slot] else {
            return Poll::Pending;
        };
        let s = &SLOT_TABLE[slot];
        let now = s.state.load(Acquire);
        if now == state(armed.generation, ARMED) {
            return Poll::Pending;
        }
        if now != state(armed.generation, DONE) {
            return Poll::Busy;
        }
        if s.late.load(Relaxed) != 0 {
            s.state.store(IDLE, Release);
            self.armed[slot] = None;
            return Poll::Late;
        }
        self.armed[slot] = None;
        // SAFETY: `Done` for our generation (`Acquire`): written, unclaimable until re-armed.
        unsafe { hand_out(s, &mut self.scratch, collect) };
        Poll::Collected
    }

    /// Records the target's CPU clock `cpu_ns`, read at monotonic `now_ns`, before `slot`'s
    /// signal; `now_ns` 0 turns the lateness check off (wall mode).
    pub fn mark_sent(&mut self, slot: usize, now_ns: u64, cpu_ns: u64) {
        SLOT_TABLE[slot].sent_cpu_ns.store(cpu_ns, Relaxed);
        SLOT_TABLE[slot].sent_ns.store(now_ns, Relaxed);
    }

    /// Whether `slot` is armed by us (pending, busy or done).
    pub fn is_armed(&self, slot: usize) -> bool {
        self.armed[slot].is_some()
    }

    /// Hands each finished timer walk to `collect` with its thread, frees it, and returns how
    /// many slots a handler is still writing. Reads only slots claimed since the last look
    /// ([`CLAIMED`]) or written then (each slot has its own page); the first look reads all.
    pub fn collect_claimed(&mut self, mut collect: impl FnMut(i32, Collected<'_>)) -> usize {
        let mut writing = 0;
        for (word, claimed) in CLAIMED.iter().enumerate() {
            // Before the slots are read: a claim this misses sets its bit for the next look.
            let claimed = claimed.swap(0, Acquire);
            let mut bits = match self.scanned_all {
                true => claimed | std::mem::take(&mut self.writing[word]),
                false => u64::MAX,
            };
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let slot = word * 64 + bit;
                if self.armed[slot].is_some() {
                    continue;
                }
                let s = &SLOT_TABLE[slot];
                let now = s.state.load(Acquire);
                match now & 3 {
                    DONE => {}
                    WRITING => {
                        self.writing[word] |= 1 << bit;
                        writing += 1;
                        continue;
                    }
                    _ => continue,
                }
                let tid = s.tid.load(Relaxed);
                // SAFETY: `Done` (`Acquire`): written, and handlers claim only `Idle` slots.
                unsafe { hand_out(s, &mut self.scratch, |walk| collect(tid, walk)) };
            }
        }
        self.scanned_all = true;
        writing
    }
}

/// Hands slot `s`'s walk to `collect`, its frames copied into `scratch`, and frees the slot.
///
/// # Safety
/// `s` must be `Done`, loaded `Acquire`, and no handler may claim it until it is `Idle`.
unsafe fn hand_out(s: &Slot, scratch: &mut Vec<u64>, collect: impl FnOnce(Collected<'_>)) {
    let depth = (s.depth.load(Relaxed) as usize).min(MAX_DEPTH);
    scratch.clear();
    // SAFETY: the caller's promise: the handler finished writing.
    let frames = unsafe { &(&*s.frames.0.get())[..depth] };
    scratch.extend_from_slice(frames);
    collect(Collected {
        frames: scratch,
        lr: s.lr.load(Relaxed),
        end: WalkEnd::from_u8(s.end.load(Relaxed) as u8),
        time: s.taken_ns.load(Relaxed),
        // SAFETY: as above, until the store below.
        copy: unsafe { s.copy.view() },
    });
    s.state.store(IDLE, Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once every slot was scanned, arming skips a timer walk left `Done` for the next look.
    #[test]
    fn arming_never_takes_a_timer_walk_not_collected_yet() {
        let mut owner = SlotOwner::new();
        owner.collect_claimed(|_, _| {});
        let (slot, generation, _) = super::super::handler::claim_free().expect("a free slot");
        slot.depth.store(0, Relaxed);
        slot.state.store(state(generation, DONE), Release);
        let walk = SLOT_TABLE
            .iter()
            .position(|s| std::ptr::eq(s, slot))
            .expect("in the table");
        let armed = owner.arm(8).expect("a slot to arm");
        assert_ne!(armed.slot, walk, "armed over a timer walk");
        let mut collected = Vec::new();
        owner.collect_claimed(|tid, _| collected.push(tid));
        let tid = super::super::safe_calls::gettid();
        assert!(collected.contains(&tid), "{collected:?}");
        assert!(owner.cancel(armed.slot));
    }
}
