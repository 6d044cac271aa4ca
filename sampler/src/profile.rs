//! The sampler's configuration, counters and result, shared by platforms.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use crate::stack_table::{Limit, StackTable};
use crate::walker::{Arch, WalkEnd};

/// What a sample stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One period (1/hz) of a thread's own CPU time: a CPU profile. Idle
    /// threads are never disturbed, and a thread that got 30% of a CPU gets
    /// 30% of the samples a fully busy one gets, on an idle machine or a
    /// loaded one.
    #[default]
    Cpu,
    /// One wall-clock tick: every thread, running or blocked, is sampled at
    /// each tick of the sampler thread. Under contention a runnable thread
    /// waiting for a CPU is sampled too (where it was preempted): per-thread
    /// counts follow wall time by design, not CPU time.
    Wall,
}

/// What paced the samples of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SampleClock {
    /// Each thread had its own CPU-time timer (Linux: a `perf_event_open`
    /// task-clock event whose overflow signals that thread), so each
    /// sample landed while its thread ran, at the instruction where the
    /// CPU time was spent. The sampler thread only collected.
    ThreadTimers,
    /// Each thread had its own POSIX CPU timer (Linux: `timer_create` on
    /// the thread's CPU clock, signalling that thread), which needs no
    /// privilege and works where perf events are refused. The kernel
    /// checks such timers on its scheduler tick, so at rates above the
    /// tick one signal stands for several periods (`1 + si_overrun`):
    /// [`SamplerStats::samples`] counts periods, [`SamplerStats::recorded`]
    /// the distinct signals.
    PosixTimers,
    /// A sampler thread ticked on absolute wall-clock deadlines and, in
    /// [`Mode::Cpu`], sampled a thread whenever the CPU time it used since
    /// its last sample reached one period (macOS; Linux in wall mode or
    /// when perf events are refused).
    #[default]
    SamplerThread,
}

impl SampleClock {
    /// Every clock.
    pub const ALL: [SampleClock; 3] = [
        SampleClock::ThreadTimers,
        SampleClock::PosixTimers,
        SampleClock::SamplerThread,
    ];

    /// `"thread-timers"`, `"posix-timers"` or `"sampler-thread"`, as in
    /// the JSON sidecar.
    pub const fn as_str(self) -> &'static str {
        match self {
            SampleClock::ThreadTimers => "thread-timers",
            SampleClock::PosixTimers => "posix-timers",
            SampleClock::SamplerThread => "sampler-thread",
        }
    }

    /// The short name users force the clock with (`--clock`,
    /// [`CLOCK_ENV`]): `"perf"`, `"posix"` or `"thread"`.
    pub const fn short_name(self) -> &'static str {
        match self {
            SampleClock::ThreadTimers => "perf",
            SampleClock::PosixTimers => "posix",
            SampleClock::SamplerThread => "thread",
        }
    }

    /// The clock a short name ([`Self::short_name`]) or a sidecar name
    /// ([`Self::as_str`]) stands for.
    pub fn from_name(name: &str) -> Option<SampleClock> {
        SampleClock::ALL
            .into_iter()
            .find(|c| c.short_name() == name || c.as_str() == name)
    }

    /// A short human description, for status lines.
    pub const fn describe(self) -> &'static str {
        match self {
            SampleClock::ThreadTimers => "per-thread CPU timers",
            SampleClock::PosixTimers => "per-thread POSIX CPU timers",
            SampleClock::SamplerThread => "sampler-thread ticks",
        }
    }

    /// Whether the kernel paces the samples by each thread's own CPU time
    /// (a timer per thread), rather than the sampler thread.
    pub const fn is_kernel_paced(self) -> bool {
        !matches!(self, SampleClock::SamplerThread)
    }
}

impl fmt::Display for SampleClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The environment variable that forces the sampler-thread path on Linux
/// (any value but empty or `0`), as `BTPROF_CLOCK=thread` does. Kept for
/// scripts written before [`CLOCK_ENV`].
pub const FORCE_SAMPLER_THREAD_ENV: &str = "BTPROF_FORCE_SAMPLER_THREAD";

/// The environment variable that forces a cpu-mode clock on Linux, as
/// [`SamplerConfig::clock`] does (which wins when both are set): `perf`,
/// `posix` or `thread` ([`SampleClock::short_name`]). For tests and
/// comparisons of the clocks; its grandchildren inherit it.
pub const CLOCK_ENV: &str = "BTPROF_CLOCK";

/// The clock the environment forces ([`CLOCK_ENV`], then
/// [`FORCE_SAMPLER_THREAD_ENV`]), if any; an unknown name is an error.
pub fn clock_from_env() -> Result<Option<SampleClock>, Error> {
    if let Some(name) = std::env::var_os(CLOCK_ENV).filter(|v| !v.is_empty()) {
        let name = name.to_string_lossy();
        return SampleClock::from_name(&name).map(Some).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{CLOCK_ENV}={name} names no clock: use perf, posix or thread"
            ))
        });
    }
    let forced =
        std::env::var_os(FORCE_SAMPLER_THREAD_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    Ok(forced.then_some(SampleClock::SamplerThread))
}

impl Mode {
    /// `"cpu"` or `"wall"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Wall => "wall",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// In [`Mode::Cpu`], samples per second of each thread's own CPU time
    /// (one sample per 1/hz of CPU a thread uses); in [`Mode::Wall`],
    /// ticks per wall-clock second, each sampling every thread.
    pub hz: u32,
    /// What a sample stands for.
    pub mode: Mode,
    /// Frames kept per stack, pc included; deeper walks are marked
    /// truncated.
    pub max_depth: usize,
    /// The Linux profiling signal (`SIGURG`, `SIGWINCH` or a real-time
    /// signal); `None` picks `default_signal()` (`SIGURG`). macOS sends no
    /// signal and rejects `Some`.
    pub signal: Option<i32>,
    /// How many distinct stacks (and frames) one window keeps; samples of
    /// new stacks beyond it are counted as overflow, not stored.
    pub limit: Limit,
    /// Walk frame pointers only, without call frame information. By
    /// default (`false`) Linux recovers callers through code built without
    /// frame pointers (the C library, distribution libraries) from its
    /// `.eh_frame`; this turns that off, for comparison. macOS always
    /// walks frame pointers only.
    pub frame_pointers_only: bool,
    /// Linux, cpu mode: the clock that paces samples, instead of the one
    /// the backend chooses (perf timers where perf events are allowed,
    /// else the sampler thread). `None` chooses, unless [`CLOCK_ENV`]
    /// forces one. A forced kernel clock the kernel refuses fails the
    /// start rather than run on another. Wall mode always runs on the
    /// sampler thread and rejects a kernel clock; no effect on macOS.
    pub clock: Option<SampleClock>,
    /// Count stacks of threads that share a name under one thread, the
    /// first of that name ([`ThreadInfo`]), so that a pool which replaces
    /// its threads (a new thread id per task) does not fill the table with
    /// one copy of the same stacks per thread id. Folded output, which
    /// roots stacks at thread names, merges such threads anyway. A name the
    /// OS may have cut short (Linux keeps 15 bytes) keeps its threads
    /// apart. Per-thread CPU time ([`ThreadCpu`]) stays per thread. Off by
    /// default here; `btprof`'s recorder turns it on.
    pub share_stacks_by_name: bool,
    /// macOS: sample an x86_64 build running under Rosetta 2 anyway. By
    /// default such a process gets [`Error::Rosetta`]: asking for the
    /// registers of a translated thread can block while another
    /// translated thread is suspended inside the translator, hanging the
    /// sampler and the thread it holds. The environment variable
    /// [`ALLOW_ROSETTA_ENV`] set to `1` does the same. No effect elsewhere.
    pub allow_rosetta: bool,
}

/// Set to `1`, lets btprof sample a process translated by Rosetta 2 (see
/// [`SamplerConfig::allow_rosetta`]).
pub const ALLOW_ROSETTA_ENV: &str = "BTPROF_ALLOW_ROSETTA";

/// Distinct stacks a window keeps by default: far more than a real
/// program's hot stacks, and a memory ceiling of about 18 MB
/// ([`Limit::max_bytes`]).
pub const DEFAULT_MAX_STACKS: usize = 32_768;

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            hz: 1000,
            mode: Mode::Cpu,
            max_depth: 256,
            signal: None,
            limit: Limit::stacks(DEFAULT_MAX_STACKS),
            frame_pointers_only: false,
            clock: None,
            share_stacks_by_name: false,
            allow_rosetta: false,
        }
    }
}

/// Highest rate accepted: above it the sampler itself would dominate.
pub const MAX_HZ: u32 = 20_000;

impl SamplerConfig {
    /// Checks the values a user can get wrong.
    pub fn validate(&self) -> Result<(), Error> {
        if self.hz == 0 || self.hz > MAX_HZ {
            return Err(Error::InvalidConfig(format!(
                "rate {} Hz is outside 1..={MAX_HZ}",
                self.hz
            )));
        }
        if self.limit.stacks == 0 || self.limit.frames < self.max_depth {
            return Err(Error::InvalidConfig(format!(
                "a stack table limit of {} stacks and {} frames cannot hold one {}-frame stack",
                self.limit.stacks, self.limit.frames, self.max_depth
            )));
        }
        if self.max_depth < 2 {
            return Err(Error::InvalidConfig(format!(
                "max depth {} keeps no caller; use at least 2",
                self.max_depth
            )));
        }
        Ok(())
    }
}

/// A thread as it appeared in samples. A thread that renamed itself
/// appears once per name; with [`SamplerConfig::share_stacks_by_name`],
/// one entry stands for every thread of its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadInfo {
    /// The OS thread id.
    pub tid: u64,
    /// The thread's name when sampled.
    pub name: String,
}

/// CPU time one thread used while it was sampled, from its own CPU clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThreadCpu {
    /// The OS thread id, as in [`ThreadInfo::tid`].
    pub tid: u64,
    /// CPU time the thread used between sampling's start (or the window's)
    /// and its stop, as far as the sampler saw it (read every few
    /// milliseconds; a thread's last moments before it exits may be
    /// missed).
    pub cpu: Duration,
    /// Samples due for this thread that were not taken because it blocks
    /// the profiling signal (its `SigBlk` mask).
    pub signal_blocked: u64,
}

/// Counters describing how a profile was taken. Nothing is dropped
/// silently: every interrupted, skipped or failed sample is counted here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerStats {
    /// The rate asked for.
    pub requested_hz: u32,
    /// The mode used.
    pub mode: Mode,
    /// What paced the samples.
    pub clock: SampleClock,
    /// When sampling started.
    pub start_time: SystemTime,
    /// Wall time from start to stop, measured (not derived from the rate).
    pub duration: Duration,
    /// Ticks of the sampler thread that ran: with [`SampleClock::ThreadTimers`]
    /// the sampler thread only wakes to collect, and this counts those
    /// wake-ups. On the Linux fallback in [`Mode::Cpu`] it wakes when
    /// threads fall due and at random moments, not on a fixed period: with
    /// two busy threads at 1000 Hz, about 1,500-2,500 wakeups a second.
    pub ticks: u64,
    /// Deadlines skipped because the sampler woke too late (on the Linux
    /// fallback in [`Mode::Cpu`], whole periods overslept).
    pub missed_ticks: u64,
    /// Stacks recorded, each counted by the periods it stands for: in cpu
    /// mode, samples per CPU-second are this over the threads' CPU time.
    pub samples: u64,
    /// Stacks recorded, each counted once. Fewer than [`Self::samples`]
    /// where one stack stands for several periods (the sampler-thread path
    /// on a busy machine pays CPU time it could not sample with later
    /// samples): the number of independent observations, which is what a
    /// share's statistical error depends on.
    pub recorded: u64,
    /// Recorded stacks by why their walk ended, indexed by `WalkEnd as usize`.
    pub walk_ends: [u64; WalkEnd::ALL.len()],
    /// Samples that were due but never taken: the signal could not be sent
    /// or the thread did not take it in time.
    pub failed_samples: u64,
    /// Samples not attempted on a tick because the thread's previous one
    /// was still in flight or all slots were busy; on the sampler-thread
    /// path in cpu mode also periods of CPU time beyond the most a thread
    /// may be owed (it kept missing its samples for a long time).
    pub skipped_samples: u64,
    /// Samples not taken because every slot was in flight (more threads
    /// due at once than slots; the next tick starts where this one
    /// stopped, so every thread gets its turn).
    pub slots_full: u64,
    /// Samples not taken because the thread blocks the profiling signal
    /// (found in its `SigBlk` mask): it is not signalled (a blocked signal
    /// would stay queued), and each period it used is counted here. Per
    /// thread in [`ThreadCpu::signal_blocked`].
    pub signal_blocked_samples: u64,
    /// Wall mode: samples of a thread whose CPU clock had not moved since
    /// its previous sample, counted again with that stack without
    /// interrupting it (it has not run, so that is still its stack; a
    /// signal would make its blocking call fail with `EINTR`).
    pub reused_samples: u64,
    /// Sampler-thread path: signals a thread took too late (it was waiting
    /// for a CPU, so the sample would have landed where it was preempted,
    /// not where its CPU time went) or on its way out of a system call
    /// (where threads are preempted far more often than their CPU time
    /// says). Nothing was recorded; the thread was sampled again on a later
    /// tick, for the same CPU time.
    pub late_samples: u64,
    /// Linux, per-thread timers: samples of threads born while sampling,
    /// taken by the events they inherited at birth before they had a timer
    /// of their own (and the periods their last moments stood for); see
    /// `born_threads` in the Linux backend. Included in
    /// [`Self::samples`].
    pub born_samples: u64,
    /// Linux sampler-thread path, cpu mode: samples for the CPU time
    /// threads used after their last sample, counted on that last stack
    /// when they exited (see `exit_tails`; a thread that lives 2 ms would
    /// otherwise lose a quarter to a half of its time). Included in
    /// [`Self::samples`].
    pub exit_samples: u64,
    /// Samples not taken because the thread had exited after it was
    /// listed (the list is re-read every few milliseconds).
    pub exited_threads: u64,
    /// Distinct (thread, name) pairs seen, whether or not their stacks
    /// were shared by name.
    pub threads_seen: u64,
    /// CPU time the sampler thread itself used.
    pub sampler_cpu: Duration,
    /// CPU time the whole process used while sampled, from its own CPU
    /// clock: every thread's, exited ones and btprof's own included. Zero
    /// where unknown (stats read back from a file). Against
    /// [`Self::sampled_cpu`] it tells how much CPU time no sample could
    /// stand for ([`Self::unsampled_cpu`]).
    pub process_cpu: Duration,
    /// Profiling signals that arrived with nothing to fill (late ones).
    pub stray_signals: u64,
    /// Callers (frames past the leaf) recovered from call frame
    /// information (`.eh_frame`) where following the frame pointer would
    /// have lost or skipped them: a large share means the profiled code
    /// lacks frame pointers.
    pub cfi_frames: u64,
    /// Callers found by following frame pointers (or where CFI agreed with
    /// the frame pointer).
    pub frame_pointer_frames: u64,
    /// CPU time each sampled thread used, by thread id (sorted).
    pub thread_cpu: Vec<ThreadCpu>,
}

impl SamplerStats {
    /// Zeroed counters for `config`.
    pub fn new(config: &SamplerConfig) -> Self {
        SamplerStats {
            requested_hz: config.hz,
            mode: config.mode,
            clock: SampleClock::SamplerThread,
            start_time: SystemTime::now(),
            duration: Duration::ZERO,
            ticks: 0,
            missed_ticks: 0,
            samples: 0,
            recorded: 0,
            walk_ends: [0; WalkEnd::ALL.len()],
            failed_samples: 0,
            skipped_samples: 0,
            slots_full: 0,
            signal_blocked_samples: 0,
            reused_samples: 0,
            late_samples: 0,
            born_samples: 0,
            exit_samples: 0,
            exited_threads: 0,
            threads_seen: 0,
            sampler_cpu: Duration::ZERO,
            process_cpu: Duration::ZERO,
            stray_signals: 0,
            cfi_frames: 0,
            frame_pointer_frames: 0,
            thread_cpu: Vec::new(),
        }
    }

    /// The achieved rate in the unit [`SamplerConfig::hz`] asks for, so the
    /// two compare: in [`Mode::Cpu`], samples per CPU-second of the sampled
    /// threads ([`Self::samples_per_cpu_second`]); in [`Mode::Wall`], ticks
    /// per wall-clock second ([`Self::ticks_per_second`]). Both come from
    /// clocks (the threads' CPU clocks, the monotonic clock), never from
    /// the requested rate.
    pub fn achieved_hz(&self) -> f64 {
        match self.mode {
            Mode::Cpu => self.samples_per_cpu_second(),
            Mode::Wall => self.ticks_per_second(),
        }
    }

    /// Sampler-thread ticks per wall-clock second. With
    /// [`SampleClock::ThreadTimers`] the sampler thread does not pace
    /// samples and this is its collection rate; on the Linux fallback in
    /// [`Mode::Cpu`] it counts wakeups at due points and random ones (see
    /// [`Self::ticks`]), so it is not the sample rate either.
    pub fn ticks_per_second(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.ticks as f64 / secs
        } else {
            0.0
        }
    }

    /// CPU time the sampled threads used, all together.
    pub fn sampled_cpu(&self) -> Duration {
        self.thread_cpu.iter().map(|t| t.cpu).sum()
    }

    /// CPU time of the process that no sampled thread accounts for: threads
    /// that lived and exited between two listings of the threads (a few
    /// milliseconds apart) or ran before their first listing, a thread's
    /// last moments before it exited, and btprof's own threads other than
    /// the sampler (a dump thread). An estimate of what the profile
    /// missed; zero where the process's CPU time is unknown.
    pub fn unsampled_cpu(&self) -> Duration {
        self.process_cpu
            .saturating_sub(self.sampled_cpu())
            .saturating_sub(self.sampler_cpu)
    }

    /// Samples per CPU-second of the sampled threads, all together: in
    /// [`Mode::Cpu`] this should equal the requested rate on a busy machine
    /// as on an idle one. Zero when no CPU time was seen.
    pub fn samples_per_cpu_second(&self) -> f64 {
        self.per_cpu_second(self.samples)
    }

    /// Distinct samples (signals or ring records, each counted once) per
    /// CPU-second of the sampled threads: below
    /// [`Self::samples_per_cpu_second`] where one sample stands for several
    /// periods (POSIX timers on a kernel whose tick is slower than the
    /// rate). What a share's statistical error depends on.
    pub fn distinct_per_cpu_second(&self) -> f64 {
        self.per_cpu_second(self.recorded)
    }

    /// `n` per CPU-second of the sampled threads; zero when no CPU time
    /// was seen.
    fn per_cpu_second(&self, n: u64) -> f64 {
        let secs = self.sampled_cpu().as_secs_f64();
        if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    }

    /// CPU time thread `tid` used while sampled, if it was seen.
    pub fn cpu_of(&self, tid: u64) -> Option<Duration> {
        self.thread_cpu
            .binary_search_by_key(&tid, |t| t.tid)
            .ok()
            .map(|i| self.thread_cpu[i].cpu)
    }

    /// Records that thread `tid` used `cpu` more CPU time.
    pub fn add_thread_cpu(&mut self, tid: u64, cpu: Duration) {
        self.thread_entry(tid).cpu += cpu;
    }

    /// Records `samples` lost because thread `tid` blocks the profiling
    /// signal (also counted in [`Self::signal_blocked_samples`]).
    pub fn add_signal_blocked(&mut self, tid: u64, samples: u64) {
        if samples > 0 {
            self.thread_entry(tid).signal_blocked += samples;
        }
    }

    fn thread_entry(&mut self, tid: u64) -> &mut ThreadCpu {
        let i = match self.thread_cpu.binary_search_by_key(&tid, |t| t.tid) {
            Ok(i) => i,
            Err(i) => {
                self.thread_cpu.insert(
                    i,
                    ThreadCpu {
                        tid,
                        cpu: Duration::ZERO,
                        signal_blocked: 0,
                    },
                );
                i
            }
        };
        &mut self.thread_cpu[i]
    }

    /// The counters accumulated since `earlier`, a copy of these stats
    /// taken before: what one window of a longer run saw. `start_time`,
    /// `duration` and `threads_seen` are the caller's to set.
    pub fn since(&self, earlier: &SamplerStats) -> SamplerStats {
        let mut walk_ends = self.walk_ends;
        for (now, then) in walk_ends.iter_mut().zip(earlier.walk_ends) {
            *now = now.saturating_sub(then);
        }
        let thread_cpu = self
            .thread_cpu
            .iter()
            .map(|t| {
                let before = earlier
                    .thread_cpu
                    .binary_search_by_key(&t.tid, |e| e.tid)
                    .ok()
                    .map(|i| earlier.thread_cpu[i]);
                ThreadCpu {
                    tid: t.tid,
                    cpu: t
                        .cpu
                        .saturating_sub(before.map_or(Duration::ZERO, |b| b.cpu)),
                    signal_blocked: t
                        .signal_blocked
                        .saturating_sub(before.map_or(0, |b| b.signal_blocked)),
                }
            })
            .collect();
        SamplerStats {
            requested_hz: self.requested_hz,
            mode: self.mode,
            clock: self.clock,
            start_time: self.start_time,
            duration: self.duration.saturating_sub(earlier.duration),
            ticks: self.ticks.saturating_sub(earlier.ticks),
            missed_ticks: self.missed_ticks.saturating_sub(earlier.missed_ticks),
            samples: self.samples.saturating_sub(earlier.samples),
            recorded: self.recorded.saturating_sub(earlier.recorded),
            walk_ends,
            failed_samples: self.failed_samples.saturating_sub(earlier.failed_samples),
            skipped_samples: self.skipped_samples.saturating_sub(earlier.skipped_samples),
            slots_full: self.slots_full.saturating_sub(earlier.slots_full),
            signal_blocked_samples: self
                .signal_blocked_samples
                .saturating_sub(earlier.signal_blocked_samples),
            reused_samples: self.reused_samples.saturating_sub(earlier.reused_samples),
            late_samples: self.late_samples.saturating_sub(earlier.late_samples),
            born_samples: self.born_samples.saturating_sub(earlier.born_samples),
            exit_samples: self.exit_samples.saturating_sub(earlier.exit_samples),
            exited_threads: self.exited_threads.saturating_sub(earlier.exited_threads),
            threads_seen: self.threads_seen,
            sampler_cpu: self.sampler_cpu.saturating_sub(earlier.sampler_cpu),
            process_cpu: self.process_cpu.saturating_sub(earlier.process_cpu),
            stray_signals: self.stray_signals.saturating_sub(earlier.stray_signals),
            cfi_frames: self.cfi_frames.saturating_sub(earlier.cfi_frames),
            frame_pointer_frames: self
                .frame_pointer_frames
                .saturating_sub(earlier.frame_pointer_frames),
            thread_cpu,
        }
    }

    /// Adds the counters of `later`, the next window of the same run, so
    /// these stats cover both. The start time stays the earlier one.
    pub fn absorb(&mut self, later: &SamplerStats) {
        self.duration += later.duration;
        self.ticks += later.ticks;
        self.missed_ticks += later.missed_ticks;
        self.samples += later.samples;
        self.recorded += later.recorded;
        for (sum, add) in self.walk_ends.iter_mut().zip(later.walk_ends) {
            *sum += add;
        }
        self.failed_samples += later.failed_samples;
        self.skipped_samples += later.skipped_samples;
        self.slots_full += later.slots_full;
        self.signal_blocked_samples += later.signal_blocked_samples;
        self.reused_samples += later.reused_samples;
        self.late_samples += later.late_samples;
        self.born_samples += later.born_samples;
        self.exit_samples += later.exit_samples;
        self.exited_threads += later.exited_threads;
        self.threads_seen = self.threads_seen.max(later.threads_seen);
        self.sampler_cpu += later.sampler_cpu;
        self.process_cpu += later.process_cpu;
        self.stray_signals += later.stray_signals;
        self.cfi_frames += later.cfi_frames;
        self.frame_pointer_frames += later.frame_pointer_frames;
        for t in &later.thread_cpu {
            self.add_thread_cpu(t.tid, t.cpu);
            self.add_signal_blocked(t.tid, t.signal_blocked);
        }
    }

    /// Recorded stacks whose raw walk did not reach the end of the frame
    /// chain. Raw: whether a walk reached its thread's entry needs symbols
    /// (the main thread's chain always breaks in the C start code after
    /// `main`, and a zero frame pointer may sit halfway up the stack), so
    /// the profile the root crate builds decides that per stack.
    pub fn truncated(&self) -> u64 {
        WalkEnd::ALL
            .iter()
            .filter(|e| e.is_truncated())
            .map(|&e| self.walk_ends[e as usize])
            .sum()
    }
}

/// Live counters of a running sampler, updated every tick.
#[derive(Debug, Default)]
pub struct Progress {
    /// Ticks so far.
    pub ticks: AtomicU64,
    /// Stacks recorded so far.
    pub samples: AtomicU64,
    /// Threads known on the last tick.
    pub threads: AtomicU64,
    /// CPU time the sampled threads used so far, in nanoseconds (read every
    /// few milliseconds): samples / this is the rate per CPU-second.
    pub sampled_cpu_ns: AtomicU64,
    /// Stacks recorded so far, each counted once (`samples` counts the
    /// periods they stand for).
    pub recorded: AtomicU64,
    /// Which clock paces the samples ([`Progress::clock`]); set before the
    /// first sample.
    pub clock: AtomicU8,
}

impl Progress {
    /// The clock that paces the samples.
    pub fn clock(&self) -> SampleClock {
        // 0: not set yet (the Mach sampler never sets it).
        let i = usize::from(self.clock.load(Ordering::Relaxed));
        i.checked_sub(1)
            .and_then(|i| SampleClock::ALL.get(i).copied())
            .unwrap_or(SampleClock::SamplerThread)
    }

    /// Records the clock that paces the samples.
    pub fn set_clock(&self, clock: SampleClock) {
        let i = SampleClock::ALL
            .iter()
            .position(|&c| c == clock)
            .unwrap_or(2);
        self.clock.store(i as u8 + 1, Ordering::Relaxed);
    }
}

/// A stopped sampler's result: stacks of raw addresses.
#[derive(Clone, Debug)]
pub struct RawProfile {
    /// Distinct stacks and their counts.
    pub table: StackTable,
    /// Threads referenced by `StackKey::thread`.
    pub threads: Vec<ThreadInfo>,
    /// How the profile was taken.
    pub stats: SamplerStats,
    /// The architecture of the addresses (for the aarch64 link-register
    /// rule).
    pub arch: Arch,
}

impl RawProfile {
    /// Adds `later`, the next window of the same run: its stacks (under
    /// this table's limit) and counters. Thread indices stay valid because
    /// a sampler's thread list only grows; the later, longer list is kept.
    pub fn absorb(&mut self, later: &RawProfile) {
        self.table.merge(&later.table);
        self.stats.absorb(&later.stats);
        if later.threads.len() > self.threads.len() {
            self.threads.clone_from(&later.threads);
        }
    }
}

/// Why sampling could not start or finish.
#[derive(Debug)]
pub enum Error {
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// Another sampler is running in this process.
    AlreadyRunning,
    /// `stop` was called twice.
    AlreadyStopped,
    /// `stop` was called in a process forked from the one that started
    /// the sampler: the sampler thread runs in the parent only. The child
    /// can start a sampler of its own.
    ForkedChild,
    /// The profiling signal already has a handler that is not ours.
    SignalInUse(i32),
    /// The sampler thread panicked (a bug; its samples are lost).
    SamplerPanicked,
    /// The sampler thread did not answer a request for the stacks so far
    /// in time.
    Timeout,
    /// This platform has no sampler backend.
    Unsupported,
    /// macOS: the process is an x86_64 build translated by Rosetta 2,
    /// where suspending threads can hang the process, and the user did not
    /// opt in ([`SamplerConfig::allow_rosetta`], [`ALLOW_ROSETTA_ENV`]).
    Rosetta,
    /// A dump of another process: no process has this pid.
    NoSuchProcess(u32),
    /// A dump of another process: the kernel refused to let this process
    /// trace `pid`; `ptrace_scope` is `kernel.yama.ptrace_scope`, where
    /// Yama is on ([`crate::one_shot::trace_refused_message`]).
    TraceRefused {
        /// The process asked for.
        pid: u32,
        /// `/proc/sys/kernel/yama/ptrace_scope`, where it exists.
        ptrace_scope: Option<u32>,
    },
    /// A dump of another process asked for this one, which cannot trace
    /// itself.
    OwnProcess(u32),
    /// An operating-system call failed.
    Io(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(msg) => write!(f, "invalid profiler configuration: {msg}"),
            Error::AlreadyRunning => f.write_str(
                "a btprof profiler is already running in this process; stop it before starting another",
            ),
            Error::AlreadyStopped => f.write_str("the profiler was already stopped"),
            Error::ForkedChild => f.write_str(
                "this profiler was started before fork() by the parent process, where it still runs; \
                 a forked child cannot stop it (start a new profiler in the child instead)",
            ),
            Error::SignalInUse(sig) => write!(
                f,
                "signal {sig} already has a handler installed by someone else; choose another profiling signal"
            ),
            Error::SamplerPanicked => f.write_str("the sampler thread panicked"),
            Error::Timeout => f.write_str("the sampler thread did not hand over its stacks in time"),
            Error::Unsupported => f.write_str("sampling is not supported on this platform"),
            Error::Rosetta => write!(
                f,
                "this x86_64 build runs under Rosetta 2, where suspending threads to sample them \
                 can hang the process (reading a translated thread's registers may wait for a \
                 thread stopped inside the translator); run the native arm64 build instead \
                 (cargo build --target aarch64-apple-darwin), or set {ALLOW_ROSETTA_ENV}=1 to \
                 sample anyway at that risk"
            ),
            Error::NoSuchProcess(pid) => write!(f, "no process with pid {pid}"),
            Error::TraceRefused { pid, ptrace_scope } => f.write_str(
                &crate::one_shot::trace_refused_message(*pid, *ptrace_scope),
            ),
            Error::OwnProcess(pid) => write!(
                f,
                "pid {pid} is this process, which cannot trace itself; take an in-process dump instead"
            ),
            Error::Io(e) => write!(f, "system call failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// The calling process's CPU clock (`CLOCK_PROCESS_CPUTIME_ID`): the CPU
/// time of all its threads, those that exited included. What the samplers
/// record as [`SamplerStats::process_cpu`], from their start.
#[cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]
pub(crate) fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
