//! Reading folded files: from btprof, `inferno-collapse-*` or FlameGraph's
//! `stackcollapse*` scripts, into a [`Profile`] with names only, with the
//! quirks of what other tools write (see `line.rs`); two-count
//! (differential) files, into the two runs they compare; and other
//! profilers' raw output (`perf script`, ...), collapsed through `inferno`
//! first.
//!
//! Reading is streaming: a file is read one line at a time through a
//! buffer and identical stacks are merged as they arrive, so a 100 MB file
//! of repeated stacks takes memory for its distinct stacks only.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use inferno::collapse::Collapse;

use super::escape::escape;
use super::line::{self, LineProblem, MAX_COUNT};
use super::read_error::ReadError;
use crate::profile::{Builder, Profile};

/// The longest line accepted, in bytes. A 512-frame stack of 1 KiB names
/// is half of this; anything longer is a binary or corrupt file, and the
/// cap keeps one such "line" from taking memory in proportion to the file.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Read buffer size: big sequential reads without a big footprint.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// What a folded file holds: one profile, or, in a two-count
/// (differential) file, the two runs it compares: `frame;...;frame BEFORE
/// AFTER` lines, as `inferno-diff-folded` and FlameGraph's
/// `difffolded.pl` write them.
#[derive(Debug)]
pub struct FoldedFile {
    /// The file's profile: its counts, or a two-count file's second
    /// counts, the new run (named `SOURCE (new)`).
    pub profile: Profile,
    /// A two-count file's first counts: the base run (named `SOURCE
    /// (base)`); `None` for a file of one count per line.
    pub base: Option<Profile>,
}

impl FoldedFile {
    /// Reads the folded file at `path`, of one or two counts per line;
    /// errors name it as given.
    pub fn read_with(
        path: impl AsRef<Path>,
        options: ReadOptions,
    ) -> Result<(FoldedFile, ReadNotes), ReadError> {
        let path = path.as_ref();
        let source = escape(&path.display().to_string());
        match File::open(path) {
            Ok(file) => Self::read_from_with(
                BufReader::with_capacity(READ_BUFFER_BYTES, file),
                source,
                options,
            ),
            Err(error) => Err(ReadError::Io {
                source,
                line: None,
                error,
            }),
        }
    }

    /// Reads folded lines of one or two counts from `reader`, naming it
    /// `source` in errors, as [`Profile::read_folded_from`] describes.
    pub fn read_from_with<R: BufRead>(
        mut reader: R,
        source: impl Into<String>,
        options: ReadOptions,
    ) -> Result<(FoldedFile, ReadNotes), ReadError> {
        let source = source.into();
        let io_error = |source: &str, error| ReadError::Io {
            source: source.to_owned(),
            line: Some(1),
            error,
        };
        let folded = match reader.fill_buf() {
            Ok(start) => starts_like_folded(start),
            Err(error) => return Err(io_error(&source, error)),
        };
        if folded {
            return parse(reader, source, options);
        }
        // Another profiler's raw output, or not a profile at all. The
        // collapsers consume what they read, so the input is kept to be
        // parsed as folded (for its error message) if none applies.
        let mut input = Vec::new();
        if let Err(error) = reader.read_to_end(&mut input) {
            return Err(io_error(&source, error));
        }
        let mut collapsed = Vec::new();
        let guessed =
            inferno::collapse::guess::Folder::default().collapse(&input[..], &mut collapsed);
        if guessed.is_ok() && !collapsed.is_empty() {
            drop(input);
            let (file, mut notes) = parse(&collapsed[..], source, options)?;
            notes.collapsed = true;
            return Ok((file, notes));
        }
        parse(&input[..], source, options)
    }

    /// The one profile to show, where one is wanted (a report, an
    /// export): a two-count file's new run, with
    /// [`ReadNotes::first_counts_dropped`] set so the reader is told.
    pub fn into_profile(self, notes: &mut ReadNotes) -> Profile {
        notes.first_counts_dropped |= self.base.is_some();
        self.profile
    }
}

impl Profile {
    /// Reads the folded file at `path`; errors name it as given. What
    /// reading noticed without failing is dropped: use
    /// [`Profile::read_folded_with`] to show it.
    pub fn read_folded(path: impl AsRef<Path>) -> Result<Profile, ReadError> {
        Self::read_folded_with(path, ReadOptions::default()).map(|(profile, _)| profile)
    }

    /// [`Profile::read_folded`] with options, and what reading noticed
    /// (rounded counts, skipped lines, raw input collapsed, the first
    /// counts of a two-count file left out).
    pub fn read_folded_with(
        path: impl AsRef<Path>,
        options: ReadOptions,
    ) -> Result<(Profile, ReadNotes), ReadError> {
        let (file, mut notes) = FoldedFile::read_with(path, options)?;
        Ok((file.into_profile(&mut notes), notes))
    }

    /// Reads folded lines from `reader`, naming it `source` in errors.
    ///
    /// Blank lines and `#` comment lines are skipped; empty frames are
    /// read as `[unknown]`; decimal counts are read as integers (real
    /// fractions rounded, and counted in [`ReadNotes`]). A line that is
    /// not `frames COUNT`, a count above 2^53, a file with no stacks and a
    /// file whose counts are all 0 are errors: a comparison against
    /// nothing would only mislead. Invalid UTF-8 is replaced (U+FFFD)
    /// rather than rejected, as `inferno` does.
    ///
    /// Input whose first stack line is not folded is tried as another
    /// profiler's raw output (`perf script`, DTrace, macOS `sample`,
    /// VTune, ...) with `inferno`'s collapsers and their format guesser.
    ///
    /// A two-count (differential) file is read as its second counts, the
    /// new run; [`FoldedFile::read_from_with`] reads both.
    pub fn read_folded_from<R: BufRead>(
        reader: R,
        source: impl Into<String>,
    ) -> Result<Profile, ReadError> {
        Self::read_folded_from_with(reader, source, ReadOptions::default())
            .map(|(profile, _)| profile)
    }

    /// [`Profile::read_folded_from`] with options, and what reading
    /// noticed.
    pub fn read_folded_from_with<R: BufRead>(
        reader: R,
        source: impl Into<String>,
        options: ReadOptions,
    ) -> Result<(Profile, ReadNotes), ReadError> {
        let (file, mut notes) = FoldedFile::read_from_with(reader, source, options)?;
        Ok((file.into_profile(&mut notes), notes))
    }
}

/// The folded-format reader proper.
fn parse<R: BufRead>(
    mut reader: R,
    source: String,
    options: ReadOptions,
) -> Result<(FoldedFile, ReadNotes), ReadError> {
    let mut builder = Builder::new();
    // A two-count file's first counts; `None` until the file's first stack
    // line says it is one.
    let mut base: Option<Builder> = None;
    // The line of the file's first stack, which set how many counts its
    // lines have.
    let mut first_stack_line = None;
    let mut notes = ReadNotes::default();
    let mut buf = Vec::with_capacity(1024);
    let (mut line_no, mut had_stacks) = (0u64, false);
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf);
        match read {
            Ok(0) => break,
            Ok(_) => line_no += 1,
            // `read_until` itself retries on `Interrupted`.
            Err(error) => {
                return Err(ReadError::Io {
                    source,
                    line: Some(line_no + 1),
                    error,
                })
            }
        }
        let text = match std::str::from_utf8(&buf) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(&buf),
        };
        let parsed = if buf.len() > MAX_LINE_BYTES {
            Err(LineProblem::TooLong {
                limit: MAX_LINE_BYTES,
            })
        } else {
            line::parse_line(&text)
        };
        let parsed = parsed.and_then(|line| match (line, first_stack_line) {
            (Some(line), Some(first)) if line.before.is_some() != base.is_some() => {
                Err(LineProblem::MixedCounts {
                    this_line: if line.before.is_some() { 2 } else { 1 },
                    first_stack_line: first,
                })
            }
            (line, _) => Ok(line),
        });
        let line = match parsed {
            Ok(Some(line)) => line,
            Ok(None) => continue,
            // A line too long to be a stack is not skipped: the rest of it
            // would be read as more lines.
            Err(problem) if options.lenient && !matches!(problem, LineProblem::TooLong { .. }) => {
                notes.skipped_lines += 1;
                if notes.first_skipped.len() < SKIPPED_NAMED {
                    notes
                        .first_skipped
                        .push(ReadError::malformed(&source, line_no, &buf, problem).to_string());
                }
                continue;
            }
            Err(problem) => return Err(ReadError::malformed(&source, line_no, &buf, problem)),
        };
        if first_stack_line.is_none() {
            first_stack_line = Some(line_no);
            if line.before.is_some() {
                base = Some(Builder::new());
            }
        }
        had_stacks = true;
        notes.rounded_lines += u64::from(line.rounded);
        let bad = |problem| ReadError::malformed(&source, line_no, &buf, problem);
        let columns = [
            Some((&mut builder, line.count)),
            base.as_mut().zip(line.before),
        ];
        for (builder, count) in columns.into_iter().flatten() {
            // Counts are at most 2^53 each; so is the total, which every
            // consumer (shares, JSON) then holds exactly.
            if builder.total_samples().saturating_add(count) > MAX_COUNT {
                return Err(bad(LineProblem::TotalOverflow));
            }
            builder
                .add_folded(line.frames(), count)
                // More than 4 billion distinct names would not fit in
                // memory long before the ids run out; say so rather than
                // wrap.
                .map_err(|_| bad(LineProblem::TotalOverflow))?;
        }
    }
    let empty = |source: String| ReadError::Empty {
        source,
        lines: line_no,
        had_stacks,
    };
    let Some(base) = base else {
        if builder.total_samples() == 0 {
            return Err(empty(source));
        }
        let profile = builder.finish_read(source);
        return Ok((
            FoldedFile {
                profile,
                base: None,
            },
            notes,
        ));
    };
    // Either run of a comparison empty would only mislead.
    for (column, total) in [
        ("base", base.total_samples()),
        ("new", builder.total_samples()),
    ] {
        if total == 0 {
            return Err(empty(format!("{source} ({column} counts)")));
        }
    }
    Ok((
        FoldedFile {
            profile: builder.finish_read(format!("{source} (new)")),
            base: Some(base.finish_read(format!("{source} (base)"))),
        },
        notes,
    ))
}

/// Whether the input's first stack line (after blank and comment lines)
/// is a folded line. Undecided (only a line cut off by the buffer after
/// comments) counts as folded: the folded reader then says what is wrong.
/// Either answer reads a folded file right; "no" only costs memory.
fn starts_like_folded(start: &[u8]) -> bool {
    let mut lines = start.split(|&b| b == b'\n').enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if i > 0 && lines.peek().is_none() && !start.ends_with(b"\n") {
            return true; // perhaps cut off by the buffer
        }
        match line::parse_line(&String::from_utf8_lossy(line)) {
            Ok(None) => continue,
            Ok(Some(_)) => return true,
            Err(_) => return false,
        }
    }
    true
}

/// How to read a folded file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip malformed lines (counted and reported in [`ReadNotes`])
    /// instead of failing on the first, as `inferno` does. Off by
    /// default: a regression gate must not judge half a file.
    pub lenient: bool,
}

/// What reading a file noticed without failing: things a user should be
/// told (see [`ReadNotes::warnings`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadNotes {
    /// Lines whose count had a fraction, rounded to the nearest integer.
    pub rounded_lines: u64,
    /// Malformed lines skipped (only with [`ReadOptions::lenient`]).
    pub skipped_lines: u64,
    /// The first few skipped lines: `source:line: problem: text`.
    pub first_skipped: Vec<String>,
    /// The input was another profiler's raw output (`perf script`,
    /// DTrace, ...), collapsed with `inferno`'s collapsers first.
    pub collapsed: bool,
    /// The input had two counts per line and only the second, the new
    /// run's, was read: where one profile was asked of a two-count file.
    pub first_counts_dropped: bool,
}

/// How many skipped lines [`ReadNotes::first_skipped`] names.
const SKIPPED_NAMED: usize = 3;

impl ReadNotes {
    /// One warning per thing noticed, for a person to read.
    pub fn warnings(&self, source: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.collapsed {
            out.push(format!(
                "{source} is not a folded file: read it as another profiler's output, \
                 collapsed with inferno (for perf, counts are the samples' periods, as \
                 stackcollapse-perf.pl gives them)"
            ));
        }
        if self.first_counts_dropped {
            out.push(format!(
                "{source} has two counts per line (differential folded output, as \
                 inferno-diff-folded writes): read the second count, the new run's"
            ));
        }
        if self.rounded_lines > 0 {
            out.push(format!(
                "{source}: {} line(s) had fractional sample counts, rounded to the nearest integer",
                self.rounded_lines
            ));
        }
        if self.skipped_lines > 0 {
            let more = self.skipped_lines - self.first_skipped.len() as u64;
            let mut w = format!(
                "{source}: skipped {} malformed line(s) (--lenient):",
                self.skipped_lines
            );
            for line in &self.first_skipped {
                w.push_str("\n  ");
                w.push_str(line);
            }
            if more > 0 {
                w.push_str(&format!("\n  ... and {more} more"));
            }
            out.push(w);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Profile, ReadError> {
        Profile::read_folded_from(text.as_bytes(), "t.folded")
    }

    fn lines(p: &Profile) -> Vec<String> {
        let mut out = Vec::new();
        p.write_folded(&mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn repeated_stacks_merge_and_totals_add_up() {
        let p = read("main;a;b 3\nmain;a 2\n\nmain;a;b 4\r\nmain;c 0\n").unwrap();
        assert_eq!(p.total_samples(), 9);
        assert_eq!(p.distinct_stacks(), 3);
        assert_eq!(p.distinct_frames(), 4);
        assert_eq!(lines(&p), ["main;a;b 7", "main;a 2", "main;c 0"]);
        let first = p.stacks().next().unwrap();
        assert_eq!(first.frames().collect::<Vec<_>>(), ["main", "a", "b"]);
        assert_eq!(p.frame_name(first.frame_ids()[2]), "b");
    }

    #[test]
    fn a_bad_line_names_file_line_and_text() {
        let err = read("main;a 1\n\nmain;b lots\n").unwrap_err();
        match &err {
            ReadError::Malformed {
                source,
                line,
                text,
                problem,
            } => {
                assert_eq!(source, "t.folded");
                assert_eq!(*line, 3);
                assert_eq!(text, "main;b lots");
                assert_eq!(*problem, LineProblem::BadCount("lots".into()));
            }
            other => panic!("wrong error: {other:?}"),
        }
        assert!(err.to_string().starts_with("t.folded:3: `lots`"), "{err}");
    }

    #[test]
    fn empty_blank_and_all_zero_files_are_errors() {
        for (text, lines, had_stacks) in [("", 0, false), ("\n \n", 2, false), ("a 0\n", 1, true)] {
            match read(text) {
                Err(ReadError::Empty {
                    lines: l,
                    had_stacks: h,
                    ..
                }) => assert_eq!((l, h), (lines, had_stacks), "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let err = Profile::read_folded("/nonexistent/x.folded").unwrap_err();
        assert!(matches!(err, ReadError::Io { line: None, .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("cannot read /nonexistent/x.folded: "),
            "{err}"
        );
    }

    #[test]
    fn an_overflowing_total_is_an_error() {
        let text = format!("a {MAX_COUNT}\nb 1\n");
        let err = read(&text).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Malformed {
                    line: 2,
                    problem: LineProblem::TotalOverflow,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn an_endless_line_stops_at_the_cap() {
        // A "line" of MAX_LINE_BYTES + 10 bytes, no newline: rejected after
        // reading one byte past the cap, not at the end of the file.
        let data = vec![b'x'; MAX_LINE_BYTES + 10];
        let err = Profile::read_folded_from(&data[..], "big").unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Malformed {
                    line: 1,
                    problem: LineProblem::TooLong { .. },
                    ..
                }
            ),
            "{err:?}"
        );
    }

    fn read_file(text: &str) -> Result<(FoldedFile, ReadNotes), ReadError> {
        FoldedFile::read_from_with(text.as_bytes(), "d.folded", ReadOptions::default())
    }

    #[test]
    fn a_two_count_file_reads_as_its_two_runs() {
        let text = "# inferno-diff-folded\nmain;a;b 3 5\nmain;a 2 0\n\nmain;a;b 1 1\nmain;c 0 4\n";
        let (file, notes) = read_file(text).unwrap();
        let (Some(base), new) = (file.base, file.profile) else {
            panic!("read as one run");
        };
        assert_eq!(lines(&base), ["main;a;b 4", "main;a 2", "main;c 0"]);
        assert_eq!(lines(&new), ["main;a;b 6", "main;a 0", "main;c 4"]);
        assert_eq!(
            (base.source(), new.source()),
            ("d.folded (base)", "d.folded (new)")
        );
        assert!(!notes.first_counts_dropped);

        // Asked for one profile, a reader gets the new run and is told.
        let (profile, notes) =
            Profile::read_folded_from_with(text.as_bytes(), "d.folded", ReadOptions::default())
                .unwrap();
        assert_eq!(profile.total_samples(), 10);
        assert!(notes.first_counts_dropped);
        let warnings = notes.warnings("d.folded").join("\n");
        assert!(warnings.contains("read the second count"), "{warnings}");

        // A one-count file stays one run, and says nothing of counts.
        let (file, notes) = read_file("main;a 2\n").unwrap();
        assert!(file.base.is_none(), "{file:?}");
        assert!(notes.warnings("x").is_empty());
    }

    #[test]
    fn a_file_mixing_one_and_two_counts_names_the_line() {
        for (text, line, this_line, first) in [
            ("main;a 1 2\n# note\nmain;b 3\n", 3, 1, 1),
            ("\nmain;a 1\nmain;b 3 4\n", 3, 2, 2),
        ] {
            match read_file(text) {
                Err(ReadError::Malformed {
                    line: l,
                    problem:
                        LineProblem::MixedCounts {
                            this_line: t,
                            first_stack_line,
                        },
                    ..
                }) => assert_eq!(
                    (l, t, first_stack_line),
                    (line, this_line, first),
                    "{text:?}"
                ),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // Lenient reading skips the odd line out and counts it.
        let (file, notes) = FoldedFile::read_from_with(
            &b"main;a 1 2\nmain;b 3\n"[..],
            "m",
            ReadOptions { lenient: true },
        )
        .unwrap();
        assert!(file.base.is_some());
        assert_eq!(notes.skipped_lines, 1);
    }

    #[test]
    fn a_two_count_file_with_an_empty_run_is_an_error_naming_it() {
        for (text, column) in [("a 0 3\nb 0 1\n", "base"), ("a 2 0\n", "new")] {
            let err = read_file(text).unwrap_err();
            assert_eq!(
                err.source_name(),
                format!("d.folded ({column} counts)"),
                "{text:?}"
            );
            assert!(err.to_string().contains("count of 0"), "{err}");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let p = Profile::read_folded_from(&b"main;f\xffo 2\n"[..], "u").unwrap();
        assert_eq!(lines(&p), ["main;f\u{fffd}o 2"]);
    }
    #[test]
    fn awkward_names_round_trip() {
        let awkward = [
            ";",
            "a;b",
            "ends with number 42",
            "version 1.5",
            "<alloc::vec::Vec<T> as Drop>::drop",
            "{closure#0}",
            " padded ",
            "",
            "tab\tinside",
            "f\u{fffd}o (was not UTF-8)",
            "\u{2014}dash",
        ];
        let mut b = crate::profile::Builder::new();
        let t = b.thread("main thread 1", None).unwrap();
        for (i, name) in awkward.iter().enumerate() {
            // Each awkward name as the leaf, and in the middle.
            b.add_stack(Some(t), ["root", name], false, i as u64 + 1)
                .unwrap();
            b.add_stack(Some(t), ["root", name, "leaf"], false, i as u64 + 100)
                .unwrap();
        }
        let profile = b.finish(crate::Stats::new(&Default::default()));
        let written = lines(&profile);
        let text = written.join("\n") + "\n";
        let (read, notes) =
            Profile::read_folded_from_with(text.as_bytes(), "w", ReadOptions::default()).unwrap();
        assert_eq!(notes, ReadNotes::default());
        let mut a = lines(&read);
        let mut b = written.clone();
        a.sort();
        b.sort();
        assert_eq!(a, b, "the file reads back to the profile");
        assert_eq!(read.distinct_stacks(), 2 * awkward.len());
        // And what btprof read, it writes back the same.
        let again = lines(&read).join("\n") + "\n";
        let reread = Profile::read_folded_from(again.as_bytes(), "again").unwrap();
        assert_eq!(lines(&reread), lines(&read));
        for line in lines(&read) {
            let (_, count) = line.rsplit_once(' ').unwrap();
            assert!(count.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn non_utf8_files_round_trip() {
        let p = Profile::read_folded_from(&b"main;f\xffo 2\nmain;\xc3 1\n"[..], "u").unwrap();
        let out = lines(&p).join("\n") + "\n";
        let back = Profile::read_folded_from(out.as_bytes(), "back").unwrap();
        assert_eq!(lines(&back), lines(&p));
    }

    #[test]
    fn quirks_of_other_tools_are_read() {
        let text = "# austin: 3.6.0\n# mode: cpu\n\na;;b 31.0\na; 10.\nc 14.23\nc 0.5\n";
        let (p, notes) =
            Profile::read_folded_from_with(text.as_bytes(), "t.folded", ReadOptions::default())
                .unwrap();
        assert_eq!(lines(&p), ["a;[unknown];b 31", "a;[unknown] 10", "c 15"]);
        assert_eq!(notes.rounded_lines, 2);
        let warnings = notes.warnings("t.folded");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("2 line(s)"), "{warnings:?}");
    }

    #[test]
    fn lenient_reading_skips_and_names_bad_lines() {
        let text = "a 1\nbad\nb 2\nc x\nd 3 4\ne \x1b 5z\nf 3\n";
        assert!(read(text).is_err(), "strict by default");
        let (p, notes) = Profile::read_folded_from_with(
            text.as_bytes(),
            "t.folded",
            ReadOptions { lenient: true },
        )
        .unwrap();
        assert_eq!(p.total_samples(), 6);
        assert_eq!(notes.skipped_lines, 4);
        assert_eq!(notes.first_skipped.len(), 3);
        assert!(
            notes.first_skipped[0].starts_with("t.folded:2: "),
            "{notes:?}"
        );
        let w = notes.warnings("t.folded").join("\n");
        assert!(
            w.contains("skipped 4 malformed line(s)") && w.contains("and 1 more"),
            "{w}"
        );
        assert!(!w.contains('\x1b'), "escaped: {w:?}");
    }

    #[test]
    fn counts_above_2_pow_53_name_the_line() {
        let err = read("a 1\nb 9007199254740993\n").unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Malformed {
                    line: 2,
                    problem: LineProblem::CountTooLarge(_),
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("t.folded:2: "), "{err}");
    }

    #[test]
    fn perf_script_output_is_collapsed_through_inferno() {
        let perf = "burn 31861  1528.428364:    1003009 cpu-clock:u: \n\
                    \t            1152 inner+0x19 (/tmp/burn)\n\
                    \t            1205 main+0x18 (/tmp/burn)\n\
                    \n\
                    burn 31861  1528.435356:    1003009 cpu-clock:u: \n\
                    \t            1152 inner+0x19 (/tmp/burn)\n\
                    \t            1205 main+0x18 (/tmp/burn)\n\
                    \n";
        let (p, notes) =
            Profile::read_folded_from_with(perf.as_bytes(), "perf", ReadOptions::default())
                .unwrap();
        assert!(notes.collapsed);
        // inferno weighs perf samples by their period (here nanoseconds
        // of cpu-clock), as stackcollapse-perf.pl does.
        assert_eq!(lines(&p), ["burn;main;inner 2006018"]);
    }
}
