//! The folded-stack text format: `thread;root;...;leaf count`.
//!
//! One line per distinct stack, sorted, so two profiles of the same program
//! produce files that `diff` and `btprof diff` can compare line by line.

use std::borrow::Cow;
use std::io::{self, Write};

use crate::folded_profile::UNKNOWN_FRAME;
use crate::profile::Stack;

/// The frame put under the thread root of a stack whose walk ended early,
/// so partial stacks are visible instead of posing as complete ones.
pub const TRUNCATED_FRAME: &str = "[btprof: truncated]";

/// The only frame of the samples a full stack table could not store (see
/// `btprof_sampler::Limit`): counted under the thread, never dropped.
pub const TABLE_FULL_FRAME: &str = "[btprof: stack table full]";

/// How to fold stacks into lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Leave out the thread-name root so identical stacks of different
    /// threads merge.
    pub merge_threads: bool,
}

/// Makes a frame name safe for the folded format, so that every file
/// btprof writes reads back (in btprof, inferno and FlameGraph) to the
/// same frames.
///
/// - `;` separates frames and a line ends at a newline, so both are
///   replaced (`[u8; 8]` becomes `[u8, 8]`, a newline a space);
/// - whitespace at either end is dropped (readers trim a line's ends);
/// - a name ending in whitespace and a number (`ends with number 42`)
///   gets `_` for that whitespace (`ends with number_42`): as the leaf,
///   it would otherwise read as a second count, which inferno draws as a
///   differential frame and btprof rejects;
/// - an empty name becomes `[unknown]`, as readers take an empty frame.
///
/// Sanitising a sanitised name changes nothing.
pub fn sanitize_frame(name: &str) -> Cow<'_, str> {
    let trimmed = name.trim_matches(is_space);
    if trimmed.is_empty() {
        return Cow::Borrowed(UNKNOWN_FRAME);
    }
    let mut out = if trimmed.contains([';', '\n', '\r']) {
        let replaced: String = trimmed
            .chars()
            .map(|c| match c {
                ';' => ',',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        Cow::Owned(replaced.trim_matches(is_space).to_owned())
    } else {
        Cow::Borrowed(trimmed)
    };
    if let Some((head, last)) = out.rsplit_once(is_space) {
        if is_number(last) {
            let head = head.trim_end_matches(is_space);
            out = Cow::Owned(format!("{head}_{last}"));
        }
    }
    if out.is_empty() {
        return Cow::Borrowed(UNKNOWN_FRAME);
    }
    out
}

/// Whitespace as folded readers split on (and trim).
fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// What a folded reader could take for a sample count: `42`, `1.5`, `10.`.
fn is_number(field: &str) -> bool {
    let (int, frac) = field.split_once('.').unwrap_or((field, ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// The folded lines for `stacks`, without counts merged across threads
/// unless asked, sorted and with identical lines summed.
pub fn fold_lines(stacks: &[Stack], options: FoldOptions) -> Vec<String> {
    let mut lines: Vec<(String, u64)> = stacks
        .iter()
        .map(|s| (fold_stack(s, options), s.count))
        .collect();
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

/// Writes [`fold_lines`] one per line.
pub fn write_folded<W: Write>(stacks: &[Stack], options: FoldOptions, mut w: W) -> io::Result<()> {
    for line in fold_lines(stacks, options) {
        writeln!(w, "{line}")?;
    }
    w.flush()
}

fn fold_stack(stack: &Stack, options: FoldOptions) -> String {
    let mut line = String::new();
    let mut push = |frame: &str| {
        if !line.is_empty() {
            line.push(';');
        }
        line.push_str(&sanitize_frame(frame));
    };
    if !options.merge_threads {
        push(&stack.thread);
    }
    if stack.truncated {
        push(TRUNCATED_FRAME);
    }
    for frame in &stack.frames {
        push(frame);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(thread: &str, frames: &[&str], count: u64) -> Stack {
        Stack {
            thread: thread.into(),
            frames: frames.iter().map(|&f| f.into()).collect(),
            truncated: false,
            count,
        }
    }

    #[test]
    fn semicolon_inside_a_type_does_not_split_a_frame() {
        let s = stack("main", &["<[u8; 8] as Debug>::fmt", "leaf"], 3);
        let lines = fold_lines(&[s], FoldOptions::default());
        assert_eq!(lines, vec!["main;<[u8, 8] as Debug>::fmt;leaf 3"]);
        assert_eq!(lines[0].split(';').count(), 3);
    }

    #[test]
    fn lines_are_sorted_and_duplicates_summed() {
        let stacks = [
            stack("t2", &["a", "b"], 1),
            stack("t1", &["a", "c"], 2),
            stack("t1", &["a", "b"], 4),
            stack("t1", &["a", "c"], 5),
        ];
        assert_eq!(
            fold_lines(&stacks, FoldOptions::default()),
            vec!["t1;a;b 4", "t1;a;c 7", "t2;a;b 1"]
        );
        assert_eq!(
            fold_lines(
                &stacks,
                FoldOptions {
                    merge_threads: true
                }
            ),
            vec!["a;b 5", "a;c 7"]
        );
    }

    #[test]
    fn truncated_stacks_are_marked() {
        let mut s = stack("w", &["mid", "leaf"], 1);
        s.truncated = true;
        assert_eq!(
            fold_lines(&[s], FoldOptions::default()),
            vec![format!("w;{TRUNCATED_FRAME};mid;leaf 1")]
        );
    }

    #[test]
    fn sanitizes_newlines_and_empty_names() {
        assert_eq!(sanitize_frame("a\nb"), "a b");
        assert_eq!(sanitize_frame(""), "[unknown]");
        assert!(matches!(sanitize_frame("plain"), Cow::Borrowed(_)));
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
        let lines = fold_lines(
            &[stack("t", &["ends with number 42"], 5)],
            FoldOptions::default(),
        );
        assert_eq!(lines, ["t;ends with number_42 5"]);
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
    fn written_output_ends_lines() {
        let mut out = Vec::new();
        write_folded(&[stack("m", &["f"], 2)], FoldOptions::default(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "m;f 2\n");
    }
}
