//! Text from input files, made safe to print in an error message.
//!
//! A malformed line may come from a binary file: raw control bytes
//! (escape sequences, backspaces, NULs) echoed to a terminal can garble or
//! reprogram it, and invalid UTF-8 would be silently replaced. Error
//! messages quote such text with every non-printable byte escaped, so the
//! user sees exactly what is in the file.

use std::fmt::Write;

/// `bytes` with printable text kept and everything else escaped:
/// `\t`, `\r`, `\n`, `\\`, `\xNN` for other control bytes and for bytes
/// that are not UTF-8, `\u{NNNN}` for non-printing Unicode (C1 controls,
/// bidirectional overrides, zero-width characters).
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\n' => out.push_str("\\n"),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if is_invisible(c) => {
                    let _ = write!(out, "\\u{{{:04x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// [`escape_bytes`] of a string.
pub(crate) fn escape(text: &str) -> String {
    escape_bytes(text.as_bytes())
}

/// Characters that print nothing or change how the rest of the line is
/// shown.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x80..=0x9f            // C1 controls (CSI is 0x9b)
        | 0x200b..=0x200f      // zero-width, LRM/RLM
        | 0x202a..=0x202e      // bidirectional embeddings and overrides
        | 0x2066..=0x2069      // bidirectional isolates
        | 0xfeff               // byte-order mark
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_is_kept() {
        assert_eq!(
            escape("main;<[u8, 8] as Debug>::fmt 3"),
            "main;<[u8, 8] as Debug>::fmt 3"
        );
        assert_eq!(escape("größe;函数"), "größe;函数");
    }

    #[test]
    fn control_and_invalid_bytes_are_escaped() {
        assert_eq!(escape_bytes(b"a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(
            escape_bytes(b"\x00\x07\x7f\tx\r\n"),
            "\\x00\\x07\\x7f\\tx\\r\\n"
        );
        assert_eq!(escape_bytes(b"f\xffo\xc3"), "f\\xffo\\xc3");
        assert_eq!(escape("back\\slash"), "back\\\\slash");
        assert_eq!(escape("\u{202e}evil\u{9b}"), "\\u{202e}evil\\u{009b}");
    }
}
