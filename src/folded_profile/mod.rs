//! Folded profiles read back: from a file of any folded-stack tool, or from
//! a [`Profile`] in memory, for comparing, reporting and re-rendering.
//!
//! Reading is streaming: a file is read one line at a time through a
//! buffer and identical stacks are merged as they arrive (see `intern.rs`),
//! so a 100 MB file of repeated stacks takes memory for its distinct stacks
//! only.

mod error;
mod intern;
mod parse;

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

pub use error::{LineProblem, ReadError};
pub use intern::FrameId;
pub use parse::{MAX_COUNT, UNKNOWN_FRAME};

use crate::escape::escape;
use crate::folded::{sanitize_frame, TRUNCATED_FRAME};
use crate::{Profile, RunInfo};
use inferno::collapse::Collapse;
use intern::{FrameTable, StackTable};

/// The longest line accepted, in bytes. A 512-frame stack of 1 KiB names
/// is half of this; anything longer is a binary or corrupt file, and the
/// cap keeps one such "line" from taking memory in proportion to the file.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Read buffer size: big sequential reads without a big footprint.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// Distinct stacks with sample counts, frames interned.
#[derive(Clone, Debug)]
pub struct FoldedProfile {
    source: String,
    frames: FrameTable,
    stacks: StackTable,
    total: u64,
    run_info: Option<RunInfo>,
    notes: ReadNotes,
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

/// One distinct stack of a [`FoldedProfile`].
#[derive(Clone, Copy, Debug)]
pub struct FoldedStack<'a> {
    frames: &'a FrameTable,
    ids: &'a [FrameId],
    count: u64,
}

impl<'a> FoldedStack<'a> {
    /// Frame names, root first.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &'a str> + ExactSizeIterator + 'a {
        let table = self.frames;
        self.ids.iter().map(move |&id| table.name(id))
    }

    /// Frame ids, root first; [`FoldedProfile::frame_name`] names them.
    pub fn frame_ids(&self) -> &'a [FrameId] {
        self.ids
    }

    /// Samples of this stack.
    pub fn count(&self) -> u64 {
        self.count
    }
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
        match parse::parse_line(&String::from_utf8_lossy(line)) {
            Ok(None) => continue,
            Ok(Some(_)) => return true,
            Err(_) => return false,
        }
    }
    true
}

/// Collects stacks and counts while a profile is built.
#[derive(Default)]
struct Builder {
    frames: FrameTable,
    stacks: StackTable,
    total: u64,
    ids: Vec<FrameId>,
}

impl Builder {
    /// Adds `count` samples of the stack `frames` (root first).
    fn add<'s>(
        &mut self,
        frames: impl IntoIterator<Item = &'s str>,
        count: u64,
    ) -> Result<(), LineProblem> {
        self.total = self
            .total
            .checked_add(count)
            .filter(|&t| t <= MAX_COUNT)
            .ok_or(LineProblem::TotalOverflow)?;
        self.ids.clear();
        for frame in frames {
            // More than 4 billion distinct names would not fit in memory
            // long before the ids run out; say so rather than wrap.
            let id = self
                .frames
                .intern(frame)
                .ok_or(LineProblem::TotalOverflow)?;
            self.ids.push(id);
        }
        // The stack's count is at most the total, which did not overflow.
        self.stacks
            .add(&self.ids, count)
            .map_err(|_| LineProblem::TotalOverflow)
    }

    fn finish(self, source: String, run_info: Option<RunInfo>) -> FoldedProfile {
        FoldedProfile {
            source,
            frames: self.frames,
            stacks: self.stacks,
            total: self.total,
            run_info,
            notes: ReadNotes::default(),
        }
    }
}

impl FoldedProfile {
    /// Reads the folded file at `path`; errors name it as given.
    pub fn open(path: impl AsRef<Path>) -> Result<FoldedProfile, ReadError> {
        Self::open_with(path, ReadOptions::default())
    }

    /// [`FoldedProfile::open`] with options.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: ReadOptions,
    ) -> Result<FoldedProfile, ReadError> {
        let path = path.as_ref();
        let source = escape(&path.display().to_string());
        match File::open(path) {
            Ok(file) => Self::from_reader_with(
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
    pub fn from_reader<R: BufRead>(
        reader: R,
        source: impl Into<String>,
    ) -> Result<FoldedProfile, ReadError> {
        Self::from_reader_with(reader, source, ReadOptions::default())
    }

    /// [`FoldedProfile::from_reader`] with options.
    pub fn from_reader_with<R: BufRead>(
        mut reader: R,
        source: impl Into<String>,
        options: ReadOptions,
    ) -> Result<FoldedProfile, ReadError> {
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
            return Self::parse(reader, source, options);
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
            let mut profile = Self::parse(&collapsed[..], source, options)?;
            profile.notes.collapsed = true;
            return Ok(profile);
        }
        Self::parse(&input[..], source, options)
    }

    /// The folded-format reader proper.
    fn parse<R: BufRead>(
        mut reader: R,
        source: String,
        options: ReadOptions,
    ) -> Result<FoldedProfile, ReadError> {
        let mut builder = Builder::default();
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
                parse::parse_line(&text)
            };
            let line = match parsed {
                Ok(Some(line)) => line,
                Ok(None) => continue,
                // A line too long to be a stack is not skipped: the rest
                // of it would be read as more lines.
                Err(problem)
                    if options.lenient && !matches!(problem, LineProblem::TooLong { .. }) =>
                {
                    notes.skipped_lines += 1;
                    if notes.first_skipped.len() < SKIPPED_NAMED {
                        notes.first_skipped.push(
                            ReadError::malformed(&source, line_no, &buf, problem).to_string(),
                        );
                    }
                    continue;
                }
                Err(problem) => return Err(ReadError::malformed(&source, line_no, &buf, problem)),
            };
            had_stacks = true;
            notes.rounded_lines += u64::from(line.rounded);
            builder
                .add(line.frames(), line.count)
                .map_err(|problem| ReadError::malformed(&source, line_no, &buf, problem))?;
        }
        if builder.total == 0 {
            return Err(ReadError::Empty {
                source,
                lines: line_no,
                had_stacks,
            });
        }
        let mut profile = builder.finish(source, None);
        profile.notes = notes;
        Ok(profile)
    }

    /// The stacks of `profile` as its folded file would hold them: the
    /// thread name as root frame, then [`TRUNCATED_FRAME`] for a walk that
    /// ended early, then the frames; names sanitised the same way. So
    /// comparing two `Profile`s gives what `btprof diff` gives on the files
    /// they write. The run's rate and mode come along as [`RunInfo`].
    ///
    /// Unlike a file, an empty profile is allowed here.
    pub fn from_profile(profile: &Profile) -> FoldedProfile {
        let mut builder = Builder::default();
        for stack in profile.stacks() {
            let thread = sanitize_frame(&stack.thread);
            let truncated = stack.truncated.then_some(TRUNCATED_FRAME);
            let frames = stack.frames.iter().map(|f| sanitize_frame(f));
            let names: Vec<Cow<'_, str>> = std::iter::once(thread)
                .chain(truncated.map(Cow::Borrowed))
                .chain(frames)
                .collect();
            // Only fails past u64::MAX samples, which the sampler's own
            // u64 sample counter rules out.
            if builder
                .add(names.iter().map(|n| n.as_ref()), stack.count)
                .is_err()
            {
                break;
            }
        }
        builder.finish("profile".to_owned(), Some(profile.run_info()))
    }

    /// What reading noticed without failing (rounded counts, skipped
    /// lines, raw input collapsed); all zero for a profile built in
    /// memory.
    pub fn read_notes(&self) -> &ReadNotes {
        &self.notes
    }

    /// The same profile under another name (used in reports and errors).
    #[must_use]
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// The same profile with what is known about how it was taken.
    #[must_use]
    pub fn with_run_info(mut self, run_info: Option<RunInfo>) -> Self {
        self.run_info = run_info;
        self
    }

    /// The name this profile goes by: a path, or `profile`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// How the profile was taken, if known.
    pub fn run_info(&self) -> Option<&RunInfo> {
        self.run_info.as_ref()
    }

    /// Samples over all stacks.
    pub fn total_samples(&self) -> u64 {
        self.total
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Distinct stacks.
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Distinct frame names.
    pub fn distinct_frames(&self) -> usize {
        self.frames.len()
    }

    /// The name of a frame id from [`FoldedStack::frame_ids`].
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn frame_name(&self, id: FrameId) -> &str {
        self.frames.name(id)
    }

    /// The distinct stacks, in the order first read.
    pub fn stacks(&self) -> impl ExactSizeIterator<Item = FoldedStack<'_>> + '_ {
        self.stacks.iter().map(|(ids, count)| FoldedStack {
            frames: &self.frames,
            ids,
            count,
        })
    }

    /// Writes `frame;...;frame COUNT` lines, one per distinct stack, in the
    /// order first read.
    pub fn write_folded<W: Write>(&self, mut w: W) -> io::Result<()> {
        for stack in self.stacks() {
            for (i, frame) in stack.frames().enumerate() {
                if i > 0 {
                    w.write_all(b";")?;
                }
                w.write_all(frame.as_bytes())?;
            }
            writeln!(w, " {}", stack.count())?;
        }
        w.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Mode, Stack, Stats};

    fn read(text: &str) -> Result<FoldedProfile, ReadError> {
        FoldedProfile::from_reader(text.as_bytes(), "t.folded")
    }

    fn lines(p: &FoldedProfile) -> Vec<String> {
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
        let err = FoldedProfile::open("/nonexistent/x.folded").unwrap_err();
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
        let err = FoldedProfile::from_reader(&data[..], "big").unwrap_err();
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

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let p = FoldedProfile::from_reader(&b"main;f\xffo 2\n"[..], "u").unwrap();
        assert_eq!(lines(&p), ["main;f\u{fffd}o 2"]);
    }

    #[test]
    fn awkward_names_round_trip() {
        let stack = |frames: &[&str], count| Stack {
            thread: "main thread 1".into(),
            frames: frames.iter().map(|&f| Arc::from(f)).collect(),
            truncated: false,
            count,
        };
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
        let mut stacks = Vec::new();
        for (i, name) in awkward.iter().enumerate() {
            // Each awkward name as the leaf, and in the middle.
            stacks.push(stack(&["root", name], i as u64 + 1));
            stacks.push(stack(&["root", name, "leaf"], i as u64 + 100));
        }
        let profile = Profile::from_stacks(stacks, Vec::new(), Stats::new(&Default::default()));
        let mut written = Vec::new();
        profile.write_folded(&mut written).unwrap();
        let read = FoldedProfile::from_reader(&written[..], "w").unwrap();
        assert!(read.read_notes().warnings("w").is_empty());
        let mut a = lines(&read);
        let mut b = lines(&FoldedProfile::from_profile(&profile));
        a.sort();
        b.sort();
        assert_eq!(a, b, "the file reads back to the profile");
        assert_eq!(read.distinct_stacks(), 2 * awkward.len());
        // And what btprof read, it writes back the same.
        let mut again = Vec::new();
        read.write_folded(&mut again).unwrap();
        let reread = FoldedProfile::from_reader(&again[..], "again").unwrap();
        assert_eq!(lines(&reread), lines(&read));
        for line in lines(&read) {
            let (_, count) = line.rsplit_once(' ').unwrap();
            assert!(count.parse::<u64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn non_utf8_files_round_trip() {
        let p = FoldedProfile::from_reader(&b"main;f\xffo 2\nmain;\xc3 1\n"[..], "u").unwrap();
        let mut out = Vec::new();
        p.write_folded(&mut out).unwrap();
        let back = FoldedProfile::from_reader(&out[..], "back").unwrap();
        assert_eq!(lines(&back), lines(&p));
    }

    #[test]
    fn quirks_of_other_tools_are_read() {
        let p =
            read("# austin: 3.6.0\n# mode: cpu\n\na;;b 31.0\na; 10.\nc 14.23\nc 0.5\n").unwrap();
        assert_eq!(lines(&p), ["a;[unknown];b 31", "a;[unknown] 10", "c 15"]);
        assert_eq!(p.read_notes().rounded_lines, 2);
        let warnings = p.read_notes().warnings("t.folded");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("2 line(s)"), "{warnings:?}");
    }

    #[test]
    fn lenient_reading_skips_and_names_bad_lines() {
        let text = "a 1\nbad\nb 2\nc x\nd 3 4\ne \x1b 5z\nf 3\n";
        assert!(read(text).is_err(), "strict by default");
        let p = FoldedProfile::from_reader_with(
            text.as_bytes(),
            "t.folded",
            ReadOptions { lenient: true },
        )
        .unwrap();
        assert_eq!(p.total_samples(), 6);
        let notes = p.read_notes();
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
        let p = read(perf).unwrap();
        assert!(p.read_notes().collapsed);
        // inferno weighs perf samples by their period (here nanoseconds
        // of cpu-clock), as stackcollapse-perf.pl does.
        assert_eq!(lines(&p), ["burn;main;inner 2006018"]);
    }

    #[test]
    fn a_profile_reads_like_its_folded_file() {
        let stack = |thread: &str, frames: &[&str], truncated, count| Stack {
            thread: thread.into(),
            frames: frames.iter().map(|&f| Arc::from(f)).collect(),
            truncated,
            count,
        };
        let mut stats = Stats::new(&Default::default());
        stats.requested_hz = 250;
        stats.mode = Mode::Wall;
        let profile = Profile::from_stacks(
            vec![
                stack("w", &["main", "<[u8; 8] as Debug>::fmt"], false, 2),
                stack("w", &["main"], true, 1),
            ],
            Vec::new(),
            stats,
        );
        let mut written = Vec::new();
        profile.write_folded(&mut written).unwrap();
        let from_file = FoldedProfile::from_reader(&written[..], "file").unwrap();
        let direct = FoldedProfile::from_profile(&profile);
        let mut a = lines(&from_file);
        let mut b = lines(&direct);
        a.sort();
        b.sort();
        assert_eq!(a, b);
        assert_eq!(direct.source(), "profile");
        let info = direct.run_info().expect("a profile knows how it was taken");
        assert_eq!((info.requested_hz, info.mode.as_str()), (250, "wall"));
    }
}
