//! Sample slots: where a signal handler leaves one thread's walk for the
//! sampler thread to pick up, and the handler itself.
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

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::{self, Arch, Registers, StackBounds, WalkEnd};

use super::checked_memory::WINDOW_WORDS;
use super::stack_regions;
use super::unwind::stack_copy::{CopiedStack, StackCopy};

/// Slots in flight at once; more threads than this are sampled on the
/// following ticks (and counted as skipped on this one).
pub(crate) const SLOTS: usize = 64;
/// The hard cap on frames per sample; `max_depth` may only lower it.
pub const MAX_DEPTH: usize = 512;

const IDLE: u64 = 0;
const ARMED: u64 = 1;
const WRITING: u64 = 2;
const DONE: u64 = 3;

#[inline]
const fn state(generation: u64, phase: u64) -> u64 {
    generation << 2 | phase
}

/// Frames written by exactly one handler while its slot is `Writing`, read
/// by the sampler only once it saw `Done`.
struct FrameBuf(UnsafeCell<[u64; MAX_DEPTH]>);

// SAFETY: access is serialised by the slot's state machine: the handler that
// won `Armed -> Writing` is the only writer, and the sampler reads only after
// an `Acquire` load of `Done`, which the writer stored with `Release`.
unsafe impl Sync for FrameBuf {}

/// The copy of the stack a handler walks through ([`CheckedMemory`]),
/// owned like [`FrameBuf`]: static, so it never sits on the handler's
/// stack (a thread may have little left).
struct WindowBuf(UnsafeCell<[u64; WINDOW_WORDS]>);

// SAFETY: as for `FrameBuf`: only the handler that won `Armed -> Writing`
// touches it, and only until it stores `Done`; the sampler never does.
unsafe impl Sync for WindowBuf {}

struct Slot {
    state: AtomicU64,
    max_depth: AtomicU32,
    depth: AtomicU32,
    end: AtomicU32,
    lr: AtomicU64,
    frames: FrameBuf,
    window: WindowBuf,
    /// Registers and stack top for CFI unwinding in the sampler thread.
    copy: StackCopy,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            state: AtomicU64::new(IDLE),
            max_depth: AtomicU32::new(MAX_DEPTH as u32),
            depth: AtomicU32::new(0),
            end: AtomicU32::new(0),
            lr: AtomicU64::new(0),
            frames: FrameBuf(UnsafeCell::new([0; MAX_DEPTH])),
            window: WindowBuf(UnsafeCell::new([0; WINDOW_WORDS])),
            copy: StackCopy::new(),
        }
    }
}

static SLOT_TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Arming generations never repeat for the life of the process, so a
/// signal from an earlier arming (or an earlier profiler) cannot claim a slot.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);
/// Our pid, to reject queued signals sent by other processes.
pub(crate) static OWN_PID: AtomicI32 = AtomicI32::new(0);
/// Handler runs that found no slot to fill (late, stray or foreign).
pub(crate) static STRAY_SIGNALS: AtomicU64 = AtomicU64::new(0);
/// Walks that found no mapping around the stack pointer: the region
/// snapshot is stale and should be refreshed.
pub(crate) static MISSING_REGIONS: AtomicU64 = AtomicU64::new(0);

/// In a forked child: frees every slot. Only the forking thread exists
/// there, so a slot a parent's handler was writing will never be finished,
/// and no sampler runs yet to own any. Async-signal-safe.
pub(crate) fn reset_after_fork() {
    for slot in &SLOT_TABLE {
        slot.state.store(IDLE, Release);
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
    /// The handler's registers and stack copy, for CFI unwinding.
    pub copy: Option<CopiedStack<'a>>,
}

/// The sampler side of the slots. Only the sampler thread holds one, and it
/// tracks which slots it armed so it never touches another's.
pub(crate) struct SlotOwner {
    armed: [Option<Armed>; SLOTS],
    scratch: Vec<u64>,
}

/// What a slot the sampler armed looks like now.
pub(crate) enum Poll {
    /// The handler has not run yet.
    Pending,
    /// The handler is walking right now.
    Busy,
    /// The walk is done and was handed to the callback; the slot is free.
    Collected,
}

impl SlotOwner {
    pub fn new() -> Self {
        SlotOwner {
            armed: [None; SLOTS],
            scratch: Vec::with_capacity(MAX_DEPTH),
        }
    }

    /// Arms a free slot for one signal, or `None` when all are in flight.
    ///
    /// A slot still `Writing` for an earlier arming (a handler of a previous
    /// profiler that outlived it) is left alone; one left `Armed` or `Done`
    /// by a previous profiler is taken over.
    pub fn arm(&mut self, max_depth: usize) -> Option<Armed> {
        let generation = NEXT_GENERATION.fetch_add(1, Relaxed);
        for (slot, s) in SLOT_TABLE.iter().enumerate() {
            if self.armed[slot].is_some() {
                continue;
            }
            let current = s.state.load(Acquire);
            if current & 3 == WRITING {
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
        let depth = (s.depth.load(Relaxed) as usize).min(MAX_DEPTH);
        // Copy out so the slot can be reused at once.
        self.scratch.clear();
        // SAFETY: the slot is `Done` for our generation (loaded with
        // `Acquire` above), so its handler finished writing and no other
        // handler can claim it until we arm it again.
        let frames = unsafe { &(&*s.frames.0.get())[..depth] };
        self.scratch.extend_from_slice(frames);
        let lr = s.lr.load(Relaxed);
        let end = WalkEnd::from_u8(s.end.load(Relaxed) as u8);
        self.armed[slot] = None;
        collect(Collected {
            frames: &self.scratch,
            lr,
            end,
            // SAFETY: the slot stays `Done` until the store below, so no
            // handler writes the copy while `collect` reads it.
            copy: unsafe { s.copy.view() },
        });
        s.state.store(IDLE, Release);
        Poll::Collected
    }

    /// Whether `slot` is armed by us (pending, busy or done).
    pub fn is_armed(&self, slot: usize) -> bool {
        self.armed[slot].is_some()
    }
}

/// The profiling signal's handler. Async-signal-safe: no allocation, no
/// locks, no panics; errno is preserved.
pub(crate) extern "C" fn on_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: reading and writing this thread's errno is always allowed.
    let errno_ptr = unsafe { libc::__errno_location() };
    // SAFETY: `__errno_location` returns a valid pointer for this thread.
    let saved_errno = unsafe { *errno_ptr };
    // SAFETY: the kernel passes a valid `siginfo_t` and `ucontext_t` to an
    // `SA_SIGINFO` handler, and they live for the duration of this call.
    unsafe { take_sample(info, context) };
    // SAFETY: as above.
    unsafe { *errno_ptr = saved_errno };
}

/// # Safety
/// `info` and `context` must be the handler's arguments.
unsafe fn take_sample(info: *const libc::siginfo_t, context: *const libc::c_void) {
    if info.is_null() || context.is_null() {
        return;
    }
    // SAFETY: non-null and provided by the kernel (see `on_signal`).
    let info = unsafe { &*info };
    // SAFETY: si_pid and si_value are valid for SI_QUEUE signals, which we
    // check first.
    let (pid, value) = unsafe {
        if info.si_code != libc::SI_QUEUE {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            return;
        }
        (info.si_pid(), info.si_value().sival_ptr as usize)
    };
    if pid != OWN_PID.load(Relaxed) {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        return;
    }
    let generation = (value >> 8) as u64;
    let Some(slot) = SLOT_TABLE.get(value & 0xff) else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        return;
    };
    if slot
        .state
        .compare_exchange(
            state(generation, ARMED),
            state(generation, WRITING),
            Acquire,
            Relaxed,
        )
        .is_err()
    {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        return;
    }

    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery.
    let regs = unsafe { registers(&*(context as *const libc::ucontext_t)) };
    let bounds = stack_regions::region_containing(regs.sp)
        .map(|(_, high)| StackBounds { low: regs.sp, high });
    if bounds.is_none() {
        MISSING_REGIONS.fetch_add(1, Relaxed);
    }
    let max_depth = (slot.max_depth.load(Relaxed) as usize).min(MAX_DEPTH);
    // SAFETY: we won `Armed -> Writing`, so we are the slot's only writer
    // and the sampler does not read it until we store `Done`.
    let frames = unsafe { &mut (&mut *slot.frames.0.get())[..max_depth] };
    // SAFETY: as above, the window is ours until we store `Done`.
    let window = unsafe { &mut *slot.window.0.get() };
    // Bounds come from a snapshot, which proves nothing about now; every
    // read goes through the kernel's fault-safe copy. The copy of the stack
    // top it starts with is kept for CFI unwinding in the sampler thread.
    // SAFETY: we won `Armed -> Writing`: the slot's copy is ours too.
    let memory = unsafe {
        slot.copy
            .capture(&regs, bounds.map_or(0, |b| b.high), window)
    };
    let walk = walker::walk(Arch::host(), &regs, bounds, &memory, frames);
    slot.depth.store(walk.depth as u32, Relaxed);
    slot.lr.store(walk.lr, Relaxed);
    slot.end.store(walk.end as u32, Relaxed);
    slot.state.store(state(generation, DONE), Release);
}

#[cfg(target_arch = "x86_64")]
fn registers(uc: &libc::ucontext_t) -> Registers {
    let g = &uc.uc_mcontext.gregs;
    Registers {
        pc: g[libc::REG_RIP as usize] as u64,
        fp: g[libc::REG_RBP as usize] as u64,
        sp: g[libc::REG_RSP as usize] as u64,
        lr: 0,
    }
}

#[cfg(target_arch = "aarch64")]
fn registers(uc: &libc::ucontext_t) -> Registers {
    let m = &uc.uc_mcontext;
    Registers {
        pc: m.pc,
        fp: m.regs[29],
        sp: m.sp,
        lr: m.regs[30],
    }
}
