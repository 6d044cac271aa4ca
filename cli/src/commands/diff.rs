//! `btprof diff BASE NEW`: compare two folded profiles and gate on
//! regressions; `btprof diff FILE` compares the two runs of a two-count
//! (differential) file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use btprof::analysis::functions::SelfFrame;
use btprof::diff::{compare, DiffOptions, Metric};
use btprof::folded::{write_two_count, FoldedFile};
use btprof::formats::flamegraph::write_differential;
use btprof::{report, FlamegraphOptions, FoldOptions, Profile};
use clap::{Args, ValueEnum};

use super::{fail, read_folded_file, read_profile, write_file, FormatArg, InputArgs};

/// Compare two folded profiles; exit 1 if a function regressed
///
/// Both profiles are normalised by their own total samples, so runs of
/// different length compare. For every function (a frame name, summed
/// over threads) the report shows its self share (samples where it is the
/// leaf) and total share (samples whose stack contains it) in each run and
/// the change in percentage points, largest increase first, then the
/// functions that are new or vanished.
///
/// A function REGRESSED when its share (self, or total with --share total)
///   1. grew by more than --threshold percentage points,
///   2. has at least --min-samples samples in the new run, and
///   3. grew beyond sampling noise: a one-sided pooled
///      two-proportion z-test gives p < alpha / m, where m is the number
///      of functions compared (a Bonferroni correction, so the chance
///      that noise alone flags any function in the whole diff is at most
///      --alpha).
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
  btprof diff base.folded new.folded -o diff.svg --negated-output diff-negated.svg
  btprof diff base.folded new.folded --folded-out diff.folded  # for inferno-flamegraph
  btprof diff base.folded new.folded --format markdown >> \"$GITHUB_STEP_SUMMARY\"
  btprof diff base.folded new.folded --share total --skip-root --threshold 5
  btprof diff diff.folded                 one two-count file: BEFORE AFTER columns")]
pub struct DiffArgs {
    /// The base (before) profile: a folded file from btprof,
    /// inferno-collapse-* or FlameGraph's stackcollapse*, or another
    /// profiler's raw output (`perf script`, ...).
    pub base: PathBuf,

    /// The new (after) profile, in the same format. Either side (not
    /// both) can be `-`, standard input. Left out, BASE is a two-count
    /// file holding both runs.
    pub new: Option<PathBuf>,

    /// How the input files are read.
    #[command(flatten)]
    pub input: InputArgs,

    /// Smallest growth, in percentage points of all samples, that can be a
    /// regression.
    #[arg(long, value_name = "POINTS", default_value_t = DiffOptions::default().threshold_points, value_parser = parse_threshold)]
    pub threshold: f64,

    /// Fewest samples of the function in the new run for a regression.
    #[arg(long, value_name = "N", default_value_t = DiffOptions::default().min_samples)]
    pub min_samples: u64,

    /// Accepted chance that sampling noise alone flags any function in the
    /// diff (divided by the number of functions for each test).
    #[arg(long, value_name = "P", default_value_t = DiffOptions::default().alpha, value_parser = parse_alpha)]
    pub alpha: f64,

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

/// The two runs: two files, or one two-count file's two columns.
fn read_runs(args: &DiffArgs) -> Result<(Profile, Profile), String> {
    let Some(new) = &args.new else {
        return match read_folded_file(&args.base, args.input)? {
            FoldedFile {
                profile,
                base: Some(base),
            } => Ok((base, profile)),
            FoldedFile { profile, .. } => Err(format!(
                "{} has one count per line: give the new profile too (btprof diff BASE NEW), \
                 or one two-count file (`frame;...;frame BEFORE AFTER` lines, as \
                 inferno-diff-folded writes)",
                profile.source()
            )),
        };
    };
    if args.base.as_os_str() == "-" && new.as_os_str() == "-" {
        return Err("only one side of a diff can be standard input (-)".to_owned());
    }
    Ok((
        read_profile(&args.base, args.input)?,
        read_profile(new, args.input)?,
    ))
}

/// Compares, prints the report and writes the flamegraphs asked for.
pub fn run(args: &DiffArgs) -> ExitCode {
    let options = DiffOptions {
        metric: match args.share {
            ShareArg::SelfShare => Metric::SelfShare,
            ShareArg::TotalShare => Metric::TotalShare,
        },
        threshold_points: args.threshold,
        min_samples: args.min_samples,
        alpha: args.alpha,
        skip_root: args.skip_root,
        self_frame: match args.self_frame {
            SelfFrameArg::OwnCode => SelfFrame::OwnCode,
            SelfFrameArg::Leaf => SelfFrame::Leaf,
        },
    };
    if let Err(message) = options.validate() {
        return fail(message);
    }
    let (base, new) = match read_runs(args) {
        Ok(both) => both,
        Err(message) => return fail(message),
    };
    let diff = compare(&base, &new, &options);
    let rows = (args.top != 0).then_some(args.top);
    print!("{}", report::diff_report(&diff, args.format.into(), rows));

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
