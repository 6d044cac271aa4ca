//! `btprof report FILE`: a folded file's top functions by self and by
//! total share.

use std::path::PathBuf;
use std::process::ExitCode;

use btprof::analysis::functions::FunctionTable;
use btprof::report;
use clap::Args;

use super::{fail, read_profile, FormatArg, InputArgs};

/// Show a folded file's top functions by self and by total share.
///
/// Self share: samples in which the function is the leaf (its own code
/// was running), over all samples. Total share: samples whose stack
/// contains the function anywhere (it, or something it called, was
/// running); recursion counts once per stack. A function is its frame
/// name, summed over threads.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  btprof report btprof.folded
  btprof report --top 5 --skip-root --format markdown btprof.folded
  perf script | inferno-collapse-perf | btprof report -
  perf script | btprof report -")]
pub struct ReportArgs {
    /// A folded file: btprof's own, or from inferno-collapse-* or
    /// FlameGraph's stackcollapse* scripts (`frame;...;frame COUNT` lines),
    /// or another profiler's raw output (`perf script`, DTrace, ...); `-`
    /// reads standard input.
    pub file: PathBuf,

    /// How the input files are read.
    #[command(flatten)]
    pub input: InputArgs,

    /// How many functions each table lists; 0 lists all.
    #[arg(long, default_value_t = 20)]
    pub top: usize,

    /// Treat each stack's first frame as a thread or process label, not a
    /// function (btprof's files start every stack with the thread name).
    #[arg(long)]
    pub skip_root: bool,

    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: FormatArg,
}

/// Prints the report: exit 0, or 2 when the file cannot be read.
pub fn run(args: &ReportArgs) -> ExitCode {
    let profile = match read_profile(&args.file, args.input) {
        Ok(p) => p,
        Err(message) => return fail(message),
    };
    let table = FunctionTable::new(&profile, args.skip_root);
    let top = if args.top == 0 { usize::MAX } else { args.top };
    print!(
        "{}",
        report::function_report(&profile, &table, top, args.format.into())
    );
    ExitCode::SUCCESS
}
