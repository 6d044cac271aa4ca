//! SVG flamegraphs through `inferno`.

use std::io::Write;

use inferno::flamegraph::{self, Options};

use crate::folded::{fold_lines, FoldOptions};
use crate::profile::Profile;
use crate::Error;

/// How to render a flamegraph.
#[derive(Clone, Debug, Default)]
pub struct FlamegraphOptions {
    /// The title; `None` for "btprof: <samples> samples, <seconds> s, <rate> Hz".
    pub title: Option<String>,
    /// Merge identical stacks of different threads.
    pub merge_threads: bool,
}

/// The default title: what was measured, from the profile's own stats.
pub fn default_title(profile: &Profile) -> String {
    let stats = profile.stats();
    let unit = match stats.mode {
        crate::Mode::Cpu => "samples per CPU-second",
        crate::Mode::Wall => "ticks per second",
    };
    format!(
        "btprof {} profile: {} samples over {:.2} s at {:.0} {unit} (requested {} Hz, {})",
        stats.mode,
        stats.samples,
        stats.duration.as_secs_f64(),
        stats.achieved_hz(),
        stats.requested_hz,
        stats.clock.describe(),
    )
}

/// Renders `profile` as an SVG flamegraph into `w`.
///
/// Colours are a hash of the function name, so a function has the same
/// colour in every run and two flamegraphs can be compared by eye.
pub fn write_flamegraph<W: Write>(
    profile: &Profile,
    options: &FlamegraphOptions,
    w: W,
) -> Result<(), Error> {
    if profile.is_empty() {
        return Err(Error::EmptyProfile);
    }
    let lines = fold_lines(
        profile.stacks(),
        FoldOptions {
            merge_threads: options.merge_threads,
        },
    );
    let mut opts = Options::default();
    opts.title = options
        .title
        .clone()
        .unwrap_or_else(|| default_title(profile));
    opts.subtitle = Some(profile.run_info().summary());
    opts.hash = true;
    opts.deterministic = true;
    opts.count_name = "samples".into();
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
        .map_err(|e| Error::Render(e.to_string()))
}
