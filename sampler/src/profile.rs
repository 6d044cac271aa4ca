//! The sampler's configuration, counters and result, shared by platforms.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use crate::stack_table::{Limit, StackTable};
use crate::walker::{Arch, WalkEnd};

/// Which threads a tick interrupts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Only threads whose CPU clock advanced since the previous tick: a
    /// CPU profile, and idle threads are never disturbed.
    #[default]
    Cpu,
    /// Every thread, running or blocked: where wall-clock time goes.
    Wall,
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
    /// Ticks per second.
    pub hz: u32,
    /// Which threads each tick interrupts.
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
}

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
/// appears once per name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadInfo {
    /// The OS thread id.
    pub tid: u64,
    /// The thread's name when sampled.
    pub name: String,
}

/// Counters describing how a profile was taken. Nothing is dropped
/// silently: every interrupted, skipped or failed sample is counted here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerStats {
    /// The rate asked for.
    pub requested_hz: u32,
    /// The mode used.
    pub mode: Mode,
    /// When sampling started.
    pub start_time: SystemTime,
    /// Wall time from start to stop, measured (not derived from the rate).
    pub duration: Duration,
    /// Ticks that ran.
    pub ticks: u64,
    /// Deadlines skipped because the sampler woke too late.
    pub missed_ticks: u64,
    /// Stacks recorded.
    pub samples: u64,
    /// Recorded stacks by why their walk ended, indexed by `WalkEnd as usize`.
    pub walk_ends: [u64; 7],
    /// Samples that were due but never taken: the signal could not be sent
    /// or the thread did not take it in time.
    pub failed_samples: u64,
    /// Samples not attempted on a tick because the thread's previous one
    /// was still in flight or all slots were busy.
    pub skipped_samples: u64,
    /// Samples not taken because the thread had exited after it was
    /// listed (the list is re-read every few milliseconds).
    pub exited_threads: u64,
    /// Distinct (thread, name) pairs seen.
    pub threads_seen: u64,
    /// CPU time the sampler thread itself used.
    pub sampler_cpu: Duration,
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
}

impl SamplerStats {
    /// Zeroed counters for `config`.
    pub fn new(config: &SamplerConfig) -> Self {
        SamplerStats {
            requested_hz: config.hz,
            mode: config.mode,
            start_time: SystemTime::now(),
            duration: Duration::ZERO,
            ticks: 0,
            missed_ticks: 0,
            samples: 0,
            walk_ends: [0; 7],
            failed_samples: 0,
            skipped_samples: 0,
            exited_threads: 0,
            threads_seen: 0,
            sampler_cpu: Duration::ZERO,
            stray_signals: 0,
            cfi_frames: 0,
            frame_pointer_frames: 0,
        }
    }

    /// Ticks per second actually achieved, from timestamps.
    pub fn achieved_hz(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.ticks as f64 / secs
        } else {
            0.0
        }
    }

    /// The counters accumulated since `earlier`, a copy of these stats
    /// taken before: what one window of a longer run saw. `start_time`,
    /// `duration` and `threads_seen` are the caller's to set.
    pub fn since(&self, earlier: &SamplerStats) -> SamplerStats {
        let mut walk_ends = self.walk_ends;
        for (now, then) in walk_ends.iter_mut().zip(earlier.walk_ends) {
            *now = now.saturating_sub(then);
        }
        SamplerStats {
            requested_hz: self.requested_hz,
            mode: self.mode,
            start_time: self.start_time,
            duration: self.duration.saturating_sub(earlier.duration),
            ticks: self.ticks.saturating_sub(earlier.ticks),
            missed_ticks: self.missed_ticks.saturating_sub(earlier.missed_ticks),
            samples: self.samples.saturating_sub(earlier.samples),
            walk_ends,
            failed_samples: self.failed_samples.saturating_sub(earlier.failed_samples),
            skipped_samples: self.skipped_samples.saturating_sub(earlier.skipped_samples),
            exited_threads: self.exited_threads.saturating_sub(earlier.exited_threads),
            threads_seen: self.threads_seen,
            sampler_cpu: self.sampler_cpu.saturating_sub(earlier.sampler_cpu),
            stray_signals: self.stray_signals.saturating_sub(earlier.stray_signals),
            cfi_frames: self.cfi_frames.saturating_sub(earlier.cfi_frames),
            frame_pointer_frames: self
                .frame_pointer_frames
                .saturating_sub(earlier.frame_pointer_frames),
        }
    }

    /// Adds the counters of `later`, the next window of the same run, so
    /// these stats cover both. The start time stays the earlier one.
    pub fn absorb(&mut self, later: &SamplerStats) {
        self.duration += later.duration;
        self.ticks += later.ticks;
        self.missed_ticks += later.missed_ticks;
        self.samples += later.samples;
        for (sum, add) in self.walk_ends.iter_mut().zip(later.walk_ends) {
            *sum += add;
        }
        self.failed_samples += later.failed_samples;
        self.skipped_samples += later.skipped_samples;
        self.exited_threads += later.exited_threads;
        self.threads_seen = self.threads_seen.max(later.threads_seen);
        self.sampler_cpu += later.sampler_cpu;
        self.stray_signals += later.stray_signals;
        self.cfi_frames += later.cfi_frames;
        self.frame_pointer_frames += later.frame_pointer_frames;
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
