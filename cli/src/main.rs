//! `btprof`: profile this process on a known workload, write a flamegraph
//! and folded stacks, and check the result. The commands that read folded
//! files (`diff`, `report`, `flamegraph`) live in `btprof_cli::commands`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{DumpStats, FlamegraphOptions, FoldOptions, Mode, Profile, Profiler};
use btprof_cli::clock_arg::parse_clock;
use btprof_cli::commands::Command;
use btprof_cli::duration::parse_duration;
use btprof_cli::outputs::{OutputOptions, Outputs};
use btprof_cli::push_args::{self, PushArgs};
use btprof_cli::selfcheck::{SelfCheck, Thresholds};
use btprof_cli::workload::{Work, Workload, FUNCTIONS};
use clap::{Parser, ValueEnum};

/// A sampling profiler that writes flamegraphs.
///
/// `btprof --pid-self` profiles btprof itself while it runs a built-in
/// workload whose CPU split is known (two threads, five functions, a call
/// chain three deep), writes an SVG flamegraph and a folded-stack file, and
/// checks the profile against the workload's own timing: the achieved
/// sampling rate, each function's share of samples against its measured
/// share of CPU time, and how many stacks reach the thread's entry. It
/// exits 0 when the check passes and 1 when it fails, so a test suite can
/// run it to prove that sampling, stack walking and symbols work on a host.
///
/// With --dump-every, btprof also writes a folded file (with a JSON
/// metadata sidecar) per window, as an application embedding the library
/// with periodic dumps would.
///
/// Ctrl-C stops early, writes everything collected so far (files, dumps,
/// the self-check of what was sampled) and then exits 130, as interrupted
/// programs do.
///
/// The commands read folded files (btprof's, or any folded file from
/// inferno-collapse-* or FlameGraph's stackcollapse* scripts):
/// `btprof diff` compares runs (one or several per side) and exits 1 on
/// a regression, `btprof report` lists the top functions, `btprof
/// flamegraph` re-renders one, `btprof export` converts one to pprof.
/// `btprof dump --pid PID` prints what each thread of another process is
/// doing now (Linux).
/// `btprof help COMMAND` explains each.
#[derive(Parser, Debug)]
#[command(name = "btprof", version, about, long_about, verbatim_doc_comment)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:
  btprof record -- ./my-program           profile any program: btprof.svg, btprof.folded
  btprof --pid-self                       5 s at 1000 Hz, writes btprof.svg and btprof.folded
  btprof --pid-self --hz 1000 --duration 500ms --output /tmp/p.svg
  btprof --pid-self --mode wall --merge-threads
  btprof --pid-self --duration 10s --dump-every 1s --dump-dir dumps --keep 5
  btprof --pid-self --push http://localhost:4040 --service-name demo --label env=dev
  btprof --pid-self --slow beta --folded slow.folded
  btprof --pid-self --label-frames        a flamegraph split by the workload's labels
  btprof --pid-self --dump-threads            what each thread is doing now
  btprof dump --pid 4242                  what each thread of process 4242 is doing now
  btprof diff btprof.folded slow.folded -o diff.svg     exit 1: beta regressed
  btprof report --top 10 btprof.folded
  btprof flamegraph btprof.folded -o btprof.svg --inverted
  btprof --pid-self --pprof btprof.pb.gz && go tool pprof -top btprof.pb.gz")]
struct Args {
    // A command that reads folded files; none for a profiling run.
    #[command(subcommand)]
    command: Option<Command>,

    /// Profile this btprof process running its built-in workload (another
    /// program: btprof record -- CMD).
    #[arg(long)]
    pid_self: bool,

    /// Samples per second per thread.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    hz: u32,

    /// How long to profile: 5, 5s, 500ms, 2m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,

    /// cpu: sample threads that are running; wall: sample every thread.
    #[arg(long, value_enum, default_value_t = ModeArg::Cpu)]
    mode: ModeArg,

    /// Where to write the SVG flamegraph.
    #[arg(long, short, default_value = "btprof.svg")]
    output: PathBuf,

    /// Where to write folded stacks (`thread;root;...;leaf count`); the run
    /// metadata goes beside it as JSON (btprof.folded -> btprof.json).
    #[arg(long, default_value = "btprof.folded")]
    folded: PathBuf,

    /// Also write the profile as pprof (gzipped profile.proto) here, for
    /// go tool pprof, Pyroscope, Parca or Datadog: thread names become
    /// `thread` labels, values are samples and CPU (or wall) nanoseconds.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,

    /// Also write each window of this length as its own folded file (and
    /// metadata sidecar) in --dump-dir: 1s, 500ms.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    dump_every: Option<Duration>,

    /// Directory for --dump-every files (created if missing)
    /// [default: btprof-dumps]. Files are named after the program:
    /// btprof-START-SEQ.folded.
    #[arg(long, value_name = "DIR", requires = "dump_every")]
    dump_dir: Option<PathBuf>,

    /// Keep only the newest N windows' files (needs --dump-every).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), requires = "dump_every")]
    keep: Option<u64>,

    /// Also write an SVG flamegraph per window (needs --dump-every).
    #[arg(long, requires = "dump_every")]
    dump_svg: bool,

    #[command(flatten)]
    push: PushArgs,

    /// Most distinct stacks kept; samples of further stacks are counted
    /// under a "[btprof: stack table full]" frame, so memory stays bounded.
    #[arg(long, default_value_t = btprof::DEFAULT_MAX_STACKS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_stacks: u64,

    /// Merge identical stacks of different threads (no thread-name root).
    #[arg(long)]
    merge_threads: bool,

    /// Leave inlined functions out of the folded file and flamegraph: each
    /// function then stands for the code inlined into it, as in files from
    /// btprof before inline expansion or from profilers without it. By
    /// default inlined functions are frames of their own, as in `perf
    /// --inline` and samply.
    #[arg(long)]
    no_inline: bool,

    /// Put each labelled stack under a frame of its labels below the
    /// thread root (`[label: step=alpha]`; the workload labels its
    /// calls), in the folded file, flamegraph and dumps.
    #[arg(long)]
    label_frames: bool,

    /// Most frames kept per stack; deeper stacks are marked truncated.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=512))]
    max_depth: u64,

    /// Largest allowed gap, in percentage points, between a function's
    /// sampled and measured share before the self-check fails.
    #[arg(long, default_value_t = 3.0)]
    max_error: f64,

    /// Make FUNCTION of the workload do twice the work per call, or
    /// FACTOR times with FUNCTION=FACTOR (beta=1.1: a tenth more); repeat
    /// to slow several, or one again. A known regression for `btprof
    /// diff` to find. The self-check still compares with measured CPU
    /// time.
    #[arg(long, value_name = "FUNCTION[=FACTOR]", value_parser = parse_slow)]
    slow: Vec<String>,

    /// No status line.
    #[arg(long, short)]
    quiet: bool,

    /// The clock that paces cpu-mode samples (Linux), instead of the one
    /// btprof chooses: perf (the kernel samples each thread by its own CPU
    /// time into ring buffers, the default where perf events are allowed)
    /// or thread (the sampler thread signals threads by the CPU time they
    /// used, the default where perf events are refused). A clock the
    /// kernel refuses is an error. The summary says which clock ran. Same
    /// as BTPROF_CLOCK=perf|thread.
    #[arg(long, value_parser = parse_clock, value_name = "perf|thread")]
    clock: Option<btprof::SampleClock>,

    /// Same as --clock thread.
    #[arg(long, conflicts_with = "clock")]
    no_thread_timers: bool,

    /// Run the built-in workload for --duration without profiling it, and
    /// print the CPU split it measured (each function's share, each
    /// worker's CPU time): the truth to hold another profiler's output
    /// against, e.g. `perf record -e cpu-clock -F 1000 --call-graph fp --
    /// btprof --workload-only`.
    #[arg(long)]
    workload_only: bool,

    /// Print a thread dump of the running workload instead of profiling
    /// it: each thread's name, id, state and backtrace (two busy workers
    /// and a thread blocked in `read` on a pipe).
    #[arg(long, requires = "pid_self")]
    dump_threads: bool,

    /// With --dump-threads: print the dump as JSON.
    #[arg(long, requires = "dump_threads")]
    json: bool,
}

/// `--slow FUNCTION[=FACTOR]`, checked as the workload will apply it.
fn parse_slow(text: &str) -> Result<String, String> {
    Work::default().slow(text).map(|_| text.to_owned())
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    Cpu,
    Wall,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(command) = &args.command {
        return command.run();
    }
    if args.workload_only {
        return match run_workload_only(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("btprof: {message}");
                ExitCode::from(2)
            }
        };
    }
    if !args.pid_self {
        eprintln!(
            "btprof: nothing to profile: use `btprof record -- CMD` to profile a program, \
             --pid-self to profile btprof's own workload, or a command (diff, report, \
             flamegraph); see btprof --help"
        );
        return ExitCode::from(2);
    }
    if args.dump_threads {
        return match btprof_cli::thread_dump::run(args.json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("btprof: {message}");
                ExitCode::from(2)
            }
        };
    }
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("btprof: {message}");
            ExitCode::from(2)
        }
    }
}

/// The exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells
/// and other interrupted programs report it, after everything collected
/// was written.
const EXIT_INTERRUPTED: u8 = 130;

/// Profiles the workload, writes the outputs and prints the self-check.
/// Returns 0 when the check passed, 1 when it failed, 130 when Ctrl-C
/// stopped the run (the files are written all the same).
fn run(args: &Args) -> Result<ExitCode, String> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;

    // Open the outputs first: a typo in a path should cost nothing, not a
    // whole profiling run.
    let outputs = Outputs::create(&args.folded, &args.output, args.pprof.as_deref())?;
    let mut work = Work::default();
    for function in &args.slow {
        work = work.slow(function)?;
    }
    let workload =
        Workload::start_with(work).map_err(|e| format!("cannot start the workload: {e}"))?;
    let mut builder = builder(args);
    if let Some(push) = args.push.push()? {
        builder = builder.push(push);
    }
    let profiler = builder.start().map_err(|e| e.to_string())?;
    workload.set_recording(true);

    let started = Instant::now();
    let show_status = !args.quiet && std::io::stderr().is_terminal();
    let mut last_status = Instant::now();
    while started.elapsed() < args.duration && !interrupted.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20).min(args.duration));
        if show_status && last_status.elapsed() >= Duration::from_millis(250) {
            last_status = Instant::now();
            print_status(&profiler, started.elapsed(), args);
        }
    }
    if show_status {
        eprint!("\r\x1b[K");
    }
    workload.set_recording(false);
    let (profile, dumps) = profiler.stop_with_dump_stats().map_err(|e| e.to_string())?;
    let truth = workload.stop();
    if interrupted.load(Ordering::SeqCst) {
        eprintln!(
            "btprof: interrupted after {:.2} s; writing what was collected",
            started.elapsed().as_secs_f64()
        );
    }

    // A run of the built-in workload always has run metadata: a sidecar
    // without it would be a bug here, not a profile to write.
    if profile.run_info().is_none() {
        return Err("the recording has no run metadata".to_owned());
    }
    outputs.write(&profile, &output_options(args))?;
    if args.dump_every.is_some() {
        print_dumps(&dumps, args);
    }
    if let Some(push) = &dumps.push {
        println!("{}", push_args::summary(push));
    }
    print_summary(&profile);
    warn_if_truncated(&profile);
    warn_if_signal_blocked(&profile);
    warn_if_unsampled(&profile);
    let check = SelfCheck::evaluate(
        &profile,
        &truth,
        Thresholds {
            max_share_error: args.max_error,
            ..Thresholds::default()
        },
    );
    println!("{check}");
    let failures = check.failures();
    if failures.is_empty() {
        println!("self-check: PASS");
    } else {
        println!("self-check: FAIL");
        for f in failures {
            println!("  - {f}");
        }
    }
    if interrupted.load(Ordering::SeqCst) {
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    Ok(ExitCode::from(u8::from(!check.passed())))
}

/// Runs the workload unprofiled and prints what it measured.
fn run_workload_only(args: &Args) -> Result<(), String> {
    let mut work = Work::default();
    for function in &args.slow {
        work = work.slow(function)?;
    }
    let workload =
        Workload::start_with(work).map_err(|e| format!("cannot start the workload: {e}"))?;
    workload.set_recording(true);
    std::thread::sleep(args.duration);
    workload.set_recording(false);
    let truth = workload.stop();
    println!(
        "workload ran {:.2} s unprofiled: {:.3} CPU-s in its workers",
        args.duration.as_secs_f64(),
        truth.total_seconds()
    );
    for i in 0..btprof_cli::workload::THREADS {
        println!(
            "  thread {}{i}: {:.3} CPU-s",
            btprof_cli::workload::THREAD_PREFIX,
            truth.thread_seconds(i)
        );
    }
    for (name, share) in FUNCTIONS.iter().zip(truth.shares()) {
        println!("  truth {name} {:.4}%", share * 100.0);
    }
    Ok(())
}

/// The profiler the arguments describe.
fn builder(args: &Args) -> btprof::ProfilerBuilder {
    let mode = match args.mode {
        ModeArg::Cpu => Mode::Cpu,
        ModeArg::Wall => Mode::Wall,
    };
    let mut builder = Profiler::builder()
        .hz(args.hz)
        .mode(mode)
        .max_depth(args.max_depth as usize)
        .max_stacks(usize::try_from(args.max_stacks).unwrap_or(usize::MAX))
        .clock(match (args.clock, args.no_thread_timers) {
            (Some(clock), _) => Some(clock),
            (None, true) => Some(btprof::SampleClock::SamplerThread),
            (None, false) => None,
        });
    if let Some(every) = args.dump_every {
        builder = builder
            .dump_every(every)
            .dump_dir(
                args.dump_dir
                    .clone()
                    .unwrap_or_else(|| DEFAULT_DUMP_DIR.into()),
            )
            .dump_svg(args.dump_svg)
            .dump_label_frames(args.label_frames);
        if let Some(keep) = args.keep {
            builder = builder.keep(usize::try_from(keep).unwrap_or(usize::MAX));
        }
    }
    builder
}

/// The status line: elapsed, samples, achieved rate, threads, which clock
/// paces the samples, dumps.
fn print_status(profiler: &Profiler, elapsed: Duration, args: &Args) {
    let p = profiler.progress();
    let secs = elapsed.as_secs_f64();
    let samples = p.samples.load(Ordering::Relaxed);
    let distinct = p.recorded.load(Ordering::Relaxed);
    let clock = p.clock();
    let rate = match args.mode {
        ModeArg::Cpu => {
            let cpu = p.sampled_cpu_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let per_cpu = |n: u64| if cpu > 0.0 { n as f64 / cpu } else { 0.0 };
            if distinct < samples {
                format!(
                    "{:.0}/CPU-s weighted, {:.0} distinct (of {})",
                    per_cpu(samples),
                    per_cpu(distinct),
                    args.hz
                )
            } else {
                format!("{:.0}/CPU-s (of {})", per_cpu(samples), args.hz)
            }
        }
        ModeArg::Wall => {
            let ticks = p.ticks.load(Ordering::Relaxed);
            let rate = if secs > 0.0 { ticks as f64 / secs } else { 0.0 };
            format!("{rate:.0} ticks/s (of {})", args.hz)
        }
    };
    let samples = if distinct < samples {
        format!("{samples} samples ({distinct} distinct)")
    } else {
        format!("{samples} samples")
    };
    let mut line = format!(
        "\r  {secs:>6.2} s / {:.2} s   {samples}   {rate}   {} threads   {}",
        args.duration.as_secs_f64(),
        p.threads.load(Ordering::Relaxed),
        clock.describe(),
    );
    if args.dump_every.is_some() {
        let d = profiler.dump_stats();
        line += &format!("   {} dumps", d.written);
        if d.failed > 0 {
            line += &format!(" ({} failed)", d.failed);
        }
    }
    if let Some(push) = profiler.dump_stats().push {
        line += &format!("   {} pushed", push.pushed);
        if push.dropped > 0 {
            line += &format!(" ({} dropped)", push.dropped);
        }
    }
    eprint!("{line} ");
}

/// The files' options: threads merged and inlined frames hidden as asked,
/// in the folded file and the flamegraph alike.
fn output_options(args: &Args) -> OutputOptions {
    OutputOptions {
        fold: FoldOptions {
            merge_threads: args.merge_threads,
            hide_inlined: args.no_inline,
            label_frames: args.label_frames,
        },
        flamegraph: FlamegraphOptions {
            merge_threads: args.merge_threads,
            hide_inlined: args.no_inline,
            label_frames: args.label_frames,
            ..FlamegraphOptions::default()
        },
        // --quiet is about the status line; the files are always named.
        quiet: false,
    }
}

/// Where --dump-every writes without --dump-dir.
const DEFAULT_DUMP_DIR: &str = "btprof-dumps";

/// What --dump-every wrote.
fn print_dumps(dumps: &DumpStats, args: &Args) {
    let kept = dumps.written - dumps.removed;
    println!(
        "wrote {} window files to {} ({} kept{}{})",
        dumps.written,
        args.dump_dir
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_DUMP_DIR))
            .display(),
        kept,
        if dumps.empty > 0 {
            format!(", {} empty windows skipped", dumps.empty)
        } else {
            String::new()
        },
        if dumps.failed > 0 {
            format!(", {} failed", dumps.failed)
        } else {
            String::new()
        },
    );
    if let Some(e) = &dumps.last_error {
        eprintln!("btprof: a dump failed: {e}");
    }
}

/// Most stacks truncated means the code lacks frame pointers (and unwind
/// information): say where and how to fix it rather than draw a
/// misleading flamegraph.
fn warn_if_truncated(profile: &Profile) {
    let Some(s) = profile.stats() else { return };
    let truncated = profile.truncated_samples();
    if s.samples >= 10 && truncated * 2 > s.samples {
        eprintln!(
            "btprof: warning: {} of {} stacks were truncated{}: that code probably lacks frame pointers \
             and unwind information. Build it with RUSTFLAGS=\"-C force-frame-pointers=yes\" (or [build] \
             rustflags in .cargo/config.toml); for C and C++, -fno-omit-frame-pointer \
             (or keep -fasynchronous-unwind-tables)",
            truncated,
            s.samples,
            most_truncated_in(profile),
        );
    }
}

/// `, most (N) in MODULE` for the module where most truncated walks
/// stopped, or nothing.
fn most_truncated_in(profile: &Profile) -> String {
    match profile.truncated_by_module().first() {
        Some((module, n)) => format!(", most ({n}) stopping in {module}"),
        None => String::new(),
    }
}

/// A busy thread that blocks the profiling signal loses its samples (it
/// is not signalled: the signal would stay queued): say which, when that
/// is most of what it should have had.
fn warn_if_signal_blocked(profile: &Profile) {
    let Some(stats) = profile.stats() else { return };
    let threads: Vec<(u64, &str)> = profile
        .threads()
        .filter_map(|t| Some((t.tid?, t.name)))
        .collect();
    for line in btprof::signal_blocked_warnings(stats, &threads) {
        eprintln!("btprof: warning: {line}");
    }
}

/// Share of the process's CPU time above which the time no sample covered
/// is warned about (below it, a summary line says it).
const UNSAMPLED_WARN_SHARE: f64 = 0.10;

/// Threads that live and exit between two listings (a few milliseconds
/// apart) are never sampled: say so when their CPU time is a real part of
/// the process's, so a profile that misses it is not read as complete.
fn warn_if_unsampled(profile: &Profile) {
    let Some(s) = profile.stats() else { return };
    let (unsampled, process) = (s.unsampled_cpu(), s.process_cpu);
    if process.is_zero() || unsampled.as_secs_f64() <= UNSAMPLED_WARN_SHARE * process.as_secs_f64()
    {
        return;
    }
    eprintln!(
        "btprof: warning: {:.1}% of the process's CPU time ({:.0} ms of {:.0} ms) ran where no \
         sample could stand for it: most likely in threads that lived only a few milliseconds \
         (started and exited between two listings of the threads), which this profile does not show",
        100.0 * unsampled.as_secs_f64() / process.as_secs_f64(),
        unsampled.as_secs_f64() * 1e3,
        process.as_secs_f64() * 1e3,
    );
}

fn print_summary(profile: &Profile) {
    let Some(s) = profile.stats() else { return };
    println!(
        "sampled {} stacks over {:.2} s ({} mode, {}): {:.1} samples per CPU-second of the sampled threads \
         ({:.1} distinct; {:.3} CPU-s; requested {} Hz); sampler thread {:.1} ticks/s, {} missed ticks",
        s.samples,
        s.duration.as_secs_f64(),
        s.mode,
        s.clock.describe(),
        s.samples_per_cpu_second(),
        s.distinct_per_cpu_second(),
        s.sampled_cpu().as_secs_f64(),
        s.requested_hz,
        s.ticks_per_second(),
        s.missed_ticks,
    );
    let callers = s.cfi_frames + s.frame_pointer_frames;
    println!(
        "truncated walks: {} of {}{} (stopped short of the thread's entry; the main thread's expected \
         end in the C start code is not counted), callers from CFI: {} of {} ({:.1}%), \
         failed samples: {}, skipped samples: {}, lost to a blocked signal: {}, late signals \
         retried: {}, taken by the kernel into ring buffers: {} ({} of threads born while \
         sampling; {} lost to a full ring), counted for threads' last moments (at exit or stop): {}, \
         not counted for threads that exited before their first sample: {}, sampler CPU: {:.1} ms",
        profile.truncated_samples(),
        s.samples,
        most_truncated_in(profile),
        s.cfi_frames,
        callers,
        100.0 * s.cfi_frames as f64 / callers.max(1) as f64,
        s.failed_samples,
        s.skipped_samples,
        s.signal_blocked_samples,
        s.late_samples,
        s.ring_samples,
        s.born_samples,
        s.lost_samples,
        s.exit_samples,
        s.stackless_samples,
        s.sampler_cpu.as_secs_f64() * 1e3,
    );
    if s.ring_threads + s.timer_threads > 0 {
        println!(
            "threads sampled by the kernel into ring buffers (no signal): {}, by a timer of \
             their own that signals them: {}",
            s.ring_threads, s.timer_threads
        );
    }
    if s.wake_timers + s.idle_without_wake_timer > 0 {
        println!(
            "idle threads given a wake timer (looked at as soon as they run, not at the next \
             listing): {}, wakes told: {}; idle threads past the wake timers' limit (looked \
             at only at listings): {}",
            s.wake_timers, s.wakes, s.idle_without_wake_timer
        );
    }
    if s.threads_found_between_listings > 0 {
        println!(
            "threads found between listings (by the thread ids the kernel gave since the last \
             one): {}",
            s.threads_found_between_listings
        );
    }
    if !s.process_cpu.is_zero() {
        println!(
            "process CPU: {:.1} ms, of which sampled threads {:.1} ms ({:.1} ms of it not \
             covered: samples lost to a full ring or of threads that exited before their first \
             sample), the sampler {:.1} ms, \
             not covered by any sample {:.1} ms ({:.1}%: threads that used less than one \
             period, threads that exited before they were listed where the kernel could not \
             sample them from birth, btprof's own dump thread)",
            s.process_cpu.as_secs_f64() * 1e3,
            s.sampled_cpu().as_secs_f64() * 1e3,
            s.lost_cpu().as_secs_f64() * 1e3,
            s.sampler_cpu.as_secs_f64() * 1e3,
            s.unsampled_cpu().as_secs_f64() * 1e3,
            100.0 * s.unsampled_cpu().as_secs_f64() / s.process_cpu.as_secs_f64(),
        );
    }
}
