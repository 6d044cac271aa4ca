//! Reading folded files: from btprof, `inferno-collapse-*` or FlameGraph's
//! `stackcollapse*` scripts, into a [`Profile`] with names only.
//!
//! Reading is streaming: a file is read one line at a time through a
//! buffer and identical stacks are merged as they arrive, so a 100 MB file
//! of repeated stacks takes memory for its distinct stacks only.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::line::{self, LineProblem};
use super::read_error::ReadError;
use crate::profile::{Builder, Profile};

/// The longest line accepted, in bytes. A 512-frame stack of 1 KiB names
/// is half of this; anything longer is a binary or corrupt file, and the
/// cap keeps one such "line" from taking memory in proportion to the file.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Read buffer size: big sequential reads without a big footprint.
const READ_BUFFER_BYTES: usize = 256 << 10;

impl Profile {
    /// Reads the folded file at `path`; errors name it as given.
    pub fn read_folded(path: impl AsRef<Path>) -> Result<Profile, ReadError> {
        let path = path.as_ref();
        let source = path.display().to_string();
        match File::open(path) {
            Ok(file) => {
                Self::read_folded_from(BufReader::with_capacity(READ_BUFFER_BYTES, file), source)
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
    pub fn read_folded_from<R: BufRead>(
        mut reader: R,
        source: impl Into<String>,
    ) -> Result<Profile, ReadError> {
        let source = source.into();
        let mut builder = Builder::new();
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
            let Some(line) = line::parse_line(&text).map_err(bad)? else {
                continue;
            };
            had_stacks = true;
            builder
                .add_folded(line.stack.split(';'), line.count)
                // More than 4 billion distinct names would not fit in
                // memory long before the ids run out; say so rather than
                // wrap.
                .map_err(|_| bad(LineProblem::TotalOverflow))?;
        }
        if builder.total_samples() == 0 {
            return Err(ReadError::Empty {
                source,
                lines: line_no,
                had_stacks,
            });
        }
        Ok(builder.finish_read(source))
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

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let p = Profile::read_folded_from(&b"main;f\xffo 2\n"[..], "u").unwrap();
        assert_eq!(lines(&p), ["main;f\u{fffd}o 2"]);
    }
}
