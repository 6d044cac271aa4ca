//! A profile's top functions (`btprof report`) as text, Markdown or JSON.

use serde_json::{json, Value};

use super::table::{code, grouped, percent, Align, Table};
use crate::analysis::functions::{FunctionSamples, FunctionTable};
use crate::profile::Profile;

/// Which ranking a table shows.
#[derive(Clone, Copy)]
enum Ranking {
    Self_,
    Total,
}

impl Ranking {
    fn heading(self, n: usize) -> String {
        match self {
            Ranking::Self_ => {
                format!("top {n} functions by self share (samples where the function is the leaf)")
            }
            Ranking::Total => format!(
                "top {n} functions by total share (samples whose stack contains the function)"
            ),
        }
    }

    fn rows(self, table: &FunctionTable, top: usize) -> Vec<&FunctionSamples> {
        match self {
            Ranking::Self_ => table.top_by_self(top),
            Ranking::Total => table.top_by_total(top),
        }
    }
}

fn ranking_table(
    table: &FunctionTable,
    rows: &[&FunctionSamples],
    ranking: Ranking,
    markdown: bool,
) -> Table {
    use Align::{Left, Right};
    let (first, other) = match ranking {
        Ranking::Self_ => ("self", "total"),
        Ranking::Total => ("total", "self"),
    };
    let mut t = Table::new(&[
        (first, Right),
        ("samples", Right),
        (other, Right),
        ("function", Left),
    ]);
    for f in rows {
        let (lead, second) = match ranking {
            Ranking::Self_ => (f.self_samples, f.total_samples),
            Ranking::Total => (f.total_samples, f.self_samples),
        };
        t.push(vec![
            percent(table.share(lead)),
            grouped(lead),
            percent(table.share(second)),
            if markdown {
                code(&f.name)
            } else {
                f.name.clone()
            },
        ]);
    }
    t
}

fn summary(profile: &Profile, table: &FunctionTable) -> String {
    format!(
        "{} samples, {} distinct stacks, {} functions",
        grouped(profile.total_samples()),
        grouped(profile.distinct_stacks() as u64),
        grouped(table.functions().len() as u64)
    )
}

/// The `top` functions by self share, then by total share, as text.
pub fn text(profile: &Profile, table: &FunctionTable, top: usize) -> String {
    let mut out = format!("{}: {}\n", profile.source(), summary(profile, table));
    for ranking in [Ranking::Self_, Ranking::Total] {
        let rows = ranking.rows(table, top);
        out.push('\n');
        out.push_str(&ranking.heading(rows.len()));
        out.push_str(":\n");
        out.push_str(&ranking_table(table, &rows, ranking, false).to_text());
    }
    out
}

/// The same as [`text`], in Markdown.
pub fn markdown(profile: &Profile, table: &FunctionTable, top: usize) -> String {
    let mut out = format!(
        "### btprof report: {}\n\n{}\n",
        code(profile.source()),
        summary(profile, table)
    );
    for ranking in [Ranking::Self_, Ranking::Total] {
        let rows = ranking.rows(table, top);
        let mut heading = ranking.heading(rows.len());
        if let Some(first) = heading.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        out.push_str(&format!("\n{heading}:\n\n"));
        out.push_str(&ranking_table(table, &rows, ranking, true).to_markdown());
    }
    out
}

/// The same as [`text`], as JSON.
pub fn json(profile: &Profile, table: &FunctionTable, top: usize) -> Value {
    let entry = |f: &FunctionSamples| {
        json!({
            "name": f.name,
            "self_samples": f.self_samples,
            "total_samples": f.total_samples,
            "self_percent": table.share(f.self_samples) * 100.0,
            "total_percent": table.share(f.total_samples) * 100.0,
        })
    };
    json!({
        "source": profile.source(),
        "samples": profile.total_samples(),
        "distinct_stacks": profile.distinct_stacks(),
        "functions": table.functions().len(),
        "top_by_self": table.top_by_self(top).into_iter().map(entry).collect::<Vec<_>>(),
        "top_by_total": table.top_by_total(top).into_iter().map(entry).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> (Profile, FunctionTable) {
        let p = Profile::read_folded_from(
            &b"t;main;parse 300\nt;main;render;draw 600\nt;main 100\n"[..],
            "run.folded",
        )
        .unwrap();
        let t = FunctionTable::new(&p, false);
        (p, t)
    }

    #[test]
    fn text_ranks_by_self_then_total() {
        let (p, t) = profile();
        let out = text(&p, &t, 2);
        assert!(
            out.starts_with("run.folded: 1,000 samples, 3 distinct stacks, 5 functions"),
            "{out}"
        );
        let rows: Vec<&str> = out.lines().filter(|l| l.contains('%')).collect();
        assert_eq!(rows.len(), 4, "{out}");
        assert!(
            rows[0].contains("60.00%") && rows[0].ends_with("draw"),
            "{out}"
        );
        assert!(rows[1].ends_with("parse"), "{out}");
        // By total: `main` and `t` are on every stack (ties by name).
        assert!(
            rows[2].contains("100.00%") && rows[2].ends_with("main"),
            "{out}"
        );
        assert!(rows[3].ends_with(" t"), "{out}");
    }

    #[test]
    fn markdown_and_json_agree() {
        let (p, t) = profile();
        let md = markdown(&p, &t, 1);
        assert!(md.contains("| 60.00% | 600 | 60.00% | `draw` |"), "{md}");
        assert!(md.contains("Top 1 functions by total share"), "{md}");
        let v = json(&p, &t, 3);
        assert_eq!(v["top_by_self"][0]["name"], "draw");
        assert_eq!(v["top_by_self"][0]["self_samples"], 600);
        assert_eq!(v["top_by_total"].as_array().unwrap().len(), 3);
        assert_eq!(v["samples"], 1000);
    }
}
