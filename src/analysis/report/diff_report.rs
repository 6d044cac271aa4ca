//! A [`DiffReport`] as text, Markdown or JSON.

use serde_json::{json, Value};

use super::table::{code, grouped, p_value, percent, points, Align, Table};
use crate::analysis::diff::{
    DiffReport, FunctionDiff, Metric, Presence, RunSummary, Samples, Spread, Verdict,
};
use crate::analysis::functions::SelfFrame;

/// Which functions a text or Markdown table shows: the first `rows`
/// (all when `None`) in report order (regressions first, then the
/// largest changes), every regressed one wherever it is, and none whose
/// gated share is zero in both runs (a caller that is never a leaf, in
/// a self-share diff: a row of zeros says nothing).
fn shown(report: &DiffReport, rows: Option<usize>) -> Vec<&FunctionDiff> {
    let limit = rows.unwrap_or(usize::MAX);
    with_samples(report)
        .enumerate()
        .filter(|(i, f)| *i < limit || f.verdict == Verdict::Regressed)
        .map(|(_, f)| f)
        .collect()
}

/// The report's functions with any samples of the gated kind in either
/// run, in report order: the ones a table could list.
fn with_samples(report: &DiffReport) -> impl Iterator<Item = &FunctionDiff> {
    let metric = report.options.metric;
    report
        .functions
        .iter()
        .filter(move |f| f.base.count(metric) > 0 || f.new.count(metric) > 0)
}

/// The functions a table shows ([`shown`]) and how many more it could
/// list (rows of zeros left out), which the table's note counts.
fn shown_and_hidden(report: &DiffReport, rows: Option<usize>) -> (Vec<&FunctionDiff>, usize) {
    let shown = shown(report, rows);
    let hidden = with_samples(report).count() - shown.len();
    (shown, hidden)
}

fn verdict_word(f: &FunctionDiff) -> &'static str {
    match f.verdict {
        Verdict::Regressed => "REGRESSED",
        Verdict::Improved => "improved",
        Verdict::Unchanged => "-",
    }
}

fn name_with_presence(f: &FunctionDiff, name: String) -> String {
    match f.presence {
        Presence::Both => name,
        Presence::New => format!("{name} [new]"),
        Presence::Vanished => format!("{name} [vanished]"),
    }
}

/// `22.10–22.90%`: the range of a side's per-run shares, `-` with one
/// run.
fn spread_cell(runs: &[f64]) -> String {
    match Spread::of(runs) {
        Some(s) if runs.len() >= 2 => format!(
            "{}–{}",
            percent(s.min).trim_end_matches('%'),
            percent(s.max)
        ),
        _ => "-".to_owned(),
    }
}

/// Whether the table shows per-side spreads: when a side has several runs.
fn shows_spread(report: &DiffReport) -> bool {
    report.base.len().max(report.new.len()) >= 2
}

fn table(report: &DiffReport, rows: &[&FunctionDiff], markdown: bool) -> Table {
    use Align::{Left, Right};
    let spread = shows_spread(report);
    let (base_spread, new_spread) = match report.options.metric {
        Metric::SelfShare => ("base self range", "new self range"),
        Metric::TotalShare => ("base total range", "new total range"),
    };
    let mut columns = vec![
        ("base self", Right),
        ("new self", Right),
        ("change", Right),
        ("base total", Right),
        ("new total", Right),
        ("change", Right),
    ];
    if spread {
        columns.extend([(base_spread, Right), (new_spread, Right)]);
    }
    columns.extend([
        ("p-value", Right),
        ("decided by", Left),
        ("verdict", Left),
        ("function", Left),
    ]);
    let mut t = Table::new(&columns);
    for f in rows {
        let name = if markdown {
            code(&f.name)
        } else {
            f.name.clone()
        };
        let mut row = vec![
            percent(f.base.self_share),
            percent(f.new.self_share),
            points(f.self_change_points()),
            percent(f.base.total_share),
            percent(f.new.total_share),
            points(f.total_change_points()),
        ];
        if spread {
            row.extend([spread_cell(&f.base_runs), spread_cell(&f.new_runs)]);
        }
        row.extend([
            p_value(f.p_value),
            f.decided.as_str().to_owned(),
            verdict_word(f).to_owned(),
            name_with_presence(f, name),
        ]);
        t.push(row);
    }
    t
}

/// One line stating the gate, e.g. "self share up by more than 1.00
/// points, at least 20 samples in the new run, and p < 6.7e-5 (...)".
fn gate_line(report: &DiffReport) -> String {
    let o = &report.options;
    let per_run = if report.base.len().max(report.new.len()) > 1 {
        " per new run on average"
    } else {
        " in the new run"
    };
    let mean = match report.rule {
        crate::analysis::diff::Rule::RunToRunSpread => "mean ",
        crate::analysis::diff::Rule::SamplingNoise => "",
    };
    format!(
        "{mean}{} share up by more than {:.2} points, at least {} samples{per_run}, \
         and p < {} = {} / {} functions ({}, Bonferroni-corrected){}{}",
        o.metric.as_str(),
        report.threshold_points(),
        o.min_samples,
        p_value(report.per_test_alpha),
        report.alpha(),
        report.tests,
        report.rule.test_name(),
        if report.per_thread() {
            "; shares weighted per thread (root frames) by the runs' mean split"
        } else if o.skip_root {
            "; root frames skipped"
        } else {
            ""
        },
        match (o.metric, o.self_frame) {
            (Metric::SelfShare, SelfFrame::OwnCode) => {
                "; self time of std/core/alloc frames counts to the innermost frame of other code"
            }
            _ => "",
        }
    )
}

/// The one-line conclusion.
fn result_line(report: &DiffReport) -> String {
    let metric = report.options.metric;
    let regressions: Vec<&FunctionDiff> = report.regressions().collect();
    if regressions.is_empty() {
        let improved = report.improvements().count();
        return if improved == 0 {
            "no regression".to_owned()
        } else {
            format!("no regression ({improved} function(s) improved)")
        };
    }
    let first = regressions[0];
    let more = match regressions.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    format!(
        "REGRESSION: {} function(s) regressed, first {} ({} points {}){more}",
        regressions.len(),
        first.name,
        points(first.change_points(metric)),
        metric.as_str()
    )
}

/// `name (12.50% self)` for new or vanished functions, most share first.
fn presence_list(
    report: &DiffReport,
    presence: Presence,
    limit: Option<usize>,
    markdown: bool,
) -> Option<String> {
    let metric = report.options.metric;
    let side = |f: &FunctionDiff| -> Samples {
        if presence == Presence::New {
            f.new
        } else {
            f.base
        }
    };
    let mut list: Vec<&FunctionDiff> = report
        .functions
        .iter()
        .filter(|f| f.presence == presence)
        .collect();
    if list.is_empty() {
        return None;
    }
    list.sort_by(|a, b| side(b).share(metric).total_cmp(&side(a).share(metric)));
    let total = list.len();
    let limit = limit.unwrap_or(usize::MAX);
    let mut items: Vec<String> = list
        .iter()
        .take(limit)
        .map(|f| {
            let name = if markdown {
                code(&f.name)
            } else {
                f.name.clone()
            };
            format!(
                "{name} ({} {})",
                percent(side(f).share(metric)),
                metric.as_str()
            )
        })
        .collect();
    if total > limit {
        items.push(format!("and {} more", total - limit));
    }
    let label = if presence == Presence::New {
        "new functions"
    } else {
        "vanished functions"
    };
    Some(format!("{label} ({total}): {}", items.join(", ")))
}

fn run_line(role: &str, run: &RunSummary) -> String {
    format!(
        "{role}: {}  {} samples, {} distinct stacks, {} functions",
        run.source,
        grouped(run.samples),
        grouped(run.stacks as u64),
        grouped(run.functions as u64)
    )
}

/// The report as a plain-text table, largest increase first, `rows`
/// functions (all when `None`) plus every regressed one.
pub fn text(report: &DiffReport, rows: Option<usize>) -> String {
    let mut out = String::new();
    for (role, runs) in [("base", &report.base), ("new ", &report.new)] {
        for run in runs {
            out.push_str(&run_line(role, run));
            out.push('\n');
        }
    }
    out.push_str(&format!("gate: {}\n", gate_line(report)));
    out.push_str(&format!("noise: {}\n", report.noise_note()));
    for w in &report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out.push('\n');
    let (shown, hidden) = shown_and_hidden(report, rows);
    out.push_str(&table(report, &shown, false).to_text());
    if hidden > 0 {
        out.push_str(&format!(
            "  ... {hidden} more function(s) with smaller changes (--top 0 lists all)\n"
        ));
    }
    out.push('\n');
    for presence in [Presence::New, Presence::Vanished] {
        if let Some(line) = presence_list(report, presence, rows, false) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str(&format!("result: {}\n", result_line(report)));
    out
}

/// The report as Markdown for a pull-request comment or CI summary.
pub fn markdown(report: &DiffReport, rows: Option<usize>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "### btprof diff: {}\n\n",
        if report.regressed() {
            "regression"
        } else {
            "no regression"
        }
    ));
    for (role, runs) in [("Base", &report.base), ("New", &report.new)] {
        for run in runs {
            out.push_str(&format!(
                "- **{role}**: {} — {} samples, {} distinct stacks, {} functions\n",
                code(&run.source),
                grouped(run.samples),
                grouped(run.stacks as u64),
                grouped(run.functions as u64)
            ));
        }
    }
    out.push_str(&format!("- **Gate**: {}\n", gate_line(report)));
    out.push_str(&format!("- **Noise**: {}\n", report.noise_note()));
    out.push_str(&format!("- **Result**: {}\n\n", result_line(report)));
    for w in &report.warnings {
        out.push_str(&format!("> **Warning:** {w}\n\n"));
    }
    let (shown, hidden) = shown_and_hidden(report, rows);
    out.push_str(&table(report, &shown, true).to_markdown());
    if hidden > 0 {
        out.push_str(&format!(
            "\n{hidden} more function(s) with smaller changes not shown.\n"
        ));
    }
    for presence in [Presence::New, Presence::Vanished] {
        if let Some(line) = presence_list(report, presence, rows, true) {
            let mut chars = line.chars();
            let first = chars.next().map(|c| c.to_ascii_uppercase());
            out.push_str(&format!(
                "\n{}{}\n",
                first.unwrap_or_default(),
                chars.as_str()
            ));
        }
    }
    out
}

fn samples_json(s: &Samples) -> Value {
    json!({
        "self_samples": s.self_samples,
        "total_samples": s.total_samples,
        "self_percent": s.self_share * 100.0,
        "total_percent": s.total_share * 100.0,
    })
}

/// A side's per-run gated shares (percent) and their spread.
fn runs_json(runs: &[f64]) -> Value {
    let spread = Spread::of(runs);
    json!({
        "percent": runs.iter().map(|s| s * 100.0).collect::<Vec<f64>>(),
        "min_percent": spread.map(|s| s.min * 100.0),
        "max_percent": spread.map(|s| s.max * 100.0),
        "sd_points": spread.and_then(|s| s.sd).map(|sd| sd * 100.0),
    })
}

fn run_json(run: &RunSummary) -> Value {
    let info = run.run_info.as_ref();
    json!({
        "source": run.source,
        "samples": run.samples,
        "distinct_stacks": run.stacks,
        "functions": run.functions,
        "requested_hz": info.map(|i| i.requested_hz),
        "mode": info.map(|i| i.mode.as_str()),
    })
}

/// The whole report as JSON: every function, no rows left out.
pub fn json(report: &DiffReport) -> Value {
    let o = &report.options;
    let functions: Vec<Value> = report
        .functions
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "presence": match f.presence {
                    Presence::Both => "both",
                    Presence::New => "new",
                    Presence::Vanished => "vanished",
                },
                "verdict": match f.verdict {
                    Verdict::Regressed => "regressed",
                    Verdict::Improved => "improved",
                    Verdict::Unchanged => "unchanged",
                },
                "base": samples_json(&f.base),
                "new": samples_json(&f.new),
                "base_runs": runs_json(&f.base_runs),
                "new_runs": runs_json(&f.new_runs),
                "self_change_points": f.self_change_points(),
                "total_change_points": f.total_change_points(),
                "statistic": f.statistic,
                "degrees_of_freedom": f.degrees_of_freedom,
                "p_value": f.p_value,
                "decided_by": f.decided.as_str(),
            })
        })
        .collect();
    let names = |it: &mut dyn Iterator<Item = &FunctionDiff>| -> Vec<String> {
        it.map(|f| f.name.clone()).collect()
    };
    json!({
        "regressed": report.regressed(),
        "regressions": names(&mut report.regressions()),
        "improvements": names(&mut report.improvements()),
        "new_functions": names(&mut report.new_functions()),
        "vanished_functions": names(&mut report.vanished_functions()),
        "base": report.base.iter().map(run_json).collect::<Vec<Value>>(),
        "new": report.new.iter().map(run_json).collect::<Vec<Value>>(),
        "gate": {
            "rule": match report.rule {
                crate::analysis::diff::Rule::SamplingNoise => "sampling-noise",
                crate::analysis::diff::Rule::RunToRunSpread => "run-to-run-spread",
            },
            "metric": o.metric.as_str(),
            "threshold_points": report.threshold_points(),
            "min_samples": o.min_samples,
            "alpha": report.alpha(),
            "tests": report.tests,
            "per_test_alpha": report.per_test_alpha,
            "skip_root": o.skip_root || report.per_thread(),
            "per_thread": report.per_thread(),
            "self_frame": o.self_frame.as_str(),
            "test": format!("{}, Bonferroni-corrected", report.rule.test_name()),
            "noise": report.noise_note(),
        },
        "warnings": report.warnings,
        "sorted_by": format!("regressions first, then absolute {}_change_points, largest first", match o.metric {
            Metric::SelfShare => "self",
            Metric::TotalShare => "total",
        }),
        "functions": functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diff::{compare, DiffOptions};
    use crate::profile::Profile;

    /// The diff of two folded texts, read as `base.folded` and
    /// `new.folded`, at the default options.
    fn diff(base: &str, new: &str) -> DiffReport {
        let read = |text: &str, name| Profile::read_folded_from(text.as_bytes(), name).unwrap();
        compare(
            &read(base, "base.folded"),
            &read(new, "new.folded"),
            &DiffOptions::default(),
        )
    }

    /// `hot` regressed, `old` vanished and `fresh` is new.
    fn report() -> DiffReport {
        diff(
            "t;main;hot 500\nt;main;cold 4470\nt;main;old 30\n",
            "t;main;hot 1000\nt;main;cold 3970\nt;main;fresh 30\n",
        )
    }

    #[test]
    fn text_leads_with_the_regression_and_concludes() {
        let out = text(&report(), None);
        let rows: Vec<&str> = out
            .lines()
            .filter(|l| l.contains('%') && !l.starts_with("new functions"))
            .collect();
        assert!(
            rows[0].contains("REGRESSED") && rows[0].ends_with("hot"),
            "{out}"
        );
        assert!(rows[0].contains("+10.00"), "{out}");
        assert!(
            out.contains("fresh [new]") && out.contains("old [vanished]"),
            "{out}"
        );
        assert!(
            out.contains("new functions (1): fresh (0.60% self)"),
            "{out}"
        );
        assert!(out.contains("two-proportion z-test"), "{out}");
        assert!(
            out.trim_end().ends_with(
                "result: REGRESSION: 1 function(s) regressed, first hot (+10.00 points self)"
            ),
            "{out}"
        );
    }

    #[test]
    fn rows_are_limited_but_regressions_always_shown() {
        let r = report();
        let out = text(&r, Some(0));
        assert!(out.contains("REGRESSED"), "{out}");
        // Six functions, of which `t` and `main` have no self samples in
        // either run: not rows to list.
        assert_eq!(r.functions.len(), 6);
        assert!(out.contains("3 more function(s)"), "{out}");
    }

    #[test]
    fn top_rows_are_regressions_then_the_largest_changes_either_way() {
        // `shrunk` falls by 8 points, `grew` rises by 2 (not significant),
        // `hot` regresses by 10; `main` is never a leaf: zero in both runs.
        let r = diff(
            "t;main;hot 500\nt;main;shrunk 900\nt;main;grew 100\nt;main;cold 3500\n",
            "t;main;hot 1000\nt;main;shrunk 500\nt;main;grew 200\nt;main;cold 3300\n",
        );
        let order: Vec<&str> = r.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(order[..3], ["hot", "shrunk", "cold"], "{order:?}");
        let out = text(&r, Some(3));
        let rows: Vec<&str> = out
            .lines()
            .filter(|l| l.ends_with(" hot") || l.ends_with(" shrunk") || l.ends_with(" cold"))
            .collect();
        assert_eq!(rows.len(), 3, "{out}");
        assert!(
            !out.lines()
                .any(|l| l.ends_with(" main") || l.ends_with(" t")),
            "{out}"
        );
        // grew is the one row left out: main and t are zero rows, not hidden ones.
        assert!(out.contains("1 more function(s)"), "{out}");
    }

    #[test]
    fn markdown_is_a_table_with_code_names() {
        let out = markdown(&report(), Some(10));
        assert!(out.starts_with("### btprof diff: regression"), "{out}");
        assert!(out.contains("| REGRESSED | `hot` |"), "{out}");
        assert!(out.contains("|--:|"), "{out}");
        assert!(out.contains("New functions (1): `fresh`"), "{out}");
    }

    #[test]
    fn json_has_every_function_and_the_gate() {
        let r = report();
        let v = json(&r);
        assert_eq!(v["regressed"], true);
        assert_eq!(v["regressions"], json!(["hot"]));
        assert_eq!(v["functions"].as_array().unwrap().len(), r.functions.len());
        assert_eq!(v["functions"][0]["name"], "hot");
        let change = v["functions"][0]["self_change_points"].as_f64().unwrap();
        assert!((change - 10.0).abs() < 1e-9);
        assert_eq!(v["gate"]["min_samples"], 20);
        assert_eq!(v["base"][0]["source"], "base.folded");
        assert_eq!(v["base"][0]["requested_hz"], Value::Null);
        assert_eq!(v["gate"]["rule"], "sampling-noise");
        assert_eq!(v["functions"][0]["decided_by"], "threshold+noise");
        assert_eq!(v["functions"][0]["degrees_of_freedom"], Value::Null);
    }
}
