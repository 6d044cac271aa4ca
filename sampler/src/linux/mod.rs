//! Linux, own process: a real-time signal per sample.
//!
//! A thread cannot ptrace its own process, and `setitimer(ITIMER_PROF)`
//! fires at the kernel tick rate (250 Hz on many kernels). So in cpu mode
//! every sampled thread gets its own CPU-time timer ([`thread_timers`]: a
//! perf task-clock event whose overflow raises the profiling signal in that
//! thread): the kernel paces the samples by each thread's own CPU time, and
//! each lands while its thread runs, on a busy machine too. The handler
//! walks the interrupted stack into a static slot ([`slots`]); the sampler
//! thread wakes every few milliseconds to collect and intern finished
//! slots, list threads, and open and close their timers.
//!
//! Where perf events are refused (or the fallback is forced, and always in
//! wall mode), the sampler thread paces the samples itself ([`SampleClock`]
//! says which): it sleeps to absolute deadlines and, each tick, sends the
//! profiling signal with `rt_tgsigqueueinfo` to every thread due: in wall
//! mode every thread, in cpu mode each thread whose CPU time since its last
//! sample reached one period (the remainder is carried; a thread that used
//! several periods since, because the sampler ran late, gets one sample
//! weighted by them). It never waits for a handler, so a thread that is
//! slow to take its signal delays only its own sample.

mod scheduling;
mod signal;
mod slots;
mod stack_regions;
mod thread_timers;
mod threads;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashMap;

use crate::clock::TickSchedule;
use crate::sampler_thread::{Claim, SamplerThread};
use crate::stack_table::{StackKey, StackTable};
use crate::walker::{Arch, WalkEnd};
use crate::window::{self, Window};
use crate::{
    exclusions, Error, Mode, Progress, RawProfile, SampleClock, SamplerConfig, SamplerStats,
    ThreadInfo, FORCE_SAMPLER_THREAD_ENV,
};

pub use slots::MAX_DEPTH;

use signal::{InstalledHandler, SignalSender};
use slots::{Collected, Poll, SlotOwner, SLOTS};
use thread_timers::ThreadTimer;

/// A slot not taken by its thread within this time is cancelled and the
/// sample counted as failed (the thread has the signal blocked, or is
/// stuck in the kernel).
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(250);
/// How often the thread list is re-read: listing `/proc/self/task` costs
/// about 7 µs, too much for every tick at 1000 Hz. A new thread is sampled
/// at most this much later; an exited one fails its send with `ESRCH`.
const RELIST_INTERVAL: Duration = Duration::from_millis(10);
/// Sampler-thread path: the most periods one sample may stand for. A
/// thread owed more (the sampler ran late, or its signals kept arriving
/// while it waited for a CPU) has the excess counted as skipped: one
/// heavy sample would otherwise put a long stretch of CPU time on one
/// stack.
const MAX_WEIGHT: u64 = 5;
/// How long a thread counts as young: its name is re-read whenever one of
/// its samples is interned, because threads often name themselves right
/// after they start.
const YOUNG: Duration = Duration::from_millis(100);
/// With per-thread timers, the longest the sampler thread sleeps between
/// two collections of finished samples.
const MAX_COLLECT_INTERVAL: Duration = Duration::from_millis(5);
/// How long `stop` waits for handlers still walking.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The default profiling signal: high in the real-time range, where
/// libraries rarely look (glibc reserves the lowest ones).
pub fn default_signal() -> i32 {
    libc::SIGRTMAX() - 3
}

/// Per-thread CPU timers in cpu mode where perf events are allowed and the
/// fallback is not forced; the sampler thread's ticks otherwise.
fn choose_clock(config: &SamplerConfig) -> SampleClock {
    let forced = config.force_sampler_thread
        || std::env::var_os(FORCE_SAMPLER_THREAD_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    if config.mode == Mode::Cpu && !forced && thread_timers::available().is_ok() {
        SampleClock::ThreadTimers
    } else {
        SampleClock::SamplerThread
    }
}

/// A running sampler of the current process.
pub struct Sampler {
    thread: SamplerThread,
    /// Dropped after the thread is joined: flushes pending signals and
    /// restores the previous action.
    handler: Option<InstalledHandler>,
    /// Released last: only then may another sampler start.
    _claim: Claim,
}

impl Sampler {
    /// Installs the signal handler and starts the sampler thread.
    pub fn start(config: SamplerConfig) -> Result<Sampler, Error> {
        config.validate()?;
        let signal = config.signal.unwrap_or_else(default_signal);
        if !(libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal) {
            return Err(Error::InvalidConfig(format!(
                "signal {signal} is not a real-time signal ({}..={})",
                libc::SIGRTMIN(),
                libc::SIGRTMAX()
            )));
        }
        let claim = Claim::take()?;
        // SAFETY: getpid has no preconditions.
        slots::OWN_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
        slots::TIMER_MAX_DEPTH.store(
            config.max_depth.clamp(1, MAX_DEPTH) as u32,
            Ordering::Relaxed,
        );
        let clock = choose_clock(&config);
        let mut scratch = Vec::new();
        stack_regions::refresh(&mut scratch);
        let handler = InstalledHandler::install(signal)?;
        let thread = SamplerThread::spawn(config.hz, move |cx| {
            signal::block_in_this_thread(signal);
            scheduling::request_short_slice();
            SamplerLoop::new(config, clock, signal, cx.progress, cx.requests)?.run(&cx.stop)
        })?;
        Ok(Sampler {
            thread,
            handler: Some(handler),
            _claim: claim,
        })
    }

    /// Live counters, for progress displays.
    pub fn progress(&self) -> &Progress {
        self.thread.progress()
    }

    /// The stacks collected so far, while sampling goes on. With `reset`,
    /// the next window starts: the sampler continues with an empty table
    /// and later calls (and [`Sampler::stop`]) return only what came
    /// after. The counters in the result cover the window alone.
    ///
    /// The sampler answers between two ticks, so this waits up to a
    /// period; [`Error::Timeout`] if it does not answer within a few.
    pub fn collect(&self, reset: bool) -> Result<RawProfile, Error> {
        self.thread.collect(reset)
    }

    /// Stops sampling and returns everything collected since the start or
    /// the last [`Sampler::collect`] with `reset`. The previous signal
    /// disposition is back in place, with no signal left pending, when this
    /// returns.
    pub fn stop(mut self) -> Result<RawProfile, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<RawProfile, Error> {
        let result = self.thread.join();
        self.handler.take();
        result
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.thread.is_running() {
            let _ = self.shutdown();
        }
    }
}

/// What the sampler knows about one thread between ticks.
struct ThreadState {
    /// Index into `RawProfile::threads` for the thread's current name.
    key: u32,
    /// Sampler-thread path, cpu mode: the thread's CPU clock on the
    /// previous tick.
    last_cpu_ns: Option<u64>,
    /// Sampler-thread path, cpu mode: CPU time used since the last sample
    /// that no sample stands for yet (the carried remainder).
    owed_ns: u64,
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
    /// With [`SampleClock::ThreadTimers`]: the thread's timer, once opened.
    timer: Option<ThreadTimer>,
    /// Opening the timer failed once (counted once, retried each listing).
    timer_failed: bool,
    /// Timer samples interned since the last listing, and the timer's
    /// count then: a thread whose timer ran many periods without a single
    /// sample has the signal blocked.
    timer_samples: u64,
    timer_checked_ns: u64,
    /// The thread blocks the profiling signal: its timer is closed (so no
    /// signals queue up on it) and its periods are counted as failed
    /// samples until it unblocks.
    blocked: Option<BlockedSince>,
}

/// A thread found blocking the profiling signal.
struct BlockedSince {
    /// Its CPU clock when last counted.
    cpu_ns: u64,
    /// CPU time not yet counted as a whole failed period.
    owed_ns: u64,
    /// The listing at which to look at its signal mask again.
    recheck_listing: u64,
}

/// Timer periods a thread may run without one sample before its signal
/// mask is looked at.
const SILENT_PERIODS: u64 = 20;
/// Listings between two looks at a blocking thread's signal mask.
const BLOCKED_RECHECK_LISTINGS: u64 = 20;

impl ThreadState {
    fn new(now: Instant, listing: u64) -> Self {
        ThreadState {
            key: u32::MAX,
            last_cpu_ns: None,
            owed_ns: 0,
            accounted_ns: None,
            pending: false,
            regions_ready: false,
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
    thread_infos: Vec<ThreadInfo>,
    thread_keys: HashMap<(i32, String), u32>,
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
    progress: Arc<Progress>,
    regions_scratch: Vec<(u64, u64)>,
    regions_stale: bool,
    missing_regions_seen: u64,
    tick: u64,
    /// Listings so far.
    listing: u64,
    /// Collection passes so far.
    pass: u64,
    /// When the thread list was last read.
    listed_at: Option<Instant>,
    /// Timer samples copied out of their slots, reused between passes.
    timer_walks: Vec<(i32, OwnedWalk)>,
}

/// A finished walk copied out of its slot, so the slot is free again
/// before the sample is named and interned.
struct OwnedWalk {
    frames: Vec<u64>,
    lr: u64,
    end: WalkEnd,
}

impl OwnedWalk {
    fn of(walk: &Collected<'_>) -> Self {
        OwnedWalk {
            frames: walk.frames.to_vec(),
            lr: walk.lr,
            end: walk.end,
        }
    }

    fn as_collected(&self) -> Collected<'_> {
        Collected {
            frames: &self.frames,
            lr: self.lr,
            end: self.end,
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
        stats.clock = clock;
        progress
            .thread_timers
            .store(clock == SampleClock::ThreadTimers, Ordering::Relaxed);
        Ok(SamplerLoop {
            window: Window::new(&stats),
            requests,
            stray_at_start: slots::STRAY_SIGNALS.load(Ordering::Relaxed),
            no_slot_at_start: slots::NO_FREE_SLOT.load(Ordering::Relaxed),
            started: Instant::now(),
            table: StackTable::with_limit(config.limit),
            stats,
            period_ns: TickSchedule::period_for_hz(config.hz),
            config,
            clock,
            sender: SignalSender::new(signal),
            own_tid: threads::gettid(),
            tasks: threads::TaskList::open().map_err(Error::Io)?,
            tids: Vec::with_capacity(64),
            threads: HashMap::new(),
            departed: HashMap::new(),
            thread_infos: Vec::new(),
            thread_keys: HashMap::new(),
            slots: SlotOwner::new(),
            slot_uses: [None; SLOTS],
            progress,
            regions_scratch: Vec::new(),
            regions_stale: false,
            missing_regions_seen: slots::MISSING_REGIONS.load(Ordering::Relaxed),
            tick: 0,
            listing: 0,
            pass: 0,
            listed_at: None,
            timer_walks: Vec::new(),
        })
    }

    fn timers(&self) -> bool {
        self.clock == SampleClock::ThreadTimers
    }

    fn run(mut self, stop: &AtomicBool) -> Result<RawProfile, Error> {
        self.stats.start_time = SystemTime::now();
        self.started = Instant::now();
        self.window = Window::new(&self.stats);
        // With timers the sampler thread only collects: often enough that
        // the slots never fill (a quarter of them per busy thread at most).
        let interval = if self.timers() {
            (self.period_ns * (SLOTS as u64 / 4))
                .clamp(1_000_000, MAX_COLLECT_INTERVAL.as_nanos() as u64)
        } else {
            self.period_ns
        };
        let mut schedule = TickSchedule::new(monotonic_ns(), interval);
        // Timers are opened at once, not a collection interval later.
        let first = if self.timers() { self.tick() } else { Ok(()) };
        let result = loop {
            if first.is_err() {
                break first;
            }
            sleep_until(schedule.deadline());
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            if let Err(e) = self.tick() {
                break Err(e);
            }
            schedule.complete_tick(monotonic_ns());
            self.stats.ticks = schedule.ticks();
            self.stats.missed_ticks = schedule.missed();
            self.progress
                .ticks
                .store(schedule.ticks(), Ordering::Relaxed);
            while let Ok(request) = self.requests.try_recv() {
                self.account_cpu();
                let stats = self.live_stats();
                let (table, threads) = (&mut self.table, &self.thread_infos);
                self.window
                    .serve(request, table, threads, &stats, Arch::host());
            }
        };
        // Every CPU reading first, then no timer fires again.
        self.account_cpu();
        for state in self.threads.values_mut() {
            state.timer = None;
        }
        self.drain();
        result?;
        let stats = self.live_stats();
        Ok(self.window.cut(
            true,
            &mut self.table,
            &self.thread_infos,
            &stats,
            Arch::host(),
        ))
    }

    /// The run's counters up to now, the ones kept elsewhere included.
    fn live_stats(&self) -> SamplerStats {
        let mut stats = self.stats.clone();
        stats.duration = self.started.elapsed();
        stats.sampler_cpu = Duration::from_nanos(threads::own_cpu_ns());
        stats.stray_signals = slots::STRAY_SIGNALS.load(Ordering::Relaxed) - self.stray_at_start;
        stats.failed_samples += slots::NO_FREE_SLOT.load(Ordering::Relaxed) - self.no_slot_at_start;
        stats.threads_seen = self.thread_infos.len() as u64;
        stats
    }

    fn tick(&mut self) -> Result<(), Error> {
        self.tick += 1;
        self.collect(false);
        if self
            .listed_at
            .is_none_or(|at| at.elapsed() >= RELIST_INTERVAL)
        {
            self.listed_at = Some(Instant::now());
            self.tasks.read(&mut self.tids).map_err(Error::Io)?;
            self.listing += 1;
            self.discover_threads();
            self.refresh_regions_if_stale();
            self.account_cpu();
            self.forget_exited();
            if self.timers() {
                self.watch_blocked_threads();
                self.open_timers();
            }
        } else {
            self.refresh_regions_if_stale();
        }
        if !self.timers() {
            self.signal_due_threads();
        }
        self.progress
            .threads
            .store(self.threads.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sampler-thread path: signals every thread due this tick.
    fn signal_due_threads(&mut self) {
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            let mut weight = 1;
            // The thread's CPU clock and when it was read: for the handler
            // to tell whether the thread waited for a CPU meanwhile.
            let mut read_at = (0, 0);
            if self.config.mode == Mode::Cpu {
                let Some(cpu) = threads::thread_cpu_ns(tid) else {
                    // Exited since listed: counted when the list is re-read.
                    continue;
                };
                read_at = (monotonic_ns(), cpu);
                // The CPU time used since the last tick is owed to the next
                // sample; a sample is due once a full period is owed.
                if let Some(last) = state.last_cpu_ns {
                    state.owed_ns += cpu.saturating_sub(last);
                }
                state.last_cpu_ns = Some(cpu);
                let most = MAX_WEIGHT * self.period_ns;
                if state.owed_ns > most {
                    self.stats.skipped_samples += (state.owed_ns - most) / self.period_ns;
                    state.owed_ns = most + (state.owed_ns - most) % self.period_ns;
                }
                if state.owed_ns < self.period_ns {
                    continue;
                }
                weight = state.owed_ns / self.period_ns;
            }
            if state.pending || !state.regions_ready {
                self.stats.skipped_samples += 1;
                continue;
            }
            let key = state.key;
            let Some(armed) = self.slots.arm(self.config.max_depth) else {
                self.stats.skipped_samples += 1;
                continue;
            };
            self.slots.mark_sent(armed.slot, read_at.0, read_at.1);
            match self.sender.send(tid, armed.signal_value()) {
                Ok(()) => {
                    state.pending = true;
                    if self.config.mode == Mode::Cpu {
                        state.owed_ns -= weight * self.period_ns;
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
    }

    /// Registers threads seen for the first time and re-reads names that
    /// are due; a new thread may run on a stack not yet in the snapshot.
    fn discover_threads(&mut self) {
        let now = Instant::now();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
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
                    if listing > 1 && self.clock == SampleClock::SamplerThread {
                        // Born while sampling: all its CPU time so far was
                        // used during the run, so it is owed (and counted)
                        // from zero, and a short-lived thread is sampled as
                        // soon as it used a period.
                        state.last_cpu_ns = Some(0);
                        state.accounted_ns = Some(0);
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
        let next_key = self.thread_infos.len() as u32;
        let infos = &mut self.thread_infos;
        let key = *self
            .thread_keys
            .entry((tid, name))
            .or_insert_with_key(|(tid, name)| {
                infos.push(ThreadInfo {
                    tid: *tid as u64,
                    name: name.clone(),
                });
                next_key
            });
        if let Some(state) = self.threads.get_mut(&tid) {
            state.key = key;
        }
        Some(key)
    }

    /// Adds each thread's CPU time since the last reading to the stats.
    fn account_cpu(&mut self) {
        let mut total = Duration::ZERO;
        for (&tid, state) in self.threads.iter_mut() {
            if let Some(now) = state.cpu_reading(tid) {
                if let Some(before) = state.accounted_ns {
                    let used = Duration::from_nanos(now.saturating_sub(before));
                    self.stats.add_thread_cpu(tid as u64, used);
                }
                state.accounted_ns = Some(now);
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
        self.threads.retain(|&tid, s| {
            let keep = s.seen_listing == listing || s.pending;
            if !keep {
                departed.insert(tid, s.key);
            }
            keep
        });
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
                self.stats.failed_samples += blocked.owed_ns / period;
                blocked.owed_ns %= period;
                if listing >= blocked.recheck_listing {
                    blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
                    if threads::blocks_signal(tid, signal) == Some(false) {
                        state.blocked = None;
                    }
                }
                continue;
            }
            let Some(count) = state.timer.as_ref().and_then(ThreadTimer::cpu_ns) else {
                continue;
            };
            let silent = state.timer_samples == 0
                && count.saturating_sub(state.timer_checked_ns) >= SILENT_PERIODS * period;
            if silent && threads::blocks_signal(tid, signal) == Some(true) {
                self.stats.failed_samples += count.saturating_sub(state.timer_checked_ns) / period;
                state.timer = None;
                // CPU time is accounted from its clock from now on.
                state.accounted_ns = threads::thread_cpu_ns(tid);
                state.blocked = Some(BlockedSince {
                    cpu_ns: threads::thread_cpu_ns(tid).unwrap_or(0),
                    owed_ns: 0,
                    recheck_listing: listing + BLOCKED_RECHECK_LISTINGS,
                });
                continue;
            }
            if silent || state.timer_samples > 0 {
                state.timer_checked_ns = count;
                state.timer_samples = 0;
            }
        }
    }

    /// Opens a timer for every thread that has none yet and whose stack is
    /// in the region snapshot.
    fn open_timers(&mut self) {
        let (period, signal) = (self.period_ns, self.sender.signal());
        for (&tid, state) in self.threads.iter_mut() {
            if state.timer.is_some()
                || state.blocked.is_some()
                || !state.regions_ready
                || state.seen_listing != self.listing
            {
                continue;
            }
            match ThreadTimer::open(tid, period, signal) {
                Ok(timer) => {
                    // The timer counts from zero: CPU time is accounted from
                    // here, where samples can start.
                    state.accounted_ns = Some(0);
                    state.timer = Some(timer);
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
    }

    fn refresh_regions_if_stale(&mut self) {
        let missing = slots::MISSING_REGIONS.load(Ordering::Relaxed);
        if missing != self.missing_regions_seen {
            self.missing_regions_seen = missing;
            self.regions_stale = true;
        }
        if self.regions_stale && stack_regions::refresh(&mut self.regions_scratch) {
            self.regions_stale = false;
            for state in self.threads.values_mut() {
                state.regions_ready = true;
            }
        }
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
            self.collect_timer_samples()
        } else {
            0
        };
        for slot in 0..SLOTS {
            let Some(slot_use) = self.slot_uses[slot] else {
                continue;
            };
            let mut finished_walk = None;
            let finished = match self.slots.poll(slot, |walk| {
                finished_walk = Some(OwnedWalk::of(&walk));
            }) {
                Poll::Collected => true,
                Poll::Late => {
                    // Owed again: the thread is sampled on a later tick,
                    // when it is running, for the same CPU time.
                    self.stats.late_samples += 1;
                    if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                        if self.config.mode == Mode::Cpu {
                            state.owed_ns += slot_use.weight * self.period_ns;
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
                    if (exited || expired) && self.slots.cancel(slot) {
                        if exited {
                            self.stats.exited_threads += 1;
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
                self.intern(key, &walk.as_collected(), slot_use.weight);
            }
            if finished {
                self.slot_uses[slot] = None;
                if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                    state.pending = false;
                }
            }
        }
        self.progress
            .samples
            .store(self.stats.samples, Ordering::Relaxed);
        writing
    }

    /// Interns every sample a timer handler left; returns how many slots
    /// handlers are still writing.
    fn collect_timer_samples(&mut self) -> usize {
        let mut walks = std::mem::take(&mut self.timer_walks);
        walks.clear();
        let writing = self.slots.collect_claimed(|tid, walk| {
            walks.push((tid, OwnedWalk::of(&walk)));
        });
        for (tid, walk) in walks.drain(..) {
            if let Some(state) = self.threads.get_mut(&tid) {
                state.timer_samples += 1;
            }
            match self.key_for_sample(tid, None) {
                Some(key) => self.intern(key, &walk.as_collected(), 1),
                // A thread this sampler never listed (it exited before):
                // its sample cannot be named.
                None => self.stats.exited_threads += 1,
            }
        }
        self.timer_walks = walks;
        writing
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
