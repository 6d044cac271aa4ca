//! `btprof diff BASE NEW`: compare two folded profiles and gate on
//! regressions; `btprof diff --base FILE... --new FILE...` compares
//! several runs per side; `btprof diff FILE` compares the two runs of a two-count
//! (differential) file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use btprof::analysis::functions::SelfFrame;
use btprof::diff::{compare_runs, DiffOptions, Metric, Rule};
use btprof::folded::{write_two_count, FoldedFile};
use btprof::formats::flamegraph::write_differential;
use btprof::{report, FlamegraphOptions, FoldOptions, Profile};
use clap::{Args, ValueEnum};

use super::run_files::expand;
use super::{fail, read_folded_file, read_profile, write_file, FormatArg, InputArgs};

/// Compare folded profiles, one run or several per side; exit 1 if a function regressed
///
/// `btprof diff BASE NEW` compares one run with one run. `btprof diff
/// --base B1 B2 B3 --new N1 N2 N3` compares several runs of each side. A
/// directory stands for the `*.folded` files in it, and a pattern with
/// `*` or `?` in its file name (quoted, so the shell leaves it) for the
/// files it matches, so three `BTPROF_DIR=base cargo test` runs compare
/// with three runs of the change as `btprof diff --base base --new new`.
///
/// Every run is normalised by its own total samples, so runs of
/// different length compare. For every function (a frame name, summed
/// over threads) the report shows its self share (samples where it is the
/// leaf) and total share (samples whose stack contains it) in each run and
/// the change in percentage points, largest increase first, then the
/// functions that are new or vanished.
///
/// With ONE RUN per side (or fewer than 3 on either side, whose runs are
/// then pooled), a function REGRESSED when its share (self, or total
/// with --share total)
///   1. grew by more than --threshold percentage points (default 2),
///   2. has at least --min-samples samples in the new run, and
///   3. grew beyond sampling noise: a one-sided pooled
///      two-proportion z-test gives p < alpha / m, where m is the number
///      of functions compared (a Bonferroni correction, so the chance
///      that noise alone flags any function in the whole diff is at most
///      --alpha, default 0.001).
///
/// Run-to-run noise is not measured then, and the report says so.
///
/// With 3 RUNS OR MORE per side, a function REGRESSED when its mean
/// share (each run weighing the same)
///   1. grew by more than --threshold points (default 1),
///   2. has at least --min-samples samples per new run on average, and
///   3. grew beyond the spread between runs: a one-sided Welch's t-test
///      on the per-run shares gives p < alpha / m (--alpha default
///      0.05), m counting the functions with at least --min-samples
///      samples per run on average.
///
/// The report shows each side's range of per-run shares, the p-value,
/// and what decided: the threshold, the samples, or the noise. Runs of a
/// side that disagree (far fewer samples, a function missing) are named.
///
/// Self time and the standard library: a sample's self time counts to
/// the innermost frame that is not Rust's standard library (`core::`,
/// `alloc::`, `std::`; btprof names inlined std helpers with their module,
/// `core::hint::black_box<u64>`), so a hot loop full of inlined std
/// helpers is its own function's self time and a regression in it names
/// that function. The root frame (thread label) and `[...]` markers never
/// take it. --self-frame leaf counts it to the leaf, whatever it is.
/// Flamegraphs still show every frame.
///
/// The test assumes independent samples; real runs differ by more than
/// that (clustered samples, system calls whose share moves with machine
/// load), which the threshold guards against. A share that fell by the
/// mirror rule is reported as improved and never fails the gate.
///
/// With one file, it is a two-count file (`frame;...;frame BEFORE AFTER`,
/// as inferno-diff-folded and difffolded.pl write): its first counts are
/// the base run, its second the new one.
///
/// Exit status: 0 no regression, 1 regression, 2 bad input or usage.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(after_help = "Examples:
  btprof diff base.folded new.folded
  btprof diff --base b1.folded b2.folded b3.folded --new n1.folded n2.folded n3.folded
  btprof diff --base base/ --new new/ --min-runs 3    every *.folded file in each directory
  btprof diff --base 'base/*.folded' --new 'new/*.folded'
  btprof diff base.folded new.folded -o diff.svg --negated-output diff-negated.svg
  btprof diff base.folded new.folded --folded-out diff.folded  # for inferno-flamegraph
  btprof diff base.folded new.folded --format markdown >> \"$GITHUB_STEP_SUMMARY\"
  btprof diff base.folded new.folded --share total --skip-root --threshold 5
  btprof diff diff.folded                 one two-count file: BEFORE AFTER columns")]
pub struct DiffArgs {
    /// BASE NEW: the base (before) and the new (after) profile, folded
    /// files from btprof, inferno-collapse-* or FlameGraph's
    /// stackcollapse*, or another profiler's raw output (`perf script`,
    /// ...). One file alone is a two-count file holding both runs. Either
    /// side (not both) can be `-`, standard input.
    #[arg(value_name = "FILE", num_args = 1..=2, required_unless_present = "base", conflicts_with_all = ["base", "new"])]
    pub files: Vec<PathBuf>,

    /// The base runs, one or more: files in the same formats, directories
    /// of `*.folded` files, or quoted patterns like 'base/*.folded'.
    #[arg(long, value_name = "FILE", num_args = 1.., requires = "new")]
    pub base: Vec<PathBuf>,

    /// The new runs, one or more, as --base.
    #[arg(long, value_name = "FILE", num_args = 1.., requires = "base")]
    pub new: Vec<PathBuf>,

    /// Fail (exit 2) when a side has fewer runs than this, so that a CI
    /// job whose runs went missing does not pass on a weaker rule.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_runs: u64,

    /// How the input files are read.
    #[command(flatten)]
    pub input: InputArgs,

    /// Smallest growth, in percentage points of all samples, that can be a
    /// regression [default: 2, or 1 with 3 runs or more per side].
    #[arg(long, value_name = "POINTS", value_parser = parse_threshold)]
    pub threshold: Option<f64>,

    /// Fewest samples of the function in the new run for a regression.
    #[arg(long, value_name = "N", default_value_t = DiffOptions::default().min_samples)]
    pub min_samples: u64,

    /// Accepted chance that noise alone flags any function in the diff
    /// (divided by the number of functions for each test) [default:
    /// 0.001, or 0.05 with 3 runs or more per side].
    #[arg(long, value_name = "P", value_parser = parse_alpha)]
    pub alpha: Option<f64>,

    /// The share the gate looks at: self (the function's own code) or
    /// total (it and everything it calls).
    #[arg(long, value_enum, default_value_t = ShareArg::SelfShare)]
    pub share: ShareArg,

    /// Treat each stack's first frame as a thread or process label, not a
    /// function: btprof's files start every stack with the thread name,
    /// so thread names then stay out of the table (use it with --share
    /// total when thread names differ between runs).
    #[arg(long)]
    pub skip_root: bool,

    /// With 3 runs or more per side: judge each function by its share of
    /// each thread's samples (root frames, as with --skip-root), weighted
    /// by how the runs split their samples between threads on average, so
    /// that one run's split drops out. For programs whose threads each
    /// run the whole time (a server under a fixed-length load), where the
    /// scheduler's split is noise; not for a fixed amount of work, where a
    /// thread that takes longer is the regression.
    #[arg(long)]
    pub per_thread: bool,

    /// Which frame a sample's self time counts to: own-code (the innermost
    /// frame that is not Rust's standard library: a std helper inlined
    /// into your loop counts as your function's time) or leaf (the
    /// innermost frame, std or not).
    #[arg(long, value_enum, default_value_t = SelfFrameArg::OwnCode)]
    pub self_frame: SelfFrameArg,

    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: FormatArg,

    /// Functions listed in text and Markdown output (regressions always
    /// are); 0 lists all. JSON always has all.
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,

    /// Write the differential flamegraph (SVG) here: the new run's
    /// stacks, each frame coloured by how its total changed against its
    /// own share of the base run (red grew, blue shrank). When code
    /// vanished, which has no width there, the companion graph of the
    /// base run's stacks is written beside it too (NAME.base.svg) unless
    /// --negated-output says where.
    #[arg(long, short, value_name = "SVG")]
    pub output: Option<PathBuf>,

    /// Also write the companion (SVG) here: the base run's stacks, so code
    /// that vanished is visible, coloured the same way.
    #[arg(long, value_name = "SVG")]
    pub negated_output: Option<PathBuf>,

    /// Write the comparison as a two-count folded file here
    /// (`frame;...;frame BEFORE AFTER`, the base scaled to the new run's
    /// total as inferno-diff-folded --normalize scales it), for
    /// inferno-flamegraph, flamegraph.pl or `btprof diff FILE`.
    #[arg(long, value_name = "FILE")]
    pub folded_out: Option<PathBuf>,

    /// Title of the flamegraphs.
    #[arg(long)]
    pub title: Option<String>,
}

/// `--share`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ShareArg {
    /// Samples where the function is the leaf.
    #[value(name = "self")]
    SelfShare,
    /// Samples whose stack contains the function.
    #[value(name = "total")]
    TotalShare,
}

/// `--self-frame`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SelfFrameArg {
    /// The innermost frame outside Rust's standard library.
    OwnCode,
    /// The innermost frame.
    Leaf,
}

fn parse_threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if (0.0..=100.0).contains(&t) => Ok(t),
        _ => Err(format!(
            "`{text}` is not a threshold: expected percentage points from 0 to 100, like 1 or 2.5"
        )),
    }
}

fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 1.0 => Ok(a),
        _ => Err(format!(
            "`{text}` is not a probability: expected a number between 0 and 1, like 0.001"
        )),
    }
}

/// The files a diff can write besides its report.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    /// `-o`: the differential flamegraph.
    Graph,
    /// `--negated-output`: its negated companion.
    NegatedGraph,
    /// `--folded-out`: the two-count folded file.
    TwoCountFile,
}

/// The runs of each side: --base and --new, two files, or one two-count
/// file's two columns.
fn read_runs(args: &DiffArgs) -> Result<(Vec<Profile>, Vec<Profile>), String> {
    let (base, new): (&[PathBuf], &[PathBuf]) = match &args.files[..] {
        [file] => return read_two_count(file, args.input),
        [base, new] => (std::slice::from_ref(base), std::slice::from_ref(new)),
        _ => (&args.base, &args.new),
    };
    let (base, new) = (expand(base)?, expand(new)?);
    let stdin = base.iter().chain(&new).filter(|p| p.as_os_str() == "-");
    if stdin.count() > 1 {
        return Err("only one side of a diff can be standard input (-), with one file".to_owned());
    }
    let read = |files: &[PathBuf]| -> Result<Vec<Profile>, String> {
        files.iter().map(|f| read_profile(f, args.input)).collect()
    };
    Ok((read(&base)?, read(&new)?))
}

/// One two-count file's two columns: its base run and its new run.
fn read_two_count(file: &Path, input: InputArgs) -> Result<(Vec<Profile>, Vec<Profile>), String> {
    match read_folded_file(file, input)? {
        FoldedFile {
            profile,
            base: Some(base),
        } => Ok((vec![base], vec![profile])),
        FoldedFile { profile, .. } => Err(format!(
            "{} has one count per line: give the new profile too (btprof diff BASE NEW), \
             or one two-count file (`frame;...;frame BEFORE AFTER` lines, as \
             inferno-diff-folded writes)",
            profile.source()
        )),
    }
}

/// The runs of a side pooled into one profile (their stacks' counts
/// added), for the flamegraphs and the two-count file: one run as it is.
fn pooled(runs: &[Profile], side: &str) -> Result<Profile, String> {
    if let [one] = runs {
        return Ok(one.clone());
    }
    let mut text = Vec::new();
    for run in runs {
        run.write_folded(&mut text).map_err(|e| e.to_string())?;
    }
    Profile::read_folded_from(&text[..], format!("{} {side} runs", runs.len()))
        .map_err(|e| e.to_string())
}

/// Compares, prints the report and writes the flamegraphs asked for.
pub fn run(args: &DiffArgs) -> ExitCode {
    let defaults = DiffOptions::default();
    let options = DiffOptions {
        metric: match args.share {
            ShareArg::SelfShare => Metric::SelfShare,
            ShareArg::TotalShare => Metric::TotalShare,
        },
        threshold_points: args.threshold.unwrap_or(defaults.threshold_points),
        spread_threshold_points: args.threshold.unwrap_or(defaults.spread_threshold_points),
        min_samples: args.min_samples,
        alpha: args.alpha.unwrap_or(defaults.alpha),
        spread_alpha: args.alpha.unwrap_or(defaults.spread_alpha),
        skip_root: args.skip_root,
        self_frame: match args.self_frame {
            SelfFrameArg::OwnCode => SelfFrame::OwnCode,
            SelfFrameArg::Leaf => SelfFrame::Leaf,
        },
        per_thread: args.per_thread,
    };
    if let Err(message) = options.validate() {
        return fail(message);
    }
    let (base, new) = match read_runs(args) {
        Ok(both) => both,
        Err(message) => return fail(message),
    };
    for (side, runs) in [("base", &base), ("new", &new)] {
        if (runs.len() as u64) < args.min_runs {
            return fail(format!(
                "the {side} side has {} run(s), fewer than --min-runs {}",
                runs.len(),
                args.min_runs
            ));
        }
    }
    let diff = compare_runs(&base, &new, &options);
    let rows = (args.top != 0).then_some(args.top);
    print!("{}", report::diff_report(&diff, args.format.into(), rows));
    if diff.rule == Rule::SamplingNoise && base.len().max(new.len()) > 1 {
        eprintln!(
            "btprof: warning: {} base and {} new runs: the spread between runs is tested \
             with {} or more per side",
            base.len(),
            new.len(),
            Rule::MIN_RUNS_FOR_SPREAD
        );
    }
    let (base, new) = match (pooled(&base, "base"), pooled(&new, "new")) {
        (Ok(b), Ok(n)) => (b, n),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };

    let style = FlamegraphOptions {
        title: args.title.clone(),
        ..FlamegraphOptions::default()
    };
    // Vanished code has no width in the graph of the new run: show it in
    // the base run's graph even when no one asked for that by name.
    let vanished = diff.vanished_functions().count();
    let companion = match (&args.output, &args.negated_output) {
        (Some(graph), None) if vanished > 0 => Some(companion_path(graph)),
        (_, named) => named.clone(),
    };
    let outputs = [
        (&args.output, Output::Graph),
        (&companion, Output::NegatedGraph),
        (&args.folded_out, Output::TwoCountFile),
    ];
    for (path, output) in outputs {
        let Some(path) = path else { continue };
        let written = write_file(path, |w| match output {
            Output::Graph => write_differential(&base, &new, &style, false, w),
            Output::NegatedGraph => write_differential(&base, &new, &style, true, w),
            Output::TwoCountFile => write_two_count(&base, &new, FoldOptions::default(), w),
        });
        match written {
            Ok(()) if output == Output::NegatedGraph && args.negated_output.is_none() => eprintln!(
                "btprof: wrote {}: the base run's stacks, where the {vanished} function(s) \
                 that vanished show",
                path.display()
            ),
            Ok(()) => eprintln!("btprof: wrote {}", path.display()),
            Err(message) => return fail(message),
        }
    }
    ExitCode::from(u8::from(diff.regressed()))
}

/// `diff.svg` -> `diff.base.svg`: where the base run's graph goes when
/// it was not named.
fn companion_path(graph: &Path) -> PathBuf {
    let stem = graph.file_stem().unwrap_or_default().to_string_lossy();
    graph.with_file_name(format!("{stem}.base.svg"))
}
