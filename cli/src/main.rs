//! `btprof`: profile this process on a known workload, or compare, report
//! and draw folded profiles. Each command lives in its own module of
//! `btprof_cli::commands`; this file only parses and dispatches.

use std::process::ExitCode;

use btprof_cli::commands::pid_self::{self, ProfileArgs};
use btprof_cli::commands::Command;
use clap::Parser;

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
  btprof --pid-self --slow alpha --folded slow.folded
  btprof diff btprof.folded slow.folded -o diff.svg     exit 1: alpha regressed
  btprof report --top 10 btprof.folded
  btprof flamegraph btprof.folded -o btprof.svg --inverted")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    profile: ProfileArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(command) => command.run(),
        None => pid_self::run(&cli.profile),
    }
}
