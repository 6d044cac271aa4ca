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
//!
//! With per-thread CPU timers ([`thread_timers`](crate::linux::clocks::timers::thread_timers)) nobody arms: the
//! overflow of a thread's own timer signals that thread, and its handler
//! claims any `Idle` slot itself (`Idle` -> `Writing` with a fresh
//! generation), records its thread id beside the walk and publishes it
//! `Done`; the sampler collects such slots with
//! [`SlotOwner::collect_claimed`]. An idle
//! thread's wake timer takes no slot: its handler only notes the wake
//! ([`wake_notices`]).

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::{self, Arch, StackBounds, WalkEnd};

use super::checked_memory::WINDOW_WORDS;
use super::registers::registers;
use super::stack_copy::{CopiedStack, StackCopy};
use super::timer_fds;
use super::timer_values;
use super::{dump_slot, own_stack, stack_regions, wake_notices};

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
struct FrameBuf(UnsafeCell<[u64; MAX_DEPTH]>);

// SAFETY: access is serialised by the slot's state machine: the handler that
// won `Armed -> Writing` is the only writer, and the sampler reads only after
// an `Acquire` load of `Done`, which the writer stored with `Release`.
unsafe impl Sync for FrameBuf {}

/// The copy of the stack a handler walks through ([`CheckedMemory`]),
/// owned like [`FrameBuf`]: static, so it never sits on the handler's
/// stack (a thread may have little left).
///
/// [`CheckedMemory`]: super::checked_memory::CheckedMemory
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
    /// The thread that wrote the walk (timer samples).
    tid: AtomicI32,
    /// Armed slots in cpu mode: the target thread's CPU clock and
    /// `CLOCK_MONOTONIC` read together just before the signal was sent
    /// (0: no check). The handler gives up a sample taken at a system
    /// call's exit after the thread spent more than
    /// [`SYSCALL_EXIT_LATE_NS`] off CPU since.
    sent_ns: AtomicU64,
    sent_cpu_ns: AtomicU64,
    /// The handler found the signal late and walked nothing.
    late: AtomicU32,
    frames: FrameBuf,
    window: WindowBuf,
    /// Registers and stack top for CFI unwinding in the sampler thread.
    copy: StackCopy,
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
/// Timer periods lost because every slot was full (the sampler thread did
/// not collect in time).
pub(crate) static NO_FREE_SLOT: AtomicU64 = AtomicU64::new(0);
/// The free slots timer handlers have claimed, one bit per slot, set after
/// each claim and taken by the sampler's next look
/// ([`SlotOwner::collect_claimed`]), which reads only those slots.
static CLAIMED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];
const _: () = assert!(SLOTS % 64 == 0);
/// Frames a timer sample keeps (slots armed by the sampler carry their own).
pub(crate) static TIMER_MAX_DEPTH: AtomicU32 = AtomicU32::new(MAX_DEPTH as u32);

/// Tests only ([`crate::test_hooks`], feature `test-hooks`): CPU time each
/// handler spends after claiming its slot, as a slow walk would, so a test
/// can catch threads inside the handler (where the profiling signal is in
/// their `SigBlk`). Production builds have neither the statics nor the
/// check in the handler.
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_NS: AtomicU64 = AtomicU64::new(0);
/// The one thread whose handlers take [`HANDLER_TEST_DELAY_NS`].
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_TID: AtomicI32 = AtomicI32::new(0);

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

/// How long a thread may have been off CPU between the sampler's decision
/// and the signal's delivery and still be sampled at a system call's exit.
///
/// A signal to a thread running on another CPU is taken within
/// microseconds, where the thread is. One to a thread waiting for a CPU is
/// taken when the thread is scheduled again, where it was preempted. Most
/// preemptions come at a timer interrupt or at the sampler's own wakeup,
/// at an unbiased point of the thread's CPU time, and such a sample is
/// kept however long the wait (giving them up took the samples of the
/// thread that shares a CPU with the sampler: with two busy processes
/// beside it, one worker of two got 258 samples per CPU-second, the other
/// 684). But a thread is preempted on its way out of a system call far
/// more often than its CPU time there says (the scheduler preempts at the
/// return to user space, and reading a CPU clock can end a time slice), so
/// a signal that finds the thread there after a wait above this is given
/// up and its periods paid by later samples. It is above what delivering a
/// signal to a running thread takes in a VM.
const SYSCALL_EXIT_LATE_NS: u64 = 10_000;

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
    /// ([`SYSCALL_EXIT_LATE_NS`]) and nothing was walked; the slot is free.
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

/// `si_code` values of a signal raised by file-descriptor I/O readiness
/// (`POLL_IN` ..= `POLL_HUP`): how a perf timer's overflow arrives when the
/// descriptor has `F_SETSIG`.
const POLL_CODES: core::ops::RangeInclusive<i32> = 1..=6;

/// # Safety
/// `info` and `context` must be the handler's arguments.
unsafe fn take_sample(info: *const libc::siginfo_t, context: *const libc::c_void) {
    if info.is_null() || context.is_null() {
        return;
    }
    // SAFETY: non-null and provided by the kernel (see `on_signal`).
    let info = unsafe { &*info };
    let claimed = if info.si_code == libc::SI_QUEUE {
        // SAFETY: si_pid and si_value are valid for SI_QUEUE signals.
        let (pid, value) = unsafe { (info.si_pid(), info.si_value().sival_ptr as usize) };
        if pid == OWN_PID.load(Relaxed) && value & dump_slot::DUMP_MARK != 0 {
            // A one-shot capture's request: its own slot, not a sample's.
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            unsafe { dump_slot::on_dump_signal(value, context) };
            return;
        }
        if pid != OWN_PID.load(Relaxed) {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        } else {
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            let pc = registers(unsafe { &*(context as *const libc::ucontext_t) }).pc;
            claim_armed(value, pc)
        }
    } else if POLL_CODES.contains(&info.si_code) {
        // SAFETY: a poll-band signal carries `si_band` and `si_fd`.
        let fd = unsafe { poll_fd(info) };
        if dump_slot::is_request_fd(fd) {
            // A one-shot capture's request, raised by a perf event.
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            unsafe { dump_slot::on_perf_request(context) };
            return;
        }
        if info.si_signo == dump_slot::capture_signal() {
            // A capture's request that fired before the capture gave up on
            // its thread (it did not run in time) and closed it: queued,
            // then taken now. The capture's business, not a sample and not
            // a profiler's stray signal; dropped.
            return;
        }
        if timer_fds::is_ours(fd) {
            claim_free()
        } else {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        }
    } else if let Some(generation) = timer_values::requested_dump(info) {
        // A one-shot capture's request, raised by a one-shot CPU timer.
        // SAFETY: `context` is the kernel's `ucontext_t` for this delivery
        // (checked non-null above).
        unsafe { dump_slot::on_dump_signal(dump_slot::DUMP_MARK | generation as usize, context) };
        return;
    } else if let Some(value) = timer_values::requested_slot(info) {
        // The sampler's request for one sample of a running thread, raised
        // by a one-shot CPU timer (see `PosixTimer::open_request`).
        // SAFETY: `context` is the kernel's `ucontext_t` for this delivery
        // (checked non-null above).
        let pc = registers(unsafe { &*(context as *const libc::ucontext_t) }).pc;
        claim_armed(value, pc)
    } else if let Some(index) = timer_values::wake_index(info) {
        // An idle thread ran again: the sampler looks at it from its next
        // wakeup (see `wake_notices`).
        wake_notices::note(index);
        return;
    } else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        None
    };
    let Some((slot, generation, max_depth)) = claimed else {
        return;
    };
    #[cfg(feature = "test-hooks")]
    test_delay();
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery, and
    // we own `slot` in `Writing` for `generation`.
    unsafe { walk_into(slot, generation, max_depth, context) };
}

/// Tests only: spends [`HANDLER_TEST_DELAY_NS`] of CPU time if this is the
/// thread a test chose.
#[cfg(feature = "test-hooks")]
fn test_delay() {
    let delay = HANDLER_TEST_DELAY_NS.load(Relaxed);
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    if delay != 0 && HANDLER_TEST_DELAY_TID.load(Relaxed) == unsafe { libc::gettid() } {
        let until = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_add(delay);
        while clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) < until {
            core::hint::spin_loop();
        }
    }
}

/// The slot a queued signal's `si_value` names, claimed `Armed -> Writing`
/// (counted as stray if there is none). A late signal (judged with `pc`,
/// where it interrupted the thread) publishes the slot `Done` and marked
/// late at once, and returns `None`.
fn claim_armed(value: usize, pc: u64) -> Option<(&'static Slot, u64, usize)> {
    let generation = (value >> 8) as u64;
    let claimed = SLOT_TABLE.get(value & 0xff).filter(|slot| {
        slot.state
            .compare_exchange(
                state(generation, ARMED),
                state(generation, WRITING),
                Acquire,
                Relaxed,
            )
            .is_ok()
    });
    let Some(slot) = claimed else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        return None;
    };
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    slot.tid.store(unsafe { libc::gettid() }, Relaxed);
    let max_depth = (slot.max_depth.load(Relaxed) as usize).min(MAX_DEPTH);
    let sent = slot.sent_ns.load(Relaxed);
    let late = sent != 0 && {
        // Wall time since the sampler's reading, less the CPU time this
        // thread got meanwhile: how long it waited for a CPU.
        let waited = clock_ns(libc::CLOCK_MONOTONIC)
            .saturating_sub(sent)
            .saturating_sub(
                clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
                    .saturating_sub(slot.sent_cpu_ns.load(Relaxed)),
            );
        // See `SYSCALL_EXIT_LATE_NS`: only a wait that ends at a system
        // call's exit is given up. A thread that was running in the call
        // when the signal came takes it there at once.
        waited > SYSCALL_EXIT_LATE_NS && after_system_call(pc)
    };
    slot.late.store(u32::from(late), Relaxed);
    if late {
        slot.state.store(state(generation, DONE), Release);
        return None;
    }
    Some((slot, generation, max_depth))
}

/// Whether the instruction just before `pc` is a system call (x86_64
/// `syscall`, aarch64 `svc #0`): the thread is returning from the kernel.
/// Reads code with the fault-safe copy; unreadable means no.
/// Async-signal-safe.
fn after_system_call(pc: u64) -> bool {
    #[cfg(target_arch = "x86_64")]
    const LEN: u64 = 2;
    #[cfg(target_arch = "x86_64")]
    const CODE: u32 = 0x050f;
    #[cfg(target_arch = "aarch64")]
    const LEN: u64 = 4;
    #[cfg(target_arch = "aarch64")]
    const CODE: u32 = 0xd400_0001;
    let Some(start) = pc.checked_sub(LEN) else {
        return false;
    };
    let base = start & !7;
    let at = (start - base) as usize;
    let mut words = [0u64; 2];
    if super::checked_memory::copy_words(base, &mut words) * 8 < at + LEN as usize {
        return false;
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_ne_bytes());
    bytes[8..].copy_from_slice(&words[1].to_ne_bytes());
    let mut code = 0u32;
    for i in (0..LEN as usize).rev() {
        code = code << 8 | u32::from(bytes[at + i]);
    }
    code == CODE
}

/// `clock` in nanoseconds. Async-signal-safe (`clock_gettime` is).
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The first `Idle` slot, claimed `Idle -> Writing` with a fresh
/// generation, for a timer sample; counts the sample lost if every slot
/// is taken.
///
/// The lowest free slot, not one further round each time: a slot's pages
/// are the program's data until first written, and the first write of
/// each copies the page and flushes it from every CPU the process runs on
/// (an interrupt to each). Taken round the table, a handler paid that for
/// its first 256 samples, most of a short run's; taken lowest first, only
/// the few slots ever in use at once are.
fn claim_free() -> Option<(&'static Slot, u64, usize)> {
    for (index, slot) in SLOT_TABLE.iter().enumerate() {
        let current = slot.state.load(Relaxed);
        if current & 3 != IDLE {
            continue;
        }
        let generation = NEXT_GENERATION.fetch_add(1, Relaxed);
        if slot
            .state
            .compare_exchange(current, state(generation, WRITING), Acquire, Relaxed)
            .is_ok()
        {
            CLAIMED[index / 64].fetch_or(1 << (index % 64), Release);
            // SAFETY: gettid has no preconditions and is async-signal-safe.
            slot.tid.store(unsafe { libc::gettid() }, Relaxed);
            slot.late.store(0, Relaxed);
            let max_depth = (TIMER_MAX_DEPTH.load(Relaxed) as usize).min(MAX_DEPTH);
            return Some((slot, generation, max_depth));
        }
    }
    NO_FREE_SLOT.fetch_add(1, Relaxed);
    None
}

/// The `si_fd` of a poll-band signal: on 64-bit Linux the `_sigpoll`
/// member (`long si_band; int si_fd;`) starts at byte 16 of `siginfo_t`.
///
/// # Safety
/// `info` must be a signal whose `si_code` is a poll band.
unsafe fn poll_fd(info: &libc::siginfo_t) -> i32 {
    const SI_FD_AT: usize = 16 + core::mem::size_of::<libc::c_long>();
    // SAFETY: `siginfo_t` is 128 bytes; byte 24 holds `si_fd` for poll-band
    // signals, which the caller checked.
    unsafe {
        (info as *const libc::siginfo_t)
            .cast::<u8>()
            .add(SI_FD_AT)
            .cast::<i32>()
            .read_unaligned()
    }
}

/// Walks the interrupted stack into `slot` and publishes it `Done`.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`, and the caller must have
/// won `slot` into `Writing` for `generation`.
unsafe fn walk_into(slot: &Slot, generation: u64, max_depth: usize, context: *const libc::c_void) {
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery.
    let regs = unsafe { registers(&*(context as *const libc::ucontext_t)) };
    // The snapshot bounds the walk where it knows the stack's mapping.
    // Where it does not (a thread or mapping newer than it, or more
    // mappings than it holds), the walk is bounded by a span above sp
    // instead of being cut to the leaf: every read is fault-safe
    // ([`CheckedMemory`](super::checked_memory::CheckedMemory)), so the bound only limits how far a corrupt chain
    // can wander, and the sampler is told to refresh the snapshot.
    let region = stack_regions::region_containing(regs.sp);
    let high = match region {
        Some((_, high)) => high,
        None => {
            MISSING_REGIONS.fetch_add(1, Relaxed);
            regs.sp.saturating_add(UNKNOWN_STACK_SPAN)
        }
    };
    let own_top = region.and_then(|region| own_stack::readable_top(regs.sp, region));
    let bounds = Some(StackBounds { low: regs.sp, high });
    // SAFETY: we won `-> Writing`, so we are the slot's only writer and the
    // sampler does not read it until we store `Done`.
    let frames = unsafe { &mut (&mut *slot.frames.0.get())[..max_depth] };
    // SAFETY: as above, the window is ours until we store `Done`.
    let window = unsafe { &mut *slot.window.0.get() };
    // Bounds come from a snapshot, which proves nothing about now: every
    // read outside the thread's own stack goes through the kernel's
    // fault-safe copy. The copy of the stack top it starts with is kept
    // for CFI unwinding in the sampler thread.
    // SAFETY: we won `-> Writing`: the slot's copy is ours too.
    let mut memory = unsafe { slot.copy.capture(&regs, high, own_top, window) };
    let walk = walker::walk(Arch::host(), &regs, bounds, &mut memory, frames);
    slot.depth.store(walk.depth as u32, Relaxed);
    slot.lr.store(walk.lr, Relaxed);
    slot.end.store(walk.end as u32, Relaxed);
    slot.state.store(state(generation, DONE), Release);
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
        let (slot, generation, _) = claim_free().expect("a free slot");
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

    #[test]
    fn a_pc_right_after_a_system_call_instruction_is_recognised() {
        if crate::emulation::not_checked_under_qemu("reading code", crate::emulation::NO_VM_READV) {
            return;
        }
        assert!(super::super::checked_memory::probe());
        #[cfg(target_arch = "x86_64")]
        let code: &[u8] = &[0x0f, 0x05];
        #[cfg(target_arch = "aarch64")]
        let code: &[u8] = &[0x01, 0x00, 0x00, 0xd4];
        // Every alignment, so the instruction straddles a word boundary too.
        let mut buffer = [0u8; 64];
        for offset in 0..16 {
            buffer.fill(0x90);
            buffer[offset..offset + code.len()].copy_from_slice(code);
            // Read through the kernel, which the compiler cannot see.
            std::hint::black_box(&mut buffer);
            let end = buffer.as_ptr() as u64 + (offset + code.len()) as u64;
            assert!(after_system_call(end), "offset {offset}");
            assert!(!after_system_call(end - 1), "offset {offset}");
            assert!(!after_system_call(end + 1), "offset {offset}");
        }
        assert!(!after_system_call(0));
        assert!(!after_system_call(8));
    }
}
