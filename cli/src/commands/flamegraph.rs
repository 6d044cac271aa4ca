//! `btprof flamegraph FILE -o out.svg`: re-render a folded file.

use std::path::PathBuf;
use std::process::ExitCode;

use btprof::folded::FoldedFile;
use btprof::formats::flamegraph::{write_differential, DEFAULT_MIN_WIDTH};
use btprof::FlamegraphOptions;
use clap::Args;

use super::{fail, output_path, read_folded_file, write_file, InputArgs};

/// Draw a folded file as an SVG flamegraph.
///
/// Any folded file works: btprof's own, or the output of inferno-collapse-*
/// or FlameGraph's stackcollapse* scripts; so does another profiler's raw
/// output that inferno's collapsers know (`perf script`, DTrace, ...).
/// Frames narrower than --min-width are left out exactly as
/// inferno-flamegraph leaves them out, so both draw the same graph.
/// Colours are a hash of each
/// function's name, so a function looks the same in every graph.
///
/// A two-count file (`frame;...;frame BEFORE AFTER`, as inferno-diff-folded
/// and difffolded.pl write) is drawn as a differential flamegraph, as
/// `btprof diff -o` draws one: the new run's stacks, each frame red where
/// its total grew and blue where it shrank, against its own share of the
/// base run.
#[derive(Args, Debug)]
#[command(after_help = "Examples:
  btprof flamegraph btprof.folded                 writes btprof.svg
  btprof flamegraph run.folded -o run.svg --title 'nightly run' --inverted
  perf script | btprof flamegraph - -o perf.svg
  inferno-diff-folded base.folded new.folded > diff.folded
  btprof flamegraph diff.folded                   writes diff.svg, differential")]
pub struct FlamegraphArgs {
    /// The folded file to draw (or another profiler's raw output, like
    /// `perf script`); `-` reads standard input (then give -o).
    pub file: PathBuf,

    /// How the input files are read.
    #[command(flatten)]
    pub input: InputArgs,

    /// Where to write the SVG [default: FILE with the extension .svg].
    #[arg(long, short)]
    pub output: Option<PathBuf>,

    /// The title [default: the file's name, samples and stacks].
    #[arg(long)]
    pub title: Option<String>,

    /// Draw an icicle graph: roots at the top, stacks growing down.
    #[arg(long, visible_alias = "icicle")]
    pub inverted: bool,

    /// Leave out frames narrower than this percentage of the graph's
    /// width: inferno-flamegraph's --minwidth, same unit and default, so
    /// both draw the same frames. 0 keeps every frame.
    #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_MIN_WIDTH, value_parser = parse_min_width)]
    pub min_width: f64,

    /// Image width in pixels.
    #[arg(long, default_value_t = 1200, value_parser = clap::value_parser!(u32).range(100..=100_000))]
    pub width: u32,
}

fn parse_min_width(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(w) if w.is_finite() && (0.0..=100.0).contains(&w) => Ok(w),
        _ => Err(format!(
            "`{text}` is not a width: expected a percentage of the graph's width from 0 \
             to 100 (like 0.01, the default, or 0.1)"
        )),
    }
}

/// Writes the flamegraph: exit 0, or 2 on bad input or an unwritable
/// output.
pub fn run(args: &FlamegraphArgs) -> ExitCode {
    let read = output_path(&args.file, args.output.as_deref(), "svg")
        .and_then(|output| Ok((output, read_folded_file(&args.file, args.input)?)));
    let (output, file) = match read {
        Ok(both) => both,
        Err(message) => return fail(message),
    };
    let style = FlamegraphOptions {
        title: args.title.clone(),
        merge_threads: false,
        hide_inlined: false,
        label_frames: false,
        inverted: args.inverted,
        min_width: args.min_width,
        image_width: Some(args.width as usize),
    };
    let FoldedFile { profile, base } = &file;
    let (written, what) = match base {
        None => (
            write_file(&output, |w| profile.write_flamegraph_with(&style, w)),
            "",
        ),
        Some(base) => (
            write_file(&output, |w| {
                write_differential(base, profile, &style, false, w)
            }),
            " (differential: the new run's stacks; red grew, blue shrank)",
        ),
    };
    if let Err(message) = written {
        return fail(message);
    }
    println!("wrote {}{what}", output.display());
    ExitCode::SUCCESS
}
