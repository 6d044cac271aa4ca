//! SVG flamegraphs through `inferno`: one profile, or the differential
//! flamegraph of two. One set of options for both.
//!
//! Colours are a hash of the function name, so a function has the same
//! colour in every run and two flamegraphs can be compared by eye.
//!
//! A differential flamegraph is drawn with the *new* run's stacks and
//! widths, each frame coloured by how its total changed: red grew, blue
//! shrank. Code that vanished has no width in the new run and cannot be
//! seen there; the *negated* companion has the base run's shape, coloured
//! the same way (see `differential.rs`).

mod differential;

use std::io::Write;

use inferno::flamegraph::{self, Direction, Options};

pub use differential::write_differential;

use super::folded::FoldOptions;
use crate::profile::Profile;
use crate::Error;

/// The default [`FlamegraphOptions::min_width`], in percent of the graph's
/// width: `inferno`'s own default (0.01 %), used by every graph btprof
/// draws.
pub const DEFAULT_MIN_WIDTH: f64 = inferno::flamegraph::defaults::MIN_WIDTH;

/// How to draw a flamegraph.
#[derive(Clone, Debug, PartialEq)]
pub struct FlamegraphOptions {
    /// The title; `None` for one that says what was measured (a
    /// recording: samples, duration, rate; a file: its name, samples and
    /// stacks).
    pub title: Option<String>,
    /// Merge identical stacks of different threads.
    pub merge_threads: bool,
    /// Leave out inlined frames ([`FoldOptions::hide_inlined`]).
    pub hide_inlined: bool,
    /// Split stacks by label ([`FoldOptions::label_frames`]).
    pub label_frames: bool,
    /// Draw an icicle graph: roots at the top, growing down.
    pub inverted: bool,
    /// Frames narrower than this percentage of the whole graph's width
    /// are left out: inferno's `--minwidth`, same unit and default
    /// ([`DEFAULT_MIN_WIDTH`]), so a graph drawn by btprof and one drawn
    /// by `inferno-flamegraph` from the same file have the same frames.
    pub min_width: f64,
    /// Image width in pixels; `None` for inferno's default (1200).
    pub image_width: Option<usize>,
}

impl Default for FlamegraphOptions {
    fn default() -> Self {
        FlamegraphOptions {
            title: None,
            merge_threads: false,
            hide_inlined: false,
            label_frames: false,
            inverted: false,
            min_width: DEFAULT_MIN_WIDTH,
            image_width: None,
        }
    }
}

impl FlamegraphOptions {
    /// `inferno`'s options for these, with stable per-name colours.
    fn inferno(&self, default_title: impl FnOnce() -> String) -> Options<'static> {
        let mut opts = Options::default();
        opts.title = self.title.clone().unwrap_or_else(default_title);
        if self.inverted {
            opts.direction = Direction::Inverted;
        }
        opts.min_width = self.min_width;
        opts.image_width = self.image_width;
        opts.hash = true;
        opts.deterministic = true;
        opts.count_name = "samples".into();
        opts
    }
}

/// The default title: what was measured. For a recording, from its own
/// stats; for a file, its name, samples and distinct stacks.
pub fn default_title(profile: &Profile) -> String {
    match profile.stats() {
        Some(stats) => format!(
            "btprof {} profile: {} samples over {:.2} s at {:.0} {} (requested {} Hz, {})",
            stats.mode,
            stats.samples,
            stats.duration.as_secs_f64(),
            stats.achieved_hz(),
            match stats.mode {
                crate::Mode::Cpu => "samples per CPU-second",
                crate::Mode::Wall => "ticks per second",
            },
            stats.requested_hz,
            stats.clock.describe(),
        ),
        None => format!(
            "{}: {} samples, {} distinct stacks",
            profile.source(),
            profile.total_samples(),
            profile.distinct_stacks()
        ),
    }
}

impl Profile {
    /// Writes an SVG flamegraph with the default options. An empty profile
    /// is [`Error::EmptyProfile`].
    pub fn write_flamegraph<W: Write>(&self, w: W) -> Result<(), Error> {
        self.write_flamegraph_with(&FlamegraphOptions::default(), w)
    }

    /// Writes an SVG flamegraph with options. A recording's subtitle says
    /// where, when and how well it was taken.
    pub fn write_flamegraph_with<W: Write>(
        &self,
        options: &FlamegraphOptions,
        w: W,
    ) -> Result<(), Error> {
        if self.is_empty() {
            return Err(Error::EmptyProfile);
        }
        let lines = self.folded_lines(FoldOptions {
            merge_threads: options.merge_threads,
            hide_inlined: options.hide_inlined,
            label_frames: options.label_frames,
        });
        let mut opts = options.inferno(|| default_title(self));
        if self.stats().is_some() {
            opts.subtitle = self.run_info().map(|info| info.summary());
        }
        flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
            .map_err(|e| Error::Render(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(text: &str, source: &str) -> Profile {
        Profile::read_folded_from(text.as_bytes(), source).unwrap()
    }

    fn svg(render: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>) -> String {
        let mut out = Vec::new();
        render(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn renders_a_titled_flamegraph_with_every_frame() {
        let p = folded("main;parse 30\nmain;render 70\n", "run.folded");
        let style = FlamegraphOptions {
            image_width: Some(800),
            ..FlamegraphOptions::default()
        };
        let text = svg(|w| p.write_flamegraph_with(&style, w));
        assert!(text.contains("<svg"), "not an SVG");
        assert!(text.contains("run.folded: 100 samples, 2 distinct stacks"));
        assert!(text.contains("render (70 samples, 70.00%)"), "{text}");
        assert!(text.contains("width=\"800\""));
    }

    #[test]
    fn inverted_and_titled_differ_from_default() {
        let p = folded("main;a 1\n", "x");
        let plain = svg(|w| p.write_flamegraph(w));
        let icicle = svg(|w| {
            p.write_flamegraph_with(
                &FlamegraphOptions {
                    inverted: true,
                    title: Some("Icicle".into()),
                    ..FlamegraphOptions::default()
                },
                w,
            )
        });
        assert!(icicle.contains("Icicle") && !plain.contains("Icicle"));
        assert_ne!(
            plain.replace("Flame Graph", ""),
            icicle.replace("Icicle", "")
        );
    }

    #[test]
    fn empty_profiles_are_a_clear_error() {
        let empty = crate::profile::Builder::new().finish(crate::Stats::new(&Default::default()));
        let mut out = Vec::new();
        assert!(matches!(
            empty.write_flamegraph(&mut out),
            Err(Error::EmptyProfile)
        ));
    }
}
