//! Linux, own process: three clocks pace the samples ([`SampleClock`]).
//!
//! **Perf events** ([`SampleClock::ThreadTimers`], the default in cpu mode
//! where `perf_event_open` is allowed): the kernel samples every thread
//! into ring buffers, with no signal ([`born_threads`]): the threads found
//! at start through task-clock events opened on them, and every thread
//! they create through the copies those events leave at creation, so a
//! thread that lives 2 ms is sampled from its first instruction. The
//! sampler thread reads the rings, unwinds each stack copy with CFI,
//! lists threads and reads their CPU clocks. A thread the rings cannot
//! take (beyond the descriptor budget, deeper than the kernel's call
//! chains, or created by a thread no event covers) gets a timer of its
//! own ([`thread_timers`]: a perf task-clock event whose overflow raises
//! the profiling signal in that thread), and the handler walks its stack
//! into a static slot ([`slots`]).
//!
//! **POSIX CPU timers** ([`posix_timers`], `timer_create` on each thread's
//! CPU clock) need no perf events. They take the timers' path (a
//! [`CpuTimer`] per thread, the handler claiming a free slot), but their
//! expiries come on the scheduler tick, so each sample carries the periods
//! it stands for. They run when forced ([`SamplerConfig::clock`]); the
//! default where perf events are refused stays the sampler thread, which
//! measured as accurate.
//!
//! **The sampler thread** (where perf events are refused, when forced, and
//! always in wall mode) paces the samples itself. In cpu mode it sends the
//! profiling signal with `rt_tgsigqueueinfo` to every thread due: a thread
//! is due when its CPU time since its last sample reaches one period, and
//! the sampler wakes at the moment each thread will be due, plus at random
//! moments ([`CpuWakeups`]), so that samples do not line up with where
//! threads resume after waiting for a CPU. A thread that could not be
//! sampled when due (it waited for a CPU, or the sampler ran late) is owed
//! the periods, paid by later samples weighted as [`CpuDebt`] says. In wall
//! mode it wakes on a fixed period and every thread is due: one that is
//! off CPU is counted so without being interrupted, on the stack it is
//! blocked on ([`blocked_stack`]), and a running one is asked for its
//! sample with a one-shot CPU timer, which only a running thread can take.
//! It never waits for a handler, so a thread that is slow to take its
//! signal delays only its own sample.
//!
//! A `setitimer(ITIMER_PROF)` is no alternative: it fires at the kernel
//! tick rate for the whole process, and its signal lands in whichever
//! thread the kernel picks.

mod blocked_stack;
mod born_threads;
mod cpu_debt;
mod cpu_timer;
mod cpu_wakeups;
mod exit_tails;
pub(crate) mod handler;
pub(crate) mod one_shot;
mod perf_attr;
mod perf_ring;
mod posix_timers;
pub(crate) mod remote;
mod scheduling;
mod split_mix;
pub(crate) mod task_clock;
mod thread_timers;
mod threads;
mod unseen_cpu;
mod unwind;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashMap;

use crate::clock::TickSchedule;
use crate::sampler_thread::SamplerThread;
use crate::stack_table::{StackKey, StackTable};
use crate::thread_keys::ThreadKeys;
use crate::walker::{Arch, WalkEnd};
use crate::window::{self, Window};
use crate::{
    exclusions, profile, Error, Mode, Progress, RawProfile, SampleClock, SamplerConfig,
    SamplerStats,
};
use cpu_debt::{CpuDebt, MAX_OWED_PERIODS};
use cpu_wakeups::CpuWakeups;
use exit_tails::{share_out, ExitTail, ExitTails};
use unseen_cpu::UnseenCpu;

pub use handler::slots::MAX_DEPTH;

use blocked_stack::{BlockedRead, BlockedStackReader, Syscall};
use born_threads::{BornSample, BornThreads, Settled};
use cpu_timer::CpuTimer;
use handler::signal::{self, InstalledHandler, SignalSender};
use handler::slots::{self, Collected, Poll, SlotOwner, SLOTS};
use handler::{checked_memory, stack_regions};
use posix_timers::PosixTimer;
use unwind::stack_copy::CopiedStack;
use unwind::CfiWalker;

/// A slot not taken by its thread within this time is cancelled and the
/// sample counted as failed (the thread has the signal blocked, or is
/// stuck in the kernel).
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(250);
/// How often the thread list is re-read: listing `/proc/self/task` costs
/// about 7 µs, too much for every tick at 1000 Hz. A new thread is sampled
/// at most this much later; an exited one fails its send with `ESRCH`.
const RELIST_INTERVAL: Duration = Duration::from_millis(10);
/// A listing may take at most 1/this of the time between two listings.
const LISTING_SHARE: u32 = 20;
/// Sampler CPU time one listing may spend opening timers for threads that
/// did not run since it read their clocks (see `open_timers`).
const IDLE_TIMER_BUDGET_NS: u64 = 1_000_000;
/// How long a thread counts as young: its name is re-read whenever one of
/// its samples is interned, because threads often name themselves right
/// after they start.
const YOUNG: Duration = Duration::from_millis(100);
/// With per-thread timers, the longest the sampler thread sleeps between
/// two collections of finished samples.
const MAX_COLLECT_INTERVAL: Duration = Duration::from_millis(5);
/// With every thread sampled into the rings, the longest the sampler
/// thread sleeps (the rings are read at a quarter of the time they take to
/// fill, if that is sooner). It still lists threads and reads their
/// clocks: the kernel does not always write a born thread's final counts
/// when it exits (seen beside busy processes), and then the CPU time the
/// thread used since its clock was last read has no count; at 100 ms that
/// was 2.5% of a 1.5 CPU-second program's time.
const MAX_RING_COLLECT_INTERVAL: Duration = Duration::from_millis(20);
/// Wall mode: CPU time a thread may gain since its last sample and still
/// count as not having run: taking a sample costs the thread a few
/// microseconds of handler (up to ~10 in a VM, more under load).
const IDLE_SLACK_NS: u64 = 50_000;
/// Wall mode: the share of wall time the sampler may spend reading the
/// stacks of threads found blocked after they ran (each read: a `/proc`
/// file, up to 32 KiB of stack and a CFI unwind, tens of microseconds).
/// Past it, such a thread is counted on its last known stack, as where
/// the read fails.
const BLOCKED_READ_SHARE: f64 = 0.02;
/// The most of that budget saved up while no thread blocks.
const BLOCKED_READ_BURST_NS: u64 = 2_000_000;
/// The least time between two reads of `/proc/self/maps`.
const REGIONS_REFRESH_INTERVAL: Duration = Duration::from_millis(250);
/// Sampler-thread path, cpu mode: how many of a young thread's last stacks
/// its CPU time after its last sample is spread over when it exits. The
/// very last one alone is too often in the thread's exit (`munmap` of its
/// signal stack, taken as the system call returns), a stack that used
/// little of its time.
const RECENT_WALKS: usize = 4;
/// The longest `stop` waits for the exit records of born threads that are
/// gone.
const EXIT_RECORDS_WAIT: Duration = Duration::from_millis(200);
/// The longest `start` waits for the sampler thread's first listing.
const FIRST_LISTING_WAIT: Duration = Duration::from_millis(500);
/// How long `stop` waits for handlers still walking.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The default profiling signal: `SIGURG`, because its default action is
/// to ignore it. A signal still queued for a thread when that thread calls
/// `execve` survives into the new program, where every handler is back to
/// its default; for a real-time signal that default is to terminate, so an
/// `exec` while profiling would kill the new program (it did, 54 times in
/// 100). `SIGURG` is then dropped instead. It is also a standard signal, so
/// the kernel never queues more than one instance per thread, whatever
/// happens, and it is rarely used (TCP out-of-band data, Go's runtime):
/// btprof refuses it when it already has a handler, and an instance from
/// elsewhere that reaches our handler is ignored, as it would have been.
pub fn default_signal() -> i32 {
    libc::SIGURG
}

/// Whether `signal` may be the profiling signal: a signal whose default
/// action is to ignore it and that has no other meaning to the kernel
/// (`SIGURG`, `SIGWINCH`), or a real-time signal (at the caller's risk on
/// `exec`, see [`default_signal`]).
fn usable_signal(signal: i32) -> bool {
    signal == libc::SIGURG
        || signal == libc::SIGWINCH
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal)
}

/// The clock forced by the configuration or the environment, checked
/// against what the kernel allows; else perf timers in cpu mode where perf
/// events are allowed, and the sampler thread's ticks otherwise. (Where
/// perf is refused the sampler thread stays the default: measured beside
/// busy processes, POSIX timers were not more accurate than it.)
fn choose_clock(config: &SamplerConfig) -> Result<SampleClock, Error> {
    let forced = match config.clock {
        Some(clock) => Some(clock),
        // The environment forces cpu-mode clocks only: wall mode has one.
        None if config.mode == Mode::Cpu => crate::clock_from_env()?,
        None => None,
    };
    let refused = |clock: SampleClock, e: std::io::Error| {
        Error::InvalidConfig(format!(
            "the {} clock was asked for, but the kernel refuses it: {e}",
            clock.short_name()
        ))
    };
    match forced {
        Some(SampleClock::SamplerThread) => Ok(SampleClock::SamplerThread),
        Some(clock) if config.mode == Mode::Wall => Err(Error::InvalidConfig(format!(
            "wall mode samples every thread from the sampler thread: the {} clock is for cpu mode",
            clock.short_name()
        ))),
        Some(SampleClock::ThreadTimers) => thread_timers::available()
            .map(|()| SampleClock::ThreadTimers)
            .map_err(|e| refused(SampleClock::ThreadTimers, e)),
        Some(SampleClock::PosixTimers) => posix_timers::available()
            .map(|()| SampleClock::PosixTimers)
            .map_err(|e| refused(SampleClock::PosixTimers, e)),
        None if config.mode == Mode::Cpu && thread_timers::available().is_ok() => {
            Ok(SampleClock::ThreadTimers)
        }
        None => Ok(SampleClock::SamplerThread),
    }
}

/// What a running sampler undoes after its thread is joined, which
/// deleted every timer before it returned: a POSIX timer signal still on
/// its way is from then on stray, and then the installed signal handler's
/// drop flushes pending signals and restores the previous action.
pub(crate) struct Running {
    _handler: InstalledHandler,
}

impl Drop for Running {
    fn drop(&mut self) {
        // Before the handler goes: fields drop after this body.
        posix_timers::end_run();
    }
}

/// Refuses a profiling signal the sampler cannot use.
pub(crate) fn check_config(config: &SamplerConfig) -> Result<(), Error> {
    let signal = config.signal.unwrap_or_else(default_signal);
    if !usable_signal(signal) {
        return Err(Error::InvalidConfig(format!(
            "signal {signal} cannot be the profiling signal: use SIGURG ({}), SIGWINCH ({}) \
             or a real-time signal ({}..={})",
            libc::SIGURG,
            libc::SIGWINCH,
            libc::SIGRTMIN(),
            libc::SIGRTMAX()
        )));
    }
    Ok(())
}

/// Installs the signal handler and starts the sampler thread, once
/// [`check_config`] passed and the caller holds the process's claim.
pub(crate) fn spawn(config: SamplerConfig) -> Result<(SamplerThread, Running), Error> {
    let signal = config.signal.unwrap_or_else(default_signal);
    // SAFETY: getpid has no preconditions.
    slots::OWN_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    // Without a fault-safe read, walks keep only the pc (counted as
    // unreadable) rather than trust a snapshot of the mappings.
    checked_memory::probe();
    unwind::stack_copy::CAPTURE.store(!config.frame_pointers_only, Ordering::Relaxed);
    slots::TIMER_MAX_DEPTH.store(
        config.max_depth.clamp(1, MAX_DEPTH) as u32,
        Ordering::Relaxed,
    );
    let clock = choose_clock(&config)?;
    let mut scratch = Vec::new();
    stack_regions::refresh(&mut scratch);
    let handler = InstalledHandler::install(signal)?;
    if clock == SampleClock::PosixTimers {
        posix_timers::begin_run();
    }
    let running = Running { _handler: handler };
    let thread = SamplerThread::spawn(config.hz, move |cx| {
        signal::block_in_this_thread(signal);
        scheduling::request_short_slice();
        // Only where it reads the rings: the sampler-thread clock's
        // accuracy was measured, and its wakeups placed, with the
        // thread at the weight of the threads it samples.
        if clock == SampleClock::ThreadTimers {
            scheduling::raise_weight();
        }
        SamplerLoop::new(config, clock, signal, cx.progress, cx.requests)?.run(&cx.stop)
    })?;
    // Until the first listing, threads that already run are not sampled:
    // a program that starts its workers right after `start` would lose
    // their first moments (200 ms of one beside busy processes). The
    // listing takes no lock a caller could hold (it reads `/proc`, opens
    // perf events); the wait is bounded all the same.
    // (The perf clock only: the sampler thread's own clock lists the
    // threads a period later, and it measured with `start` returning at
    // once.)
    let deadline = Instant::now() + FIRST_LISTING_WAIT;
    while clock == SampleClock::ThreadTimers
        && thread.progress().listings.load(Ordering::Acquire) == 0
        && !thread.is_finished()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((thread, running))
}

/// What the sampler knows about one thread between ticks.
struct ThreadState {
    /// Index into `RawProfile::threads` for the thread's current name.
    key: u32,
    /// Sampler-thread path, cpu mode: the thread's CPU clock on the
    /// previous tick.
    last_cpu_ns: Option<u64>,
    /// Cpu mode, sampler-thread path: CPU time used and not yet stood for
    /// by a sample.
    debt: CpuDebt,
    /// Cpu mode, sampler-thread path: when its next sample was predicted to
    /// fall due (monotonic ns), if it ran on from the last look. A due
    /// thread is signalled at that wakeup, or at a random one.
    due_at: Option<u64>,
    /// Cpu mode, sampler-thread path: its CPU clock stood still at the last
    /// look(s), and whether it was runnable then (waiting for a CPU, so
    /// still predicted: it may resume right after any wakeup) rather than
    /// blocked. Looked up once per stop, not at every wakeup.
    stalled: Option<bool>,
    /// The last reading of the thread's CPU time (its timer's count, or its
    /// CPU clock) added to [`SamplerStats::thread_cpu`].
    accounted_ns: Option<u64>,
    /// A signal is in flight: don't send another.
    pending: bool,
    /// The published stack regions include this thread's stack. A thread
    /// is not signalled, and gets no timer, before that: a stale snapshot
    /// could bound its walk by a mapping that no longer exists.
    regions_ready: bool,
    /// The listing the thread was last seen in, to forget exited threads.
    seen_listing: u64,
    /// When the sampler first saw the thread.
    first_seen: Instant,
    /// The collection pass that last re-read the name of this young thread.
    name_pass: u64,
    /// The listing at which to re-read the name: besides young threads'
    /// names, names are re-read at growing intervals (renames later in life).
    name_check_listing: u64,
    name_check_interval: u64,
    /// With a kernel-paced clock: the thread's timer, once opened.
    timer: Option<CpuTimer>,
    /// Opening the timer failed once (counted once, retried each listing).
    timer_failed: bool,
    /// Timer samples interned since the last listing, and the timer's
    /// count then: a thread whose timer ran many periods without a single
    /// sample has the signal blocked.
    timer_samples: u64,
    timer_checked_ns: u64,
    /// The thread blocks the profiling signal: its timer is closed (so no
    /// signals queue up on it), the sampler thread does not signal it, and
    /// its due samples are counted in `signal_blocked_samples` until it
    /// unblocks.
    blocked: Option<BlockedSince>,
    /// Timer path: the timer count at the start of a silent spell in which
    /// the thread was seen with the signal blocked. It is taken for one
    /// that blocks the signal only if the next look, a listing later,
    /// finds it silent and blocked again ([`blocks_signal_now`]).
    suspect_since_ns: Option<u64>,
    /// Sampler-thread path, wall mode: the thread's last stack, counted
    /// again, off CPU, while its CPU clock does not move, and its CPU
    /// clock when that stack was taken.
    last_walk: Option<OwnedWalk>,
    walk_cpu_ns: u64,
    /// Sampler-thread path, wall mode: the one-shot timer asking for the
    /// sample in flight ([`SamplerLoop::wall_requests`]); deleted, and with
    /// it any signal it still had queued, once that sample is done.
    request: Option<PosixTimer>,
    /// The same: ticks that found the thread running and that no sample
    /// has stood for yet. Its request fires on a scheduler tick of its
    /// running, which a thread working in short bursts between blocking
    /// calls reaches only now and then; the sample that lands stands for
    /// all of them, so its CPU ticks are not counted as off CPU.
    running_ticks: u64,
    /// Sampler-thread path, wall mode: the tick up to which the thread's
    /// samples are counted.
    counted_tick: u64,
    /// Sampler-thread path: its CPU clock at the last listing, to tell
    /// idle threads from active ones.
    listing_cpu_ns: Option<u64>,
    /// Sampler-thread path, cpu mode: the latest reading of its CPU clock
    /// ([`ExitTails::saw`]), when it was taken (monotonic ns), and when a
    /// reading first failed because it had exited.
    read_ns: Option<u64>,
    read_at_ns: u64,
    gone_at_ns: Option<u64>,
    /// Sampler-thread path, cpu mode: the last [`RECENT_WALKS`] stacks of
    /// a young thread born while sampling, on which the CPU time it used
    /// after its last sample is counted when it exits ([`ExitTails`]).
    recent_walks: Vec<OwnedWalk>,
    /// Timer path: born while sampling under the inherited events
    /// ([`BornThreads`]), which sample it instead of a timer of its own
    /// (no signal, so its mask, `sigwait` and blocking calls never see
    /// them) unless `born_deep`.
    born: bool,
    /// A born thread whose stack was deeper than the kernel's call chains
    /// reach (`perf_event_max_stack`) while `max_depth` asks for more: it
    /// gets a timer, whose handler walks as deep as asked.
    born_deep: bool,
    /// Timer path: one of the threads the inherited events were opened on,
    /// which sample it too: like a born thread, it gets no timer of its
    /// own unless `born_deep`.
    on_ring: bool,
    /// Counted in [`SamplerStats::timer_threads`].
    timer_counted: bool,
    /// Sampler-thread path: started while sampling (seen at a later
    /// listing than the first): owed its CPU time from zero.
    born_during_run: bool,
    /// Sampler-thread path: its signal mask was looked at before its first
    /// signal (a thread that blocks the signal from the start, as daemons
    /// and `sigwait` loops do, is never signalled: the signal would stay
    /// queued, or be taken by its `sigwait` as if it were its own).
    mask_checked: bool,
}

/// A thread found blocking the profiling signal.
struct BlockedSince {
    /// Its CPU clock when last counted.
    cpu_ns: u64,
    /// CPU time not yet counted as a whole failed period.
    owed_ns: u64,
    /// The listing at which to look at its signal mask again.
    recheck_listing: u64,
    /// Whether a second look agreed. A single look at `SigBlk` cannot tell
    /// a thread that blocks the signal from one that is starting (glibc's
    /// `pthread_create` runs a new thread's first instructions with every
    /// signal blocked) or entering btprof's handler: until the recheck at
    /// the next listing agrees, its failed periods are held in `owed_ns`,
    /// not counted, and dropped if the thread turns out to take signals.
    confirmed: bool,
}

impl BlockedSince {
    /// Seen blocking once: to be looked at again at the next listing.
    fn provisional(cpu_ns: u64, listing: u64) -> Self {
        BlockedSince {
            cpu_ns,
            owed_ns: 0,
            recheck_listing: listing + 1,
            confirmed: false,
        }
    }
}

/// Timer periods a thread may run without one sample before its signal
/// mask is looked at.
const SILENT_PERIODS: u64 = 20;
/// Listings between two looks at a blocking thread's signal mask.
const BLOCKED_RECHECK_LISTINGS: u64 = 20;

/// Whether thread `tid` blocks `signal` itself: `SigBlk` has it, and the
/// thread is not inside (or just leaving) btprof's own handler, whose
/// `sa_mask` puts the signal in `SigBlk` while it runs
/// ([`slots::in_handler`], looked at before and after the mask is read).
/// A thread that just entered the handler and has not claimed its slot yet
/// still looks blocked here: callers take the verdict as final only when
/// a later look agrees, or undo it at the next listing.
fn blocks_signal_now(tid: i32, signal: libc::c_int) -> bool {
    !slots::in_handler(tid)
        && threads::blocks_signal(tid, signal) == Some(true)
        && !slots::in_handler(tid)
}

impl ThreadState {
    fn new(now: Instant, listing: u64) -> Self {
        ThreadState {
            key: u32::MAX,
            last_cpu_ns: None,
            debt: CpuDebt::default(),
            due_at: None,
            stalled: None,
            accounted_ns: None,
            pending: false,
            // Walks are fault-safe and bounded without the snapshot too
            // (see `slots`), so a new thread is sampled at once.
            regions_ready: true,
            seen_listing: listing,
            first_seen: now,
            name_pass: 0,
            name_check_listing: listing,
            name_check_interval: 1,
            timer: None,
            timer_failed: false,
            timer_samples: 0,
            timer_checked_ns: 0,
            blocked: None,
            suspect_since_ns: None,
            last_walk: None,
            walk_cpu_ns: 0,
            request: None,
            running_ticks: 0,
            counted_tick: 0,
            listing_cpu_ns: None,
            read_ns: None,
            read_at_ns: 0,
            gone_at_ns: None,
            recent_walks: Vec::new(),
            born_during_run: false,
            born: false,
            born_deep: false,
            on_ring: false,
            timer_counted: false,
            mask_checked: false,
        }
    }

    /// The thread's CPU time as the sampler accounts it: its timer's count
    /// if it has one (a timer starts at zero when opened), else its clock.
    fn cpu_reading(&self, tid: i32) -> Option<u64> {
        match &self.timer {
            Some(timer) => timer.cpu_ns(),
            None => threads::thread_cpu_ns(tid),
        }
    }
}

/// Which thread an armed slot belongs to.
#[derive(Clone, Copy)]
struct SlotUse {
    tid: i32,
    key: u32,
    /// The periods of CPU time this sample stands for (1 in wall mode).
    weight: u64,
    armed_at: Instant,
    /// Asked for with a one-shot CPU timer: it stands for the ticks that
    /// found the thread running until it lands (`running_ticks`).
    by_request: bool,
}

struct SamplerLoop {
    config: SamplerConfig,
    clock: SampleClock,
    sender: SignalSender,
    own_tid: i32,
    period_ns: u64,
    tasks: threads::TaskList,
    tids: Vec<i32>,
    threads: HashMap<i32, ThreadState>,
    /// Threads dropped at the last listing, for samples they left behind.
    departed: HashMap<i32, u32>,
    thread_keys: ThreadKeys,
    /// `open_timers`' candidates (CPU time just used, tid), kept for reuse.
    timer_queue: Vec<(u64, i32)>,
    slots: SlotOwner,
    slot_uses: [Option<SlotUse>; SLOTS],
    table: StackTable,
    stats: SamplerStats,
    window: Window,
    requests: mpsc::Receiver<window::Request>,
    stray_at_start: u64,
    no_slot_at_start: u64,
    /// When `run` started: the run's duration is measured from here.
    started: Instant,
    /// The process's CPU clock when `run` started.
    process_cpu_at_start: Duration,
    progress: Arc<Progress>,
    regions_scratch: Vec<(u64, u64)>,
    regions_stale: bool,
    /// When `/proc/self/maps` was last read, and the least time to the
    /// next read (longer when a read is costly).
    regions_read_at: Option<Instant>,
    regions_every: Duration,
    missing_regions_seen: u64,
    tick: u64,
    /// Listings so far.
    listing: u64,
    /// Collection passes so far.
    pass: u64,
    /// When the thread list was last read.
    listed_at: Option<Instant>,
    /// Timer samples copied out of their slots with the periods each
    /// stands for, reused between passes.
    timer_walks: Vec<(i32, u64, OwnedWalk)>,
    /// How often the thread list is read: [`RELIST_INTERVAL`], or longer
    /// when a listing is costly.
    relist_every: Duration,
    /// Sampler-thread path: the threads the ticks look at, chosen at each
    /// listing ([`Self::choose_active`]).
    active: Vec<i32>,
    /// Sampler-thread path: where in the thread list the next tick starts,
    /// so that when there are more threads due than slots, every thread
    /// gets its turn rather than the first ones every tick.
    rotation: usize,
    /// Sampler-thread path, cpu mode: when to wake (due points and random
    /// ticks) instead of a fixed period.
    wakeups: Option<CpuWakeups>,
    /// Sampler-thread path, wall mode: a running thread's sample is asked
    /// for with a one-shot CPU timer ([`PosixTimer::open_request`]), not
    /// a signal sent straight to it, so that no thread is ever signalled
    /// inside a blocking call; `false` where the kernel refuses the timers.
    wall_requests: bool,
    /// Sampler-thread path, cpu mode: CPU time of threads it did not look
    /// at, to list the threads early when a new one runs.
    unseen: Option<UnseenCpu>,
    /// Sampler-thread path, cpu mode: the CPU time threads used after
    /// their last sample, counted when they exit.
    tails: Option<ExitTails>,
    /// Threads that exited at the last listing, with what they still
    /// stand for, until [`Self::settle_exits`] counts it.
    exits: Vec<Exit>,
    /// CFI unwinding of the handlers' stack copies; `None` with
    /// `frame_pointers_only`.
    cfi: Option<CfiWalker>,
    /// Wall mode: reads the stacks of threads found blocked after they ran
    /// (created at the first), and the sampler time it may still spend on
    /// them ([`BLOCKED_READ_SHARE`]).
    blocked_reader: Option<BlockedStackReader>,
    blocked_read_budget_ns: u64,
    blocked_read_tick: u64,
    /// Timer path: the inherited events that sample threads born while
    /// sampling; `None` where the kernel refused them (then `born_tried`).
    born: Option<BornThreads>,
    born_tried: bool,
    born_samples: Vec<BornSample>,
    born_settled: Vec<Settled>,
    /// Born threads no listing has found yet: their keys and names.
    born_keys: HashMap<i32, BornKey>,
    /// Born threads' last walks (and their keys), under which the part of
    /// a period after their last sample is counted when they are settled.
    born_walks: HashMap<i32, (u32, OwnedWalk)>,
    /// Born threads gone from the listings before they were settled: the
    /// CPU time their clocks had when last read.
    born_accounted: HashMap<i32, u64>,
}

/// The key of a born thread no listing found yet, and the collection pass
/// that last read its name (read again at most once per pass).
#[derive(Clone, Copy)]
struct BornKey {
    key: u32,
    named_pass: u64,
}

/// A thread that exited at the last listing, and its last stacks
/// ([`SamplerLoop::settle_exits`]).
struct Exit {
    tid: i32,
    key: u32,
    walks: Vec<OwnedWalk>,
    tail: ExitTail,
}

impl AsMut<ExitTail> for Exit {
    fn as_mut(&mut self) -> &mut ExitTail {
        &mut self.tail
    }
}

/// A finished walk copied out of its slot, so the slot is free again
/// before the sample is named and interned.
#[derive(Clone)]
struct OwnedWalk {
    frames: Vec<u64>,
    lr: u64,
    end: WalkEnd,
}

impl OwnedWalk {
    /// The same frames, counted for a thread that was off CPU: the
    /// profile shows them under `[btprof: off-cpu]`.
    fn off_cpu(&self) -> OwnedWalk {
        OwnedWalk {
            end: WalkEnd::Blocked,
            ..self.clone()
        }
    }

    /// Copies `walk` out of its slot, completed with CFI from the slot's
    /// stack copy first when there is a `cfi` walker (which counts in
    /// `stats` where the callers came from).
    fn of(
        walk: &Collected<'_>,
        cfi: Option<&mut CfiWalker>,
        max_depth: usize,
        stats: &mut SamplerStats,
    ) -> Self {
        let (frames, end) = unwind::finish(cfi, walk, max_depth, stats);
        OwnedWalk {
            frames: frames.to_vec(),
            lr: walk.lr,
            end,
        }
    }

    fn as_collected(&self) -> Collected<'_> {
        Collected {
            frames: &self.frames,
            lr: self.lr,
            end: self.end,
            copy: None,
        }
    }
}

impl SamplerLoop {
    fn new(
        config: SamplerConfig,
        clock: SampleClock,
        signal: i32,
        progress: Arc<Progress>,
        requests: mpsc::Receiver<window::Request>,
    ) -> Result<Self, Error> {
        let mut stats = SamplerStats::new(&config);
        let cfi = (!config.frame_pointers_only).then(CfiWalker::new);
        let wall_requests = config.mode == Mode::Wall
            && clock == SampleClock::SamplerThread
            && posix_timers::available().is_ok();
        let wakeups =
            (clock == SampleClock::SamplerThread && config.mode == Mode::Cpu).then(|| {
                let seed =
                    monotonic_ns() ^ u64::from(threads::gettid().unsigned_abs()).rotate_left(32);
                CpuWakeups::new(TickSchedule::period_for_hz(config.hz), seed)
            });
        stats.clock = clock;
        let period_ns = TickSchedule::period_for_hz(config.hz);
        progress.set_clock(clock);
        Ok(SamplerLoop {
            window: Window::new(&stats),
            requests,
            stray_at_start: slots::STRAY_SIGNALS.load(Ordering::Relaxed),
            no_slot_at_start: slots::NO_FREE_SLOT.load(Ordering::Relaxed),
            started: Instant::now(),
            process_cpu_at_start: profile::process_cpu_time(),
            table: StackTable::with_limit(config.limit),
            stats,
            period_ns,
            thread_keys: ThreadKeys::new(config.share_stacks_by_name, threads::NAME_CUT_LEN),
            timer_queue: Vec::new(),
            config,
            clock,
            sender: SignalSender::new(signal),
            own_tid: threads::gettid(),
            tasks: threads::TaskList::open().map_err(Error::Io)?,
            tids: Vec::with_capacity(64),
            threads: HashMap::new(),
            departed: HashMap::new(),
            slots: SlotOwner::new(),
            slot_uses: [None; SLOTS],
            progress,
            regions_scratch: Vec::new(),
            regions_stale: false,
            regions_read_at: Some(Instant::now()),
            regions_every: REGIONS_REFRESH_INTERVAL,
            missing_regions_seen: slots::MISSING_REGIONS.load(Ordering::Relaxed),
            tick: 0,
            listing: 0,
            pass: 0,
            listed_at: None,
            timer_walks: Vec::new(),
            rotation: 0,
            unseen: wakeups.is_some().then(|| UnseenCpu::new(period_ns)),
            tails: wakeups.is_some().then(|| ExitTails::new(monotonic_ns())),
            exits: Vec::new(),
            wakeups,
            wall_requests,
            cfi,
            blocked_reader: None,
            blocked_read_budget_ns: 0,
            blocked_read_tick: 0,
            active: Vec::new(),
            relist_every: RELIST_INTERVAL,
            born: None,
            born_tried: false,
            born_samples: Vec::new(),
            born_settled: Vec::new(),
            born_keys: HashMap::new(),
            born_walks: HashMap::new(),
            born_accounted: HashMap::new(),
        })
    }

    /// Whether each thread has a timer of its own (perf or POSIX) and the
    /// sampler thread only collects.
    fn timers(&self) -> bool {
        self.clock.is_kernel_paced()
    }

    /// How long the sampler thread sleeps between two collections. With
    /// timers, often enough that the slots never fill (a quarter of them
    /// per busy thread at most); once every thread is sampled into the
    /// rings (no timer open), [`MAX_RING_COLLECT_INTERVAL`], or a quarter
    /// of the time a ring takes to fill at one sample per period per CPU
    /// if that is sooner (rates far above 1000 Hz).
    fn collect_interval(&self) -> u64 {
        if !self.timers() {
            return self.period_ns;
        }
        let slots = (self.period_ns * (SLOTS as u64 / 4))
            .clamp(1_000_000, MAX_COLLECT_INTERVAL.as_nanos() as u64);
        let rings_only = !self.threads.values().any(|s| s.timer.is_some());
        match self.born.as_ref() {
            Some(born) if rings_only => (born.samples_per_ring() / 4 * self.period_ns)
                .clamp(slots, MAX_RING_COLLECT_INTERVAL.as_nanos() as u64),
            _ => slots,
        }
    }

    fn run(mut self, stop: &AtomicBool) -> Result<RawProfile, Error> {
        self.stats.start_time = SystemTime::now();
        self.started = Instant::now();
        self.process_cpu_at_start = profile::process_cpu_time();
        self.window = Window::new(&self.stats);
        let mut schedule = TickSchedule::new(monotonic_ns(), self.collect_interval());
        // Timers are opened at once, not a collection interval later.
        let first = if self.timers() { self.tick() } else { Ok(()) };
        let result = loop {
            if first.is_err() {
                break first;
            }
            let deadline = match self.wakeups.as_mut() {
                Some(wakeups) => wakeups.next(monotonic_ns()),
                None => schedule.deadline(),
            };
            sleep_until(deadline);
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            if let Some(wakeups) = self.wakeups.as_mut() {
                wakeups.woke(deadline, monotonic_ns());
            }
            if let Err(e) = self.tick() {
                break Err(e);
            }
            let interval = self.collect_interval();
            if self.wakeups.is_none() && interval != schedule.period() {
                schedule.set_period(monotonic_ns(), interval);
            }
            (self.stats.ticks, self.stats.missed_ticks) = match &self.wakeups {
                Some(wakeups) => (wakeups.ticks(), wakeups.missed()),
                None => {
                    schedule.complete_tick(monotonic_ns());
                    (schedule.ticks(), schedule.missed())
                }
            };
            self.progress
                .ticks
                .store(self.stats.ticks, Ordering::Relaxed);
            while let Ok(request) = self.requests.try_recv() {
                self.account_cpu();
                let stats = self.live_stats();
                let (table, threads) = (&mut self.table, self.thread_keys.infos());
                self.window
                    .serve(request, table, threads, &stats, Arch::host());
            }
        };
        // Every CPU reading first, then no timer fires again. Periods
        // lost to a blocked signal since the last listing are counted too.
        if self.timers() {
            self.watch_blocked_threads();
        }
        self.account_cpu();
        if let Some(born) = self.born.as_mut() {
            born.stop_sampling();
        }
        for state in self.threads.values_mut() {
            state.timer = None;
        }
        self.drain();
        self.finish_born();
        result?;
        let stats = self.live_stats();
        Ok(self.window.cut(
            true,
            &mut self.table,
            self.thread_keys.infos(),
            &stats,
            Arch::host(),
        ))
    }

    /// The run's counters up to now, the ones kept elsewhere included.
    fn live_stats(&self) -> SamplerStats {
        let mut stats = self.stats.clone();
        stats.duration = self.started.elapsed();
        stats.sampler_cpu = Duration::from_nanos(threads::own_cpu_ns());
        stats.process_cpu = profile::process_cpu_time().saturating_sub(self.process_cpu_at_start);
        stats.stray_signals = slots::STRAY_SIGNALS.load(Ordering::Relaxed) - self.stray_at_start;
        stats.failed_samples += slots::NO_FREE_SLOT.load(Ordering::Relaxed) - self.no_slot_at_start;
        stats.threads_seen = self.thread_keys.threads_seen();
        stats
    }

    fn tick(&mut self) -> Result<(), Error> {
        self.tick += 1;
        self.collect(false);
        if self
            .listed_at
            .is_none_or(|at| at.elapsed() >= self.relist_every)
            || self.unseen_thread_runs()
        {
            let listing_cpu = threads::own_cpu_ns();
            self.listed_at = Some(Instant::now());
            self.tasks.read(&mut self.tids).map_err(Error::Io)?;
            self.listing += 1;
            self.discover_threads();
            // Not part of the listing's cost: reads of the maps are spaced
            // by their own.
            let regions_cost = self.refresh_regions_if_stale();
            self.account_cpu();
            // Every thread's clock was just read: the process's now, against
            // them (`UnseenCpu`, `ExitTails`).
            let mut unread = 0;
            if let (Some(unseen), Some(tails)) = (self.unseen.as_mut(), self.tails.as_mut()) {
                let process = profile::process_cpu_time().as_nanos() as u64;
                let own = threads::own_cpu_ns();
                unseen.reset(monotonic_ns(), process, own);
                unread = tails.at_listing(process, own);
            }
            self.forget_exited();
            self.settle_exits(unread);
            if self.timers() {
                self.watch_blocked_threads();
                self.open_born_events();
                self.open_timers();
            } else {
                self.recheck_blocked_threads();
                self.choose_active();
            }
            self.progress
                .listings
                .store(self.listing, Ordering::Release);
            // A listing reads every thread's clock: with thousands of
            // threads it costs milliseconds. Keep it under 1/LISTING_SHARE
            // of the sampler's time, so ticks stay cheap and on time (a new
            // thread is then found later in such a process).
            // (Measured in the sampler's own CPU time: on a busy machine
            // its wall time says more about the load than the listing.)
            let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(listing_cpu))
                .saturating_sub(regions_cost);
            self.relist_every = RELIST_INTERVAL.max(cost * LISTING_SHARE);
            if let Some(unseen) = self.unseen.as_mut() {
                unseen.listed(monotonic_ns(), cost.as_nanos() as u64);
            }
        } else {
            self.refresh_regions_if_stale();
        }
        if !self.timers() {
            self.signal_due_threads();
        }
        // After the threads are signalled or their timers opened, so that
        // reading the modules (the first time, copying their unwind
        // sections) never delays a sample.
        if let Some(cfi) = self.cfi.as_mut() {
            cfi.refresh_modules();
        }
        self.progress
            .threads
            .store(self.threads.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sampler-thread path, cpu mode: whether to list the threads before
    /// the listing interval is up, because CPU time went to threads it did
    /// not look at ([`UnseenCpu`]): a new thread, most likely, which would
    /// otherwise run unsampled until the next listing, or to its end. As
    /// often as listings' cost allows, spread over time ([`UnseenCpu`]).
    fn unseen_thread_runs(&mut self) -> bool {
        let Some(unseen) = self.unseen.as_mut() else {
            return false;
        };
        let now = monotonic_ns();
        if !unseen.due(now) {
            return false;
        }
        let before = threads::own_cpu_ns();
        let process = profile::process_cpu_time().as_nanos() as u64;
        let own = threads::own_cpu_ns();
        unseen.check(now, process, own, own.saturating_sub(before))
    }

    /// Sampler-thread path: signals every thread due this tick that is
    /// running user code, starting where the last tick ran out of slots.
    ///
    /// A thread that is not running user code is never interrupted: a
    /// signal would make its blocking call (`poll`, `nanosleep`, `select`,
    /// `epoll_wait`, a `read` with a timeout…) fail with `EINTR`. In cpu
    /// mode its owed CPU time waits until it runs again. In wall mode a
    /// thread whose CPU clock has not moved since its last sample has not
    /// run, so its last stack is counted again, off CPU; one that ran and
    /// is off CPU now is counted off CPU on the stack it is blocked on
    /// ([`Self::count_blocked`]). A running one is asked for a sample with
    /// a one-shot CPU timer where the kernel allows them
    /// ([`Self::wall_requests`]), else signalled.
    ///
    /// Only threads found active at the last listing are looked at
    /// ([`Self::choose_active`]): with thousands of idle threads, reading
    /// every thread's clock every tick would cost more than the period.
    fn signal_due_threads(&mut self) {
        let random_tick = self.wakeups.as_ref().is_some_and(CpuWakeups::random_tick);
        let count = self.active.len();
        let start = if count == 0 { 0 } else { self.rotation % count };
        let mut ran_out_at = None;
        for n in 0..count {
            let i = (start + n) % count;
            let tid = self.active[i];
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            let Some(cpu) = threads::thread_cpu_ns(tid) else {
                // Exited since listed: counted when the list is re-read,
                // having run at most until now since its last reading.
                state.gone_at_ns.get_or_insert_with(monotonic_ns);
                continue;
            };
            if let (Some(tails), Some(unseen)) = (self.tails.as_mut(), self.unseen.as_mut()) {
                unseen.saw(tails.saw(&mut state.read_ns, cpu));
            }
            let mut weight = 1;
            // The thread's CPU clock and when it was read: for the handler
            // to tell whether the thread waited for a CPU meanwhile.
            let mut read_at = (0, 0);
            // Whether its CPU clock moved since the last tick: see below.
            let progressed = state.last_cpu_ns.is_none_or(|last| cpu > last);
            if self.config.mode == Mode::Wall {
                state.last_cpu_ns = Some(cpu);
            }
            if self.config.mode == Mode::Cpu {
                let now = monotonic_ns();
                read_at = (now, cpu);
                state.read_at_ns = now;
                // The CPU time used since the last look is owed to the next
                // sample; a sample is due once a full period is owed.
                if let Some(last) = state.last_cpu_ns {
                    let used = cpu.saturating_sub(last);
                    self.stats.skipped_samples += state.debt.accrue(used, self.period_ns);
                }
                state.last_cpu_ns = Some(cpu);
                // A thread whose clock stands still is waiting for a CPU
                // (`R`) or blocked: asked once per stop, not every wakeup.
                if progressed {
                    state.stalled = None;
                } else if state.stalled.is_none() {
                    let runnable = threads::run_state(tid) == Some(threads::RunState::Running);
                    state.stalled = Some(runnable);
                }
                let predicted = state.due_at.take().is_some_and(|at| at <= now);
                let Some(due) = state.debt.due(self.period_ns) else {
                    // Predict when it falls due if it runs from now: a
                    // thread waiting for a CPU too, as it may well resume
                    // right after this wakeup (`CpuWakeups`). A blocked one
                    // is found by a random tick once it has run.
                    if progressed || state.stalled == Some(true) {
                        predict_due(state, self.wakeups.as_mut(), now, self.period_ns);
                    }
                    continue;
                };
                // Due without this being its predicted moment (it fell due
                // unseen, after a blocking call or a missed prediction): a
                // sample now would land at a moment tied to other threads'
                // due points; a random tick's is unbiased.
                if !predicted && !random_tick {
                    continue;
                }
                weight = due;
            }
            if let Some(blocked) = &mut state.blocked {
                // It blocks the signal: not signalled, its samples counted
                // (held until a second look confirms it).
                if self.config.mode == Mode::Cpu {
                    state.debt.pay(weight, self.period_ns);
                }
                if blocked.confirmed {
                    self.stats.signal_blocked_samples += weight;
                    self.stats.add_signal_blocked(tid as u64, weight);
                } else {
                    blocked.owed_ns += weight * self.period_ns;
                }
                continue;
            }
            if self.config.mode == Mode::Wall {
                // Being sampled costs a thread some CPU (the handler): less
                // than IDLE_SLACK_NS of progress is not running.
                let ran = cpu >= state.walk_cpu_ns + IDLE_SLACK_NS;
                if let (false, Some(walk)) = (ran, &state.last_walk) {
                    let weight = self.tick.saturating_sub(state.counted_tick).max(1);
                    state.counted_tick = self.tick;
                    let (key, walk) = (state.key, walk.off_cpu());
                    self.stats.reused_samples += weight;
                    self.intern(key, &walk.as_collected(), weight);
                    continue;
                }
            }
            if state.pending && self.wall_requests {
                // Its request waits for it to run. Off CPU meanwhile, it is
                // counted as such; running, its ticks are counted when the
                // sample lands.
                let running =
                    progressed && threads::run_state(tid) == Some(threads::RunState::Running);
                if running {
                    state.running_ticks += 1;
                    state.counted_tick = self.tick;
                } else {
                    self.count_blocked(tid, cpu);
                }
                continue;
            }
            if state.pending || !state.regions_ready {
                self.stats.skipped_samples += 1;
                continue;
            }
            // Cpu mode: `R` alone is not proof that a thread runs user
            // code: a thread woken from `poll` (or `select`, ...) is `R`
            // while it waits for a CPU, still inside the call, and a signal
            // then makes the call fail with `EINTR` instead of returning
            // its timeout (on a busy machine, up to 34 of 300 calls did).
            // Such a thread has not run since the last tick; one that runs
            // user code has (or was preempted there, when its sample would
            // come late anyway). Its owed CPU time waits for a tick that
            // finds it running, never signalled into its blocking call: such
            // a signal would be taken at the call's exit after a wait, so its
            // sample is given up as late (`slots::claim_armed`) and the debt
            // stays, a cascade of `EINTR` for nothing (62 of 300 calls under
            // load). A thread whose wake-ups fall exactly in step with the
            // ticks is never found running: its owed time past the debt's
            // cap is counted as skipped, not sampled.
            if self.config.mode == Mode::Cpu && !progressed {
                continue;
            }
            match threads::run_state(tid) {
                // Wall mode: `R` without progress since the last tick is a
                // thread woken inside a blocking call (or preempted), still
                // waiting for a CPU: counted like a blocked one, not
                // signalled (see the cpu-mode note above).
                Some(threads::RunState::Running)
                    if self.config.mode == Mode::Wall && !progressed =>
                {
                    self.count_blocked(tid, cpu);
                    continue;
                }
                Some(threads::RunState::Running) => {}
                Some(threads::RunState::Blocked) => {
                    if self.config.mode == Mode::Wall {
                        self.count_blocked(tid, cpu);
                    }
                    continue;
                }
                None => continue,
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if !state.mask_checked {
                state.mask_checked = true;
                let signal = self.sender.signal();
                if blocks_signal_now(tid, signal) {
                    // Its due periods stay owed: the next tick holds them
                    // on the provisional verdict.
                    state.blocked = Some(BlockedSince::provisional(cpu, self.listing));
                    continue;
                }
            }
            let key = state.key;
            let Some(armed) = self.slots.arm(self.config.max_depth) else {
                self.stats.slots_full += 1;
                ran_out_at.get_or_insert(i);
                continue;
            };
            // A young thread born while sampling, with no stack yet, keeps
            // its first sample even if it comes late (see `slots`): given
            // up, the thread may be gone before the next, and every period
            // it used with it ([`ExitTails`] counts them on its last stack).
            let first = self.tails.is_some()
                && state.born_during_run
                && state.recent_walks.is_empty()
                && state.first_seen.elapsed() < YOUNG;
            let read_at = if first { (0, 0) } else { read_at };
            self.slots.mark_sent(armed.slot, read_at.0, read_at.1);
            let by_request = self.wall_requests;
            let sent = if by_request {
                // No lateness check (`mark_sent` above had no reading in
                // wall mode): the timer fires on a tick of the thread's
                // own running, an unbiased moment, however late.
                PosixTimer::open_request(tid, self.sender.signal(), armed.signal_value())
                    .map(|timer| state.request = Some(timer))
            } else {
                self.sender.send(tid, armed.signal_value())
            };
            match sent {
                Ok(()) => {
                    state.pending = true;
                    state.counted_tick = self.tick;
                    if by_request {
                        state.running_ticks += 1;
                    }
                    if self.config.mode == Mode::Cpu {
                        state.debt.pay(weight, self.period_ns);
                        predict_due(state, self.wakeups.as_mut(), read_at.0, self.period_ns);
                    }
                    self.slot_uses[armed.slot] = Some(SlotUse {
                        tid,
                        key,
                        weight: if self.config.mode == Mode::Cpu {
                            weight
                        } else {
                            1
                        },
                        armed_at: Instant::now(),
                        by_request,
                    });
                }
                Err(e) => {
                    // Nobody was signalled, so nobody can claim the slot.
                    self.slots.cancel(armed.slot);
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        self.stats.exited_threads += 1;
                    } else {
                        self.stats.failed_samples += 1;
                    }
                }
            }
        }
        self.rotation = ran_out_at.unwrap_or(0);
    }

    /// Wall mode with requests, at the end (the run's or the thread's): the
    /// ticks that found the thread running and that no sample stood for,
    /// counted on its last stack, or as skipped if it has none.
    fn count_running_ticks_left(&mut self, tid: i32) {
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let ticks = std::mem::take(&mut state.running_ticks);
        match &state.last_walk {
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
    fn count_blocked(&mut self, tid: i32, cpu: u64) {
        let read = self.read_blocked_stack(tid);
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        let walk = match read.or_else(|| state.last_walk.as_ref().map(OwnedWalk::off_cpu)) {
            Some(walk) => walk,
            None => match threads::blocked_syscall_pc(tid) {
                Some(pc) => OwnedWalk {
                    frames: vec![pc],
                    lr: 0,
                    end: WalkEnd::Blocked,
                },
                None => {
                    self.stats.skipped_samples += 1;
                    return;
                }
            },
        };
        state.walk_cpu_ns = cpu;
        state.last_walk = Some(walk.clone());
        let weight = self.tick.saturating_sub(state.counted_tick).max(1);
        state.counted_tick = self.tick;
        let key = state.key;
        self.intern(key, &walk.as_collected(), weight);
    }

    /// Wall mode: the stack of thread `tid` if it is blocked in the kernel
    /// and the budget allows reading it; `None` if it is waiting for a CPU
    /// (nothing to read from outside), moved meanwhile, or the budget is
    /// spent.
    fn read_blocked_stack(&mut self, tid: i32) -> Option<OwnedWalk> {
        let cfi = self.cfi.as_mut()?;
        let tick_ns = self.period_ns;
        let earned = (tick_ns as f64 * BLOCKED_READ_SHARE) as u64;
        let since = self.tick.saturating_sub(self.blocked_read_tick);
        self.blocked_read_tick = self.tick;
        self.blocked_read_budget_ns =
            (self.blocked_read_budget_ns + since * earned).min(BLOCKED_READ_BURST_NS);
        if self.blocked_read_budget_ns == 0 {
            return None;
        }
        let started = monotonic_ns();
        let Some(Syscall::At { nr, sp, pc }) = blocked_stack::read_syscall(tid) else {
            return None;
        };
        let reader = self
            .blocked_reader
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
        self.blocked_read_budget_ns = self.blocked_read_budget_ns.saturating_sub(spent);
        walk
    }

    /// Sampler-thread path, at each listing: picks the threads the ticks
    /// look at until the next listing: those whose CPU clock moved since
    /// the last listing, and those with a sample in flight or owed. An
    /// idle thread's CPU time is not lost (it is owed from its last reading
    /// when it runs again); in wall mode the ticks it sat idle are counted
    /// here, in one weighted sample of its last stack.
    fn choose_active(&mut self) {
        let mut active = std::mem::take(&mut self.active);
        active.clear();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            let Some(now) = threads::thread_cpu_ns(tid) else {
                continue;
            };
            // A thread seen for the first time counts as moving only if it
            // used a period of CPU in its life: thousands of new idle
            // threads would otherwise all be looked at on every tick until
            // the next listing (which, with that many threads, is long in
            // coming): the sampler thread spent 28-38% of a core so. A
            // thread with less is owed no cpu-mode sample yet.
            // One born while sampling, found early ([`UnseenCpu`]), is
            // looked at once it used a quarter period: it may live 2 ms.
            let moved = match state.listing_cpu_ns {
                Some(before) => now >= before + IDLE_SLACK_NS,
                None if state.born_during_run => now >= self.period_ns / 4,
                None => now >= self.period_ns,
            };
            state.listing_cpu_ns = Some(now);
            let busy = moved || state.pending || state.debt.due(self.period_ns).is_some();
            if busy || state.blocked.is_some() {
                active.push(tid);
            } else if self.config.mode == Mode::Wall && self.tick > state.counted_tick {
                if let Some(walk) = state.last_walk.as_ref().map(OwnedWalk::off_cpu) {
                    let weight = self.tick - state.counted_tick;
                    state.counted_tick = self.tick;
                    let key = state.key;
                    self.stats.reused_samples += weight;
                    self.intern(key, &walk.as_collected(), weight);
                } else {
                    self.count_blocked(tid, now);
                }
            }
        }
        self.active = active;
    }

    /// Registers threads seen for the first time and re-reads names that
    /// are due; a new thread may run on a stack not yet in the snapshot.
    fn discover_threads(&mut self) {
        let now = Instant::now();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                // A profiler thread (the dump thread) may be listed once
                // before it excludes itself: forget it now, before its CPU
                // time or its blocked signals are counted.
                self.threads.remove(&tid);
                // The process's clock counts btprof's threads too.
                if let (Some(tails), true) = (self.tails.as_mut(), tid != self.own_tid) {
                    if let Some(cpu) = threads::thread_cpu_ns(tid) {
                        tails.saw_excluded(tid, cpu, self.listing > 1);
                    }
                }
                continue;
            }
            let listing = self.listing;
            let state = match self.threads.get_mut(&tid) {
                Some(s) => {
                    s.seen_listing = listing;
                    if s.name_check_listing > listing {
                        continue;
                    }
                    s
                }
                None => {
                    self.regions_stale = true;
                    let mut state = ThreadState::new(now, listing);
                    if let Some(born) = self.born.as_mut() {
                        state.born = born.is_young(tid);
                        if state.born {
                            // Its clock counts from its birth, all of it
                            // sampled by the inherited events.
                            state.accounted_ns = Some(0);
                        } else {
                            // Not known to be born here yet (its start may
                            // still be in a ring): counted as listed from now.
                            let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                            born.hand_off(tid, monotonic_ns(), cpu);
                        }
                    }
                    if listing > 1 && self.clock == SampleClock::SamplerThread {
                        // Born while sampling: all its CPU time so far was
                        // used during the run, so it is owed (and counted)
                        // from zero, and a short-lived thread is sampled as
                        // soon as it used a period.
                        state.last_cpu_ns = Some(0);
                        state.accounted_ns = Some(0);
                        state.read_ns = Some(0);
                        state.born_during_run = true;
                        // Its first look counts as its predicted moment:
                        // one found late (it ran a period already) is
                        // sampled then, not at a random tick after it ended.
                        state.due_at = Some(0);
                    }
                    self.threads.entry(tid).or_insert(state)
                }
            };
            state.name_check_listing = listing + state.name_check_interval;
            state.name_check_interval = (state.name_check_interval * 2).min(1024);
            self.read_name(tid);
        }
        // A thread whose name could not be read even once (it exited at
        // once) is dropped now rather than sampled under no name.
        self.threads.retain(|_, s| s.key != u32::MAX);
    }

    /// Reads thread `tid`'s name and points its state at that name's key.
    fn read_name(&mut self, tid: i32) -> Option<u32> {
        let name = threads::thread_name(tid)?;
        let previous = self
            .threads
            .get(&tid)
            .map(|s| s.key)
            .filter(|&k| k != u32::MAX);
        let key = self.thread_keys.key(tid as u64, name, previous);
        if let Some(state) = self.threads.get_mut(&tid) {
            state.key = key;
        }
        Some(key)
    }

    /// Adds each thread's CPU time since the last reading to the stats.
    fn account_cpu(&mut self) {
        let mut total = Duration::ZERO;
        let read_at = monotonic_ns();
        let born = self.born.as_ref();
        for (&tid, state) in self.threads.iter_mut() {
            // A thread sampled into the rings that exited: its events'
            // counts, which no more than the wall time since the last
            // reading can have added to.
            let from_ring = || {
                let count = born?.parent_cpu_ns(tid)?;
                let before = state.accounted_ns?;
                let wall = read_at.saturating_sub(state.read_at_ns);
                Some(count.clamp(before, before + wall))
            };
            let reading =
                state
                    .cpu_reading(tid)
                    .or_else(|| if state.on_ring { from_ring() } else { None });
            if state.on_ring {
                state.read_at_ns = read_at;
            }
            if let Some(now) = reading {
                if let Some(before) = state.accounted_ns {
                    let used = Duration::from_nanos(now.saturating_sub(before));
                    self.stats.add_thread_cpu(tid as u64, used);
                }
                state.accounted_ns = Some(now);
                if let Some(tails) = self.tails.as_mut() {
                    tails.saw(&mut state.read_ns, now);
                    state.read_at_ns = read_at;
                }
            } else if self.tails.is_some() {
                state.gone_at_ns.get_or_insert(read_at);
            }
        }
        for t in &self.stats.thread_cpu {
            total += t.cpu;
        }
        self.progress
            .sampled_cpu_ns
            .store(total.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Forgets threads not in the latest listing (closing their timers)
    /// unless a signal to them is still in flight.
    fn forget_exited(&mut self) {
        let listing = self.listing;
        self.departed.clear();
        let departed = &mut self.departed;
        let mut born = self.born.as_mut();
        let born_accounted = &mut self.born_accounted;
        let (reckon, period, now) = (self.tails.is_some(), self.period_ns, monotonic_ns());
        let (exits, stats) = (&mut self.exits, &mut self.stats);
        let mut ring_exits = Vec::new();
        self.threads.retain(|&tid, s| {
            let keep = s.seen_listing == listing || s.pending;
            if !keep {
                departed.insert(tid, s.key);
                if reckon {
                    // Its CPU time read since the last listing, then what it
                    // stands for after its last sample ([`ExitTails`]).
                    if let (Some(read), Some(accounted)) = (s.read_ns, s.accounted_ns) {
                        let since = Duration::from_nanos(read.saturating_sub(accounted));
                        stats.add_thread_cpu(tid as u64, since);
                    }
                    if !s.recent_walks.is_empty() {
                        exits.push(Exit {
                            tid,
                            key: s.key,
                            walks: std::mem::take(&mut s.recent_walks),
                            tail: ExitTail {
                                owed_ns: s.debt.take_all(period),
                                cap_ns: s.gone_at_ns.unwrap_or(now).saturating_sub(s.read_at_ns),
                                unread_ns: 0,
                            },
                        });
                    }
                }
                if let Some(born) = born.as_mut() {
                    born.forget(tid);
                    if s.born {
                        born_accounted.insert(tid, s.accounted_ns.unwrap_or(0));
                    }
                }
                if s.on_ring {
                    ring_exits.push((tid, s.accounted_ns.unwrap_or(0)));
                }
            }
            keep
        });
        for (tid, cpu_ns) in ring_exits {
            self.count_parent_tail(tid, cpu_ns);
        }
    }

    /// Sampler-thread path, cpu mode: counts on each thread that exited at
    /// this listing, on its last stacks, the CPU time it used after its
    /// last sample: what it was owed at its last reading, and its share of
    /// the `unread_ns` nobody read since the last listing ([`ExitTails`]).
    fn settle_exits(&mut self, unread_ns: u64) {
        let Some(mut tails) = self.tails.take() else {
            return;
        };
        share_out(unread_ns, &mut self.exits);
        let mut exits = std::mem::take(&mut self.exits);
        for exit in exits.drain(..) {
            let tail = exit.tail;
            let unread = Duration::from_nanos(tail.unread_ns);
            self.stats.add_thread_cpu(exit.tid as u64, unread);
            let samples = tails
                .samples_for(tail.owed_ns + tail.unread_ns, self.period_ns)
                .min(MAX_OWED_PERIODS);
            // Each on one of its last stacks, picked at random: the thread's
            // recent samples scaled up to all of its time.
            let mut counts = [0u64; RECENT_WALKS];
            for _ in 0..samples {
                counts[tails.pick(exit.walks.len())] += 1;
            }
            for (walk, &count) in exit.walks.iter().zip(&counts) {
                if count > 0 {
                    self.intern(exit.key, &walk.as_collected(), count);
                }
            }
            self.stats.exit_samples += samples;
        }
        self.exits = exits;
        self.tails = Some(tails);
    }

    /// Finds threads that block the profiling signal (their timer ran
    /// many periods, yet no sample came) and closes their timers, so
    /// signals do not queue up on them; counts their CPU periods as failed
    /// samples while they block; and lets them have a timer again once
    /// they unblock.
    fn watch_blocked_threads(&mut self) {
        let (period, signal, listing) = (self.period_ns, self.sender.signal(), self.listing);
        for (&tid, state) in self.threads.iter_mut() {
            if let Some(blocked) = &mut state.blocked {
                let Some(cpu) = threads::thread_cpu_ns(tid) else {
                    continue;
                };
                blocked.owed_ns += cpu.saturating_sub(blocked.cpu_ns);
                blocked.cpu_ns = cpu;
                if !blocked.confirmed && listing >= blocked.recheck_listing {
                    // The second look: a thread that was starting, or in
                    // btprof's handler, gets its timer at this listing;
                    // the CPU time held meanwhile was never sampled, like
                    // any thread's before its timer opened.
                    blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
                    if !blocks_signal_now(tid, signal) {
                        state.blocked = None;
                        continue;
                    }
                    blocked.confirmed = true;
                }
                if !blocked.confirmed {
                    continue;
                }
                let lost = blocked.owed_ns / period;
                self.stats.signal_blocked_samples += lost;
                self.stats.add_signal_blocked(tid as u64, lost);
                blocked.owed_ns %= period;
                if listing >= blocked.recheck_listing {
                    blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
                    if threads::blocks_signal(tid, signal) == Some(false) {
                        state.blocked = None;
                    }
                }
                continue;
            }
            let Some(count) = state.timer.as_ref().and_then(CpuTimer::cpu_ns) else {
                continue;
            };
            let silent = state.timer_samples == 0
                && count.saturating_sub(state.timer_checked_ns) >= SILENT_PERIODS * period;
            // `SigBlk` also holds the signal while the thread runs btprof's
            // own handler: a silent spell (kernel time, or the sampler
            // thread starved on a busy machine) looked at in that moment
            // would close a working thread's timer and count its samples as
            // lost. So the handler's own slots are looked at too, and it
            // takes two silent spells in a row, each of many periods of the
            // thread's CPU time without a single sample, with the signal
            // blocked at both looks: a thread that takes its signals
            // leaves a sample in between.
            let suspect = silent && blocks_signal_now(tid, signal);
            if !suspect {
                state.suspect_since_ns = None;
            } else if state.suspect_since_ns.is_none() {
                state.suspect_since_ns = Some(state.timer_checked_ns);
            } else {
                let since = state
                    .suspect_since_ns
                    .take()
                    .unwrap_or(state.timer_checked_ns);
                let lost = count.saturating_sub(since) / period;
                self.stats.signal_blocked_samples += lost;
                self.stats.add_signal_blocked(tid as u64, lost);
                state.timer = None;
                // CPU time is accounted from its clock from now on.
                state.accounted_ns = threads::thread_cpu_ns(tid);
                // Two looks agreed already.
                state.blocked = Some(BlockedSince {
                    cpu_ns: threads::thread_cpu_ns(tid).unwrap_or(0),
                    owed_ns: 0,
                    recheck_listing: listing + BLOCKED_RECHECK_LISTINGS,
                    confirmed: true,
                });
                continue;
            }
            if silent || state.timer_samples > 0 {
                state.timer_checked_ns = count;
                state.timer_samples = 0;
            }
        }
    }

    /// Opens a timer for threads that have none yet and whose stack is in
    /// the region snapshot: every one that ran since this listing read its
    /// clock, busiest first, then idle ones for at most
    /// [`IDLE_TIMER_BUDGET_NS`] of the sampler's CPU time. The rest wait
    /// for later listings, so that a process with thousands of idle
    /// threads has its busy ones sampled at once instead of after seconds
    /// of opening timers no one needs yet (when the sampler thread drains
    /// no slots either).
    fn open_timers(&mut self) {
        let (period, signal) = (self.period_ns, self.sender.signal());
        let mut wanted = std::mem::take(&mut self.timer_queue);
        wanted.clear();
        for (&tid, state) in &self.threads {
            if state.timer.is_some()
                || state.blocked.is_some()
                || !state.regions_ready
                || state.seen_listing != self.listing
                || ((state.born || state.on_ring) && !state.born_deep)
            {
                continue;
            }
            // CPU time since `account_cpu` read the clock in this listing.
            let ran = match (threads::thread_cpu_ns(tid), state.accounted_ns) {
                (Some(now), Some(before)) => now.saturating_sub(before),
                _ => 0,
            };
            wanted.push((ran, tid));
        }
        wanted.sort_unstable_by(|a, b| b.cmp(a));
        let started = threads::own_cpu_ns();
        for &(ran, tid) in &wanted {
            if ran == 0 && threads::own_cpu_ns().saturating_sub(started) > IDLE_TIMER_BUDGET_NS {
                break;
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if !state.mask_checked {
                // A thread that blocks the signal gets no timer: its
                // overflows would queue up (real-time signals) or be taken
                // by its `sigwait`. Counted by `watch_blocked_threads`.
                state.mask_checked = true;
                if blocks_signal_now(tid, signal) {
                    if state.born || state.on_ring {
                        // A deep born thread that blocks the signal keeps
                        // its ring samples (cut at the kernel's depth).
                        state.born_deep = false;
                        state.mask_checked = false;
                        continue;
                    }
                    let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                    state.blocked = Some(BlockedSince::provisional(cpu, self.listing));
                    continue;
                }
            }
            match CpuTimer::open(self.clock, tid, period, signal) {
                Ok(timer) => {
                    // The timer counts from zero: CPU time is accounted from
                    // here, where samples can start. A (deep) born thread's
                    // ring samples stop here.
                    let born = std::mem::take(&mut state.born);
                    if born | std::mem::take(&mut state.on_ring) {
                        let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                        if let Some(born) = self.born.as_mut() {
                            born.hand_off(tid, monotonic_ns(), cpu);
                        }
                    }
                    state.accounted_ns = Some(0);
                    state.timer = Some(timer);
                    self.stats.timer_threads += u64::from(!state.timer_counted);
                    state.timer_counted = true;
                    state.timer_samples = 0;
                    state.timer_checked_ns = 0;
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.stats.exited_threads += 1;
                }
                Err(_) if state.timer_failed => {}
                Err(_) => {
                    state.timer_failed = true;
                    self.stats.failed_samples += 1;
                }
            }
        }
        self.timer_queue = wanted;
    }

    /// Re-reads `/proc/self/maps` when walks missed the snapshot or new
    /// threads appeared, at most every [`REGIONS_REFRESH_INTERVAL`]: with
    /// thousands of mappings one read costs milliseconds, and the snapshot
    /// only tightens walk bounds (reads are fault-safe without it).
    /// Returns the sampler CPU time the read took (zero when none was due).
    fn refresh_regions_if_stale(&mut self) -> Duration {
        let missing = slots::MISSING_REGIONS.load(Ordering::Relaxed);
        if missing != self.missing_regions_seen {
            self.missing_regions_seen = missing;
            self.regions_stale = true;
        }
        if !self.regions_stale
            || self
                .regions_read_at
                .is_some_and(|at| at.elapsed() < self.regions_every)
        {
            return Duration::ZERO;
        }
        self.regions_read_at = Some(Instant::now());
        let cpu_before = threads::own_cpu_ns();
        let refreshed = stack_regions::refresh(&mut self.regions_scratch);
        // With thousands of mappings a read costs milliseconds: keep it
        // under 1/LISTING_SHARE of the sampler's time too.
        let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(cpu_before));
        self.regions_every = REGIONS_REFRESH_INTERVAL.max(cost * LISTING_SHARE);
        if refreshed {
            self.regions_stale = false;
            for state in self.threads.values_mut() {
                state.regions_ready = true;
            }
        }
        cost
    }

    /// The key to intern a sample of thread `tid` under: a young thread's
    /// name is read again first (once per collection pass), so a thread
    /// that named itself after it was listed is not shown under its old
    /// name.
    fn key_for_sample(&mut self, tid: i32, fallback: Option<u32>) -> Option<u32> {
        let pass = self.pass;
        match self.threads.get_mut(&tid) {
            Some(state) => {
                if state.first_seen.elapsed() < YOUNG && state.name_pass != pass {
                    state.name_pass = pass;
                    if let Some(key) = self.read_name(tid) {
                        return Some(key);
                    }
                }
                self.threads.get(&tid).map(|s| s.key)
            }
            None => fallback.or_else(|| self.departed.get(&tid).copied()),
        }
    }

    /// Interns finished walks and cancels samples that waited too long;
    /// with `cancel_all`, every sample whose handler has not started.
    /// Returns how many timer samples handlers are still writing.
    fn collect(&mut self, cancel_all: bool) -> usize {
        self.pass += 1;
        let writing = if self.timers() {
            let writing = self.collect_timer_samples();
            self.collect_born_samples();
            writing
        } else {
            0
        };
        for slot in 0..SLOTS {
            let Some(slot_use) = self.slot_uses[slot] else {
                continue;
            };
            let mut finished_walk = None;
            let (cfi, stats, max_depth) = (&mut self.cfi, &mut self.stats, self.config.max_depth);
            let finished = match self.slots.poll(slot, |walk| {
                finished_walk = Some(OwnedWalk::of(&walk, cfi.as_mut(), max_depth, stats));
            }) {
                Poll::Collected => true,
                Poll::Late => {
                    // Its periods ride on the thread's next samples, taken
                    // at its next due points (`CpuDebt::refund`).
                    self.stats.late_samples += 1;
                    if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                        if self.config.mode == Mode::Cpu {
                            self.stats.skipped_samples += state.debt.refund(slot_use.weight);
                        }
                    }
                    true
                }
                Poll::Busy => false,
                Poll::Pending => {
                    // A thread that exited with its signal pending never
                    // takes it: that is an exit, not a failure.
                    let exited = threads::thread_cpu_ns(slot_use.tid).is_none();
                    let expired = cancel_all || slot_use.armed_at.elapsed() > SAMPLE_TIMEOUT;
                    if slot_use.by_request && (exited || expired) {
                        // Deleted first: its signal, if queued, goes too.
                        if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                            state.request = None;
                        }
                    }
                    if (exited || expired) && self.slots.cancel(slot) {
                        if slot_use.by_request && !exited && !cancel_all {
                            // It has not run through a scheduler tick since
                            // (else its timer would have fired): the ticks
                            // it was seen running wait for its next
                            // request. One that blocks the signal still
                            // shows it pending, and is marked so.
                            let _ = self.cannot_take_signal(slot_use.tid);
                        } else if slot_use.by_request {
                            self.stats.exited_threads += u64::from(exited);
                            self.count_running_ticks_left(slot_use.tid);
                        } else if exited {
                            self.stats.exited_threads += 1;
                            // Its periods are counted with the rest of its
                            // last moments ([`ExitTails`]).
                            if let (Some(state), true) =
                                (self.threads.get_mut(&slot_use.tid), self.tails.is_some())
                            {
                                self.stats.skipped_samples += state.debt.refund(slot_use.weight);
                            }
                        } else if !cancel_all && self.cannot_take_signal(slot_use.tid) {
                            self.stats.signal_blocked_samples += slot_use.weight;
                            self.stats
                                .add_signal_blocked(slot_use.tid as u64, slot_use.weight);
                        } else {
                            self.stats.failed_samples += slot_use.weight;
                        }
                        true
                    } else {
                        false
                    }
                }
            };
            if let Some(walk) = finished_walk {
                let key = self
                    .key_for_sample(slot_use.tid, Some(slot_use.key))
                    .unwrap_or(slot_use.key);
                let mut weight = slot_use.weight;
                if slot_use.by_request {
                    if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                        weight = std::mem::take(&mut state.running_ticks).max(1);
                    }
                }
                self.intern(key, &walk.as_collected(), weight);
                if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                    if self.config.mode == Mode::Wall {
                        // Its clock now includes what taking the sample cost.
                        state.walk_cpu_ns = threads::thread_cpu_ns(slot_use.tid).unwrap_or(0);
                        state.last_walk = Some(walk);
                    } else if self.tails.is_some() {
                        // Kept while the thread is young: a short-lived
                        // thread's tail is a large part of its life.
                        let walks = &mut state.recent_walks;
                        if state.born_during_run && state.first_seen.elapsed() < YOUNG {
                            if walks.len() == RECENT_WALKS {
                                walks.remove(0);
                            }
                            walks.push(walk);
                        } else {
                            walks.clear();
                        }
                    }
                }
            }
            if finished {
                self.slot_uses[slot] = None;
                if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                    state.pending = false;
                    state.request = None;
                }
            }
        }
        self.progress
            .samples
            .store(self.stats.samples, Ordering::Relaxed);
        self.progress
            .recorded
            .store(self.stats.recorded, Ordering::Relaxed);
        writing
    }

    /// Sampler-thread path: a signal sent to `tid` was not taken in time.
    /// If the thread blocks the signal (or it is still queued on it), it
    /// is marked blocked and not signalled again until it unblocks, so at
    /// most one signal is ever outstanding for it; returns whether it was.
    fn cannot_take_signal(&mut self, tid: i32) -> bool {
        let signal = self.sender.signal();
        let Some(status) = threads::signal_status(tid, signal) else {
            return false;
        };
        // Still pending: it has not taken the signal, whatever its mask,
        // and another must not be queued on it. Blocked (not inside
        // btprof's handler, whose `sa_mask` blocks it too): it may be
        // one that blocks the signal.
        if !(status.pending || (status.blocked && !slots::in_handler(tid))) {
            return false;
        }
        let listing = self.listing;
        if let Some(state) = self.threads.get_mut(&tid) {
            state.blocked = Some(BlockedSince {
                cpu_ns: threads::thread_cpu_ns(tid).unwrap_or(0),
                owed_ns: 0,
                // Looked at again at the next listing, so a thread that
                // was only slow to take its signal is soon sampled again.
                recheck_listing: listing + 1,
                // Its signal went untaken for SAMPLE_TIMEOUT: evidence
                // enough.
                confirmed: true,
            });
        }
        true
    }

    /// Sampler-thread path: lets threads that blocked the signal have
    /// samples again once they unblocked it and nothing of ours is queued
    /// on them any more.
    fn recheck_blocked_threads(&mut self) {
        let (signal, listing) = (self.sender.signal(), self.listing);
        for (&tid, state) in self.threads.iter_mut() {
            let Some(blocked) = &mut state.blocked else {
                continue;
            };
            if listing < blocked.recheck_listing {
                continue;
            }
            blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
            if !blocked.confirmed {
                // The second look (see `BlockedSince::confirmed`): the
                // periods held meanwhile are counted, or owed again.
                let periods = blocked.owed_ns / self.period_ns;
                if blocks_signal_now(tid, signal) {
                    blocked.confirmed = true;
                    self.stats.signal_blocked_samples += periods;
                    self.stats.add_signal_blocked(tid as u64, periods);
                } else {
                    if self.config.mode == Mode::Cpu {
                        self.stats.skipped_samples += state.debt.refund(periods);
                    }
                    state.blocked = None;
                }
                continue;
            }
            if let Some(status) = threads::signal_status(tid, signal) {
                if !status.blocked && !status.pending {
                    state.blocked = None;
                }
            }
        }
    }

    /// Interns every sample a timer handler left; returns how many slots
    /// handlers are still writing.
    fn collect_timer_samples(&mut self) -> usize {
        let mut walks = std::mem::take(&mut self.timer_walks);
        walks.clear();
        let (cfi, stats) = (&mut self.cfi, &mut self.stats);
        let max_depth = self.config.max_depth;
        let writing = self.slots.collect_claimed(|tid, weight, walk| {
            let walk = OwnedWalk::of(&walk, cfi.as_mut(), max_depth, stats);
            walks.push((tid, weight, walk));
        });
        for (tid, weight, walk) in walks.drain(..) {
            if let Some(state) = self.threads.get_mut(&tid) {
                state.timer_samples += 1;
            }
            match self.key_for_sample(tid, None) {
                Some(key) => self.intern(key, &walk.as_collected(), weight),
                // A thread this sampler never listed (it exited before):
                // its sample cannot be named.
                None => self.stats.exited_threads += 1,
            }
        }
        self.timer_walks = walks;
        writing
    }

    /// Timer path, first listing: opens the inherited events on the threads
    /// listed, so that threads they create are sampled from birth.
    fn open_born_events(&mut self) {
        // POSIX timers run where perf events are refused (or forced off).
        if self.born_tried || self.clock != SampleClock::ThreadTimers {
            return;
        }
        self.born_tried = true;
        let seed = monotonic_ns().rotate_left(17) ^ u64::from(self.own_tid.unsigned_abs());
        let tids: Vec<i32> = self
            .tids
            .iter()
            .copied()
            .filter(|&t| !exclusions::is_excluded(t as u64))
            .collect();
        match BornThreads::open(
            &tids,
            self.own_tid,
            self.period_ns,
            self.config.max_depth.clamp(1, MAX_DEPTH),
            seed,
        ) {
            Ok(born) => {
                // The events sample the threads they were opened on too:
                // those need no timer of their own, and take no signal.
                for tid in born.parents() {
                    if let Some(state) = self.threads.get_mut(&tid) {
                        state.on_ring = true;
                    }
                }
                self.born = Some(born);
            }
            // Every thread then gets a timer, and born threads wait for a
            // listing.
            Err(_) => self.born = None,
        }
    }

    /// Timer path: interns the samples the inherited events took of born
    /// threads, and settles those whose samples are all in.
    fn collect_born_samples(&mut self) {
        let Some(born) = self.born.as_mut() else {
            return;
        };
        let mut samples = std::mem::take(&mut self.born_samples);
        let mut settled = std::mem::take(&mut self.born_settled);
        self.stats.lost_samples += born.drain(&mut samples, &mut settled, |tid| {
            exclusions::is_excluded(tid as u64)
        });
        self.stats.ring_threads = born.sampled_threads();
        let born_max_stack = born.max_stack();
        let max_depth = self.config.max_depth;
        for sample in samples.drain(..) {
            if sample.frames.is_empty() {
                // Taken in the kernel after the thread let go of its user
                // memory, on its way out: there is no user stack to count.
                self.stats.failed_samples += 1;
                continue;
            }
            let copy = sample
                .regs
                .filter(|_| !sample.stack.is_empty())
                .map(|regs| CopiedStack::from_parts(regs, regs.sp, &sample.stack));
            let collected = Collected {
                frames: &sample.frames,
                lr: sample.regs.map_or(0, |r| r.lr),
                end: sample.end,
                copy,
            };
            let walk = OwnedWalk::of(&collected, self.cfi.as_mut(), max_depth, &mut self.stats);
            let Some(key) = self.key_for_born(sample.tid) else {
                self.stats.exited_threads += 1;
                continue;
            };
            if sample.end == WalkEnd::DepthCap && max_depth > born_max_stack {
                if let Some(state) = self.threads.get_mut(&sample.tid) {
                    state.born_deep = true;
                }
            }
            self.intern(key, &walk.as_collected(), 1);
            self.stats.ring_samples += 1;
            if !self.threads.get(&sample.tid).is_some_and(|s| s.on_ring) {
                self.stats.born_samples += 1;
            }
            self.born_walks.insert(sample.tid, (key, walk));
        }
        self.born_samples = samples;
        self.settle_born(&mut settled);
        self.born_settled = settled;
    }

    /// The key a born thread's ring sample is counted under: a listed
    /// thread's own key; otherwise its name (from its last name change, its
    /// `comm`, or the thread that created it, whose name it inherited),
    /// read once per collection pass.
    fn key_for_born(&mut self, tid: i32) -> Option<u32> {
        let (hint, parent) = self.born.as_ref()?.name_hint(tid);
        let hint = hint.map(str::to_owned);
        if let Some(state) = self.threads.get_mut(&tid) {
            // A listing may have read its name before it named itself, and
            // it may be gone before its name is read again.
            return match hint {
                Some(name) => {
                    state.key = self.thread_keys.key(tid as u64, name, Some(state.key));
                    Some(state.key)
                }
                None => self.key_for_sample(tid, None),
            };
        }
        let pass = self.pass;
        let previous = match self.born_keys.get(&tid) {
            Some(known) if known.named_pass == pass => return Some(known.key),
            Some(known) => Some(known.key),
            None => None,
        };
        let name = match hint {
            Some(name) => Some(name),
            None => threads::thread_name(tid).or_else(|| {
                let parent = parent?;
                self.threads
                    .get(&parent)
                    .and_then(|s| self.thread_keys.infos().get(s.key as usize))
                    .map(|info| info.name.clone())
                    .or_else(|| threads::thread_name(parent))
            }),
        }?;
        let key = self.thread_keys.key(tid as u64, name, previous);
        self.born_keys.insert(
            tid,
            BornKey {
                key,
                named_pass: pass,
            },
        );
        Some(key)
    }

    /// Counts settled born threads' CPU time, and the periods their ends
    /// stood for under their last stacks.
    fn settle_born(&mut self, settled: &mut Vec<Settled>) {
        for s in settled.drain(..) {
            if s.ended {
                // Its clock was read at listings up to `accounted`: the rest
                // of its time is the kernel's count beyond that. One no
                // listing found is counted only if it was sampled (else its
                // time is left to the unsampled estimate).
                let accounted = match self.threads.get_mut(&s.tid) {
                    Some(state) if state.born => {
                        let before = state.accounted_ns.unwrap_or(0);
                        state.accounted_ns = Some(before.max(s.cpu_ns));
                        Some(before)
                    }
                    Some(_) => None,
                    None => self.born_accounted.remove(&s.tid),
                };
                let add = match accounted {
                    Some(before) => s.cpu_ns.saturating_sub(before),
                    None if s.sampled && !self.threads.contains_key(&s.tid) => s.cpu_ns,
                    None => 0,
                };
                if add > 0 {
                    self.stats
                        .add_thread_cpu(s.tid as u64, Duration::from_nanos(add));
                }
            }
            self.born_keys.remove(&s.tid);
            if let Some((key, walk)) = self.born_walks.remove(&s.tid) {
                if s.extra_sample {
                    self.intern(key, &walk.as_collected(), 1);
                    self.stats.born_samples += 1;
                    self.stats.ring_samples += 1;
                }
            }
        }
    }

    /// Counts the last part of a period that thread `tid`, one the ring
    /// events were opened on, ran after its last sample, at random by its
    /// fraction ([`BornThreads::parent_tail`]), as it exits or sampling
    /// stops with its CPU clock at `cpu_ns`.
    fn count_parent_tail(&mut self, tid: i32, cpu_ns: u64) {
        let Some(born) = self.born.as_mut() else {
            return;
        };
        if born.parent_tail(tid, cpu_ns) {
            if let Some((key, walk)) = self.born_walks.remove(&tid) {
                self.intern(key, &walk.as_collected(), 1);
                self.stats.ring_samples += 1;
            }
        }
        self.born_walks.remove(&tid);
    }

    /// On stop, once no timer fires: the last ring samples, and every born
    /// thread settled (the living with their CPU clocks now).
    fn finish_born(&mut self) {
        if self.born.is_none() {
            return;
        }
        self.collect_born_samples();
        // A thread's `join` returns before the kernel writes its exit and
        // final counts, and a thread preempted on its way out (beside busy
        // processes) writes them tens of milliseconds later: wait a little
        // for those, rather than count a gone thread's time as nothing.
        let deadline = Instant::now() + EXIT_RECORDS_WAIT;
        while self
            .born
            .as_ref()
            .is_some_and(|b| b.awaiting_exit(threads::thread_cpu_ns))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
            self.collect_born_samples();
        }
        let parents: Vec<(i32, u64)> = self
            .threads
            .iter()
            .filter(|(_, s)| s.on_ring)
            .map(|(&tid, s)| (tid, s.accounted_ns.unwrap_or(0)))
            .collect();
        for (tid, cpu_ns) in parents {
            self.count_parent_tail(tid, cpu_ns);
        }
        let mut settled = std::mem::take(&mut self.born_settled);
        if let Some(born) = self.born.as_mut() {
            born.finish(&mut settled, threads::thread_cpu_ns);
        }
        self.settle_born(&mut settled);
        self.born = None;
    }

    fn intern(&mut self, key: u32, walk: &Collected<'_>, weight: u64) {
        self.table.add(
            StackKey {
                thread: key,
                frames: walk.frames,
                lr: walk.lr,
                end: walk.end,
            },
            weight,
        );
        self.stats.samples += weight;
        self.stats.recorded += 1;
        self.stats.walk_ends[walk.end as usize] += weight;
    }

    /// On stop: collects what finished, cancels what never started and
    /// waits a little for handlers still walking.
    fn drain(&mut self) {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            let writing = self.collect(true);
            let busy = (0..SLOTS).filter(|&s| self.slots.is_armed(s)).count() + writing;
            if busy == 0 {
                return;
            }
            if Instant::now() >= deadline {
                // Their handlers may still finish; the slots stay `Writing`
                // until then and the next sampler skips them.
                self.stats.failed_samples += busy as u64;
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Cpu mode, sampler-thread path: records when `state`'s thread will next
/// fall due if it runs from `now_ns`, and has the sampler wake then.
fn predict_due(
    state: &mut ThreadState,
    wakeups: Option<&mut CpuWakeups>,
    now_ns: u64,
    period_ns: u64,
) {
    let at = now_ns + state.debt.until_next_period(period_ns);
    state.due_at = Some(at);
    if let Some(wakeups) = wakeups {
        wakeups.due_at(at);
    }
}

fn monotonic_ns() -> u64 {
    threads::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}

/// Sleeps until an absolute `CLOCK_MONOTONIC` time, through interruptions.
fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: valid clock id, flags and timespec; no remainder needed
        // with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}
