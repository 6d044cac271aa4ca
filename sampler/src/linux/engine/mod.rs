//! The sampler thread's engine: one [`SamplerLoop`] drives every clock.
//!
//! Whatever the clock, the sampler thread does the same things on each
//! wakeup ([`SamplerLoop::tick`]): it collects the samples that finished
//! and interns them ([`collect`]), lists the threads at intervals and
//! reads their CPU clocks ([`thread_list`]), and then does what its clock
//! asks of it: reads the perf rings ([`ring_clock`]), opens per-thread
//! timers ([`signal_timers`]), or paces the samples itself
//! ([`pacing`]). Threads that block the profiling signal are found and
//! counted on both signal paths ([`signal_blocked`]). It never waits for
//! a handler: a slow thread delays only its own sample.
//!
//! The state is one struct, [`SamplerLoop`], with an `impl` block per
//! file; this file holds the struct (and the per-thread state it keeps,
//! [`ThreadState`] and [`BlockedSince`], whose fields every file reads),
//! `new`, `run`, `tick` and the run's stats. Only the sampler thread
//! touches any of it; the handlers see the static slots
//! ([`super::signal`]) and nothing else.

mod blocked_reads;
mod collect;
mod cpu_accounting;
mod new_threads;
mod pacing;
mod ring_clock;
mod signal_blocked;
mod signal_timers;
mod thread_list;
mod thread_state;
mod wake_timers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashMap;

use crate::clock::TickSchedule;
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

/// A slot not taken by its thread within this time is cancelled and the
/// sample counted as failed (the thread has the signal blocked, or is
/// stuck in the kernel).
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(250);

/// How often the thread list is re-read: listing `/proc/self/task` costs
/// about 7 µs, too much for every tick at 1000 Hz. A new thread is sampled
/// at most this much later; an exited one fails its send with `ESRCH`.
const RELIST_INTERVAL: Duration = Duration::from_millis(10);

/// With per-thread timers, the thread list is read at most every this many
/// periods (and every [`RELIST_INTERVAL`] at rates above 200 Hz). A
/// listing, with the clock reads and signal-mask checks that follow it, is
/// most of what the sampler thread does on these clocks; at 100 Hz a
/// listing every 10 ms cost 0.5% of a core for 200 samples a second. A
/// thread born while sampling gets its timer at most this many periods
/// late, and that CPU is counted as not covered.
const RELIST_PERIODS: u64 = 2;

/// A listing may take at most 1/this of the time between two listings.
const LISTING_SHARE: u32 = 20;

/// Whether a test holds the rings' reading back (`HOLD_DRAINS`, with the
/// feature `test-hooks`).
fn drains_held() -> bool {
    #[cfg(feature = "test-hooks")]
    return super::test_hooks::HOLD_DRAINS.load(Ordering::Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// Whether a test holds the listings back (`HOLD_LISTINGS`, with the
/// feature `test-hooks`).
fn listings_held() -> bool {
    #[cfg(feature = "test-hooks")]
    return super::test_hooks::HOLD_LISTINGS.load(Ordering::Relaxed);
    #[cfg(not(feature = "test-hooks"))]
    false
}

/// How long a thread counts as young: its name is re-read whenever one of
/// its samples is interned, because threads often name themselves right
/// after they start.
const YOUNG: Duration = Duration::from_millis(100);

/// With per-thread timers, the longest the sampler thread sleeps between
/// two collections of finished samples: a slot that was never taken is
/// given up after [`SAMPLE_TIMEOUT`], which needs a look well within it.
const MAX_COLLECT_INTERVAL: Duration = Duration::from_millis(100);

/// With per-thread timers, once for this long every look found the same
/// thread count and every thread sampled, and no listing a new thread
/// (where threads come and go the count can hold), the sampler thread
/// wakes only every [`MAX_COLLECT_INTERVAL`] (or sooner if the slots or
/// rings need it), not at every listing interval: each wakeup looks at the
/// thread count and the threads' clocks, which with a steady set of
/// threads is most of the sampler thread's time. The first thread born after such a quiet
/// spell gets its timer up to that much later; what it ran before is
/// counted as not covered, and its birth brings back the shorter
/// interval. A quarter second: a pool starts its threads within
/// milliseconds of each other, so a burst of births keeps the short
/// interval throughout; waiting a whole second left a third of a
/// 3-second job on it.
const QUIET_AFTER: Duration = Duration::from_millis(250);

/// With every thread sampled into the rings, the sampler thread sleeps
/// [`RING_COLLECT_PERIODS`] periods, within these bounds (and reads the
/// rings at a quarter of the time they take to fill, if that is sooner).
/// It still lists threads and reads the clocks of those sampled since the
/// last reading ([`SamplerLoop::account_cpu`]): the kernel does not
/// always write a born thread's final counts when it exits (seen beside
/// busy processes), and then the CPU time the thread used since its clock
/// was last read has no count; at 100 ms that was 2.5% of a 1.5
/// CPU-second program's time at 1000 Hz. Each wakeup costs the same
/// whatever the rate, so at 100 Hz it wakes every 100 ms, not 20.
const RING_COLLECT_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(100));
/// Periods between two collections on the rings alone: a sample's worth
/// of time lost at an exit without final counts stays a small part of
/// what the thread's samples stand for.
const RING_COLLECT_PERIODS: u64 = 20;

/// The least time between two reads of `/proc/self/maps`.
const REGIONS_REFRESH_INTERVAL: Duration = Duration::from_millis(250);

/// Sampler-thread path, cpu mode: how many of a young thread's last stacks
/// its CPU time after its last sample is spread over when it exits. The
/// very last one alone is too often in the thread's exit (`munmap` of its
/// signal stack, taken as the system call returns), a stack that used
/// little of its time.
const RECENT_WALKS: usize = 4;

/// How long `stop` waits for handlers still walking.
const DRAIN_TIMEOUT: Duration = Duration::from_millis(100);

pub(super) struct SamplerLoop {
    config: SamplerConfig,
    clock: SampleClock,
    sender: SignalSender,
    own_tid: i32,
    /// When threads created since the last listing may next be looked for
    /// ([`SamplerLoop::find_new_threads`]), and the scratch list for them.
    new_threads_due: Option<Instant>,
    new_tids: Vec<i32>,
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
    /// The process's thread count, and the births and exits read from the
    /// rings, as the last listing began ([`Self::listing_can_wait`]).
    listed_as: Option<(u64, Option<TaskRecords>)>,
    /// With per-thread timers: since when every look found the thread
    /// count the same and every thread sampled, and no listing found a new
    /// thread ([`QUIET_AFTER`]).
    steady_since: Option<Instant>,
    /// Timer samples copied out of their slots with the periods each
    /// stands for, reused between passes.
    timer_walks: Vec<(i32, OwnedWalk)>,
    /// Frame vectors of walks replaced since, for the next samples'.
    spare_frames: SpareFrames,
    /// How often the thread list is read: `relist_floor`, or longer when a
    /// listing is costly.
    relist_every: Duration,
    /// The least time between two listings: [`RELIST_INTERVAL`], and with
    /// per-thread timers at least [`RELIST_PERIODS`] periods.
    relist_floor: Duration,
    /// The CPUs that can run the process's threads at once: with timers
    /// paced by CPU time, signals claim slots at most this many times per
    /// period.
    cpus: u64,
    /// Sampler-thread path: the threads the ticks look at, chosen at each
    /// listing ([`Self::choose_active`]), and idle ones that ran since
    /// ([`Self::take_wake_notices`]).
    active: Vec<i32>,
    /// Sampler-thread path: where in the thread list the next tick starts,
    /// so that when there are more threads due than slots, every thread
    /// gets its turn rather than the first ones every tick.
    rotation: usize,
    /// Sampler-thread path, cpu mode: when to wake, CPU time nobody looked
    /// at, and threads' last moments ([`CpuPacing`]).
    cpu_pacing: Option<CpuPacing>,
    /// Sampler-thread path, wall mode: a running thread's sample is asked
    /// for with a one-shot CPU timer
    /// ([`PosixTimer::open_request`](cpu_timers::PosixTimer::open_request)),
    /// not a signal sent straight to it, so that no thread is ever
    /// signalled inside a blocking call; `false` where the kernel refuses
    /// the timers.
    wall_requests: bool,
    /// Threads that exited at the last listing, with what they still
    /// stand for, until [`Self::settle_exits`] counts it.
    exits: Vec<Exit>,
    /// CFI unwinding of the handlers' stack copies; `None` with
    /// `frame_pointers_only`.
    cfi: Option<CfiWalker>,
    /// Wall mode: reads the stacks of threads found blocked after they ran,
    /// within a share of the sampler's time.
    blocked_reads: BlockedReads,
    /// The ring clock's inherited events and their records.
    ring: RingState,
}

impl SamplerLoop {
    pub(super) fn new(
        config: SamplerConfig,
        clock: SampleClock,
        signal: i32,
        progress: Arc<Progress>,
        requests: mpsc::Receiver<window::Request>,
    ) -> Result<Self, Error> {
        // `choose_clock` gives wall mode the sampler thread only: a timer
        // of each thread's own is a cpu-mode clock.
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
            // Read at spawn. The first listing finds every thread new, so
            // handlers read stacks checked (`own_stack`) until the next
            // read, a refresh interval later: reading the maps before the
            // first timers open would delay them.
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
        })
    }

    // What the engine does differently by clock, each asked by what it
    // means rather than by which clock runs; the constructor builds the
    // state each clock keeps (`cpu_pacing`, `wall_requests`, `ring`).

    /// Whether the kernel paces each thread's samples (the perf clock) and
    /// the sampler thread only collects.
    fn timers(&self) -> bool {
        self.clock.is_kernel_paced()
    }

    /// Whether threads are sampled into the kernel's rings by perf events,
    /// the inherited ones covering the threads they create.
    fn rings_wanted(&self) -> bool {
        self.clock == SampleClock::Perf
    }

    /// How long the sampler thread sleeps between two collections.
    ///
    /// With timers, often enough that the slots never fill: timers paced by
    /// CPU time signal at most once per period per CPU, so a quarter of the
    /// slots lasts `SLOTS / 4 / cpus` periods. Within that, as often as the
    /// thread list is read, so that a born thread gets its timer on time,
    /// or, once the threads held still for [`QUIET_AFTER`], at most every
    /// [`MAX_COLLECT_INTERVAL`].
    /// Once every thread is sampled into the rings (no timer open),
    /// [`RING_COLLECT_INTERVAL`], or a quarter of the time a ring takes to
    /// fill at one sample per period per CPU if that is sooner (rates far
    /// above 1000 Hz).
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

    /// Whether every known thread is sampled into the rings: none has a
    /// timer of its own.
    fn rings_only(&self) -> bool {
        !self.threads.values().any(|s| s.timer.open.is_some())
    }

    pub(super) fn run(mut self, stop: &AtomicBool) -> Result<RawProfile, Error> {
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
        // The snapshot stays published after stop: a handler that runs late,
        // or a one-shot capture, reads checked from now on.
        stack_regions::set_covers_listed(false);
        // Every CPU reading first, then no timer fires again. Periods
        // lost to a blocked signal since the last listing are counted too.
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
        if std::mem::take(&mut self.ring.deep_found) && self.timers() {
            self.open_timers();
        }
        let by_time = self
            .listed_at
            .is_none_or(|at| at.elapsed() >= self.relist_every);
        // Checked even when the time is up: a listing may be put off, and
        // CPU time seen nowhere is no reason to wait.
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
            // Not part of the listing's cost: reads of the maps are spaced
            // by their own.
            let regions_cost = self.refresh_regions_if_stale();
            self.account_cpu(false);
            // Every thread's clock was just read (those clocks put no thread
            // on the rings): the process's now, against them (`UnseenCpu`,
            // `ExitTails`).
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
            // A listing reads every thread's clock: with thousands of
            // threads it costs milliseconds. Keep it under 1/LISTING_SHARE
            // of the sampler's time, so ticks stay cheap and on time (a new
            // thread is then found later in such a process).
            // (Measured in the sampler's own CPU time: on a busy machine
            // its wall time says more about the load than the listing.)
            // Registering new threads, and arming idle threads' wake
            // timers, are left out of the spacing: they are paid once per
            // thread (or per wake), and the listing that registered a pool
            // of thousands (5,000 names: 50-70 ms) put the next one over a
            // second away, while threads started after the pool ran
            // unseen. Early listings for threads that churn still spend it
            // (`UnseenCpu`).
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
            // A listing put off on the sampler-thread clock reads no clock
            // beyond its ticks': what the threads ran is counted at the
            // next listing, or when a dump or the stop asks.
            if due && self.timers() {
                self.account_cpu(false);
            }
            self.find_new_threads();
        }
        if !self.timers() {
            self.take_wake_notices();
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
            stack_regions::set_covers_listed(true);
        }
        cost
    }
}

/// Sleeps until an absolute `CLOCK_MONOTONIC` time, or until `stop` is set.
/// Parked, not in `clock_nanosleep`: `stop` unparks this thread, so a
/// sampler that sleeps 100 ms between collections stops at once instead of
/// at its next wakeup.
fn sleep_until(deadline_ns: u64, stop: &AtomicBool) {
    loop {
        let now_ns = monotonic_ns();
        if now_ns >= deadline_ns || stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::park_timeout(Duration::from_nanos(deadline_ns - now_ns));
    }
}
