//! Folded profiles read back: from a file of any folded-stack tool, or from
//! a [`Profile`] in memory, for comparing, reporting and re-rendering.
//!
//! Reading is streaming: a file is read one line at a time through a
//! buffer and identical stacks are merged as they arrive (see `intern.rs`),
//! so a 100 MB file of repeated stacks takes memory for its distinct stacks
//! only.

#[path = "../formats/folded/read_error.rs"]
mod error;
mod intern;
#[path = "../formats/folded/line.rs"]
mod parse;

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

pub use error::{LineProblem, ReadError};
pub use intern::FrameId;

use crate::folded::{sanitize_frame, TRUNCATED_FRAME};
use crate::{Profile, RunInfo};
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
        }
    }
}

impl FoldedProfile {
    /// Reads the folded file at `path`; errors name it as given.
    pub fn open(path: impl AsRef<Path>) -> Result<FoldedProfile, ReadError> {
        let path = path.as_ref();
        let source = path.display().to_string();
        match File::open(path) {
            Ok(file) => {
                Self::from_reader(BufReader::with_capacity(READ_BUFFER_BYTES, file), source)
            }
            Err(error) => Err(ReadError::Io {
                source,
                line: None,
                error,
            }),
        }
    }

    /// Reads folded lines from `reader`, naming it `source` in errors.
    ///
    /// Blank lines are skipped. A line that is not `frames COUNT`, a file
    /// with no stacks and a file whose counts are all 0 are errors: a
    /// comparison against nothing would only mislead. Invalid UTF-8 is
    /// replaced (U+FFFD) rather than rejected, as `inferno` does.
    pub fn from_reader<R: BufRead>(
        mut reader: R,
        source: impl Into<String>,
    ) -> Result<FoldedProfile, ReadError> {
        let source = source.into();
        let mut builder = Builder::default();
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
            let bad = |problem| ReadError::malformed(&source, line_no, &text, problem);
            if buf.len() > MAX_LINE_BYTES {
                return Err(bad(LineProblem::TooLong {
                    limit: MAX_LINE_BYTES,
                }));
            }
            let Some(line) = parse::parse_line(&text).map_err(bad)? else {
                continue;
            };
            had_stacks = true;
            builder
                .add(line.stack.split(';'), line.count)
                .map_err(bad)?;
        }
        if builder.total == 0 {
            return Err(ReadError::Empty {
                source,
                lines: line_no,
                had_stacks,
            });
        }
        Ok(builder.finish(source, None))
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
        let text = format!("a {}\nb 1\n", u64::MAX);
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
