//! The `btprof` commands, one module each: those that read folded files,
//! and `record`, which profiles another program; `main.rs` parses the
//! command line and dispatches here (the self-profiling run, `btprof
//! --pid-self`, is still in `main.rs`).
//!
//! Exit codes are shared with profiling: 0 success (no regression), 1 a
//! failed check (a regression, a failed self-check), 2 bad input or usage.

pub mod diff;
pub mod dump;
pub mod export;
pub mod flamegraph;
pub mod record;
pub mod report;
mod run_files;

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use btprof::folded::{FoldedFile, ReadOptions};
use btprof::formats::output_file::PendingFile;
use btprof::report::Format;
use btprof::{Profile, RunInfo};
use clap::{Subcommand, ValueEnum};

/// The commands besides profiling.
///
/// The variants are documented only in rustdoc builds (`cfg(doc)`): clap
/// takes a variant's doc comment as the command's help and would then
/// ignore the full help written on each command's arguments.
#[derive(Subcommand, Debug)]
pub enum Command {
    #[cfg_attr(
        doc,
        doc = "`btprof diff`: did a function get slower between two profiles?"
    )]
    Diff(diff::DiffArgs),
    #[cfg_attr(doc, doc = "`btprof report`: the top functions of one profile.")]
    Report(report::ReportArgs),
    #[cfg_attr(doc, doc = "`btprof flamegraph`: re-render a folded file as an SVG.")]
    Flamegraph(flamegraph::FlamegraphArgs),
    #[cfg_attr(doc, doc = "`btprof export`: convert a profile to pprof.")]
    Export(export::ExportArgs),
    Record(record::RecordArgs),
    #[cfg_attr(doc, doc = "`btprof dump`: a thread dump of another process.")]
    Dump(dump::DumpArgs),
}

impl Command {
    /// Runs the command and says how to exit.
    pub fn run(&self) -> ExitCode {
        match self {
            Command::Diff(args) => diff::run(args),
            Command::Report(args) => report::run(args),
            Command::Flamegraph(args) => flamegraph::run(args),
            Command::Export(args) => export::run(args),
            Command::Record(args) => record::run(args),
            Command::Dump(args) => dump::run(args),
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

/// How the commands read their input files: `--lenient`.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct InputArgs {
    /// Skip malformed lines (with a warning that counts them and names
    /// the first few) instead of failing. Off by default: a regression
    /// gate must not judge half a file.
    #[arg(long)]
    pub lenient: bool,
}

/// The name standard input goes by in messages.
pub const STDIN_NAME: &str = "<stdin>";

/// For the commands that turn one folded file into another format: where
/// to write (`output`, or `file` with `extension`, which standard input
/// and a file that already ends so cannot give).
pub(crate) fn output_path(
    file: &Path,
    output: Option<&Path>,
    extension: &str,
) -> Result<PathBuf, String> {
    match output {
        Some(path) => Ok(path.to_path_buf()),
        None if file.as_os_str() == "-" => {
            Err("reading standard input: give the output with -o".to_owned())
        }
        None => {
            let derived = file.with_extension(extension);
            if derived == file {
                return Err(format!(
                    "{} already ends in .{extension}: give the output with -o",
                    file.display()
                ));
            }
            Ok(derived)
        }
    }
}

/// Reads a profile: a folded file (btprof's, inferno-collapse-*,
/// FlameGraph's stackcollapse*), or another profiler's raw output that
/// inferno's collapsers know (`perf script`, DTrace, ...); `-` reads
/// standard input. When there is one, the run metadata sidecar beside a
/// file (`run.folded` -> `run.json`, as btprof writes them) comes along,
/// which the diff uses to warn about runs that do not compare. The error
/// names the file and what is wrong; a sidecar that cannot be read is
/// only warned about, since the stacks are what is compared. What
/// reading noticed (rounded counts, skipped lines) is printed as warnings.
///
/// A two-count (differential) file is read as its second counts, the new
/// run, with a warning; [`read_folded_file`] reads both runs.
pub(crate) fn read_profile(path: &Path, input: InputArgs) -> Result<Profile, String> {
    Ok(read(path, input, false)?.profile)
}

/// [`read_profile`] for the commands that draw or compare both runs of a
/// two-count (differential) file: the file as it is, one run or two.
pub(crate) fn read_folded_file(path: &Path, input: InputArgs) -> Result<FoldedFile, String> {
    read(path, input, true)
}

/// Reads `path` (or standard input), prints what reading noticed, and
/// attaches a one-count file's sidecar. Unless `keep_both`, a two-count
/// file's first counts are dropped, with a warning.
fn read(path: &Path, input: InputArgs, keep_both: bool) -> Result<FoldedFile, String> {
    let options = ReadOptions {
        lenient: input.lenient,
    };
    let stdin = path.as_os_str() == "-";
    let (file, mut notes) = if stdin {
        FoldedFile::read_from_with(std::io::stdin().lock(), STDIN_NAME, options)
    } else {
        FoldedFile::read_with(path, options)
    }
    .map_err(|e| e.to_string())?;
    // Warnings name the file, not one of a two-count file's runs.
    let source = match &file.base {
        None => file.profile.source().to_owned(),
        Some(_) if stdin => STDIN_NAME.to_owned(),
        Some(_) => path.display().to_string(),
    };
    // A two-count file has no sidecar of its own: its runs' sidecars are
    // beside the files it was made from, if anywhere.
    let sidecar = !stdin && file.base.is_none();
    let file = if keep_both {
        file
    } else {
        FoldedFile {
            profile: file.into_profile(&mut notes),
            base: None,
        }
    };
    for warning in notes.warnings(&source) {
        eprintln!("btprof: warning: {warning}");
    }
    if !sidecar {
        return Ok(file);
    }
    let info = RunInfo::read_sidecar(path).unwrap_or_else(|e| {
        eprintln!("btprof: warning: ignoring the run metadata: {e}");
        None
    });
    Ok(FoldedFile {
        profile: file.profile.with_run_info(info),
        base: file.base,
    })
}

/// Writes `path` with `write`, all or nothing: through a temporary file
/// renamed into place, so a failure leaves an existing file as it was
/// (see `btprof::output_file`). Errors name the file.
pub(crate) fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), btprof::Error>,
) -> Result<(), String> {
    // The helper's own errors already name the path.
    let mut pending = PendingFile::create(path).map_err(|e| format!("cannot write {e}"))?;
    write(pending.writer()).map_err(|e| format!("{}: {e}", path.display()))?;
    pending.commit().map_err(|e| format!("cannot write {e}"))?;
    Ok(())
}
