//! The one-shot capture's side of the handler (`dump::one_shot` arms it
//! and unwinds the copy): its static slot, stack copy and walk.

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::{self, Arch, StackBounds};

use super::checked_memory::{self, CheckedMemory, WINDOW_WORDS};
use super::handler;
use super::registers::registers;
use super::slots::MAX_DEPTH;
use super::slots::{self, state, ARMED, DONE, IDLE, WRITING};
use super::stack_copy::CopyThenChecked;
use super::{own_stack, stack_regions};

/// Stack words copied; more than a sample's, as one thread is copied at
/// a time.
pub(crate) const COPY_WORDS: usize = 4096;

/// The `si_value` bit of a capture's request; a profiler's values never
/// reach it.
pub(crate) const DUMP_MARK: usize = 1 << (usize::BITS - 1);

/// The capture's slot; static, so a late handler touches valid memory.
pub(crate) struct DumpSlot {
    pub(crate) state: AtomicU64,
    pub(crate) tid: AtomicI32,
    pub(crate) depth: AtomicU32,
    pub(crate) end: AtomicU32,
    pub(crate) lr: AtomicU64,
    pub(crate) held_ns: AtomicU64,
    pub(crate) regs: [AtomicU64; 4],
    pub(crate) base: AtomicU64,
    pub(crate) len: AtomicU32,
    pub(crate) frames: UnsafeCell<[u64; MAX_DEPTH]>,
    pub(crate) window: UnsafeCell<[u64; WINDOW_WORDS]>,
    pub(crate) words: UnsafeCell<[u64; COPY_WORDS]>,
}

// SAFETY: the buffers are written by the handler that won
// `Armed -> Writing` and read by the one capturing thread after an
// `Acquire` load of `Done`.
unsafe impl Sync for DumpSlot {}

pub(crate) static SLOT: DumpSlot = DumpSlot {
    state: AtomicU64::new(IDLE),
    tid: AtomicI32::new(0),
    depth: AtomicU32::new(0),
    end: AtomicU32::new(0),
    lr: AtomicU64::new(0),
    held_ns: AtomicU64::new(0),
    regs: [const { AtomicU64::new(0) }; 4],
    base: AtomicU64::new(0),
    len: AtomicU32::new(0),
    frames: UnsafeCell::new([0; MAX_DEPTH]),
    window: UnsafeCell::new([0; WINDOW_WORDS]),
    words: UnsafeCell::new([0; COPY_WORDS]),
};

pub(crate) static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// The perf request in flight: descriptor (-1: none), thread, generation.
/// A late signal of an earlier request on a reused descriptor is told
/// apart by the thread.
pub(crate) static REQUEST_FD: AtomicI32 = AtomicI32::new(-1);
pub(crate) static REQUEST_TID: AtomicI32 = AtomicI32::new(0);
pub(crate) static REQUEST_GENERATION: AtomicU64 = AtomicU64::new(0);
/// Whether `fd` is the perf request in flight. Async-signal-safe.
pub(crate) fn is_request_fd(fd: i32) -> bool {
    fd >= 0 && REQUEST_FD.load(Acquire) == fd
}

/// The handler's part for a perf request's signal, if it is for this
/// thread. Async-signal-safe.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`.
pub(crate) unsafe fn on_perf_request(context: *const libc::c_void) {
    // SAFETY: gettid has no preconditions.
    if REQUEST_TID.load(Acquire) != unsafe { libc::gettid() } {
        return;
    }
    let generation = REQUEST_GENERATION.load(Acquire);
    // SAFETY: the caller's promise.
    unsafe { on_dump_signal(DUMP_MARK | generation as usize, context) };
}

/// Whether thread `tid` is in the capture's handler (with the profiling
/// signal masked meanwhile).
pub(crate) fn in_dump_handler(tid: i32) -> bool {
    SLOT.state.load(Acquire) & 3 == WRITING && SLOT.tid.load(Relaxed) == tid
}

/// The handler's part: if the slot is armed for `value`'s generation,
/// copies registers and stack into it and walks the frame pointers.
/// Async-signal-safe.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`.
pub(crate) unsafe fn on_dump_signal(value: usize, context: *const libc::c_void) {
    let entered = handler::clock_ns(libc::CLOCK_MONOTONIC);
    let generation = (value & !DUMP_MARK) as u64;
    if SLOT
        .state
        .compare_exchange(
            state(generation, ARMED),
            state(generation, WRITING),
            Acquire,
            Relaxed,
        )
        .is_err()
    {
        return;
    }
    // SAFETY: gettid has no preconditions.
    SLOT.tid.store(unsafe { libc::gettid() }, Relaxed);
    // SAFETY: the caller's promise.
    let regs = registers(unsafe { &*(context as *const libc::ucontext_t) });
    let region = stack_regions::region_containing(regs.sp);
    let high = region
        .map(|(_, high)| high)
        .unwrap_or(regs.sp.saturating_add(slots::UNKNOWN_STACK_SPAN));
    let own_top = region.and_then(|region| own_stack::readable_top(regs.sp, region));
    for (to, from) in SLOT.regs.iter().zip([regs.pc, regs.sp, regs.fp, regs.lr]) {
        to.store(from, Relaxed);
    }
    let base = regs.sp & !7;
    // SAFETY: we won `Writing`, so the buffers are ours until `Done`.
    let (words, window, frames) = unsafe {
        (
            &mut *SLOT.words.get(),
            &mut *SLOT.window.get(),
            &mut *SLOT.frames.get(),
        )
    };
    let len = checked_memory::copy_stack_top(base, high, own_top, &mut words[..]);
    SLOT.base.store(base, Relaxed);
    SLOT.len.store(len as u32, Relaxed);
    let mut memory = CopyThenChecked::new(
        base,
        &words[..len],
        CheckedMemory::new(window, regs.sp, high).with_own_stack(own_top),
    );
    let bounds = Some(StackBounds { low: regs.sp, high });
    let walk = walker::walk(Arch::host(), &regs, bounds, &mut memory, frames);
    SLOT.depth.store(walk.depth as u32, Relaxed);
    SLOT.lr.store(walk.lr, Relaxed);
    SLOT.end.store(walk.end as u32, Relaxed);
    let left = handler::clock_ns(libc::CLOCK_MONOTONIC);
    SLOT.held_ns.store(left.saturating_sub(entered), Relaxed);
    SLOT.state.store(state(generation, DONE), Release);
}

/// The capture signal: `SIGRTMAX - 1`, real-time (never merged) and rarely
/// used; a capture fails with [`crate::Error::SignalInUse`] if the program
/// handles it. Async-signal-safe.
pub fn capture_signal() -> libc::c_int {
    libc::SIGRTMAX() - 1
}
