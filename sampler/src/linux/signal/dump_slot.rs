//! The one-shot capture's side of the handler (`dump::one_shot` arms it and unwinds the copy):
//! its static slot, stack copy and walk.

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::{self, Arch};

use super::checked_memory::WINDOW_WORDS;
use super::registers::registers;
use super::slots::{state, ARMED, DONE, IDLE, MAX_DEPTH, WRITING};
use super::stack_copy::StackCopy;
use super::{safe_calls, stack_bounds};

/// Stack words copied; more than a sample's, as one thread is copied at a time.
pub(crate) const COPY_WORDS: usize = 4096;

/// The `si_value` bit of a capture's request; a profiler's values never reach it.
pub(crate) const DUMP_MARK: usize = 1 << (usize::BITS - 1);

/// The capture's slot; static, so a late handler touches valid memory.
pub(crate) struct DumpSlot {
    pub(crate) state: AtomicU64,
    pub(crate) tid: AtomicI32,
    pub(crate) depth: AtomicU32,
    pub(crate) end: AtomicU32,
    pub(crate) lr: AtomicU64,
    pub(crate) held_ns: AtomicU64,
    pub(crate) copy: StackCopy<COPY_WORDS>,
    pub(crate) frames: UnsafeCell<[u64; MAX_DEPTH]>,
    pub(crate) window: UnsafeCell<[u64; WINDOW_WORDS]>,
}

// SAFETY: the buffers are written by the handler that won `Armed -> Writing` and read by the
// one capturing thread after an `Acquire` load of `Done`.
unsafe impl Sync for DumpSlot {}

pub(crate) static SLOT: DumpSlot = DumpSlot {
    state: AtomicU64::new(IDLE),
    tid: AtomicI32::new(0),
    depth: AtomicU32::new(0),
    end: AtomicU32::new(0),
    lr: AtomicU64::new(0),
    held_ns: AtomicU64::new(0),
    copy: StackCopy::new(),
    frames: UnsafeCell::new([0; MAX_DEPTH]),
    window: UnsafeCell::new([0; WINDOW_WORDS]),
};

pub(crate) static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// The perf request in flight: descriptor (-1: none), thread, generation. A late signal of an
/// earlier request on a reused descriptor is told apart by the thread.
pub(crate) static REQUEST_FD: AtomicI32 = AtomicI32::new(-1);
pub(crate) static REQUEST_TID: AtomicI32 = AtomicI32::new(0);
pub(crate) static REQUEST_GENERATION: AtomicU64 = AtomicU64::new(0);
/// Whether `fd` is the perf request in flight. Async-signal-safe.
pub(crate) fn is_request_fd(fd: i32) -> bool {
    fd >= 0 && REQUEST_FD.load(Acquire) == fd
}

/// The handler's part for a perf request's signal, if it is for this thread.
/// Async-signal-safe.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`.
pub(crate) unsafe fn on_perf_request(context: *const libc::c_void) {
    if REQUEST_TID.load(Acquire) != safe_calls::gettid() {
        return;
    }
    let generation = REQUEST_GENERATION.load(Acquire);
    // SAFETY: the caller's promise.
    unsafe { on_dump_signal(DUMP_MARK | generation as usize, context) };
}

/// Whether thread `tid` is in the capture's handler (the profiling signal masked meanwhile).
pub(crate) fn in_dump_handler(tid: i32) -> bool {
    SLOT.state.load(Acquire) & 3 == WRITING && SLOT.tid.load(Relaxed) == tid
}

/// The handler's part: if the slot is armed for `value`'s generation, copies registers and
/// stack into it and walks the frame pointers. Async-signal-safe.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`.
pub(crate) unsafe fn on_dump_signal(value: usize, context: *const libc::c_void) {
    let entered = safe_calls::clock_ns(libc::CLOCK_MONOTONIC);
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
    SLOT.tid.store(safe_calls::gettid(), Relaxed);
    // SAFETY: the caller's promise.
    let regs = registers(unsafe { &*(context as *const libc::ucontext_t) });
    let (high, own_top, _) = stack_bounds::stack_bounds(regs.sp);
    // SAFETY: we won `Writing`, so the buffers are ours until `Done`.
    let (window, frames) = unsafe { (&mut *SLOT.window.get(), &mut *SLOT.frames.get()) };
    // SAFETY: as above.
    let mut memory = unsafe { SLOT.copy.capture(&regs, high, own_top, window, true) };
    let bounds = Some(walker::StackBounds { low: regs.sp, high });
    let walk = walker::walk(Arch::host(), &regs, bounds, &mut memory, frames);
    SLOT.depth.store(walk.depth as u32, Relaxed);
    SLOT.lr.store(walk.lr, Relaxed);
    SLOT.end.store(walk.end as u32, Relaxed);
    let left = safe_calls::clock_ns(libc::CLOCK_MONOTONIC);
    SLOT.held_ns.store(left.saturating_sub(entered), Relaxed);
    SLOT.state.store(state(generation, DONE), Release);
}

/// The capture signal: `SIGRTMAX - 1`, real-time (never merged) and rarely used; a capture
/// fails with [`crate::Error::SignalInUse`] if the program handles it. Async-signal-safe.
pub fn capture_signal() -> libc::c_int {
    libc::SIGRTMAX() - 1
}
