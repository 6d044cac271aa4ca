//! Writing folded stacks: `thread;root;...;leaf count`, one line per
//! distinct stack.
//!
//! A recording's lines come sorted (see [`crate::profile::Builder::finish`]),
//! so two profiles of the same program produce files that `diff` and
//! `btprof diff` can compare line by line; a file read back is written in
//! the order it was read.

use std::io::Write;

use crate::profile::Profile;
use crate::Error;

/// How to fold stacks into lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Leave out the thread-name root so identical stacks of different
    /// threads merge.
    pub merge_threads: bool,
}

impl Profile {
    /// The folded lines (`thread;root;...;leaf count`): in the profile's
    /// order, or, with threads merged, sorted with identical lines summed.
    pub fn folded_lines(&self, options: FoldOptions) -> Vec<String> {
        let lines = self.stacks().map(|stack| {
            let mut line = String::new();
            for (i, name) in stack.folded_names(options.merge_threads).enumerate() {
                if i > 0 {
                    line.push(';');
                }
                line.push_str(name);
            }
            (line, stack.count())
        });
        if !options.merge_threads {
            return lines
                .map(|(line, count)| format!("{line} {count}"))
                .collect();
        }
        let mut lines: Vec<(String, u64)> = lines.collect();
        lines.sort_unstable();
        let mut out: Vec<String> = Vec::with_capacity(lines.len());
        let mut iter = lines.into_iter().peekable();
        while let Some((stack, mut count)) = iter.next() {
            while let Some((_, more)) = iter.next_if(|(next, _)| *next == stack) {
                count += more;
            }
            out.push(format!("{stack} {count}"));
        }
        out
    }

    /// Writes folded stacks, one line per distinct stack, thread names as
    /// root frames.
    pub fn write_folded<W: Write>(&self, w: W) -> Result<(), Error> {
        self.write_folded_with(FoldOptions::default(), w)
    }

    /// Writes folded stacks with options (e.g. threads merged).
    pub fn write_folded_with<W: Write>(&self, options: FoldOptions, mut w: W) -> Result<(), Error> {
        if options.merge_threads {
            for line in self.folded_lines(options) {
                writeln!(w, "{line}").map_err(Error::Io)?;
            }
        } else {
            // Streamed: no line is built.
            for stack in self.stacks() {
                for (i, name) in stack.folded_names(false).enumerate() {
                    if i > 0 {
                        w.write_all(b";").map_err(Error::Io)?;
                    }
                    w.write_all(name.as_bytes()).map_err(Error::Io)?;
                }
                writeln!(w, " {}", stack.count()).map_err(Error::Io)?;
            }
        }
        w.flush().map_err(Error::Io)
    }
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
                merge_threads: true
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
}
