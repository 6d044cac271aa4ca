//! `btprof`: profile this process on a known workload, write a flamegraph
//! and folded stacks, and check the result. The commands that read folded
//! files (`diff`, `report`, `flamegraph`) live in `btprof_cli::commands`.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{FlamegraphOptions, FoldOptions, Mode, Profile, Profiler};
use btprof_cli::commands::Command;
use btprof_cli::duration::parse_duration;
use btprof_cli::selfcheck::{SelfCheck, Thresholds};
use btprof_cli::workload::{Work, Workload, FUNCTIONS};
use clap::builder::PossibleValuesParser;
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
/// Ctrl-C stops early and still writes everything collected.
///
/// The commands read folded files (btprof's, or any folded file from
/// inferno-collapse-* or FlameGraph's stackcollapse* scripts):
/// `btprof diff` compares two runs and exits 1 on a regression, `btprof
/// report` lists the top functions, `btprof flamegraph` re-renders one.
/// `btprof help COMMAND` explains each.
#[derive(Parser, Debug)]
#[command(name = "btprof", version, about, long_about, verbatim_doc_comment)]
#[command(args_conflicts_with_subcommands = true)]
#[command(after_help = "Examples:
  btprof --pid-self                       5 s at 1000 Hz, writes btprof.svg and btprof.folded
  btprof --pid-self --hz 1000 --duration 500ms --output /tmp/p.svg
  btprof --pid-self --mode wall --merge-threads
  btprof --pid-self --slow beta --folded slow.folded
  btprof diff btprof.folded slow.folded -o diff.svg     exit 1: beta regressed
  btprof report --top 10 btprof.folded
  btprof flamegraph btprof.folded -o btprof.svg --inverted")]
struct Args {
    // A command that reads folded files; none for a profiling run.
    #[command(subcommand)]
    command: Option<Command>,

    /// Profile this btprof process running its built-in workload (the only
    /// target supported yet).
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

    /// Where to write folded stacks (`thread;root;...;leaf count`).
    #[arg(long, default_value = "btprof.folded")]
    folded: PathBuf,

    /// Merge identical stacks of different threads (no thread-name root).
    #[arg(long)]
    merge_threads: bool,

    /// Most frames kept per stack; deeper stacks are marked truncated.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=512))]
    max_depth: u64,

    /// Largest allowed gap, in percentage points, between a function's
    /// sampled and measured share before the self-check fails.
    #[arg(long, default_value_t = 3.0)]
    max_error: f64,

    /// Make FUNCTION of the workload do twice the work per call (repeat to
    /// slow several, or one again): a known regression for `btprof diff`
    /// to find. The self-check still compares with measured CPU time.
    #[arg(long, value_name = "FUNCTION", value_parser = PossibleValuesParser::new(FUNCTIONS))]
    slow: Vec<String>,

    /// No progress line.
    #[arg(long, short)]
    quiet: bool,
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
    if !args.pid_self {
        eprintln!(
            "btprof: nothing to profile: pass --pid-self to profile btprof's own workload \
             (other targets are not supported yet), or use a command (diff, report, \
             flamegraph); see btprof --help"
        );
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("btprof: {message}");
            ExitCode::from(2)
        }
    }
}

/// Profiles the workload, writes the outputs and prints the self-check.
/// Returns whether the check passed.
fn run(args: &Args) -> Result<bool, String> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;

    let mut work = Work::default();
    for function in &args.slow {
        work = work.slow(function)?;
    }
    let workload =
        Workload::start_with(work).map_err(|e| format!("cannot start the workload: {e}"))?;
    let mode = match args.mode {
        ModeArg::Cpu => Mode::Cpu,
        ModeArg::Wall => Mode::Wall,
    };
    let profiler = Profiler::builder()
        .hz(args.hz)
        .mode(mode)
        .max_depth(args.max_depth as usize)
        .start()
        .map_err(|e| e.to_string())?;
    workload.set_recording(true);

    let started = Instant::now();
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    let mut last_progress = Instant::now();
    while started.elapsed() < args.duration && !interrupted.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20).min(args.duration));
        if show_progress && last_progress.elapsed() >= Duration::from_millis(250) {
            last_progress = Instant::now();
            let p = profiler.progress();
            eprint!(
                "\r  {:>6.2} s / {:.2} s   {} samples   {} threads ",
                started.elapsed().as_secs_f64(),
                args.duration.as_secs_f64(),
                p.samples.load(Ordering::Relaxed),
                p.threads.load(Ordering::Relaxed),
            );
        }
    }
    if show_progress {
        eprint!("\r\x1b[K");
    }
    workload.set_recording(false);
    let profile = profiler.stop().map_err(|e| e.to_string())?;
    let truth = workload.stop();
    if interrupted.load(Ordering::SeqCst) {
        eprintln!(
            "btprof: interrupted after {:.2} s; writing what was collected",
            started.elapsed().as_secs_f64()
        );
    }

    write_outputs(&profile, args)?;
    print_summary(&profile);
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
    Ok(check.passed())
}

fn write_outputs(profile: &Profile, args: &Args) -> Result<(), String> {
    let create = |path: &PathBuf| {
        File::create(path)
            .map(BufWriter::new)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))
    };
    let folded = FoldOptions {
        merge_threads: args.merge_threads,
    };
    let mut out = create(&args.folded)?;
    profile
        .write_folded_with(folded, &mut out)
        .and_then(|()| out.flush().map_err(btprof::Error::Io))
        .map_err(|e| format!("{}: {e}", args.folded.display()))?;
    println!("wrote {}", args.folded.display());

    if profile.is_empty() {
        eprintln!("btprof: no samples, so no flamegraph was written");
        return Ok(());
    }
    let mut svg = create(&args.output)?;
    let options = FlamegraphOptions {
        merge_threads: args.merge_threads,
        ..FlamegraphOptions::default()
    };
    profile
        .write_flamegraph_with(&options, &mut svg)
        .and_then(|()| svg.flush().map_err(btprof::Error::Io))
        .map_err(|e| format!("{}: {e}", args.output.display()))?;
    println!("wrote {}", args.output.display());
    Ok(())
}

fn print_summary(profile: &Profile) {
    let s = profile.stats();
    println!(
        "sampled {} stacks over {:.2} s: {:.1} ticks/s (requested {} Hz, {} mode), {} missed ticks",
        s.samples,
        s.duration.as_secs_f64(),
        s.achieved_hz(),
        s.requested_hz,
        s.mode,
        s.missed_ticks,
    );
    println!(
        "truncated walks: {}, failed samples: {}, skipped samples: {}, sampler CPU: {:.1} ms",
        s.truncated(),
        s.failed_samples,
        s.skipped_samples,
        s.sampler_cpu.as_secs_f64() * 1e3,
    );
}
