//! Linux, own process: a signal per sample (`SIGURG` by default).
//!
//! A thread cannot ptrace its own process, and `setitimer(ITIMER_PROF)`
//! fires at the kernel tick rate (250 Hz on many kernels), so the sampler
//! thread drives the rate itself: it sleeps to absolute deadlines and, each
//! tick, sends the profiling signal to every thread it should sample with
//! `rt_tgsigqueueinfo`. The handler walks the interrupted stack into a
//! static slot ([`slots`]); the sampler collects finished slots on its next
//! tick and interns them. It never waits for a handler, so a thread that is
//! slow to take its signal delays only its own sample.

pub(crate) mod checked_memory;
mod scheduling;
mod signal;
mod slots;
mod stack_regions;
mod threads;
mod unwind;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashMap;

use crate::clock::TickSchedule;
use crate::sampler_thread::{Claim, SamplerThread};
use crate::stack_table::{StackKey, StackTable};
use crate::walker::Arch;
use crate::window::{self, Window};
use crate::{
    exclusions, Error, Mode, Progress, RawProfile, SamplerConfig, SamplerStats, ThreadInfo,
};

pub use slots::MAX_DEPTH;

use signal::{InstalledHandler, SignalSender};
use slots::{Poll, SlotOwner, SLOTS};
use unwind::CfiWalker;

/// A slot not taken by its thread within this time is cancelled and the
/// sample counted as failed (the thread has the signal blocked, or is
/// stuck in the kernel).
const SAMPLE_TIMEOUT: Duration = Duration::from_millis(250);
/// CPU time a thread may gain since its last sample and still count as idle
/// in `cpu` mode (at most half a period): being sampled costs a thread a few
/// microseconds (up to ~10 in a VM), which must not make it look busy.
const IDLE_SLACK_NS: u64 = 50_000;
/// How often the thread list is re-read: listing `/proc/self/task` costs
/// about 7 µs, too much for every tick at 1000 Hz. A new thread is sampled
/// at most this much later; an exited one fails its send with `ESRCH`.
const RELIST_INTERVAL: Duration = Duration::from_millis(10);
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
        let claim = Claim::take()?;
        // SAFETY: getpid has no preconditions.
        slots::OWN_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
        // Without a fault-safe read, walks keep only the pc (counted as
        // unreadable) rather than trust a snapshot of the mappings.
        checked_memory::probe();
        unwind::stack_copy::CAPTURE.store(!config.frame_pointers_only, Ordering::Relaxed);
        let mut scratch = Vec::new();
        stack_regions::refresh(&mut scratch);
        let handler = InstalledHandler::install(signal)?;
        let thread = SamplerThread::spawn(config.hz, move |cx| {
            signal::block_in_this_thread(signal);
            scheduling::request_short_slice();
            SamplerLoop::new(config, signal, cx.progress, cx.requests)?.run(&cx.stop)
        })?;
        Ok(Sampler {
            thread,
            handler: Some(handler),
            _claim: claim,
        })
    }

    /// Whether this sampler was started by the calling process; `false` in
    /// a child forked while it ran, where it cannot be stopped (the child
    /// gets [`Error::ForkedChild`] and may start its own).
    pub fn started_in_this_process(&self) -> bool {
        !self.thread.forked_away()
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
    last_cpu_ns: Option<u64>,
    /// A signal is in flight: don't send another.
    pending: bool,
    /// The published stack regions include this thread's stack. A thread
    /// is not signalled before that: a stale snapshot could bound its walk
    /// by a mapping that no longer exists.
    regions_ready: bool,
    /// The tick the thread was last listed on, to forget exited threads.
    seen_tick: u64,
    /// When to re-read the name: threads often name themselves right after
    /// they start, so names are re-read at growing intervals.
    name_check_tick: u64,
    name_check_interval: u64,
}

/// Which thread an armed slot belongs to.
#[derive(Clone, Copy)]
struct SlotUse {
    tid: i32,
    key: u32,
    armed_at: Instant,
}

struct SamplerLoop {
    config: SamplerConfig,
    sender: SignalSender,
    own_tid: i32,
    tasks: threads::TaskList,
    tids: Vec<i32>,
    threads: HashMap<i32, ThreadState>,
    thread_infos: Vec<ThreadInfo>,
    thread_keys: HashMap<(i32, String), u32>,
    slots: SlotOwner,
    slot_uses: [Option<SlotUse>; SLOTS],
    table: StackTable,
    stats: SamplerStats,
    window: Window,
    requests: mpsc::Receiver<window::Request>,
    stray_at_start: u64,
    /// When `run` started: the run's duration is measured from here.
    started: Instant,
    progress: Arc<Progress>,
    regions_scratch: Vec<(u64, u64)>,
    regions_stale: bool,
    missing_regions_seen: u64,
    tick: u64,
    /// When the thread list was last read.
    listed_at: Option<Instant>,
    idle_slack_ns: u64,
    /// CFI unwinding of the handlers' stack copies; `None` with
    /// `frame_pointers_only`.
    cfi: Option<CfiWalker>,
}

impl SamplerLoop {
    fn new(
        config: SamplerConfig,
        signal: i32,
        progress: Arc<Progress>,
        requests: mpsc::Receiver<window::Request>,
    ) -> Result<Self, Error> {
        let idle_slack_ns = IDLE_SLACK_NS.min(TickSchedule::period_for_hz(config.hz) / 2);
        let stats = SamplerStats::new(&config);
        let cfi = (!config.frame_pointers_only).then(CfiWalker::new);
        Ok(SamplerLoop {
            window: Window::new(&stats),
            requests,
            stray_at_start: slots::STRAY_SIGNALS.load(Ordering::Relaxed),
            started: Instant::now(),
            table: StackTable::with_limit(config.limit),
            stats,
            config,
            sender: SignalSender::new(signal),
            own_tid: threads::gettid(),
            tasks: threads::TaskList::open().map_err(Error::Io)?,
            tids: Vec::with_capacity(64),
            threads: HashMap::new(),
            thread_infos: Vec::new(),
            thread_keys: HashMap::new(),
            slots: SlotOwner::new(),
            slot_uses: [None; SLOTS],
            progress,
            regions_scratch: Vec::new(),
            regions_stale: false,
            missing_regions_seen: slots::MISSING_REGIONS.load(Ordering::Relaxed),
            tick: 0,
            listed_at: None,
            idle_slack_ns,
            cfi,
        })
    }

    fn run(mut self, stop: &AtomicBool) -> Result<RawProfile, Error> {
        self.stats.start_time = SystemTime::now();
        self.started = Instant::now();
        self.window = Window::new(&self.stats);
        let mut schedule =
            TickSchedule::new(monotonic_ns(), TickSchedule::period_for_hz(self.config.hz));
        loop {
            sleep_until(schedule.deadline());
            if stop.load(Ordering::Acquire) {
                break;
            }
            self.tick()?;
            schedule.complete_tick(monotonic_ns());
            self.stats.ticks = schedule.ticks();
            self.stats.missed_ticks = schedule.missed();
            self.progress
                .ticks
                .store(schedule.ticks(), Ordering::Relaxed);
            while let Ok(request) = self.requests.try_recv() {
                let stats = self.live_stats();
                let (table, threads) = (&mut self.table, &self.thread_infos);
                self.window
                    .serve(request, table, threads, &stats, Arch::host());
            }
        }
        self.drain();
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
            self.discover_threads();
        }
        self.refresh_regions_if_stale();

        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                continue;
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            state.seen_tick = self.tick;
            if state.pending || !state.regions_ready {
                self.stats.skipped_samples += 1;
                continue;
            }
            if self.config.mode == Mode::Cpu {
                let Some(cpu) = threads::thread_cpu_ns(tid) else {
                    self.stats.exited_threads += 1;
                    continue;
                };
                // Progress is measured from the thread's last sample and
                // must exceed what taking that sample cost the thread
                // (signal delivery, the walk, restarting a blocking call),
                // or an idle thread would look busy after every sample.
                let idle = state
                    .last_cpu_ns
                    .is_some_and(|last| cpu < last + self.idle_slack_ns);
                if idle {
                    continue;
                }
                state.last_cpu_ns = Some(cpu);
            }
            let key = state.key;
            let Some(armed) = self.slots.arm(self.config.max_depth) else {
                self.stats.skipped_samples += 1;
                continue;
            };
            match self.sender.send(tid, armed.signal_value()) {
                Ok(()) => {
                    state.pending = true;
                    self.slot_uses[armed.slot] = Some(SlotUse {
                        tid,
                        key,
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
        let tick = self.tick;
        self.threads.retain(|_, s| s.seen_tick == tick || s.pending);
        self.progress
            .threads
            .store(self.threads.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Registers threads seen for the first time and re-reads names that
    /// are due; a new thread may run on a stack not yet in the snapshot.
    fn discover_threads(&mut self) {
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                continue;
            }
            let tick = self.tick;
            let state = match self.threads.get_mut(&tid) {
                Some(s) if s.name_check_tick > tick => continue,
                Some(s) => s,
                None => {
                    self.regions_stale = true;
                    self.threads.entry(tid).or_insert(ThreadState {
                        key: u32::MAX,
                        last_cpu_ns: None,
                        pending: false,
                        regions_ready: false,
                        seen_tick: tick,
                        name_check_tick: tick,
                        name_check_interval: 1,
                    })
                }
            };
            state.name_check_tick = tick + state.name_check_interval;
            state.name_check_interval = (state.name_check_interval * 2).min(1024);
            let Some(name) = threads::thread_name(tid) else {
                continue;
            };
            let next_key = self.thread_infos.len() as u32;
            let key = *self
                .thread_keys
                .entry((tid, name))
                .or_insert_with_key(|(tid, name)| {
                    self.thread_infos.push(ThreadInfo {
                        tid: *tid as u64,
                        name: name.clone(),
                    });
                    next_key
                });
            if let Some(state) = self.threads.get_mut(&tid) {
                state.key = key;
            }
        }
        // A thread whose name could not be read even once (it exited at
        // once) is dropped now rather than sampled under no name.
        self.threads.retain(|_, s| s.key != u32::MAX);
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

    /// Interns finished walks and cancels samples that waited too long;
    /// with `cancel_all`, every sample whose handler has not started.
    fn collect(&mut self, cancel_all: bool) {
        if let Some(cfi) = self.cfi.as_mut() {
            cfi.refresh_modules();
        }
        for slot in 0..SLOTS {
            let Some(slot_use) = self.slot_uses[slot] else {
                continue;
            };
            let (table, stats) = (&mut self.table, &mut self.stats);
            let (cfi, max_depth) = (&mut self.cfi, self.config.max_depth);
            let finished = match self.slots.poll(slot, |walk| {
                let (frames, end) = unwind::finish(cfi.as_mut(), &walk, max_depth, stats);
                table.add(
                    StackKey {
                        thread: slot_use.key,
                        frames,
                        lr: walk.lr,
                        end,
                    },
                    1,
                );
                stats.samples += 1;
                stats.walk_ends[end as usize] += 1;
            }) {
                Poll::Collected => true,
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
                            self.stats.failed_samples += 1;
                        }
                        true
                    } else {
                        false
                    }
                }
            };
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
    }

    /// On stop: collects what finished, cancels what never started and
    /// waits a little for handlers still walking.
    fn drain(&mut self) {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            self.collect(true);
            let busy = (0..SLOTS).filter(|&s| self.slots.is_armed(s)).count();
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
