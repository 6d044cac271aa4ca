//! Sample slots: where a signal handler ([`super::handler`]) leaves one
//! thread's walk for the sampler thread to pick up.
//!
//! The sampler arms a slot for a thread, then sends that thread the
//! profiling signal with the slot index and an arming generation in
//! `si_value`. The handler, running on the interrupted thread, claims the
//! slot (`Armed` -> `Writing`, a compare-and-swap on the generation), walks
//! into the slot's preallocated frame buffer and publishes it (`Done`). The
//! sampler collects `Done` slots on its next tick, and cancels slots left
//! `Armed` for too long (`Armed` -> `Idle`) so a late handler finds nothing
//! to write into. Every slot and counter is static: a handler that runs
//! after the profiler stopped touches only memory that still exists.
//!
//! With per-thread CPU timers ([`thread_timers`](crate::linux::clocks::timers::thread_timers)) nobody arms: the
//! overflow of a thread's own timer signals that thread, and its handler
//! claims any `Idle` slot itself (`Idle` -> `Writing` with a fresh
//! generation), records its thread id beside the walk and publishes it
//! `Done`; the sampler collects such slots with
//! [`SlotOwner::collect_claimed`]. An idle
//! thread's wake timer takes no slot: its handler only notes the wake
//! ([`super::wake_notices`]).

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::WalkEnd;

use super::checked_memory::WINDOW_WORDS;
use super::dump_slot;
use super::stack_copy::{CopiedStack, StackCopy};

/// Slots in flight at once; more threads than this are sampled on the
/// following ticks (and counted as skipped on this one). With per-thread
/// timers, the samples the handlers may leave between two collections:
/// 256 is a quarter of a second of two busy threads at 1000 Hz. The slot
/// index travels in the low 8 bits of `si_value`, so 256 is also the most.
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

/// Frames written by exactly one handler while its slot is `Writing`, read
/// by the sampler only once it saw `Done`.
pub(super) struct FrameBuf(pub(super) UnsafeCell<[u64; MAX_DEPTH]>);

// SAFETY: access is serialised by the slot's state machine: the handler that
// won `Armed -> Writing` is the only writer, and the sampler reads only after
// an `Acquire` load of `Done`, which the writer stored with `Release`.
unsafe impl Sync for FrameBuf {}

/// The copy of the stack a handler walks through ([`CheckedMemory`]),
/// owned like [`FrameBuf`]: static, so it never sits on the handler's
/// stack (a thread may have little left).
///
/// [`CheckedMemory`]: super::checked_memory::CheckedMemory
pub(super) struct WindowBuf(pub(super) UnsafeCell<[u64; WINDOW_WORDS]>);

// SAFETY: as for `FrameBuf`: only the handler that won `Armed -> Writing`
// touches it, and only until it stores `Done`; the sampler never does.
unsafe impl Sync for WindowBuf {}

pub(super) struct Slot {
    pub(super) state: AtomicU64,
    pub(super) max_depth: AtomicU32,
    pub(super) depth: AtomicU32,
    pub(super) end: AtomicU32,
    pub(super) lr: AtomicU64,
    /// The thread that wrote the walk (timer samples).
    pub(super) tid: AtomicI32,
    /// Armed slots in cpu mode: the target thread's CPU clock and
    /// `CLOCK_MONOTONIC` read together just before the signal was sent
    /// (0: no check). The handler gives up a sample taken at a system
    /// call's exit after the thread spent more than
    /// `handler::SYSCALL_EXIT_LATE_NS` off CPU since.
    pub(super) sent_ns: AtomicU64,
    pub(super) sent_cpu_ns: AtomicU64,
    /// The handler found the signal late and walked nothing.
    pub(super) late: AtomicU32,
    pub(super) frames: FrameBuf,
    pub(super) window: WindowBuf,
    /// Registers and stack top for CFI unwinding in the sampler thread.
    pub(super) copy: StackCopy,
}

impl Slot {
    /// All zeros, so that the table is zero-initialised memory (`.bss`),
    /// not 6 MiB of every embedding program's file: `max_depth` is set at
    /// each arming.
    const fn new() -> Self {
        Slot {
            state: AtomicU64::new(IDLE),
            max_depth: AtomicU32::new(0),
            depth: AtomicU32::new(0),
            end: AtomicU32::new(0),
            lr: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            sent_ns: AtomicU64::new(0),
            sent_cpu_ns: AtomicU64::new(0),
            late: AtomicU32::new(0),
            frames: FrameBuf(UnsafeCell::new([0; MAX_DEPTH])),
            window: WindowBuf(UnsafeCell::new([0; WINDOW_WORDS])),
            copy: StackCopy::new(),
        }
    }
}

pub(super) static SLOT_TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Arming generations never repeat for the life of the process, so a
/// signal from an earlier arming (or an earlier profiler) cannot claim a slot.
pub(super) static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
/// Our pid, to reject queued signals sent by other processes.
pub(crate) static OWN_PID: AtomicI32 = AtomicI32::new(0);
/// Handler runs that found no slot to fill (late, stray or foreign).
pub(crate) static STRAY_SIGNALS: AtomicU64 = AtomicU64::new(0);
/// Walks that found no mapping around the stack pointer: the region
/// snapshot is stale and should be refreshed.
pub(crate) static MISSING_REGIONS: AtomicU64 = AtomicU64::new(0);
/// Timer periods lost because every slot was full (the sampler thread did
/// not collect in time).
pub(crate) static NO_FREE_SLOT: AtomicU64 = AtomicU64::new(0);
/// The free slots timer handlers have claimed, one bit per slot, set after
/// each claim and taken by the sampler's next look
/// ([`SlotOwner::collect_claimed`]), which reads only those slots.
pub(super) static CLAIMED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];
const _: () = assert!(SLOTS % 64 == 0);
/// Frames a timer sample keeps (slots armed by the sampler carry their own).
pub(crate) static TIMER_MAX_DEPTH: AtomicU32 = AtomicU32::new(MAX_DEPTH as u32);

/// Whether thread `tid` is inside btprof's handler, or just left it: it
/// holds a slot it is writing, or one it finished that the sampler has not
/// collected yet.
///
/// While the handler runs, the kernel blocks the profiling signal for
/// that thread (the handler's `sa_mask`), so its `SigBlk` says "blocked"
/// just as for a thread that really blocks the signal: look here before
/// taking `SigBlk` as proof. A `true` is conservative (a slot may still
/// name a thread from an earlier use); the moments the slots cannot show
/// (the handler's first instructions, before it claims a slot) are left to
/// the callers, which want the mask seen twice, at looks far enough apart.
pub(crate) fn in_handler(tid: i32) -> bool {
    dump_slot::in_dump_handler(tid)
        || SLOT_TABLE.iter().any(|slot| {
            matches!(slot.state.load(Acquire) & 3, WRITING | DONE) && slot.tid.load(Relaxed) == tid
        })
}

/// In a forked child: frees every slot. Only the forking thread exists
/// there, so a slot a parent's handler was writing will never be finished,
/// and no sampler runs yet to own any. Async-signal-safe.
pub(crate) fn reset_after_fork() {
    for slot in &SLOT_TABLE {
        slot.state.store(IDLE, Release);
    }
    for word in &CLAIMED {
        word.store(0, Release);
    }
}

/// How far above the stack pointer a walk may go when the snapshot does not
/// know the stack's mapping: the default size of a thread's stack (8 MiB).
pub(crate) const UNKNOWN_STACK_SPAN: u64 = 8 << 20;

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
    /// The handler's registers and stack copy, for CFI unwinding.
    pub copy: Option<CopiedStack<'a>>,
}

/// The sampler side of the slots. Only the sampler thread holds one, and it
/// tracks which slots it armed so it never touches another's.
pub(crate) struct SlotOwner {
    armed: [Option<Armed>; SLOTS],
    scratch: Vec<u64>,
    /// Every slot was looked at once, for walks a previous profiler left.
    scanned_all: bool,
    /// Slots a timer handler claimed and was still writing at the last
    /// look, one bit per slot as in [`CLAIMED`].
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
    /// The signal found its thread at a system call's exit after a wait
    /// (`handler::SYSCALL_EXIT_LATE_NS`) and nothing was walked; the slot is free.
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

    /// Arms a free slot for one signal, or `None` when all are in flight.
    ///
    /// A slot still `Writing` for an earlier arming (a handler of a previous
    /// profiler that outlived it) is left alone; one left `Armed` by a
    /// previous profiler is taken over. A `Done` one holds a timer
    /// handler's walk once [`Self::collect_claimed`] has looked at every
    /// slot, and waits for its next look; before that, it is a previous
    /// profiler's and is taken over too.
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
            // A compare-and-swap, not a store: a late handler may claim the
            // old arming between our load and here.
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

    /// Takes back an armed slot whose handler has not started (the signal
    /// could not be sent, the wait timed out, or the profiler is stopping).
    /// Returns `false` if the handler already claimed it: poll again.
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
        // SAFETY: the slot is `Done` for our generation (loaded with
        // `Acquire` above), so its handler finished writing and no other
        // handler can claim it until we arm it again.
        unsafe { hand_out(s, &mut self.scratch, collect) };
        Poll::Collected
    }

    /// Records, before the signal for armed `slot` is sent, the target's
    /// CPU clock `cpu_ns` and the monotonic time `now_ns` it was read at,
    /// for the handler's lateness check; `now_ns` 0 turns the check off
    /// (wall mode samples threads that are not running by design).
    pub fn mark_sent(&mut self, slot: usize, now_ns: u64, cpu_ns: u64) {
        SLOT_TABLE[slot].sent_cpu_ns.store(cpu_ns, Relaxed);
        SLOT_TABLE[slot].sent_ns.store(now_ns, Relaxed);
    }

    /// Whether `slot` is armed by us (pending, busy or done).
    pub fn is_armed(&self, slot: usize) -> bool {
        self.armed[slot].is_some()
    }

    /// Hands every walk a timer handler finished (slots nobody armed, now
    /// `Done`) to `collect` with the thread that wrote it, and frees those
    /// slots. Returns how many slots a
    /// handler is still writing.
    ///
    /// Only the slots handlers claimed since the last look ([`CLAIMED`]),
    /// and those they were still writing then, are looked at: each slot's
    /// state sits on a page of its own, and reading all 256 cost tens of
    /// microseconds per collection, most of which find none or a few. The
    /// first look reads every slot, for walks a previous profiler left.
    pub fn collect_claimed(&mut self, mut collect: impl FnMut(i32, Collected<'_>)) -> usize {
        let mut writing = 0;
        for (word, claimed) in CLAIMED.iter().enumerate() {
            // Taken before the slots are read: a handler sets its bit after
            // its claim, so a claim this misses is found by the next look.
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
                // SAFETY: the slot is `Done` (loaded with `Acquire` above):
                // its handler finished writing, and no handler claims a slot
                // that is not `Idle`.
                unsafe { hand_out(s, &mut self.scratch, |walk| collect(tid, walk)) };
            }
        }
        self.scanned_all = true;
        writing
    }
}

/// Hands the walk in slot `s` to `collect` (its frames copied out into
/// `scratch`, so the slot can be reused at once) and frees the slot.
///
/// # Safety
/// `s` must be `Done`, loaded with `Acquire`, and no handler may claim it
/// before it is `Idle` again: nobody writes it while `collect` reads it.
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
        // SAFETY: as above, until the store below.
        copy: unsafe { s.copy.view() },
    });
    s.state.store(IDLE, Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once the sampler has looked at every slot, a timer handler's walk
    /// left `Done` waits for its next look: arming a slot for a signal of
    /// the sampler's own takes another one, and the walk is collected
    /// with its thread.
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
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        assert!(collected.contains(&tid), "{collected:?}");
        assert!(owner.cancel(armed.slot));
    }
}
