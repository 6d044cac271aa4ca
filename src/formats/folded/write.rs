//! Writing folded stacks: `thread;root;...;leaf count`, one line per
//! distinct stack; and the two-count (differential) file of two
//! profiles, `...;leaf before after`.
//!
//! A recording's lines come sorted (see [`crate::profile::Builder::finish`]),
//! so two profiles of the same program produce files that `diff` and
//! `btprof diff` can compare line by line; a file read back is written in
//! the order it was read.

use std::collections::BTreeMap;
use std::io::Write;

use crate::profile::Profile;
use crate::Error;

/// How to fold stacks into lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Leave out the thread-name root so identical stacks of different
    /// threads merge.
    pub merge_threads: bool,
    /// Leave out frames that were inlined into their caller, so each
    /// machine function stands for the code inlined into it: what btprof
    /// wrote before it expanded inlining, and what profilers without
    /// inline expansion write. By default inlined functions are ordinary
    /// frames, as perf (`--inline`) and samply show them.
    pub hide_inlined: bool,
    /// Put a labelled stack's label frame under its thread root
    /// ([`crate::profile::label_frame`]: `[label: endpoint=checkout]`), so
    /// a flamegraph splits by label. Stacks without labels get none, and
    /// a profile without labels folds as without this option.
    pub label_frames: bool,
}

impl Profile {
    /// The folded lines (`thread;root;...;leaf count`), identical lines
    /// summed: in the profile's order, or, with threads merged, inlined
    /// frames hidden or label frames shown, sorted.
    pub fn folded_lines(&self, options: FoldOptions) -> Vec<String> {
        let mut out = Vec::new();
        self.each_folded_line(options, |line, count| {
            out.push(format!("{line} {count}"));
        });
        out
    }

    /// Calls `emit` with each folded line (without its count) and its
    /// count, identical lines summed.
    ///
    /// A recording keeps stacks with equal lines but different frames (the
    /// same functions at other lines) apart and next to each other, so in
    /// the profile's order equal lines are adjacent and are summed as they
    /// stream by. Dropping thread names or inlined frames can make distant
    /// lines equal, and label frames split a run of equal lines, so then
    /// the lines are sorted first.
    fn each_folded_line(&self, options: FoldOptions, mut emit: impl FnMut(&str, u64)) {
        let hide_inlined = options.hide_inlined && self.has_inlined_frames();
        let label_frames = options.label_frames && self.has_labels();
        let line_of = |stack: &crate::Stack<'_>, line: &mut String| {
            line.clear();
            for (i, name) in stack
                .folded_names_labelled(options.merge_threads, hide_inlined, label_frames)
                .enumerate()
            {
                if i > 0 {
                    line.push(';');
                }
                line.push_str(name);
            }
        };
        if options.merge_threads || hide_inlined || label_frames {
            let mut lines: Vec<(String, u64)> = self
                .stacks()
                .map(|stack| {
                    let mut line = String::new();
                    line_of(&stack, &mut line);
                    (line, stack.count())
                })
                .collect();
            lines.sort_unstable();
            let mut iter = lines.into_iter().peekable();
            while let Some((stack, mut count)) = iter.next() {
                while let Some((_, more)) = iter.next_if(|(next, _)| *next == stack) {
                    count = count.saturating_add(more);
                }
                emit(&stack, count);
            }
            return;
        }
        let (mut pending, mut line) = (String::new(), String::new());
        let mut pending_count = None;
        for stack in self.stacks() {
            line_of(&stack, &mut line);
            match pending_count {
                Some(count) if line == pending => {
                    pending_count = Some(stack.count().saturating_add(count));
                }
                _ => {
                    if let Some(count) = pending_count {
                        emit(&pending, count);
                    }
                    std::mem::swap(&mut pending, &mut line);
                    pending_count = Some(stack.count());
                }
            }
        }
        if let Some(count) = pending_count {
            emit(&pending, count);
        }
    }

    /// Writes folded stacks, one line per distinct stack, thread names as
    /// root frames.
    pub fn write_folded<W: Write>(&self, w: W) -> Result<(), Error> {
        self.write_folded_with(FoldOptions::default(), w)
    }

    /// Writes folded stacks with options (e.g. threads merged, inlined
    /// frames left out).
    pub fn write_folded_with<W: Write>(&self, options: FoldOptions, mut w: W) -> Result<(), Error> {
        let mut result = Ok(());
        self.each_folded_line(options, |line, count| {
            if result.is_ok() {
                result = writeln!(w, "{line} {count}");
            }
        });
        result.map_err(Error::Io)?;
        w.flush().map_err(Error::Io)
    }
}

/// Writes the two-count (differential folded) file of `base` against
/// `new`: `stack BEFORE AFTER` for every stack of either run, sorted by
/// stack, the base counts first scaled to the new run's total and rounded
/// down, exactly as `inferno-diff-folded --normalize` scales them, so a
/// longer base run does not read as everything shrinking.
///
/// `inferno-flamegraph` and FlameGraph's `flamegraph.pl` draw such a file
/// as a differential flamegraph; btprof reads it back as the two runs
/// ([`FoldedFile`](super::FoldedFile)), the base at the new run's scale.
pub fn write_two_count<W: Write>(
    base: &Profile,
    new: &Profile,
    options: FoldOptions,
    mut w: W,
) -> Result<(), Error> {
    let mut stacks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut base_total, mut new_total) = (0u64, 0u64);
    base.each_folded_line(options, |line, count| {
        stacks.entry(line.to_owned()).or_default().0 += count;
        base_total += count;
    });
    new.each_folded_line(options, |line, count| {
        stacks.entry(line.to_owned()).or_default().1 += count;
        new_total += count;
    });
    // inferno's arithmetic, in f64 and truncated, so both tools write the
    // same file; totals are below 2^53, so the products are exact enough.
    let scaled = |count: u64| {
        if base_total == new_total || base_total == 0 {
            count
        } else {
            (count as f64 * new_total as f64 / base_total as f64) as u64
        }
    };
    for (stack, (before, after)) in &stacks {
        writeln!(w, "{stack} {} {after}", scaled(*before)).map_err(Error::Io)?;
    }
    w.flush().map_err(Error::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{sanitize_frame, Builder, TRUNCATED_FRAME};
    use crate::{Mode, Stats};

    /// A recording of `stacks`: (thread, frames root first, truncated, count).
    fn recording(stacks: &[(&str, &[&str], bool, u64)]) -> Profile {
        let mut b = Builder::new();
        for &(thread, frames, truncated, count) in stacks {
            let t = b.thread(thread, None).unwrap();
            b.add_stack(Some(t), frames.iter().copied(), truncated, count)
                .unwrap();
        }
        b.finish(Stats::new(&Default::default()))
    }

    #[test]
    fn semicolon_inside_a_type_does_not_split_a_frame() {
        let p = recording(&[("main", &["<[u8; 8] as Debug>::fmt", "leaf"], false, 3)]);
        let lines = p.folded_lines(FoldOptions::default());
        assert_eq!(lines, vec!["main;<[u8, 8] as Debug>::fmt;leaf 3"]);
        assert_eq!(lines[0].split(';').count(), 3);
    }

    #[test]
    fn names_ending_in_a_number_keep_one_count_per_line() {
        assert_eq!(sanitize_frame("ends with number 42"), "ends with number_42");
        assert_eq!(sanitize_frame("version 1.5"), "version_1.5");
        assert_eq!(sanitize_frame("tab\t7"), "tab_7");
        assert_eq!(sanitize_frame("spaces   3  "), "spaces_3");
        // Digits glued to the name, or inside it, are no count.
        assert_eq!(sanitize_frame("worker-3"), "worker-3");
        assert_eq!(sanitize_frame("thread 3 of 4x"), "thread 3 of 4x");
        let p = recording(&[("t", &["ends with number 42"], false, 5)]);
        assert_eq!(
            p.folded_lines(FoldOptions::default()),
            ["t;ends with number_42 5"]
        );
    }

    #[test]
    fn sanitizing_is_idempotent() {
        for name in [
            "",
            " ",
            " a ",
            "a;b",
            "x 42",
            "x 4 2",
            "a\n1",
            "\t9",
            "[u8; 8] 3",
            "; 5",
        ] {
            let once = sanitize_frame(name).into_owned();
            assert_eq!(sanitize_frame(&once), once, "{name:?}");
            assert!(
                !once.is_empty() && !once.contains(';'),
                "{name:?} -> {once:?}"
            );
        }
    }

    #[test]
    fn lines_are_sorted_and_duplicates_summed() {
        let p = recording(&[
            ("t2", &["a", "b"], false, 1),
            ("t1", &["a", "c"], false, 2),
            ("t1", &["a", "b"], false, 4),
            ("t1", &["a", "c"], false, 5),
        ]);
        assert_eq!(
            p.folded_lines(FoldOptions::default()),
            vec!["t1;a;b 4", "t1;a;c 7", "t2;a;b 1"]
        );
        assert_eq!(
            p.folded_lines(FoldOptions {
                merge_threads: true,
                ..FoldOptions::default()
            }),
            vec!["a;b 5", "a;c 7"]
        );
    }

    #[test]
    fn threads_of_the_same_name_share_a_line() {
        let mut b = Builder::new();
        let (w1, w2) = (
            b.thread("worker", Some(1)).unwrap(),
            b.thread("worker", Some(2)).unwrap(),
        );
        assert_ne!(w1, w2);
        b.add_stack(Some(w1), ["f"], false, 2).unwrap();
        b.add_stack(Some(w2), ["f"], false, 3).unwrap();
        let p = b.finish(Stats::new(&Default::default()));
        assert_eq!(p.folded_lines(FoldOptions::default()), vec!["worker;f 5"]);
        assert_eq!(p.threads().len(), 2);
    }

    #[test]
    fn label_frames_split_a_line_by_label_only_when_asked() {
        let mut b = Builder::new();
        let (w1, w2) = (
            b.thread("worker", Some(1)).unwrap(),
            b.thread("worker", Some(2)).unwrap(),
        );
        let checkout = b.labels(&[("endpoint", "checkout")]).unwrap();
        let acme = b
            .labels(&[("tenant", "acme"), ("endpoint", "checkout")])
            .unwrap();
        b.add_labelled_stack(Some(w1), checkout, ["main", "f"], false, 2)
            .unwrap();
        b.add_labelled_stack(Some(w2), checkout, ["main", "f"], false, 3)
            .unwrap();
        b.add_labelled_stack(Some(w1), acme, ["main", "f"], true, 4)
            .unwrap();
        b.add_stack(Some(w1), ["main", "f"], false, 1).unwrap();
        b.add_stack(Some(w1), ["main", "g"], false, 6).unwrap();
        let p = b.finish(Stats::new(&Default::default()));
        // Threads of one name merge, labels do not.
        assert_eq!(p.distinct_stacks(), 4);
        let labelled = |s: &crate::Stack<'_>| s.labels().get("endpoint").is_some();
        assert_eq!(
            p.stacks().filter(labelled).map(|s| s.count()).sum::<u64>(),
            9
        );
        // Without the option, the lines are those of no labels at all.
        assert_eq!(
            p.folded_lines(FoldOptions::default()),
            vec![
                "worker;[btprof: truncated];main;f 4",
                "worker;main;f 6",
                "worker;main;g 6"
            ]
        );
        let with_frames = FoldOptions {
            label_frames: true,
            ..FoldOptions::default()
        };
        assert_eq!(
            p.folded_lines(with_frames),
            vec![
                "worker;[label: endpoint=checkout, tenant=acme];[btprof: truncated];main;f 4",
                "worker;[label: endpoint=checkout];main;f 5",
                "worker;main;f 1",
                "worker;main;g 6",
            ]
        );
        let merged = FoldOptions {
            merge_threads: true,
            ..with_frames
        };
        assert_eq!(
            p.folded_lines(merged)[1],
            "[label: endpoint=checkout];main;f 5"
        );
    }

    #[test]
    fn inlined_frames_fold_as_frames_or_not_and_equal_lines_merge() {
        use crate::profile::FrameInfo;
        let mut b = Builder::new();
        let t = b.thread("main", Some(1)).unwrap();
        let at = |name, address, line, inlined| FrameInfo {
            address: Some(address),
            file: Some("/src/lib.rs"),
            line: Some(line),
            inlined,
            ..FrameInfo::named(name)
        };
        // `hot` inlined into `run` at two addresses (two lines), and `run`
        // calling `leaf` directly.
        for (address, line, count) in [(0x10, 7, 3), (0x14, 8, 4)] {
            let stack = [at("main", 0x1, 1, false), at("run", address, 2, false)];
            let hot = at("hot", address, line, true);
            b.add_frames(Some(t), stack.into_iter().chain([hot]), false, count)
                .unwrap();
        }
        b.add_stack(Some(t), ["main", "run", "leaf"], false, 5)
            .unwrap();
        b.add_stack(Some(t), ["main", "run"], false, 1).unwrap();
        let p = b.finish(Stats::new(&Default::default()));
        // The model keeps both lines of `hot` apart...
        assert_eq!(p.distinct_stacks(), 4);
        assert!(p.has_inlined_frames());
        // ...folded output merges them into one line.
        assert_eq!(
            p.folded_lines(FoldOptions::default()),
            vec![
                "main;main;run 1",
                "main;main;run;hot 7",
                "main;main;run;leaf 5"
            ]
        );
        let hidden = FoldOptions {
            hide_inlined: true,
            ..FoldOptions::default()
        };
        assert_eq!(
            p.folded_lines(hidden),
            vec!["main;main;run 8", "main;main;run;leaf 5"]
        );
        let mut out = Vec::new();
        p.write_folded_with(hidden, &mut out).unwrap();
        assert_eq!(out, b"main;main;run 8\nmain;main;run;leaf 5\n");
    }

    #[test]
    fn truncated_stacks_are_marked() {
        let p = recording(&[("w", &["mid", "leaf"], true, 1)]);
        assert_eq!(
            p.folded_lines(FoldOptions::default()),
            vec![format!("w;{TRUNCATED_FRAME};mid;leaf 1")]
        );
    }

    #[test]
    fn sanitizes_newlines_and_empty_names() {
        assert_eq!(sanitize_frame("a\nb"), "a b");
        assert_eq!(sanitize_frame(""), "[unknown]");
        assert!(matches!(
            sanitize_frame("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn written_output_ends_lines() {
        let mut out = Vec::new();
        recording(&[("m", &["f"], false, 2)])
            .write_folded(&mut out)
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "m;f 2\n");
    }

    #[test]
    fn a_recording_reads_back_as_its_folded_file() {
        let mut stats = Stats::new(&Default::default());
        stats.requested_hz = 250;
        stats.mode = Mode::Wall;
        let mut b = Builder::new();
        let w = b.thread("w", None).unwrap();
        b.add_stack(Some(w), ["main", "<[u8; 8] as Debug>::fmt"], false, 2)
            .unwrap();
        b.add_stack(Some(w), ["main"], true, 1).unwrap();
        let recorded = b.finish(stats);
        let mut written = Vec::new();
        recorded.write_folded(&mut written).unwrap();
        let read = Profile::read_folded_from(&written[..], "file").unwrap();
        let mut again = Vec::new();
        read.write_folded(&mut again).unwrap();
        assert_eq!(written, again);
        assert_eq!(recorded.source(), "profile");
        let info = recorded
            .run_info()
            .expect("a recording knows how it was taken");
        assert_eq!((info.requested_hz, info.mode.as_str()), (250, "wall"));
        assert!(read.run_info().is_none() && read.stats().is_none());
    }

    #[test]
    fn two_count_files_scale_the_base_as_inferno_does() {
        let read = |text: &str| Profile::read_folded_from(text.as_bytes(), "t").unwrap();
        // The base has 300 samples, the new run 100: base counts are
        // scaled by a third, rounded down.
        let base = read("t;a 200\nt;b 100\n");
        let new = read("t;b 60\nt;c 40\n");
        let mut ours = Vec::new();
        write_two_count(&base, &new, FoldOptions::default(), &mut ours).unwrap();
        let ours = String::from_utf8(ours).unwrap();
        assert_eq!(ours, "t;a 66 0\nt;b 33 60\nt;c 0 40\n");

        let mut theirs = Vec::new();
        let normalize = inferno::differential::Options {
            normalize: true,
            strip_hex: false,
        };
        let (b, n) = ("t;a 200\nt;b 100\n", "t;b 60\nt;c 40\n");
        inferno::differential::from_readers(normalize, b.as_bytes(), n.as_bytes(), &mut theirs)
            .unwrap();
        let mut theirs: Vec<_> = std::str::from_utf8(&theirs).unwrap().lines().collect();
        theirs.sort_unstable();
        assert_eq!(ours.lines().collect::<Vec<_>>(), theirs);
    }
}
