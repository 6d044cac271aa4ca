//! The sampler thread's engine: one [`SamplerLoop`] drives every clock.
//!
//! Each wakeup ([`SamplerLoop::tick`]) collects finished samples
//! ([`collect`]), lists threads at intervals ([`thread_list`]), and then
//! does its clock's work ([`ring_clock`], [`signal_timers`], [`pacing`]).
//! The loop never waits for a handler, so a slow thread delays only its
//! own sample. Only the sampler thread touches this state; handlers see
//! the static slots ([`super::signal`]) and nothing else.

mod blocked_reads;
mod collect;
mod cpu_accounting;
mod new_threads;
mod pacing;
mod ring_clock;
mod signal_blocked;
mod signal_sends;
mod signal_timers;
mod thread_list;
mod thread_state;
mod wake_timers;
mod wall_ticks;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashMap;

use crate::clock::TickSchedule;
use crate::labels;
use crate::stack_table::StackTable;
use crate::thread_keys::ThreadKeys;
use crate::walker::Arch;
use crate::window::{self, Window};
use crate::{profile, Error, Mode, Progress, RawProfile, SampleClock, SamplerConfig, SamplerStats};

use super::clocks::ring::born_threads::{BornThreads, TaskRecords};
use super::kernel::cpu_timers;
use super::kernel::threads;
use super::monotonic_ns;
use super::signal::install::SignalSender;
use super::signal::slots::{self, SlotOwner, SLOTS};
use super::signal::stack_regions;
use super::unwind::CfiWalker;
use ring_clock::RingState;

use blocked_reads::BlockedReads;
use collect::{OwnedWalk, SpareFrames};
use cpu_accounting::Exit;
use pacing::CpuPacing;
use thread_state::{BlockedSince, SlotUse, ThreadState};

/// A slot its thread has not taken within this time is cancelled and the
/// sample counted as failed (signal blocked, or stuck in the kernel).
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(250);

/// How often the thread list is re-read: a listing is too costly for every
/// tick. A new thread is sampled at most this much later.
const RELIST_INTERVAL: Duration = Duration::from_millis(10);

/// With per-thread timers, the least periods between two listings (never
/// under [`RELIST_INTERVAL`]): listings are most of the sampler's cost at
/// low rates, but a thread born meanwhile gets its timer this much late.
const RELIST_PERIODS: u64 = 2;

/// A listing may take at most 1/this of the time between two listings.
const LISTING_SHARE: u32 = 20;

/// Whether a test holds the rings' reading back (`test-hooks`).
fn drains_held() -> bool {
    #[cfg(feature = "test-hooks")]
    return super::test_hooks::HOLD_DRAINS.load(Ordering::Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// Whether a test holds the listings back (`test-hooks`).
fn listings_held() -> bool {
    #[cfg(feature = "test-hooks")]
    return super::test_hooks::HOLD_LISTINGS.load(Ordering::Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// How long a thread counts as young: its name is re-read at each intern,
/// because threads often name themselves right after they start.
const YOUNG: Duration = Duration::from_millis(100);

/// With per-thread timers, the longest sleep between two collections; must
/// stay well within [`SAMPLE_TIMEOUT`] so untaken slots are given up on time.
const MAX_COLLECT_INTERVAL: Duration = Duration::from_millis(100);

/// With per-thread timers, how long the threads must hold still (same
/// count, all sampled, none new) before wakeups stretch to
/// [`MAX_COLLECT_INTERVAL`]; short enough that a pool's births all see it.
const QUIET_AFTER: Duration = Duration::from_millis(250);

/// With every thread on the rings, the bounds of the [`RING_COLLECT_PERIODS`]
/// sleep between collections. Wakeups still read sampled threads' clocks,
/// because the kernel does not always write a born thread's final counts at
/// exit: the longer the sleep, the more such a thread's time goes uncounted.
const RING_COLLECT_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(100));
/// Periods between two collections on the rings alone, so time lost at an
/// exit without final counts stays small beside the thread's samples.
const RING_COLLECT_PERIODS: u64 = 20;

/// The least time between two reads of `/proc/self/maps`.
const REGIONS_REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// Sampler-thread path, cpu mode: the last stacks a young thread's tail is
/// spread over at exit, since the very last one is often the exit itself.
const RECENT_WALKS: usize = 4;

/// How long `stop` waits for handlers still walking.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

pub(super) struct SamplerLoop {
    config: SamplerConfig,
    clock: SampleClock,
    sender: SignalSender,
    own_tid: i32,
    /// When new threads may next be looked for, and the scratch list.
    new_threads_due: Option<Instant>,
    new_tids: Vec<i32>,
    period_ns: u64,
    tasks: threads::TaskList,
    tids: Vec<i32>,
    threads: HashMap<i32, ThreadState>,
    /// Threads dropped at the last listing, for samples they left behind.
    departed: HashMap<i32, u32>,
    thread_keys: ThreadKeys,
    /// `open_timers`' candidates (CPU time just used, tid).
    timer_queue: Vec<(u64, i32)>,
    slots: SlotOwner,
    slot_uses: [Option<SlotUse>; SLOTS],
    table: StackTable,
    stats: SamplerStats,
    window: Window,
    requests: mpsc::Receiver<window::Request>,
    stray_at_start: u64,
    no_slot_at_start: u64,
    /// When `run` started, and the process's CPU clock then.
    started: Instant,
    process_cpu_at_start: Duration,
    progress: Arc<Progress>,
    regions_scratch: Vec<(u64, u64)>,
    regions_stale: bool,
    /// When `/proc/self/maps` was last read, and the least time to the next.
    regions_read_at: Option<Instant>,
    regions_every: Duration,
    missing_regions_seen: u64,
    tick: u64,
    listing: u64,
    pass: u64,
    listed_at: Option<Instant>,
    /// Thread count and ring births/exits as the last listing began.
    listed_as: Option<(u64, Option<TaskRecords>)>,
    /// With timers: since when the threads held still ([`QUIET_AFTER`]).
    steady_since: Option<Instant>,
    /// Timer samples copied out of their slots, reused between passes.
    timer_walks: Vec<(i32, OwnedWalk)>,
    /// Frame vectors of replaced walks, for reuse.
    spare_frames: SpareFrames,
    /// Time between listings: `relist_floor`, longer when listing is costly.
    relist_every: Duration,
    /// Least time between listings: [`RELIST_INTERVAL`], with timers at
    /// least [`RELIST_PERIODS`] periods.
    relist_floor: Duration,
    /// CPUs that can run at once: CPU-paced timers fill this many slots a period.
    cpus: u64,
    /// Sampler-thread path: threads the ticks look at, chosen per listing.
    active: Vec<i32>,
    /// Sampler-thread path: where the next tick starts, so all get a turn.
    rotation: usize,
    /// Sampler-thread path, cpu mode ([`CpuPacing`]).
    cpu_pacing: Option<CpuPacing>,
    /// Wall mode: ask running threads with a one-shot CPU timer
    /// ([`PosixTimer::open_request`](cpu_timers::PosixTimer::open_request)),
    /// never signalling a blocking call; `false` where the kernel refuses.
    wall_requests: bool,
    /// Exited threads whose remaining CPU [`Self::settle_exits`] counts.
    exits: Vec<Exit>,
    /// `None` with `frame_pointers_only`.
    cfi: Option<CfiWalker>,
    /// Wall mode: stack reads of threads found blocked after they ran.
    blocked_reads: BlockedReads,
    /// The perf clock's inherited events and their records.
    ring: RingState,
    /// Which label set a thread had when ([`crate::labels`]).
    labels: labels::Resolver,
    /// Threads log their label changes' times while this is held.
    _labels_recording: labels::log::Recording,
}

impl SamplerLoop {
    pub(super) fn new(
        config: SamplerConfig,
        clock: SampleClock,
        signal: i32,
        progress: Arc<Progress>,
        requests: mpsc::Receiver<window::Request>,
    ) -> Result<Self, Error> {
        // Wall mode always runs on the sampler thread.
        debug_assert!(config.mode == Mode::Cpu || !clock.is_kernel_paced());
        let mut stats = SamplerStats::new(&config);
        let cfi = (!config.frame_pointers_only).then(CfiWalker::new);
        let wall_requests = config.mode == Mode::Wall
            && clock == SampleClock::SamplerThread
            && cpu_timers::available().is_ok();
        stats.clock = clock;
        let period_ns = TickSchedule::period_for_hz(config.hz);
        let cpu_pacing =
            (clock == SampleClock::SamplerThread && config.mode == Mode::Cpu).then(|| {
                let seed =
                    monotonic_ns() ^ u64::from(threads::gettid().unsigned_abs()).rotate_left(32);
                CpuPacing::new(period_ns, seed)
            });
        let relist_floor = if clock.is_kernel_paced() {
            RELIST_INTERVAL.max(Duration::from_nanos(RELIST_PERIODS * period_ns))
        } else {
            RELIST_INTERVAL
        };
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
            new_threads_due: None,
            new_tids: Vec::new(),
            tasks: threads::TaskList::open().map_err(Error::Io)?,
            tids: Vec::with_capacity(64),
            threads: HashMap::new(),
            departed: HashMap::new(),
            slots: SlotOwner::new(),
            slot_uses: [None; SLOTS],
            progress,
            regions_scratch: Vec::new(),
            regions_stale: false,
            // Counted as read at spawn, so the first timers are not delayed.
            regions_read_at: Some(Instant::now()),
            regions_every: REGIONS_REFRESH_INTERVAL,
            missing_regions_seen: slots::MISSING_REGIONS.load(Ordering::Relaxed),
            tick: 0,
            listing: 0,
            pass: 0,
            listed_at: None,
            listed_as: None,
            steady_since: None,
            timer_walks: Vec::new(),
            spare_frames: SpareFrames::default(),
            rotation: 0,
            exits: Vec::new(),
            cpu_pacing,
            wall_requests,
            cfi,
            blocked_reads: BlockedReads::default(),
            active: Vec::new(),
            relist_every: relist_floor,
            relist_floor,
            cpus: threads::configured_cpus(),
            ring: RingState::default(),
            labels: labels::Resolver::default(),
            _labels_recording: labels::log::recording(),
        })
    }

    /// Whether the kernel paces samples and the sampler thread only collects.
    fn timers(&self) -> bool {
        self.clock.is_kernel_paced()
    }

    /// Whether threads are sampled into the kernel's perf rings.
    fn rings_wanted(&self) -> bool {
        self.clock == SampleClock::Perf
    }

    /// How long the sampler thread sleeps between two collections, in ns:
    /// with timers, before a quarter of the slots fills and as often as
    /// listings; on the rings alone, [`RING_COLLECT_INTERVAL`].
    fn collect_interval(&self) -> u64 {
        if !self.timers() {
            return self.period_ns;
        }
        let slots = (self.period_ns * (SLOTS as u64 / 4) / self.cpus)
            .clamp(1_000_000, MAX_COLLECT_INTERVAL.as_nanos() as u64);
        let rings_only = self.rings_only();
        let ring_fill = |born: &BornThreads| born.samples_per_ring() / 4 * self.period_ns;
        match self.ring.events.as_ref() {
            Some(born) if rings_only => {
                let (least, most) = RING_COLLECT_INTERVAL;
                let longest = (RING_COLLECT_PERIODS * self.period_ns)
                    .clamp(least.as_nanos() as u64, most.as_nanos() as u64);
                ring_fill(born).clamp(1_000_000, longest)
            }
            born => {
                let quiet = self
                    .steady_since
                    .is_some_and(|at| at.elapsed() >= QUIET_AFTER);
                let listing = if quiet {
                    MAX_COLLECT_INTERVAL.max(self.relist_floor)
                } else {
                    self.relist_floor
                };
                let listing = listing.as_nanos() as u64;
                let rings = born.map_or(u64::MAX, ring_fill);
                slots.min(listing).min(rings).max(1_000_000)
            }
        }
    }

    fn rings_only(&self) -> bool {
        !self.threads.values().any(|s| s.timer.open.is_some())
    }

    pub(super) fn run(mut self, stop: &AtomicBool) -> Result<RawProfile, Error> {
        self.stats.start_time = SystemTime::now();
        self.started = Instant::now();
        self.process_cpu_at_start = profile::process_cpu_time();
        self.window = Window::new(&self.stats);
        let mut schedule = TickSchedule::new(monotonic_ns(), self.collect_interval());
        let first = if self.timers() { self.tick() } else { Ok(()) };
        let result = loop {
            if first.is_err() {
                break first;
            }
            let deadline = match self.cpu_pacing.as_mut() {
                Some(p) => p.wakeups.next(monotonic_ns(), p.young_threads),
                None => schedule.deadline(),
            };
            sleep_until(deadline, stop);
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            if let Some(CpuPacing { wakeups, .. }) = self.cpu_pacing.as_mut() {
                wakeups.woke(deadline, monotonic_ns());
            }
            if let Err(e) = self.tick() {
                break Err(e);
            }
            let interval = self.collect_interval();
            if self.cpu_pacing.is_none() && interval != schedule.period() {
                schedule.set_period(monotonic_ns(), interval);
            }
            (self.stats.ticks, self.stats.missed_ticks) = match &self.cpu_pacing {
                Some(CpuPacing { wakeups, .. }) => (wakeups.ticks(), wakeups.missed()),
                None => {
                    schedule.complete_tick(monotonic_ns());
                    (schedule.ticks(), schedule.missed())
                }
            };
            self.progress
                .ticks
                .store(self.stats.ticks, Ordering::Relaxed);
            while let Ok(request) = self.requests.try_recv() {
                self.account_cpu(true);
                let stats = self.live_stats();
                let (table, threads) = (&mut self.table, self.thread_keys.infos());
                self.window
                    .serve(request, table, threads, &stats, Arch::host());
            }
        };
        // The regions snapshot stays published; late readers read checked.
        stack_regions::set_covers_listed(false);
        // Read every CPU clock before the timers stop firing.
        if self.timers() {
            self.watch_blocked_threads();
        }
        self.account_cpu(true);
        if let Some(born) = self.ring.events.as_mut() {
            born.stop_sampling();
        }
        for state in self.threads.values_mut() {
            state.timer.open = None;
        }
        self.drain();
        self.settle_at_stop();
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
        if std::mem::take(&mut self.ring.deep_found) && self.timers() {
            self.open_timers();
        }
        let by_time = self
            .listed_at
            .is_none_or(|at| at.elapsed() >= self.relist_every);
        // Unseen CPU forces a listing even when it could otherwise wait.
        let unseen = self.unseen_thread_runs();
        let due = (by_time || unseen) && !listings_held();
        if due && (unseen || !self.listing_can_wait()) {
            let listing_cpu = threads::own_cpu_ns();
            self.listed_at = Some(Instant::now());
            if let Some(watch) = self
                .cpu_pacing
                .as_mut()
                .and_then(|p| p.new_threads.as_mut())
            {
                watch.mark();
            }
            self.tasks.read(&mut self.tids).map_err(Error::Io)?;
            self.listing += 1;
            let registering = self.discover_threads();
            let mut arming = Duration::ZERO;
            // Maps reads are spaced on their own, not charged to the listing.
            let regions_cost = self.refresh_regions_if_stale();
            self.account_cpu(false);
            // Every thread's clock was just read: compare the process's.
            let mut unread = 0;
            if let Some(CpuPacing { unseen, tails, .. }) = self.cpu_pacing.as_mut() {
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
                arming = self.choose_active();
            }
            self.progress
                .listings
                .store(self.listing, Ordering::Release);
            // Keep listings under 1/LISTING_SHARE of the sampler's own CPU
            // time. Registering threads and arming wake timers are paid once
            // per thread, so they are left out, lest a big pool stall listings.
            let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(listing_cpu))
                .saturating_sub(regions_cost);
            self.relist_every = self
                .relist_floor
                .max(cost.saturating_sub(registering + arming) * LISTING_SHARE);
            if let Some(CpuPacing { unseen, .. }) = self.cpu_pacing.as_mut() {
                unseen.listed(monotonic_ns(), cost.as_nanos() as u64);
            }
        } else {
            self.refresh_regions_if_stale();
            // On the kernel-paced clocks a put-off listing still reads the
            // clocks of threads sampled since; the sampler-thread clock waits.
            if due && self.timers() {
                self.account_cpu(false);
            }
            self.find_new_threads();
        }
        if !self.timers() {
            self.take_wake_notices();
            match self.config.mode {
                Mode::Cpu => self.signal_due_cpu(),
                Mode::Wall => self.signal_due_wall(),
            }
        }
        // After signalling, so reading modules never delays a sample.
        if let Some(cfi) = self.cfi.as_mut() {
            cfi.refresh_modules();
        }
        self.progress
            .threads
            .store(self.threads.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Re-reads `/proc/self/maps` when walks missed it or threads were born,
    /// spaced by cost; returns the CPU time spent.
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
        let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(cpu_before));
        self.regions_every = REGIONS_REFRESH_INTERVAL.max(cost * LISTING_SHARE);
        if refreshed {
            self.regions_stale = false;
            stack_regions::set_covers_listed(true);
        }
        cost
    }
}

/// Sleeps until an absolute `CLOCK_MONOTONIC` time or until `stop` is set;
/// parks so that `stop` can unpark it at once.
fn sleep_until(deadline_ns: u64, stop: &AtomicBool) {
    loop {
        let now_ns = monotonic_ns();
        if now_ns >= deadline_ns || stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::park_timeout(Duration::from_nanos(deadline_ns - now_ns));
    }
}
