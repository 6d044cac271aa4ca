//! The sampler's configuration and result, shared by platforms; the
//! counters that come with a result are in [`crate::stats`].

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::stack_table::{Limit, StackTable};
use crate::stats::SamplerStats;
use crate::walker::Arch;

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
    /// first of that name ([`ThreadInfo`]), so that a pool which replaces
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

/// Live counters of a running sampler, updated every tick.
#[derive(Debug, Default)]
pub struct Progress {
    /// Ticks so far.
    pub ticks: AtomicU64,
    /// Stacks recorded so far.
    pub samples: AtomicU64,
    /// Threads known on the last tick.
    pub threads: AtomicU64,
    /// Listings of the threads so far: after the first, every thread
    /// that existed at start is being sampled (Linux).
    pub listings: AtomicU64,
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
