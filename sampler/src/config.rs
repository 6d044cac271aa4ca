//! How to sample: the mode, the clock, the rate and the limits, shared by
//! platforms.

use std::fmt;

use crate::error::Error;
pub use crate::error::ALLOW_ROSETTA_ENV;
use crate::stack_table::Limit;

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
    /// Perf task-clock events paced each thread by its own CPU time, so
    /// each sample landed while its thread ran, at the instruction where
    /// the CPU time was spent: the kernel wrote each thread's samples into
    /// ring buffers, with no signal, and a thread the rings could not take
    /// had an event of its own whose overflow signalled it
    /// ([`SamplerStats::ring_threads`](crate::SamplerStats::ring_threads),
    /// [`SamplerStats::timer_threads`](crate::SamplerStats::timer_threads)).
    /// The sampler thread only collected.
    Perf,
    /// A sampler thread ticked on absolute wall-clock deadlines and, in
    /// [`Mode::Cpu`], sampled a thread whenever the CPU time it used since
    /// its last sample reached one period (macOS; Linux in wall mode or
    /// when perf events are refused).
    #[default]
    SamplerThread,
}

impl SampleClock {
    /// Every clock.
    pub const ALL: [SampleClock; 2] = [SampleClock::Perf, SampleClock::SamplerThread];

    /// `"perf"` or `"sampler-thread"`, as in the JSON sidecar.
    pub const fn as_str(self) -> &'static str {
        match self {
            SampleClock::Perf => "perf",
            SampleClock::SamplerThread => "sampler-thread",
        }
    }

    /// The short name users force the clock with (`--clock`,
    /// [`CLOCK_ENV`]): `"perf"` or `"thread"`.
    pub const fn short_name(self) -> &'static str {
        match self {
            SampleClock::Perf => "perf",
            SampleClock::SamplerThread => "thread",
        }
    }

    /// The clock a short name ([`Self::short_name`]) or a sidecar name
    /// ([`Self::as_str`]) stands for. `"thread-timers"`, the perf clock's
    /// sidecar name in older runs, still reads as [`SampleClock::Perf`].
    pub fn from_name(name: &str) -> Option<SampleClock> {
        if name == "thread-timers" {
            return Some(SampleClock::Perf);
        }
        SampleClock::ALL
            .into_iter()
            .find(|c| c.short_name() == name || c.as_str() == name)
    }

    /// Why `name` forces no clock, for an error message that names the
    /// clocks there are.
    pub fn unknown_name(name: &str) -> String {
        let retired = if name == "posix" || name == "posix-timers" {
            "the POSIX timer clock was retired (its samples came on the kernel's \
             scheduler tick, not at the rate asked for): "
        } else {
            ""
        };
        format!("{name:?} names no clock: {retired}use perf or thread")
    }

    /// A short human description, for status lines.
    pub const fn describe(self) -> &'static str {
        match self {
            SampleClock::Perf => "perf events: kernel ring records per thread",
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
/// (any value but empty or `0`), as `BTPROF_CLOCK=thread` does. Kept so
/// existing scripts keep working; prefer [`CLOCK_ENV`].
pub const FORCE_SAMPLER_THREAD_ENV: &str = "BTPROF_FORCE_SAMPLER_THREAD";

/// The environment variable that forces a cpu-mode clock on Linux, as
/// [`SamplerConfig::clock`] does (which wins when both are set): `perf`
/// or `thread` ([`SampleClock::short_name`]). For tests and
/// comparisons of the clocks; its grandchildren inherit it.
pub const CLOCK_ENV: &str = "BTPROF_CLOCK";

/// The clock the environment forces ([`CLOCK_ENV`], then
/// [`FORCE_SAMPLER_THREAD_ENV`]), if any; an unknown name is an error.
pub fn clock_from_env() -> Result<Option<SampleClock>, Error> {
    if let Some(name) = std::env::var_os(CLOCK_ENV).filter(|v| !v.is_empty()) {
        let name = name.to_string_lossy();
        return SampleClock::from_name(&name).map(Some).ok_or_else(|| {
            Error::InvalidConfig(format!("{CLOCK_ENV}: {}", SampleClock::unknown_name(&name)))
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
    /// first of that name ([`ThreadInfo`](crate::ThreadInfo)), so that a pool which replaces
    /// its threads (a new thread id per task) does not fill the table with
    /// one copy of the same stacks per thread id. Folded output, which
    /// roots stacks at thread names, merges such threads anyway. A name the
    /// OS may have cut short (Linux keeps 15 bytes) keeps its threads
    /// apart. Per-thread CPU time ([`crate::ThreadCpu`]) stays per thread. Off by
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
