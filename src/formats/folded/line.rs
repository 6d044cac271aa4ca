//! One line of a folded file: `frame;frame;...;frame COUNT`, or with two
//! counts, `frame;...;frame BEFORE AFTER`.
//!
//! This is the format of btprof's own files, `inferno-collapse-*` and
//! FlameGraph's `stackcollapse*` scripts: frames root first, separated by
//! `;`, then whitespace and a sample count. Frames may contain spaces
//! (`[unknown]`, `operator new`, thread names), so the count is the last
//! whitespace-separated field and everything before it is the stack.
//!
//! Two-count ("differential folded") lines, as `inferno-diff-folded` and
//! FlameGraph's `difffolded.pl` write them, carry the stack's samples in
//! two runs: the base, then the new one. A stack whose last frame ends in
//! a space and digits (`worker 3`) reads the same as a two-count line;
//! the file's first stack line decides which kind the file is, and a line
//! of the other kind is an error that says so.
//!
//! What other tools write is read as they mean it:
//! - an empty frame (`a;;b`, a trailing `;`, from a perf sample with an
//!   address and no symbol) is [`UNKNOWN_FRAME`], as btprof names one;
//! - a count written as a decimal (`31.0`, `10.`) is that integer, and a
//!   real fraction (`14.23`) is rounded to the nearest one and reported;
//! - `#` comment lines (austin's header) and blank lines are skipped.

use std::fmt;

use super::escape::escape;
pub use crate::profile::UNKNOWN_FRAME;

/// The largest sample count (per line, and in total) accepted: 2^53, the
/// largest integer every consumer holds exactly (a `f64`, which shares and
/// JSON numbers are). Larger counts are corrupt input or an overflow
/// elsewhere; `inferno` would overflow on them.
pub const MAX_COUNT: u64 = 1 << 53;

/// Why a line is not a folded stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineProblem {
    /// Nothing after the stack (no whitespace in the line).
    MissingCount,
    /// The last field is not a non-negative number.
    BadCount(String),
    /// The count is larger than [`MAX_COUNT`].
    CountTooLarge(String),
    /// Only a count, no frames.
    NoFrames,
    /// A one-count line in a two-count file, or the other way round.
    MixedCounts {
        /// The counts on this line: 1 or 2.
        this_line: u8,
        /// The 1-based line of the file's first stack, which set its kind.
        first_stack_line: u64,
    },
    /// The line is longer than any real stack (a binary or corrupt file).
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The samples so far add up to more than [`MAX_COUNT`].
    TotalOverflow,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHAPE: &str = "expected `frame;frame;...;frame COUNT`";
        match self {
            LineProblem::MissingCount => write!(f, "no sample count at the end ({SHAPE})"),
            LineProblem::BadCount(count) => write!(
                f,
                "`{count}` is not a sample count ({SHAPE} with COUNT a non-negative number)"
            ),
            LineProblem::CountTooLarge(count) => write!(
                f,
                "the sample count `{count}` is larger than 2^53 = {MAX_COUNT}, the largest \
                 count btprof reads exactly: the file is corrupt or was written after an overflow"
            ),
            LineProblem::NoFrames => write!(f, "no frames before the sample count ({SHAPE})"),
            LineProblem::MixedCounts {
                this_line,
                first_stack_line,
            } => {
                let (this, first) = if *this_line == 2 {
                    ("two sample counts", "one")
                } else {
                    ("one sample count", "two")
                };
                write!(
                    f,
                    "{this} at the end, but the first stack (line {first_stack_line}) had \
                     {first}: a folded file has one count per line (`frame;...;frame COUNT`) \
                     or, as differential output, two on every line (`frame;...;frame BEFORE AFTER`)"
                )
            }
            LineProblem::TooLong { limit } => write!(
                f,
                "the line is longer than {} MiB: this does not look like a folded file",
                limit >> 20
            ),
            LineProblem::TotalOverflow => write!(
                f,
                "the samples add up to more than 2^53 = {MAX_COUNT}, the largest total \
                 btprof counts exactly"
            ),
        }
    }
}

/// A parsed line: the stack (frames joined by `;`; an empty frame means
/// [`UNKNOWN_FRAME`]) and count; on a two-count line, `count` is the
/// second (new) one and `before` the first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub(crate) stack: &'a str,
    pub(crate) count: u64,
    /// The first count of a two-count line.
    pub(crate) before: Option<u64>,
    /// A count had a fractional part that was rounded away.
    pub(crate) rounded: bool,
}

impl<'a> Line<'a> {
    /// The frames, root first, empty ones named [`UNKNOWN_FRAME`].
    pub(crate) fn frames(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.stack.split(';').map(|f| {
            if f.trim_matches(is_space).is_empty() {
                UNKNOWN_FRAME
            } else {
                f
            }
        })
    }
}

/// Parses one line; `Ok(None)` for a blank or comment line.
pub(crate) fn parse_line(line: &str) -> Result<Option<Line<'_>>, LineProblem> {
    let line = line.trim();
    if line.is_empty() || is_comment(line) {
        return Ok(None);
    }
    let Some((stack, count)) = line.rsplit_once(is_space) else {
        return Err(if is_count(line) {
            LineProblem::NoFrames
        } else {
            LineProblem::MissingCount
        });
    };
    let (count, rounded) = parse_count(count)?;
    let stack = stack.trim_end_matches(is_space);
    if let Some((frames, first)) = stack
        .rsplit_once(is_space)
        .filter(|(_, last)| is_count(last))
    {
        let (before, first_rounded) = parse_count(first)?;
        return Ok(Some(Line {
            stack: frames.trim_end_matches(is_space),
            count,
            before: Some(before),
            rounded: rounded || first_rounded,
        }));
    }
    Ok(Some(Line {
        stack,
        count,
        before: None,
        rounded,
    }))
}

/// `# ...` (austin's header, comments in hand-written files) or a lone `#`.
fn is_comment(line: &str) -> bool {
    line == "#" || line.starts_with("# ") || line.starts_with("#\t")
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Digits, optionally with a decimal point and more digits: `12`, `31.0`,
/// `10.`, `14.23`.
fn is_count(field: &str) -> bool {
    let (int, frac) = field.split_once('.').unwrap_or((field, ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// The count, rounded to the nearest integer (ties up), and whether a
/// non-zero fraction was rounded away.
fn parse_count(field: &str) -> Result<(u64, bool), LineProblem> {
    // `u64::from_str` also takes `+5`; a count is digits only.
    if !is_count(field) {
        return Err(LineProblem::BadCount(escape(field)));
    }
    let too_large = || LineProblem::CountTooLarge(escape(field));
    let (int, frac) = field.split_once('.').unwrap_or((field, ""));
    let mut count: u64 = int.parse().map_err(|_| too_large())?;
    let rounded = frac.bytes().any(|b| b != b'0');
    if frac.as_bytes().first().is_some_and(|&d| d >= b'5') {
        count = count.checked_add(1).ok_or_else(too_large)?;
    }
    if count > MAX_COUNT {
        return Err(too_large());
    }
    Ok((count, rounded))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> (&str, u64) {
        let l = parse_line(line).unwrap().unwrap();
        (l.stack, l.count)
    }

    fn frames(line: &str) -> Vec<&str> {
        parse_line(line).unwrap().unwrap().frames().collect()
    }

    #[test]
    fn reads_the_common_shapes() {
        assert_eq!(ok("main;foo;bar 12"), ("main;foo;bar", 12));
        assert_eq!(ok("single 1"), ("single", 1));
        assert_eq!(ok("zero;count 0"), ("zero;count", 0));
        // CRLF files, tabs, runs of spaces.
        assert_eq!(ok("a;b 3\r\n"), ("a;b", 3));
        assert_eq!(ok("a;b\t4"), ("a;b", 4));
        assert_eq!(ok("a;b   5  "), ("a;b", 5));
    }

    #[test]
    fn frames_may_contain_spaces() {
        assert_eq!(
            ok("Web Content;[unknown];operator new(unsigned long) 7"),
            ("Web Content;[unknown];operator new(unsigned long)", 7)
        );
        assert_eq!(
            ok("java;Interpreter;<[u8, 8] as Debug>::fmt 2"),
            ("java;Interpreter;<[u8, 8] as Debug>::fmt", 2)
        );
    }

    #[test]
    fn blank_and_comment_lines_are_skipped() {
        assert_eq!(parse_line(""), Ok(None));
        assert_eq!(parse_line("   \r\n"), Ok(None));
        assert_eq!(parse_line("# austin: 3.6.0"), Ok(None));
        assert_eq!(parse_line("#"), Ok(None));
        // A frame that merely starts with `#` is still a stack.
        assert_eq!(ok("#main;f 2"), ("#main;f", 2));
    }

    #[test]
    fn empty_frames_are_unknown() {
        assert_eq!(frames("a;;b 1"), ["a", UNKNOWN_FRAME, "b"]);
        assert_eq!(frames(";a 1"), [UNKNOWN_FRAME, "a"]);
        assert_eq!(frames("a; 1"), ["a", UNKNOWN_FRAME]);
        assert_eq!(frames("a;  10"), ["a", UNKNOWN_FRAME]);
        assert_eq!(frames("a;  ;b 10"), ["a", UNKNOWN_FRAME, "b"]);
    }

    #[test]
    fn decimal_counts_are_integers_and_fractions_round() {
        let count = |line| {
            let l = parse_line(line).unwrap().unwrap();
            (l.count, l.rounded)
        };
        assert_eq!(count("a 31.0"), (31, false));
        assert_eq!(count("a 10."), (10, false));
        assert_eq!(count("a 7.000"), (7, false));
        assert_eq!(count("a 14.23"), (14, true));
        assert_eq!(count("a 14.5"), (15, true));
        assert_eq!(count("a 0.7"), (1, true));
    }

    #[test]
    fn rejects_what_is_not_a_stack_and_count() {
        let cases = [
            ("main;foo", LineProblem::MissingCount),
            ("main;foo bar", LineProblem::BadCount("bar".into())),
            ("main;foo -3", LineProblem::BadCount("-3".into())),
            ("main;foo +3", LineProblem::BadCount("+3".into())),
            ("main;foo .5", LineProblem::BadCount(".5".into())),
            ("main;foo 1.5.2", LineProblem::BadCount("1.5.2".into())),
            ("main;foo 1e3", LineProblem::BadCount("1e3".into())),
            ("main;foo 0x10", LineProblem::BadCount("0x10".into())),
            (
                "main;foo 18446744073709551616",
                LineProblem::CountTooLarge("18446744073709551616".into()),
            ),
            ("42", LineProblem::NoFrames),
            ("main;foo 10 x12", LineProblem::BadCount("x12".into())),
        ];
        for (line, want) in cases {
            assert_eq!(parse_line(line), Err(want), "{line:?}");
        }
    }

    #[test]
    fn two_count_lines_carry_both_runs() {
        let two = |line| {
            let l = parse_line(line).unwrap().unwrap();
            (l.stack, l.before, l.count, l.rounded)
        };
        assert_eq!(two("main;foo 10 12"), ("main;foo", Some(10), 12, false));
        assert_eq!(two("main;foo\t0  7\r\n"), ("main;foo", Some(0), 7, false));
        // Decimal counts as in one-count files; a fraction in either counts.
        assert_eq!(two("a;b 3.0 4.5"), ("a;b", Some(3), 5, true));
        assert_eq!(two("a;b 2.5 4"), ("a;b", Some(3), 4, true));
        // Frames may still contain spaces; blank frames are unknown.
        assert_eq!(
            two("Web Content;operator new(unsigned long) 1 2"),
            ("Web Content;operator new(unsigned long)", Some(1), 2, false)
        );
        assert_eq!(frames("a;; 1 2"), ["a", UNKNOWN_FRAME, UNKNOWN_FRAME]);
        // One number before the count is a one-frame stack, as it always was.
        assert_eq!(two("12 34"), ("12", None, 34, false));
        assert_eq!(
            parse_line("a 1 99999999999999999999"),
            Err(LineProblem::CountTooLarge("99999999999999999999".into()))
        );
        assert_eq!(
            parse_line("a 99999999999999999999 1"),
            Err(LineProblem::CountTooLarge("99999999999999999999".into()))
        );
    }

    #[test]
    fn counts_above_2_pow_53_are_rejected() {
        assert_eq!(ok("a 9007199254740992").1, MAX_COUNT);
        for too_large in [
            "9007199254740993",
            "18446744073709551615",
            "9007199254740992.5",
        ] {
            assert_eq!(
                parse_line(&format!("a {too_large}")),
                Err(LineProblem::CountTooLarge(too_large.into()))
            );
        }
    }

    #[test]
    fn problems_say_what_was_expected() {
        let text = LineProblem::BadCount("bar".into()).to_string();
        assert!(text.contains("`bar`") && text.contains("COUNT"), "{text}");
        let mixed = LineProblem::MixedCounts {
            this_line: 1,
            first_stack_line: 3,
        }
        .to_string();
        assert!(
            mixed.starts_with("one sample count") && mixed.contains("(line 3) had two"),
            "{mixed}"
        );
        assert!(LineProblem::CountTooLarge("1".into())
            .to_string()
            .contains("2^53"));
    }
}
