//! The differential flamegraph of two profiles, and its negated companion.
//!
//! `inferno` draws the graph from the two-count lines of the comparison
//! (the shape of one run, each frame's width its samples there), but it
//! gives each frame only the change of its *own* samples: a caller whose
//! callees all grew reads as unchanged, and its percentages are of the
//! whole graph. So btprof redraws what a frame says once `inferno` has
//! laid it out: every frame, leaf or not, gets the change of its *total*
//! (its samples and its callees'), and
//!
//! - its colour says how much that total grew or shrank relative to its
//!   own size in the base run: red grew, blue shrank, white unchanged,
//!   full colour at double (or half) its base share and for new code;
//! - its tooltip says `name (N samples, 12.1% → 15.3% of samples: +3.2
//!   points, +26% of its own time)`, the shares of each run's own total.
//!
//! Frames are matched to stacks by position, not by name: in each row of
//! the SVG, a frame's parent is the frame of the row below (above, in an
//! icicle graph) whose span holds its first sample.

use std::collections::HashMap;
use std::io::Write;

use inferno::flamegraph;

use super::super::folded::{write_two_count, FoldOptions};
use super::FlamegraphOptions;
use crate::profile::Profile;
use crate::Error;

/// Renders the differential flamegraph of `base` against `new` into `w`:
/// the new run's shape, each frame coloured by how its total changed.
/// With `negated`, the companion: the base run's shape, so code that
/// vanished shows, coloured the same way (red still means "grew").
pub fn write_differential<W: Write>(
    base: &Profile,
    new: &Profile,
    options: &FlamegraphOptions,
    negated: bool,
    mut w: W,
) -> Result<(), Error> {
    if base.is_empty() || new.is_empty() {
        return Err(Error::EmptyProfile);
    }
    let fold = FoldOptions {
        merge_threads: options.merge_threads,
        hide_inlined: options.hide_inlined,
        label_frames: options.label_frames,
    };
    let (before, after) = if negated { (new, base) } else { (base, new) };
    let mut lines = Vec::new();
    write_two_count(before, after, fold, &mut lines)?;
    // Every frame name came from a `str`, so this cannot fail; an error
    // would only mean a bug here, reported rather than unwrapped.
    let render = |e: std::string::FromUtf8Error| Error::Render(e.to_string());
    let lines = String::from_utf8(lines).map_err(render)?;

    let mut opts = options.inferno(|| {
        format!(
            "btprof diff: base {} \u{2192} new {}{}",
            base.source_name().unwrap_or("run"),
            new.source_name().unwrap_or("run"),
            if negated { " (negated)" } else { "" }
        )
    });
    let widths = if negated {
        "the base run's samples, so vanished code shows"
    } else {
        "the new run's samples"
    };
    opts.subtitle = Some(format!(
        "widths: {widths}; colour: each frame's total against its own base share \
         (red grew, blue shrank, full at 2x or new)"
    ));
    opts.negate_differentials = negated;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut opts, lines.lines(), &mut svg)
        .map_err(|e| Error::Render(e.to_string()))?;
    let svg = String::from_utf8(svg).map_err(render)?;
    let totals = Totals::of(base, new, fold);
    w.write_all(relabel(&svg, &totals, options.inverted).as_bytes())
        .map_err(Error::Io)?;
    w.flush().map_err(Error::Io)
}

/// Each stack prefix's total samples in both runs: a trie of frame names
/// from the root, node 0 the graph's root (`all`).
struct Totals {
    children: HashMap<(usize, String), usize>,
    /// `(base, new)` samples of each node, itself and its callees.
    samples: Vec<(u64, u64)>,
}

impl Totals {
    fn of(base: &Profile, new: &Profile, fold: FoldOptions) -> Totals {
        let mut totals = Totals {
            children: HashMap::new(),
            samples: vec![(0, 0)],
        };
        for (run, profile) in [(0, base), (1, new)] {
            for line in profile.folded_lines(fold) {
                let Some((stack, count)) = line.rsplit_once(' ') else {
                    continue;
                };
                let count: u64 = count.parse().unwrap_or(0);
                totals.add(run, stack.split(';'), count);
            }
        }
        totals
    }

    fn add<'a>(&mut self, run: usize, frames: impl Iterator<Item = &'a str>, count: u64) {
        let mut node = 0;
        self.bump(node, run, count);
        for frame in frames {
            let next = self.samples.len();
            node = *self
                .children
                .entry((node, frame.to_owned()))
                .or_insert(next);
            if node == next {
                self.samples.push((0, 0));
            }
            self.bump(node, run, count);
        }
    }

    fn bump(&mut self, node: usize, run: usize, count: u64) {
        let samples = &mut self.samples[node];
        if run == 0 {
            samples.0 += count;
        } else {
            samples.1 += count;
        }
    }

    fn child(&self, node: usize, name: &str) -> Option<usize> {
        self.children.get(&(node, name.to_owned())).copied()
    }
}

/// One frame of `inferno`'s SVG: where its title and fill are, and where
/// it is drawn.
struct Frame {
    /// Byte range of the title's text.
    title: std::ops::Range<usize>,
    /// Byte range of the fill attribute's value.
    fill: std::ops::Range<usize>,
    /// The frame's name, unescaped.
    name: String,
    /// Its row's `y`, and its first sample and width in samples.
    y: String,
    x: u64,
    width: u64,
}

/// Reads every frame of an `inferno` SVG. Anything not shaped as
/// expected is left out (and so keeps what `inferno` wrote).
fn frames(svg: &str) -> Vec<Frame> {
    const OPEN: &str = "<g><title>";
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = svg[at..].find(OPEN) {
        let start = at + found + OPEN.len();
        at = start;
        let Some(title_len) = svg[start..].find("</title>") else {
            break;
        };
        let title = start..start + title_len;
        let rect_start = title.end;
        let Some(rect_len) = svg[rect_start..].find("/>") else {
            break;
        };
        let rect = &svg[rect_start..rect_start + rect_len];
        let attr = |name: &str| -> Option<std::ops::Range<usize>> {
            let key = format!(" {name}=\"");
            let from = rect.find(&key)? + key.len();
            let len = rect[from..].find('"')?;
            Some(rect_start + from..rect_start + from + len)
        };
        let (Some(fill), Some(y), Some(x), Some(width)) =
            (attr("fill"), attr("y"), attr("fg:x"), attr("fg:w"))
        else {
            continue;
        };
        let (Ok(x), Ok(width)) = (svg[x].parse(), svg[width].parse()) else {
            continue;
        };
        let Some((name, _)) = svg[title.clone()].rsplit_once(" (") else {
            continue;
        };
        out.push(Frame {
            name: unescape(name),
            title,
            fill,
            y: svg[y].to_owned(),
            x,
            width,
        });
    }
    out
}

/// `svg` with every frame's title and colour from `totals`; `inverted`
/// for an icicle graph, whose root row is at the top.
fn relabel(svg: &str, totals: &Totals, inverted: bool) -> String {
    let frames = frames(svg);
    // The root is `all` in the outermost row: a function may be called
    // `all` too, but it sits on a row above the root's.
    let y = |f: &Frame| f.y.parse::<f64>().unwrap_or(0.0);
    let roots = frames.iter().enumerate().filter(|(_, f)| f.name == "all");
    let root = if inverted {
        roots.min_by(|(_, a), (_, b)| y(a).total_cmp(&y(b)))
    } else {
        roots.max_by(|(_, a), (_, b)| y(a).total_cmp(&y(b)))
    };
    let Some((root, _)) = root else {
        return svg.to_owned();
    };
    // Rows by distance from the root's row: depth 0 is the root.
    let root_y = y(&frames[root]);
    let mut rows: Vec<&str> = frames.iter().map(|f| f.y.as_str()).collect();
    let distance = |y: &str| (y.parse::<f64>().unwrap_or(0.0) - root_y).abs();
    rows.sort_by(|a, b| distance(a).total_cmp(&distance(b)));
    rows.dedup();
    let depth_of: HashMap<&str, usize> = rows.iter().enumerate().map(|(d, y)| (*y, d)).collect();
    let mut by_depth: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    for (i, frame) in frames.iter().enumerate() {
        by_depth[depth_of[frame.y.as_str()]].push(i);
    }
    for row in &mut by_depth {
        row.sort_by_key(|&i| frames[i].x);
    }
    // Each frame's trie node, row by row from the root.
    let mut node: Vec<Option<usize>> = vec![None; frames.len()];
    node[root] = Some(0);
    for depth in 1..by_depth.len() {
        for &i in &by_depth[depth] {
            let x = frames[i].x;
            let parents = &by_depth[depth - 1];
            let at = parents.partition_point(|&p| frames[p].x <= x);
            let parent = at.checked_sub(1).map(|j| parents[j]).filter(|&p| {
                let p = &frames[p];
                x < p.x + p.width
            });
            node[i] = parent
                .and_then(|p| node[p])
                .and_then(|n| totals.child(n, &frames[i].name));
        }
    }

    let (base_total, new_total) = totals.samples[0];
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for (frame, node) in frames.iter().zip(node) {
        let Some(node) = node else { continue };
        let (base, new) = totals.samples[node];
        let change = Change::new(base, base_total, new, new_total);
        // The name as escaped, and the samples as inferno wrote them
        // (`1,350`), from `name (1,350 samples, ...)`.
        let Some((name, details)) = svg[frame.title.clone()].rsplit_once(" (") else {
            continue;
        };
        let samples = details.split(' ').next().unwrap_or_default();
        edits.push((frame.title.clone(), change.title(name, samples)));
        edits.push((frame.fill.clone(), change.colour()));
    }
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = String::with_capacity(svg.len() + edits.len() * 32);
    let mut at = 0;
    for (range, text) in edits {
        out.push_str(&svg[at..range.start]);
        out.push_str(&text);
        at = range.end;
    }
    out.push_str(&svg[at..]);
    out
}

/// Undoes the XML escapes `inferno` writes in titles.
fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// How a frame's total changed between the runs, as shares of each run's
/// own samples.
struct Change {
    base_share: f64,
    new_share: f64,
}

impl Change {
    fn new(base: u64, base_total: u64, new: u64, new_total: u64) -> Change {
        let share = |n: u64, total: u64| {
            if total == 0 {
                0.0
            } else {
                n as f64 / total as f64
            }
        };
        Change {
            base_share: share(base, base_total),
            new_share: share(new, new_total),
        }
    }

    /// The change relative to the base share: 0.26 for +26% of its own
    /// time; `None` for code the base run did not have.
    fn relative(&self) -> Option<f64> {
        (self.base_share > 0.0).then(|| self.new_share / self.base_share - 1.0)
    }

    /// `name (N samples, 12.10% → 15.30% of samples: +3.20 points, +26%
    /// of its own time)`. The details end in one parenthesised group
    /// with no `(` inside: inferno's script takes the frame's label as
    /// the title without it.
    fn title(&self, escaped_name: &str, samples: &str) -> String {
        let points = (self.new_share - self.base_share) * 100.0;
        let own = match self.relative() {
            None => "new code".to_owned(),
            Some(r) if self.new_share == 0.0 && r <= -1.0 => "vanished".to_owned(),
            Some(r) => format!("{:+.0}% of its own time", r * 100.0),
        };
        format!(
            "{escaped_name} ({samples} samples, {:.2}% \u{2192} {:.2}% of samples: {points:+.2} points, {own})",
            self.base_share * 100.0,
            self.new_share * 100.0,
        )
    }

    /// Red for growth, blue for shrinking, white for no change; full
    /// colour at twice the base share (or half of it) and for new code.
    fn colour(&self) -> String {
        let strength = match self.relative() {
            None => 1.0,
            // Halving is as strong a change as doubling.
            Some(r) if r < 0.0 => (1.0 / (1.0 + r).max(0.5) - 1.0).min(1.0),
            Some(r) => r.min(1.0),
        };
        let shade = (250.0 - 200.0 * strength).round() as u8;
        let grew = self.relative().is_none_or(|r| r >= 0.0);
        if grew {
            format!("rgb(250,{shade},{shade})")
        } else {
            format!("rgb({shade},{shade},250)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(text: &str, source: &str) -> Profile {
        Profile::read_folded_from(text.as_bytes(), source).unwrap()
    }

    fn svg(base: &Profile, new: &Profile, negated: bool) -> String {
        let mut out = Vec::new();
        write_differential(base, new, &FlamegraphOptions::default(), negated, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The title and fill of the frame called `name`.
    fn frame<'a>(svg: &'a str, name: &str) -> (&'a str, &'a str) {
        let start = svg
            .find(&format!("<g><title>{name} ("))
            .unwrap_or_else(|| panic!("no frame {name}"))
            + "<g><title>".len();
        let title = &svg[start..start + svg[start..].find("</title>").unwrap()];
        let fill_at = start + svg[start..].find("fill=\"").unwrap() + "fill=\"".len();
        let fill = &svg[fill_at..fill_at + svg[fill_at..].find('"').unwrap()];
        (title, fill)
    }

    #[test]
    fn every_frame_carries_the_change_of_its_total() {
        // `parse` keeps its own 100 samples, but its callee `lex` doubles:
        // parse's total grows from 200 of 1000 to 300 of 1000.
        let base = folded(
            "t;main;parse 100\nt;main;parse;lex 100\nt;main;render 800\n",
            "base.folded",
        );
        let new = folded(
            "t;main;parse 100\nt;main;parse;lex 200\nt;main;render 700\n",
            "new.folded",
        );
        let svg = svg(&base, &new, false);
        let (title, fill) = frame(&svg, "parse");
        assert_eq!(
            title,
            "parse (300 samples, 20.00% \u{2192} 30.00% of samples: +10.00 points, \
             +50% of its own time)"
        );
        assert_eq!(fill, "rgb(250,150,150)", "half of full red");
        let (title, fill) = frame(&svg, "lex");
        assert!(
            title.ends_with("+10.00 points, +100% of its own time)"),
            "{title}"
        );
        assert_eq!(fill, "rgb(250,50,50)", "full red at double");
        let (title, fill) = frame(&svg, "render");
        assert!(title.contains("80.00% \u{2192} 70.00%"), "{title}");
        assert!(fill.ends_with(",250)"), "blue: {fill}");
        let (title, fill) = frame(&svg, "main");
        assert!(
            title.contains("+0.00 points, +0% of its own time"),
            "{title}"
        );
        assert_eq!(fill, "rgb(250,250,250)");
        assert!(svg.contains("btprof diff: base base.folded \u{2192} new new.folded"));
    }

    #[test]
    fn new_code_is_full_red_and_vanished_code_shows_in_the_negated_graph() {
        let base = folded("main;old 50\nmain;keep 50\n", "base");
        let new = folded("main;fresh 50\nmain;keep 50\n", "new");
        let diff = svg(&base, &new, false);
        let (title, fill) = frame(&diff, "fresh");
        assert!(title.starts_with("fresh (50 samples, 0.00%") && title.ends_with("new code)"));
        assert_eq!(fill, "rgb(250,50,50)");
        assert!(
            !diff.contains("<title>old ("),
            "vanished code has no width here"
        );
        let negated = svg(&base, &new, true);
        let (title, fill) = frame(&negated, "old");
        assert!(
            title.starts_with("old (50 samples, 50.00% \u{2192} 0.00%"),
            "{title}"
        );
        assert!(title.ends_with("vanished)"), "{title}");
        assert_eq!(fill, "rgb(50,50,250)");
        assert!(negated.contains("(negated)") && negated.contains("widths: the base run"));
    }

    #[test]
    fn names_that_need_escaping_and_icicles_are_matched() {
        // A function called `all`, like the graph's root, is matched too.
        let base = folded("t;<Vec<u8> as Drop>::drop 10\nt;a&b 10\nt;all 10\n", "b");
        let new = folded("t;<Vec<u8> as Drop>::drop 30\nt;a&b 10\nt;all 20\n", "n");
        let options = FlamegraphOptions {
            inverted: true,
            ..FlamegraphOptions::default()
        };
        let mut out = Vec::new();
        write_differential(&base, &new, &options, false, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        let (title, _) = frame(&svg, "&lt;Vec&lt;u8&gt; as Drop&gt;::drop");
        assert!(title.contains("33.33% \u{2192} 50.00%"), "{title}");
        let (title, _) = frame(&svg, "a&amp;b");
        assert!(title.contains("33.33% \u{2192} 16.67%"), "{title}");
        assert!(
            svg.contains("<title>all (20 samples, 33.33% \u{2192} 33.33%"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>all (60 samples, 100.00% \u{2192} 100.00%"),
            "{svg}"
        );
    }
}
