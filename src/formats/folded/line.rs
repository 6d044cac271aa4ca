//! One line of a folded file: `frame;frame;...;frame COUNT`.
//!
//! This is the format of btprof's own files, `inferno-collapse-*` and
//! FlameGraph's `stackcollapse*` scripts: frames root first, separated by
//! `;`, then whitespace and a sample count. Frames may contain spaces
//! (`[unknown]`, `operator new`, thread names), so the count is the last
//! whitespace-separated field and everything before it is the stack.

use std::fmt;

/// Why a line is not a folded stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineProblem {
    /// Nothing after the stack (no whitespace in the line).
    MissingCount,
    /// The last field is not a non-negative integer.
    BadCount(String),
    /// The count does not fit in a `u64`.
    CountTooLarge(String),
    /// Only a count, no frames.
    NoFrames,
    /// `;;`, or `;` at either end of the stack.
    EmptyFrame,
    /// Two counts at the end: differential output, not a plain profile.
    TwoCounts,
    /// The line is longer than any real stack (a binary or corrupt file).
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The samples so far overflow a `u64`.
    TotalOverflow,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHAPE: &str = "expected `frame;frame;...;frame COUNT`";
        match self {
            LineProblem::MissingCount => write!(f, "no sample count at the end ({SHAPE})"),
            LineProblem::BadCount(count) => write!(
                f,
                "`{count}` is not a sample count ({SHAPE} with COUNT a non-negative integer)"
            ),
            LineProblem::CountTooLarge(count) => {
                write!(f, "the sample count `{count}` is larger than {}", u64::MAX)
            }
            LineProblem::NoFrames => write!(f, "no frames before the sample count ({SHAPE})"),
            LineProblem::EmptyFrame => {
                f.write_str("an empty frame name (`;;`, or `;` at the start or end of the stack)")
            }
            LineProblem::TwoCounts => f.write_str(
                "two sample counts at the end: this looks like differential folded output; \
                 btprof reads plain folded files with one count per line",
            ),
            LineProblem::TooLong { limit } => write!(
                f,
                "the line is longer than {} MiB: this does not look like a folded file",
                limit >> 20
            ),
            LineProblem::TotalOverflow => {
                write!(f, "the total sample count is larger than {}", u64::MAX)
            }
        }
    }
}

/// A parsed line: the stack (frames joined by `;`, validated) and count.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub(crate) stack: &'a str,
    pub(crate) count: u64,
}

/// Parses one line; `Ok(None)` for a blank one.
pub(crate) fn parse_line(line: &str) -> Result<Option<Line<'_>>, LineProblem> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    let Some((stack, count)) = line.rsplit_once(is_space) else {
        return Err(if is_count(line) {
            LineProblem::NoFrames
        } else {
            LineProblem::MissingCount
        });
    };
    let count = parse_count(count)?;
    let stack = stack.trim_end_matches(is_space);
    if stack
        .rsplit_once(is_space)
        .is_some_and(|(_, last)| is_count(last))
    {
        return Err(LineProblem::TwoCounts);
    }
    if stack.starts_with(';') || stack.ends_with(';') || stack.contains(";;") {
        return Err(LineProblem::EmptyFrame);
    }
    Ok(Some(Line { stack, count }))
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_count(field: &str) -> bool {
    !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit())
}

fn parse_count(field: &str) -> Result<u64, LineProblem> {
    // `u64::from_str` also takes `+5`; a count is digits only.
    if !is_count(field) {
        return Err(LineProblem::BadCount(field.to_owned()));
    }
    field
        .parse()
        .map_err(|_| LineProblem::CountTooLarge(field.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> (&str, u64) {
        let l = parse_line(line).unwrap().unwrap();
        (l.stack, l.count)
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
    fn blank_lines_are_skipped() {
        assert_eq!(parse_line(""), Ok(None));
        assert_eq!(parse_line("   \r\n"), Ok(None));
    }

    #[test]
    fn rejects_what_is_not_a_stack_and_count() {
        let cases = [
            ("main;foo", LineProblem::MissingCount),
            ("main;foo bar", LineProblem::BadCount("bar".into())),
            ("main;foo -3", LineProblem::BadCount("-3".into())),
            ("main;foo +3", LineProblem::BadCount("+3".into())),
            ("main;foo 1.5", LineProblem::BadCount("1.5".into())),
            ("main;foo 0x10", LineProblem::BadCount("0x10".into())),
            (
                "main;foo 18446744073709551616",
                LineProblem::CountTooLarge("18446744073709551616".into()),
            ),
            ("42", LineProblem::NoFrames),
            ("main;;foo 1", LineProblem::EmptyFrame),
            (";main 1", LineProblem::EmptyFrame),
            ("main; 1", LineProblem::EmptyFrame),
            ("main;foo 10 12", LineProblem::TwoCounts),
        ];
        for (line, want) in cases {
            assert_eq!(parse_line(line), Err(want), "{line:?}");
        }
    }

    #[test]
    fn the_largest_count_fits() {
        assert_eq!(ok("a 18446744073709551615").1, u64::MAX);
    }

    #[test]
    fn problems_say_what_was_expected() {
        let text = LineProblem::BadCount("bar".into()).to_string();
        assert!(text.contains("`bar`") && text.contains("COUNT"), "{text}");
        assert!(LineProblem::TwoCounts.to_string().contains("differential"));
    }
}
