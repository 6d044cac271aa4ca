//! `btprof record [OPTIONS] -- CMD [ARGS...]`: profile any dynamically
//! linked program, and the processes it starts, by preloading btprof's
//! sampler into them (see `docs/record.md`).

// The Mach-O checks run on macOS only, and are tested everywhere.
#[cfg(any(target_os = "macos", test))]
mod dyld_rules;
mod launch;
mod library;
#[cfg(any(target_os = "macos", test))]
mod macho;
mod merge;
mod preflight;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use btprof::formats::process_record::env;
use btprof::{Profile, RunInfo, SampleClock};
use clap::{Args, ValueEnum};

use super::{fail, EXIT_BAD_INPUT};
use crate::clock_arg::parse_clock;
use crate::duration::parse_duration;
use crate::outputs::{OutputOptions, Outputs};
use crate::push_args::PushArgs;

/// Profile a program: btprof record -- CMD [ARGS...]
///
/// Runs CMD with btprof's sampler preloaded (LD_PRELOAD; on macOS
/// DYLD_INSERT_LIBRARIES), so any dynamically linked program is profiled
/// unchanged and unprivileged, and by default every process it starts
/// too. When CMD ends, the processes' profiles are merged, each under a
/// root frame `name (pid)`, and written as with --pid-self: an SVG
/// flamegraph, folded stacks with a JSON sidecar, and pprof on request.
///
/// btprof exits with CMD's exit status (128 + the signal when a signal
/// ended it). SIGINT and SIGTERM sent to btprof are passed on to CMD,
/// whose profile is written before it dies of them; Ctrl-C reaches CMD
/// from the terminal directly.
///
/// Statically linked and setuid programs cannot be preloaded into and are
/// refused before anything runs. A process killed by SIGKILL or a crash
/// writes no profile; the summary names it. See docs/record.md.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(after_help = "Examples:
  btprof record -- ./my-program --its-flag       writes btprof.svg and btprof.folded
  btprof record --hz 500 -o run.svg -- python3 script.py
  btprof record --no-follow -- make               only make's own process
  btprof record --duration 10s --pprof run.pb.gz -- ./server
  btprof record --push http://localhost:4040 --service-name api --label env=dev -- ./server")]
pub struct RecordArgs {
    /// Samples per second per thread (of its CPU time in cpu mode).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub hz: u32,

    /// Stop sampling after this long (5s, 500ms, 2m); CMD goes on
    /// [default: until CMD ends].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// cpu: sample threads that are running; wall: sample every thread.
    #[arg(long, value_enum, default_value_t = RecordMode::Cpu)]
    pub mode: RecordMode,

    /// Where to write the SVG flamegraph.
    #[arg(long, short, default_value = "btprof.svg")]
    pub output: PathBuf,

    /// Where to write folded stacks (`process (pid);thread;root;...;leaf
    /// count`); the run metadata goes beside it as JSON.
    #[arg(long, default_value = "btprof.folded")]
    pub folded: PathBuf,

    /// Also write the profile as pprof (gzipped profile.proto) here.
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Only CMD's own process (and what it execs), not the processes it
    /// starts.
    #[arg(long)]
    pub no_follow: bool,

    /// Root each process's stacks at its name only, without the pid, so
    /// processes of one program add up (e.g. a build's compiler runs).
    #[arg(long)]
    pub merge_processes: bool,

    /// Merge identical stacks of different threads (no thread-name frame).
    #[arg(long)]
    pub merge_threads: bool,

    /// Leave inlined functions out of the folded file and flamegraph.
    #[arg(long)]
    pub no_inline: bool,

    /// Most frames kept per stack; deeper stacks are marked truncated.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=512))]
    pub max_depth: u64,

    /// Most distinct stacks kept per process.
    #[arg(long, default_value_t = btprof::DEFAULT_MAX_STACKS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_stacks: u64,

    /// The Linux profiling signal, as a number, if CMD uses SIGURG itself
    /// (SIGWINCH, or a real-time signal).
    #[arg(long, value_name = "NUMBER")]
    pub signal: Option<i32>,

    /// The clock that paces cpu-mode samples in every process (Linux),
    /// instead of the one each chooses: perf (the kernel samples each
    /// thread by its own CPU time into ring buffers, the default where perf
    /// events are allowed) or thread (the sampler thread, by the CPU time
    /// threads used; the default where perf events are refused). A process
    /// whose kernel refuses it is not profiled, and says so. The summary
    /// says which clock ran. Same as BTPROF_CLOCK=perf|thread.
    #[arg(long, value_parser = parse_clock, value_name = "perf|thread")]
    pub clock: Option<SampleClock>,

    /// Same as --clock thread.
    #[arg(long, conflicts_with = "clock")]
    pub no_thread_timers: bool,

    /// Keep each process's own folded file and record (JSON) in this
    /// directory instead of a temporary one that is removed.
    #[arg(long, value_name = "DIR")]
    pub raw_dir: Option<PathBuf>,

    /// No summary lines.
    #[arg(long, short)]
    pub quiet: bool,

    /// Each process pushes its windows itself (a `pid` label tells them
    /// apart); problems are said on CMD's stderr.
    #[command(flatten)]
    pub push: PushArgs,

    /// The command to profile, and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RecordMode {
    Cpu,
    Wall,
}

/// The environment variable the sampler in each process reads its forced
/// clock from (`btprof_sampler::CLOCK_ENV`).
const CLOCK_ENV: &str = "BTPROF_CLOCK";

/// Runs CMD profiled and exits with its status.
pub fn run(args: &RecordArgs) -> ExitCode {
    match record(args) {
        Ok(code) => code,
        Err(message) => fail(message),
    }
}

fn record(args: &RecordArgs) -> Result<ExitCode, String> {
    let program = &args.command[0];
    if let (RecordMode::Wall, Some(clock)) = (args.mode, args.clock) {
        // Each process would ignore it: in wall mode the sampler thread
        // samples every thread.
        if clock.is_kernel_paced() {
            return Err(format!(
                "--clock {} is for cpu mode: wall mode samples every thread from the sampler \
                 thread",
                clock.short_name()
            ));
        }
    }
    // Checked here, once, rather than in every process it would fail in.
    if let Some(push) = args.push.push()? {
        push.validate()?;
    }
    let library = library::find()?;
    for note in preflight::check(program, &library, !args.no_follow)? {
        eprintln!("btprof: {note}");
    }
    // The outputs first: a typo in a path costs nothing.
    let outputs = Outputs::create(&args.folded, &args.output, args.pprof.as_deref())?;
    let raw = RawDir::create(args.raw_dir.as_deref())?;
    launch::forward_stop_signals()?;

    let mut command = Command::new(program);
    command.args(&args.command[1..]);
    configure(&mut command, args, &library, raw.path());
    let (pid, status) = launch::run(command)
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
    let name = Path::new(program)
        .file_name()
        .map_or_else(|| program.to_string_lossy(), |n| n.to_string_lossy())
        .into_owned();
    let died = status.signal();
    if let Some(signal) = launch::interrupted() {
        eprintln!(
            "btprof: got {} while {name} ran; writing what was collected",
            launch::signal_name(signal)
        );
    }
    if let Some(signal) = died {
        eprintln!(
            "btprof: {name} ({pid}) died of {}{}",
            launch::signal_name(signal),
            if status.core_dumped() {
                " (core dumped)"
            } else {
                ""
            }
        );
    }

    let gathered = merge::gather(raw.path());
    for problem in &gathered.unreadable {
        eprintln!("btprof: warning: {problem}");
    }
    say_perf_refused(&gathered, args);
    let info = merge::combined_run_info(&gathered.parts);
    let profile = merge::merge(&gathered.parts, args.merge_processes, args.merge_threads)?
        .with_run_info(info);
    if !args.quiet {
        print_summary(&gathered, &profile, args);
        print_missing(&gathered, pid, died);
    }
    if gathered.parts.is_empty() {
        let started = !gathered.missing.is_empty();
        let why = no_profile_why(cfg!(target_vendor = "apple"), died, started, args.duration);
        eprintln!("btprof: no process wrote a profile{why}");
    } else {
        // Threads and inlining were applied while merging (the threads)
        // and in each process (inlining): the files take the profile as
        // it is.
        let options = OutputOptions {
            quiet: args.quiet,
            ..OutputOptions::default()
        };
        outputs.write(&profile, &options)?;
    }
    Ok(exit_code(status))
}

/// What follows "no process wrote a profile". Where no process even
/// started the profiler and the command did not die, on macOS the likely
/// cause is dyld ignoring `DYLD_INSERT_LIBRARIES`, which it does without a
/// word (on Linux the preflight refuses the programs whose loader would).
fn no_profile_why(
    macos: bool,
    died: Option<i32>,
    started: bool,
    duration: Option<Duration>,
) -> String {
    if died.is_some() {
        return String::new();
    }
    if started || !macos {
        return " (see the lines above)".to_owned();
    }
    let late = if duration.is_some() {
        ", or it started after --duration had run out"
    } else {
        ""
    };
    format!(
        ": no process loaded btprof's library, unless a line above says otherwise{late}. \
         dyld ignores DYLD_INSERT_LIBRARIES in restricted programs: Apple's own (SIP), those \
         signed with the hardened runtime and without the \
         com.apple.security.cs.allow-dyld-environment-variables entitlement (see \
         `codesign -dv --entitlements - PROGRAM`) and setuid ones; and a program started \
         through /bin/sh (system(), popen, a #! script) drops it for all it starts. For a \
         script, name its interpreter: btprof record -- python3 script.py"
    )
}

/// The environment that injects the library and configures it.
fn configure(command: &mut Command, args: &RecordArgs, library: &Path, dir: &Path) {
    let preload_var = if cfg!(target_os = "macos") {
        "DYLD_INSERT_LIBRARIES"
    } else {
        "LD_PRELOAD"
    };
    let mut preload = library.as_os_str().to_owned();
    if let Some(existing) = std::env::var_os(preload_var).filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    command
        .env(preload_var, preload)
        .env(env::DIR, dir)
        .env(env::HZ, args.hz.to_string())
        .env(
            env::MODE,
            match args.mode {
                RecordMode::Cpu => "cpu",
                RecordMode::Wall => "wall",
            },
        )
        .env(env::MAX_DEPTH, args.max_depth.to_string())
        .env(env::MAX_STACKS, args.max_stacks.to_string())
        .env(env::NO_INLINE, if args.no_inline { "1" } else { "0" })
        .env_remove(env::SIGNAL)
        .env_remove(env::DEADLINE_MS)
        .env_remove(env::PARENT);
    if let Some(signal) = args.signal {
        command.env(env::SIGNAL, signal.to_string());
    }
    for (name, value) in args.push.env() {
        command.env(name, value);
    }
    match (args.clock, args.no_thread_timers) {
        (Some(clock), _) => {
            command.env(CLOCK_ENV, clock.short_name());
        }
        (None, true) => {
            command.env(CLOCK_ENV, SampleClock::SamplerThread.short_name());
        }
        // A BTPROF_CLOCK of the caller's own is passed on, as it would be
        // without btprof.
        (None, false) => {}
    }
    if let Some(duration) = args.duration {
        let deadline = SystemTime::now() + duration;
        let ms = deadline
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        command.env(env::DEADLINE_MS, ms.to_string());
    }
    if args.no_follow {
        command.env(env::PARENT, std::process::id().to_string());
    }
}

/// CMD's status as btprof's: its exit code, or 128 + the signal that
/// ended it, as shells report it.
fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::from(EXIT_BAD_INPUT),
    }
}

/// The status lines: processes, samples, rate, clock.
fn print_summary(gathered: &merge::Gathered, profile: &Profile, args: &RecordArgs) {
    let Some(info) = profile.run_info() else {
        return;
    };
    // A process whose `exec` failed, or that stopped sampling at the
    // deadline and wrote again, has written more than one profile: it is
    // still one process, named once (an image that `exec`ed another is a
    // name of its own under the same pid).
    let names = merge::process_names(&gathered.parts, NAMES_SHOWN);
    let mut pids: Vec<u32> = gathered.parts.iter().map(|p| p.record.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let rate = match args.mode {
        RecordMode::Cpu => format!(
            "{:.1} samples per CPU-second ({:.1} distinct; {:.3} CPU-s sampled; requested {} Hz)",
            info.samples_per_cpu_second,
            info.distinct_samples_per_cpu_second,
            info.sampled_cpu_secs,
            args.hz
        ),
        RecordMode::Wall => format!(
            "{:.1} ticks per second (requested {} Hz)",
            info.achieved_hz, args.hz
        ),
    };
    // `mixed` when the processes ran on different clocks.
    let mut clock = SampleClock::from_name(&info.clock)
        .map_or(info.clock.as_str(), |c| c.describe())
        .to_owned();
    if info.ring_threads + info.timer_threads > 0 {
        clock += &format!(
            " ({} threads on the rings, {} on timers of their own)",
            info.ring_threads, info.timer_threads
        );
    }
    println!(
        "profiled {} process{} ({}): {} samples, {rate}, {} mode, {clock}; truncated walks: {}, \
         failed samples: {}{}",
        pids.len(),
        if pids.len() == 1 { "" } else { "es" },
        names.join(", "),
        info.samples,
        info.mode,
        info.truncated_walks,
        info.failed_samples,
        losses(info),
    );
    if let Some((push, processes)) = merge::pushed(&gathered.parts) {
        println!(
            "pushed {} of {} windows ({} bytes) from {processes} process{}",
            push.pushed,
            push.windows,
            push.bytes_sent,
            if processes == 1 { "" } else { "es" },
        );
        if push.dropped + push.unsent > 0 {
            eprintln!(
                "btprof: warning: {} windows were not pushed: {} dropped, {} still queued at \
                 exit (each process said why on stderr)",
                push.dropped + push.unsent,
                push.dropped,
                push.unsent
            );
        }
    }
}

/// How many process names a status line shows before "and N more": a
/// build or a shell script runs hundreds of processes, and the profile
/// has a root frame for each.
const NAMES_SHOWN: usize = 8;

/// The status line's tail for samples that were due and have no stack,
/// each with its cause; empty when there were none.
fn losses(info: &RunInfo) -> String {
    let mut out = String::new();
    if info.signal_blocked_samples > 0 {
        out += &format!(
            ", lost to a blocked signal: {} (threads that block the profiling signal)",
            info.signal_blocked_samples
        );
    }
    if info.lost_samples > 0 {
        out += &format!(", lost to a full ring: {}", info.lost_samples);
    }
    if info.stackless_samples > 0 {
        out += &format!(
            ", of threads that exited before their first sample: {}",
            info.stackless_samples
        );
    }
    if info.lost_samples + info.stackless_samples > 0 {
        out += &format!(" ({:.3} CPU-s not covered)", info.lost_cpu_secs);
    }
    if info.unsampled_cpu_secs > UNSAMPLED_SAID_SHARE * info.process_cpu_secs {
        out += &format!(
            ", not covered by any sample: {:.3} of the processes' {:.3} CPU-s ({:.1}%: threads \
             that ran less than one period, threads that exited before a listing found them \
             where the kernel could not sample them from birth, threads' last moments, \
             btprof's own threads)",
            info.unsampled_cpu_secs,
            info.process_cpu_secs,
            100.0 * info.unsampled_cpu_secs / info.process_cpu_secs
        );
    }
    out
}

/// The share of the processes' CPU time with no sample above which the
/// status line says how much: below it, a program's start before its
/// first listing and btprof's own threads.
const UNSAMPLED_SAID_SHARE: f64 = 0.02;

/// One line, for the whole recording, when perf events were refused and
/// the sampler thread paced cpu-mode samples without being asked to
/// ([`merge::paced_without_perf`]).
fn say_perf_refused(gathered: &merge::Gathered, args: &RecordArgs) {
    let forced = args.clock.is_some()
        || args.no_thread_timers
        || matches!(btprof::clock_from_env(), Ok(Some(_)));
    if forced {
        return;
    }
    if let Some(which) = merge::paced_without_perf(&gathered.parts, NAMES_SHOWN) {
        eprintln!(
            "btprof: per-thread CPU timers (perf events) were refused here, so the sampler \
             thread paced {which} (see docs/record.md)"
        );
    }
}

/// One line per process that was profiled and wrote no profile.
fn print_missing(gathered: &merge::Gathered, child: u32, died: Option<i32>) {
    for m in &gathered.missing {
        let macos = cfg!(target_vendor = "apple");
        let why = missing_why(m, child, died, process_alive(m.pid), macos);
        eprintln!("btprof: no profile from {} ({}): {why}", m.name, m.pid);
    }
}

/// Why process `m` wrote no profile: `child` is the command's pid,
/// `died` the signal it died of, `alive` whether `m` still runs. On macOS
/// neither `exec` nor `_exit` is interposed, so a process ending either
/// way writes nothing, and the last reason names both.
fn missing_why(
    m: &merge::Missing,
    child: u32,
    died: Option<i32>,
    alive: bool,
    macos: bool,
) -> String {
    match died {
        Some(signal) if m.pid == child && !m.execed => {
            return format!("it died of {}", launch::signal_name(signal));
        }
        _ => {}
    }
    if m.exited_in_start_up {
        "it exited while btprof was still starting in it, before its first sample".to_owned()
    } else if m.execed {
        let lost = if macos {
            " (exec is not intercepted on macOS)"
        } else {
            " (through a call btprof does not intercept)"
        };
        format!(
            "it called exec before writing it{lost}, so its samples before the exec are lost; \
             the new program's are under the same pid"
        )
    } else if alive {
        "it is still running (started by CMD, not waited for)".to_owned()
    } else if macos {
        "it ended without exit: exec of a program btprof did not profile, _exit, SIGKILL or a \
         fatal signal"
            .to_owned()
    } else {
        "it ended without exit: _exit, SIGKILL or a fatal signal".to_owned()
    }
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

/// Where the processes write their own profiles: `--raw-dir`, or a
/// private temporary directory removed at the end.
struct RawDir {
    path: PathBuf,
    remove: bool,
}

impl RawDir {
    fn create(keep: Option<&Path>) -> Result<RawDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let (path, remove) = match keep {
            Some(dir) => (std::path::absolute(dir).unwrap_or(dir.to_path_buf()), false),
            None => {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let name = format!("btprof-record-{}-{nanos}", std::process::id());
                (std::env::temp_dir().join(name), true)
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(RawDir { path, remove })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RawDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_profile_names_an_early_exit_and_an_exec() {
        let m = |pid, early, execed| merge::Missing {
            pid,
            name: "p".into(),
            exited_in_start_up: early,
            execed,
        };
        let why = |m: &merge::Missing, died, alive, macos| missing_why(m, 7, died, alive, macos);
        assert_eq!(
            why(&m(7, false, false), Some(9), false, false),
            "it died of SIGKILL"
        );
        // The command's old image, replaced by one that then died.
        assert!(why(&m(7, false, true), Some(9), false, true).starts_with("it called exec"));
        for macos in [false, true] {
            let early = why(&m(8, true, false), None, false, macos);
            assert!(early.contains("while btprof was still starting"), "{early}");
            let execed = why(&m(8, false, true), None, false, macos);
            assert!(execed.contains("called exec"), "{execed}");
            assert_eq!(
                execed.contains("macOS"),
                macos,
                "{execed}: only macOS never intercepts exec"
            );
            let running = why(&m(8, false, false), None, true, macos);
            assert!(running.contains("still running"), "{running}");
        }
        assert!(!why(&m(8, false, false), None, false, false).contains("exec"));
        assert!(why(&m(8, false, false), None, false, true).contains("exec of a program"));
    }

    #[test]
    fn a_run_where_no_process_started_names_dyld_on_macos() {
        let second = Some(Duration::from_secs(1));
        // The command died, or some process started and said why: as before.
        assert_eq!(no_profile_why(true, Some(9), false, None), "");
        assert_eq!(
            no_profile_why(true, None, true, None),
            " (see the lines above)"
        );
        // Linux: the preflight refused what the loader would ignore.
        assert_eq!(
            no_profile_why(false, None, false, None),
            " (see the lines above)"
        );
        // macOS, nothing started: dyld's silent refusals are named.
        let why = no_profile_why(true, None, false, None);
        assert!(
            why.contains("DYLD_INSERT_LIBRARIES") && why.contains("codesign -dv"),
            "{why}"
        );
        assert!(!why.contains("--duration"), "{why}");
        assert!(no_profile_why(true, None, false, second).contains("after --duration"));
    }
}
