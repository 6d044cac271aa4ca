//! Column-aligned tables for terminals and Markdown.

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A table of strings with headers.
pub(crate) struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(columns: &[(&'static str, Align)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one cell per column.
    pub(crate) fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// Plain text, columns separated by two spaces, each line indented by
    /// two. The last column is not padded, so long names (the usual last
    /// column) do not push everything else around.
    pub(crate) fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain(std::iter::once(self.columns[c].0.len()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let header: Vec<String> = self.columns.iter().map(|(h, _)| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            out.push_str("  ");
            let last = row.len() - 1;
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c].saturating_sub(cell.chars().count());
                match self.columns[c].1 {
                    Align::Right => {
                        out.extend(std::iter::repeat_n(' ', pad));
                        out.push_str(cell);
                    }
                    Align::Left if c == last => out.push_str(cell),
                    Align::Left => {
                        out.push_str(cell);
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                if c != last {
                    out.push_str("  ");
                }
            }
            out.push('\n');
        }
        out
    }

    /// A GitHub-flavoured Markdown table. Cells are used as given: escape
    /// them with [`code`] where needed.
    pub(crate) fn to_markdown(&self) -> String {
        let mut out = String::from("|");
        for (h, _) in &self.columns {
            out.push_str(&format!(" {h} |"));
        }
        out.push_str("\n|");
        for (_, align) in &self.columns {
            out.push_str(match align {
                Align::Left => ":--|",
                Align::Right => "--:|",
            });
        }
        out.push('\n');
        for row in &self.rows {
            out.push('|');
            for cell in row {
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
        out
    }
}

/// `text` as a Markdown code span that is safe inside a table cell.
pub(crate) fn code(text: &str) -> String {
    // A `|` ends a table cell even inside a code span unless escaped; a
    // backtick inside needs a longer fence.
    let text = text.replace('|', "\\|");
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// `n` with thousands separators: `1,234,567`.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A share (0..=1) as a percentage with two decimals: `37.41%`.
pub(crate) fn percent(share: f64) -> String {
    format!("{:.2}%", share * 100.0)
}

/// A change in percentage points with its sign: `+16.61`.
pub(crate) fn points(change: f64) -> String {
    // Avoid "-0.00" for a change that rounds to nothing.
    if change.abs() < 0.005 {
        "0.00".to_owned()
    } else {
        format!("{change:+.2}")
    }
}

/// A p-value, short: `3.2e-7`; `0` when it underflowed.
pub(crate) fn p_value(p: f64) -> String {
    if p == 0.0 {
        "0".to_owned()
    } else if p >= 0.01 {
        format!("{p:.2}")
    } else {
        format!("{p:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_aligns_columns_and_leaves_the_last_ragged() {
        let mut t = Table::new(&[("n", Align::Right), ("name", Align::Left)]);
        t.push(vec!["1".into(), "short".into()]);
        t.push(vec!["100".into(), "a much longer name".into()]);
        assert_eq!(
            t.to_text(),
            "    n  name\n    1  short\n  100  a much longer name\n"
        );
    }

    #[test]
    fn markdown_has_alignment_row_and_escapes_pipes() {
        let mut t = Table::new(&[("n", Align::Right), ("name", Align::Left)]);
        t.push(vec!["1".into(), code("a|b")]);
        assert_eq!(
            t.to_markdown(),
            "| n | name |\n|--:|:--|\n| 1 | `a\\|b` |\n"
        );
        assert_eq!(code("x`y"), "`` x`y ``");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(percent(0.37412), "37.41%");
        assert_eq!(points(16.614), "+16.61");
        assert_eq!(points(-0.001), "0.00");
        assert_eq!(points(-2.5), "-2.50");
        assert_eq!(p_value(0.5), "0.50");
        assert_eq!(p_value(3.2e-7), "3.2e-7");
        assert_eq!(p_value(0.0), "0");
    }
}
