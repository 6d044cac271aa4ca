//! The `btprof` commands that read folded files, one module each;
//! `main.rs` parses the command line and dispatches here (the profiling
//! run itself, `btprof --pid-self`, is still in `main.rs`).
//!
//! Exit codes are shared with profiling: 0 success (no regression), 1 a
//! failed check (a regression, a failed self-check), 2 bad input or usage.

pub mod diff;
pub mod flamegraph;
pub mod report;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use btprof::report::Format;
use btprof::{Profile, RunInfo};
use clap::{Subcommand, ValueEnum};

/// The commands besides profiling.
#[derive(Subcommand, Debug)]
pub enum Command {
    Diff(diff::DiffArgs),
    Report(report::ReportArgs),
    Flamegraph(flamegraph::FlamegraphArgs),
}

impl Command {
    /// Runs the command and says how to exit.
    pub fn run(&self) -> ExitCode {
        match self {
            Command::Diff(args) => diff::run(args),
            Command::Report(args) => report::run(args),
            Command::Flamegraph(args) => flamegraph::run(args),
        }
    }
}

/// The exit code for bad input or usage, as clap uses for usage errors.
pub const EXIT_BAD_INPUT: u8 = 2;

/// Prints `btprof: message` and returns the bad-input exit code.
pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("btprof: {message}");
    ExitCode::from(EXIT_BAD_INPUT)
}

/// `--format`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum FormatArg {
    /// Aligned columns for a terminal.
    #[default]
    Text,
    /// One JSON document with every function.
    Json,
    /// GitHub-flavoured Markdown, for CI summaries and pull-request comments.
    Markdown,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Text => Format::Text,
            FormatArg::Json => Format::Json,
            FormatArg::Markdown => Format::Markdown,
        }
    }
}

/// Reads a folded file and, when there is one, the run metadata sidecar
/// beside it (`run.folded` -> `run.json`, as btprof writes them), which
/// the diff uses to warn about runs that do not compare. The error names
/// the file and what is wrong; a sidecar that cannot be read is only
/// warned about, since the stacks are what is compared.
pub(crate) fn read_profile(path: &Path) -> Result<Profile, String> {
    let profile = Profile::read_folded(path).map_err(|e| e.to_string())?;
    let info = RunInfo::read_sidecar(path).unwrap_or_else(|e| {
        eprintln!("btprof: warning: ignoring the run metadata: {e}");
        None
    });
    Ok(profile.with_run_info(info))
}

/// Creates `path` and writes it with `write`; errors name the file.
pub(crate) fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), btprof::Error>,
) -> Result<(), String> {
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut out = BufWriter::new(file);
    write(&mut out)
        .and_then(|()| out.flush().map_err(btprof::Error::Io))
        .map_err(|e| format!("{}: {e}", path.display()))
}
