//! The sampler's configuration, counters and result, shared by platforms.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use crate::stack_table::StackTable;
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
    /// The Linux profiling signal (a real-time signal); `None` picks
    /// `default_signal()`. macOS sends no signal and rejects `Some`.
    pub signal: Option<i32>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            hz: 1000,
            mode: Mode::Cpu,
            max_depth: 256,
            signal: None,
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

    /// Recorded stacks whose walk did not reach the end of the chain.
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

/// Why sampling could not start or finish.
#[derive(Debug)]
pub enum Error {
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// Another sampler is running in this process.
    AlreadyRunning,
    /// `stop` was called twice.
    AlreadyStopped,
    /// The profiling signal already has a handler that is not ours.
    SignalInUse(i32),
    /// The sampler thread panicked (a bug; its samples are lost).
    SamplerPanicked,
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
            Error::SignalInUse(sig) => write!(
                f,
                "signal {sig} already has a handler installed by someone else; choose another real-time signal"
            ),
            Error::SamplerPanicked => f.write_str("the sampler thread panicked"),
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
