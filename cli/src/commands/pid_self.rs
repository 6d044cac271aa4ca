//! `btprof --pid-self`: profile this process on the built-in workload,
//! write a flamegraph and folded stacks, and check the result.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{FlamegraphOptions, FoldOptions, Mode, Profile, Profiler};
use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};

use crate::duration::parse_duration;
use crate::selfcheck::{SelfCheck, Thresholds};
use crate::workload::{Work, Workload, FUNCTIONS};

/// The options of a profiling run (the top-level options of `btprof`).
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Profile this btprof process running its built-in workload (the only
    /// target supported yet).
    #[arg(long)]
    pub pid_self: bool,

    /// Samples per second per thread.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub hz: u32,

    /// How long to profile: 5, 5s, 500ms, 2m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,

    /// cpu: sample threads that are running; wall: sample every thread.
    #[arg(long, value_enum, default_value_t = ModeArg::Cpu)]
    pub mode: ModeArg,

    /// Where to write the SVG flamegraph.
    #[arg(long, short, default_value = "btprof.svg")]
    pub output: PathBuf,

    /// Where to write folded stacks (`thread;root;...;leaf count`).
    #[arg(long, default_value = "btprof.folded")]
    pub folded: PathBuf,

    /// Merge identical stacks of different threads (no thread-name root).
    #[arg(long)]
    pub merge_threads: bool,

    /// Most frames kept per stack; deeper stacks are marked truncated.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=512))]
    pub max_depth: u64,

    /// Largest allowed gap, in percentage points, between a function's
    /// sampled and measured share before the self-check fails.
    #[arg(long, default_value_t = 3.0)]
    pub max_error: f64,

    /// Make FUNCTION of the workload do twice the work per call (repeat to
    /// slow several, or one again): a known regression for `btprof diff`
    /// to find. The self-check still compares with measured CPU time.
    #[arg(long, value_name = "FUNCTION", value_parser = PossibleValuesParser::new(FUNCTIONS))]
    pub slow: Vec<String>,

    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Which threads to sample.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    Cpu,
    Wall,
}

/// Runs `btprof --pid-self ...`: exit 0 when the self-check passes, 1 when
/// it fails, 2 when the run could not be done.
pub fn run(args: &ProfileArgs) -> ExitCode {
    if !args.pid_self {
        eprintln!(
            "btprof: nothing to profile: pass --pid-self to profile btprof's own workload \
             (other targets are not supported yet), or use a command (diff, report, \
             flamegraph); see btprof --help"
        );
        return ExitCode::from(2);
    }
    match profile_and_check(args) {
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
fn profile_and_check(args: &ProfileArgs) -> Result<bool, String> {
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

fn write_outputs(profile: &Profile, args: &ProfileArgs) -> Result<(), String> {
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
