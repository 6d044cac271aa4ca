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
//! With per-thread CPU timers ([`super::thread_timers`]) nobody arms: the
//! overflow of a thread's own timer signals that thread, and its handler
//! claims any `Idle` slot itself (`Idle` -> `Writing` with a fresh
//! generation), records its thread id beside the walk and publishes it
//! `Done`; the sampler collects such slots with
//! [`SlotOwner::collect_claimed`].

use core::cell::UnsafeCell;
use core::sync::atomic::{
    AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::walker::{self, Arch, DirectMemory, Registers, StackBounds, WalkEnd};

use super::stack_regions;

/// Slots in flight at once; more threads than this are sampled on the
/// following ticks (and counted as skipped on this one). With per-thread
/// timers, the samples the handlers may leave between two collections:
/// 256 is a quarter of a second of two busy threads at 1000 Hz. The slot
/// index travels in the low 8 bits of `si_value`, so 256 is also the most.
pub(crate) const SLOTS: usize = 256;
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
    /// (0: no check). The handler gives up a sample if the thread spent
    /// more than [`LATE_NS`] off CPU since.
    sent_ns: AtomicU64,
    sent_cpu_ns: AtomicU64,
    /// The handler found the signal late and walked nothing.
    late: AtomicU32,
    frames: FrameBuf,
}

impl Slot {
    const fn new() -> Self {
        Slot {
            state: AtomicU64::new(IDLE),
            max_depth: AtomicU32::new(MAX_DEPTH as u32),
            depth: AtomicU32::new(0),
            end: AtomicU32::new(0),
            lr: AtomicU64::new(0),
            tid: AtomicI32::new(0),
            sent_ns: AtomicU64::new(0),
            sent_cpu_ns: AtomicU64::new(0),
            late: AtomicU32::new(0),
            frames: FrameBuf(UnsafeCell::new([0; MAX_DEPTH])),
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
/// Timer samples lost because every slot was full (the sampler thread did
/// not collect in time).
pub(crate) static NO_FREE_SLOT: AtomicU64 = AtomicU64::new(0);
/// Frames a timer sample keeps (slots armed by the sampler carry their own).
pub(crate) static TIMER_MAX_DEPTH: AtomicU32 = AtomicU32::new(MAX_DEPTH as u32);
/// Where a timer handler starts looking for a free slot, so handlers on
/// different threads do not all contend for slot 0.
static NEXT_FREE_HINT: AtomicU32 = AtomicU32::new(0);

/// How long a thread may have been off CPU between the sampler's decision
/// and the signal's delivery and still be sampled. A signal to a thread
/// running on another CPU is taken within microseconds while the thread
/// keeps running (its CPU clock keeps pace with the wall clock); one to a
/// thread waiting for a CPU is taken when the thread is scheduled again,
/// and its sample would land where the thread was preempted (on a loaded
/// machine, disproportionately at the return from a system call), not
/// where its CPU time went. Such a sample is given up and the thread
/// sampled on a later tick.
pub(crate) const LATE_NS: u64 = 50_000;

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
    /// The signal arrived too late ([`LATE_NS`]) and nothing was walked;
    /// the slot is free.
    Late,
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
        if s.late.load(Relaxed) != 0 {
            s.state.store(IDLE, Release);
            self.armed[slot] = None;
            return Poll::Late;
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
        s.state.store(IDLE, Release);
        self.armed[slot] = None;
        collect(Collected {
            frames: &self.scratch,
            lr,
            end,
        });
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
    /// slots. Returns how many slots a handler is still writing.
    pub fn collect_claimed(&mut self, mut collect: impl FnMut(i32, Collected<'_>)) -> usize {
        let mut writing = 0;
        for (slot, s) in SLOT_TABLE.iter().enumerate() {
            if self.armed[slot].is_some() {
                continue;
            }
            let now = s.state.load(Acquire);
            match now & 3 {
                DONE => {}
                WRITING => {
                    writing += 1;
                    continue;
                }
                _ => continue,
            }
            let depth = (s.depth.load(Relaxed) as usize).min(MAX_DEPTH);
            self.scratch.clear();
            // SAFETY: the slot is `Done` (loaded with `Acquire` above): its
            // handler finished writing, and no handler claims a slot that is
            // not `Idle`, so nobody writes it until we store `Idle` below.
            let frames = unsafe { &(&*s.frames.0.get())[..depth] };
            self.scratch.extend_from_slice(frames);
            let lr = s.lr.load(Relaxed);
            let end = WalkEnd::from_u8(s.end.load(Relaxed) as u8);
            let tid = s.tid.load(Relaxed);
            s.state.store(IDLE, Release);
            collect(
                tid,
                Collected {
                    frames: &self.scratch,
                    lr,
                    end,
                },
            );
        }
        writing
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
        if pid != OWN_PID.load(Relaxed) {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        } else {
            claim_armed(value)
        }
    } else if POLL_CODES.contains(&info.si_code) {
        // SAFETY: a poll-band signal carries `si_band` and `si_fd`.
        let fd = unsafe { poll_fd(info) };
        if super::thread_timers::is_ours(fd) {
            claim_free()
        } else {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        }
    } else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        None
    };
    let Some((slot, generation, max_depth)) = claimed else {
        return;
    };
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery, and
    // we own `slot` in `Writing` for `generation`.
    unsafe { walk_into(slot, generation, max_depth, context) };
}

/// The slot a queued signal's `si_value` names, claimed `Armed -> Writing`
/// (counted as stray if there is none). A late signal publishes the slot
/// `Done` and marked late at once, and returns `None`.
fn claim_armed(value: usize) -> Option<(&'static Slot, u64, usize)> {
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
        waited > LATE_NS
    };
    slot.late.store(u32::from(late), Relaxed);
    if late {
        slot.state.store(state(generation, DONE), Release);
        return None;
    }
    Some((slot, generation, max_depth))
}

/// `clock` in nanoseconds. Async-signal-safe (`clock_gettime` is).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Any `Idle` slot, claimed `Idle -> Writing` with a fresh generation, for
/// a timer sample; counts the sample lost if every slot is taken.
fn claim_free() -> Option<(&'static Slot, u64, usize)> {
    let start = NEXT_FREE_HINT.fetch_add(1, Relaxed) as usize;
    for i in 0..SLOTS {
        let slot = &SLOT_TABLE[(start + i) % SLOTS];
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
    let bounds = stack_regions::region_containing(regs.sp)
        .map(|(_, high)| StackBounds { low: regs.sp, high });
    if bounds.is_none() {
        MISSING_REGIONS.fetch_add(1, Relaxed);
    }
    // SAFETY: we won `-> Writing`, so we are the slot's only writer and the
    // sampler does not read it until we store `Done`.
    let frames = unsafe { &mut (&mut *slot.frames.0.get())[..max_depth] };
    let walk = walker::walk(Arch::host(), &regs, bounds, &mut DirectMemory, frames);
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
