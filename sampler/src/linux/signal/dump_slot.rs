//! The one-shot capture's side of the handler: its static slot, and what
//! the handler does with a capture's request (copy the registers and the
//! top of the stack, walk the frame-pointer chain). The capture itself,
//! which arms the slot and unwinds the copy, is `dump::one_shot`.

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

/// Stack copied per thread: 32 KiB, four times a sample's, since only one
/// thread is copied at a time. Frames beyond it come from the frame-pointer
/// walk.
pub(crate) const COPY_WORDS: usize = 4096;

/// The bit of `si_value` that marks a one-shot capture's request; the
/// profiler's values (a generation shifted by 8 and a slot index) never
/// reach it.
pub(crate) const DUMP_MARK: usize = 1 << (usize::BITS - 1);

/// The one slot a capture's handler writes into; static, so a handler
/// that runs after its request was withdrawn touches only valid memory
/// (and finds the slot not armed for it).
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

// SAFETY: the buffers are written only by the handler that won
// `Armed -> Writing` for the current generation, and read only by the
// capturing thread after an `Acquire` load of `Done`, which that handler
// stored with `Release`; the capture lock allows one capturing thread.
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

/// The perf request in flight (`dump::one_shot`'s `Request::Perf`): its descriptor (-1
/// when none), the thread it was opened on, and its generation. A late
/// signal of an earlier request whose descriptor number was reused lands
/// in another thread, and is told apart by the thread id.
pub(crate) static REQUEST_FD: AtomicI32 = AtomicI32::new(-1);
pub(crate) static REQUEST_TID: AtomicI32 = AtomicI32::new(0);
pub(crate) static REQUEST_GENERATION: AtomicU64 = AtomicU64::new(0);
/// Whether `fd` is the perf request in flight. Async-signal-safe.
pub(crate) fn is_request_fd(fd: i32) -> bool {
    fd >= 0 && REQUEST_FD.load(Acquire) == fd
}

/// The handler's part for a perf request's signal: the capture, if the
/// request was for this thread. Async-signal-safe.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`.
pub(crate) unsafe fn on_perf_request(context: *const libc::c_void) {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    if REQUEST_TID.load(Acquire) != unsafe { libc::gettid() } {
        return;
    }
    let generation = REQUEST_GENERATION.load(Acquire);
    // SAFETY: the caller's promise.
    unsafe { on_dump_signal(DUMP_MARK | generation as usize, context) };
}

/// Whether thread `tid` is in the capture's handler (its signal mask then
/// holds the profiling signal for a moment).
pub(crate) fn in_dump_handler(tid: i32) -> bool {
    SLOT.state.load(Acquire) & 3 == WRITING && SLOT.tid.load(Relaxed) == tid
}

/// The handler's part: copies registers and stack into the slot armed for
/// `value`'s generation and walks the frame-pointer chain. Returns at once
/// if the slot is not armed for it (a withdrawn request).
/// Async-signal-safe: no allocation, lock or panic.
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
    // SAFETY: gettid has no preconditions and is async-signal-safe.
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

/// The signal captures are requested with: `SIGRTMAX - 1`, a real-time
/// signal (queued, never merged with another pending instance) that
/// programs rarely use. A capture fails with [`crate::Error::SignalInUse`] if the
/// program installed a handler for it. Async-signal-safe (the handler
/// tells a capture's late request by it).
pub fn capture_signal() -> libc::c_int {
    libc::SIGRTMAX() - 1
}
