//! `btprof export FILE --format pprof`: convert a folded file for a
//! continuous-profiling backend.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::{fail, output_path, read_profile, write_file, InputArgs};

/// Convert a folded file to pprof (gzipped profile.proto)
///
/// pprof is what Grafana Pyroscope, Parca, Datadog, Google Cloud Profiler
/// and `go tool pprof` read. Every stack becomes a sample with its count
/// (`samples`); with btprof's metadata sidecar beside the file (run.folded
/// -> run.json), also the time it stands for (cpu or wall nanoseconds at
/// the recorded rate), the start time and the duration.
///
/// Recording can write pprof directly: btprof --pid-self --pprof FILE.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(after_help = "Examples:
  btprof export btprof.folded --thread-root        writes btprof.pb.gz
  go tool pprof -top btprof.pb.gz
  btprof export run.folded -o run.pb.gz")]
pub struct ExportArgs {
    /// The folded file to convert (`-` for standard input).
    pub file: PathBuf,

    /// How the input files are read.
    #[command(flatten)]
    pub input: InputArgs,

    /// The output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Pprof)]
    pub format: ExportFormat,

    /// Where to write [default: FILE with the extension .pb.gz].
    #[arg(long, short)]
    pub output: Option<PathBuf>,

    /// Take each stack's first frame as its thread's name, as in btprof's
    /// own files, and put it on the sample as a `thread` label instead of
    /// a frame.
    #[arg(long)]
    pub thread_root: bool,
}

/// `--format`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Gzipped profile.proto.
    Pprof,
}

/// Writes the export: exit 0, or 2 on bad input or an unwritable output.
pub fn run(args: &ExportArgs) -> ExitCode {
    let read = output_path(&args.file, args.output.as_deref(), "pb.gz")
        .and_then(|output| Ok((output, read_profile(&args.file, args.input)?)));
    let (output, profile) = match read {
        Ok(both) => both,
        Err(message) => return fail(message),
    };
    let ExportFormat::Pprof = args.format;
    if let Err(message) = write_file(&output, |w| profile.write_pprof_with(args.thread_root, w)) {
        return fail(message);
    }
    println!("wrote {}", output.display());
    ExitCode::SUCCESS
}
