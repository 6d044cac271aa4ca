//! Why a folded file could not be read.

use std::fmt;
use std::io;

use super::escape::escape_bytes;
use super::line::LineProblem;

/// Longest excerpt of a bad line quoted in an error, in characters.
const EXCERPT_CHARS: usize = 160;

/// Why a folded file could not be read. Every variant names the file
/// (`source`), so a message printed on its own says which input was bad.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read.
    Io {
        /// The file's name as given.
        source: String,
        /// The 1-based line being read when reading failed, if any.
        line: Option<u64>,
        /// What the system said.
        error: io::Error,
    },
    /// A line is not `frame;...;frame COUNT`.
    Malformed {
        /// The file's name as given.
        source: String,
        /// The 1-based line number.
        line: u64,
        /// The line, shortened to a readable excerpt if it is long, with
        /// non-printable bytes escaped (`\x1b`, `\xff`).
        text: String,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// The file holds no samples.
    Empty {
        /// The file's name as given.
        source: String,
        /// Lines read (all blank, or all with count 0).
        lines: u64,
        /// Whether any line held a stack (all of them with count 0).
        had_stacks: bool,
    },
}

impl ReadError {
    /// The file the error is about.
    pub fn source_name(&self) -> &str {
        match self {
            ReadError::Io { source, .. }
            | ReadError::Malformed { source, .. }
            | ReadError::Empty { source, .. } => source,
        }
    }

    pub(crate) fn malformed(source: &str, line: u64, text: &[u8], problem: LineProblem) -> Self {
        ReadError::Malformed {
            source: source.to_owned(),
            line,
            text: excerpt(text),
            problem,
        }
    }
}

/// `text` without its line ending, escaped for a terminal, cut to
/// [`EXCERPT_CHARS`] characters with a note of how much was left out.
fn excerpt(text: &[u8]) -> String {
    let mut end = text.len();
    while end > 0 && matches!(text[end - 1], b'\r' | b'\n') {
        end -= 1;
    }
    let text = escape_bytes(&text[..end]);
    let total = text.chars().count();
    if total <= EXCERPT_CHARS {
        return text;
    }
    let head: String = text.chars().take(EXCERPT_CHARS).collect();
    format!("{head}... ({} more characters)", total - EXCERPT_CHARS)
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io {
                source,
                line: None,
                error,
            } => write!(f, "cannot read {source}: {error}"),
            ReadError::Io {
                source,
                line: Some(line),
                error,
            } => write!(f, "cannot read {source} at line {line}: {error}"),
            ReadError::Malformed {
                source,
                line,
                text,
                problem,
            } => write!(f, "{source}:{line}: {problem}\n  the line: {text}"),
            ReadError::Empty {
                source, lines: 0, ..
            } => write!(f, "{source} is empty: it holds no folded stacks"),
            ReadError::Empty {
                source,
                lines,
                had_stacks: false,
            } => write!(
                f,
                "{source} holds no folded stacks: its {lines} line(s) are all blank"
            ),
            ReadError::Empty { source, .. } => write!(
                f,
                "{source} holds no samples: every stack in it has a count of 0"
            ),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io { error, .. } => Some(error),
            ReadError::Malformed { .. } | ReadError::Empty { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_with_a_note() {
        let long = "x".repeat(EXCERPT_CHARS + 40);
        let e = ReadError::malformed("f.folded", 9, long.as_bytes(), LineProblem::MissingCount);
        let text = e.to_string();
        assert!(text.starts_with("f.folded:9: no sample count"), "{text}");
        assert!(text.ends_with("... (40 more characters)"), "{text}");
        assert!(text.len() < EXCERPT_CHARS + 200);
    }

    #[test]
    fn binary_text_is_escaped_not_echoed() {
        let e = ReadError::malformed(
            "bin",
            1,
            b"\x7fELF\x02\x01\x1b[31m\xff\r\n",
            LineProblem::MissingCount,
        );
        let text = e.to_string();
        assert!(
            text.ends_with("the line: \\x7fELF\\x02\\x01\\x1b[31m\\xff"),
            "{text}"
        );
        assert!(!text.bytes().any(|b| b < 0x20 && b != b'\n'), "{text:?}");
    }

    #[test]
    fn empty_files_say_which_kind_of_empty() {
        let empty = |lines, had_stacks| {
            ReadError::Empty {
                source: "e.folded".into(),
                lines,
                had_stacks,
            }
            .to_string()
        };
        assert_eq!(
            empty(0, false),
            "e.folded is empty: it holds no folded stacks"
        );
        assert!(empty(3, false).contains("3 line(s) are all blank"));
        assert!(empty(3, true).contains("count of 0"));
    }
}
