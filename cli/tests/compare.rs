//! End-to-end tests of `btprof diff`, `btprof report` and `btprof
//! flamegraph`: exit codes, the three output formats, flamegraph files,
//! bad input, and a real regression made with `--slow`.

mod run_support;

use std::fs;
use std::sync::Mutex;

use btprof_testkit::temp_dir::TempDir;
use run_support::{path_str, run_in, Run};
use serde_json::Value;

/// Every run of the binary takes its turn. The machine has two cores:
/// another `btprof` running beside a profiling run would be profiled as
/// contention (and the real-run test judges how alike two profiles are).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn btprof(dir: &TempDir, args: &[&str]) -> Run {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run_in(dir, args)
}

/// Folded text for a program whose `hot` function has `hot` of 10,000
/// samples and the rest spread over other functions.
fn program(hot: u64) -> String {
    let rest = 10_000 - hot;
    format!(
        "main-thread;main;app::run;app::hot {hot}\n\
         main-thread;main;app::run;app::parse {}\n\
         main-thread;main;app::run;app::render;app::draw {}\n\
         worker;start;app::io {}\n",
        rest * 4 / 10,
        rest * 4 / 10,
        rest - 2 * (rest * 4 / 10),
    )
}

fn json(run: &Run) -> Value {
    run.json()
}

/// A scratch directory `name` holding `base.folded` and `new.folded`
/// with these texts, and the two files' paths: how a diff test starts.
fn base_and_new(name: &str, base: &str, new: &str) -> (TempDir, String, String) {
    let dir = TempDir::new("btprof-compare-test", name);
    let base = dir.file("base.folded", base);
    let new = dir.file("new.folded", new);
    (dir, base, new)
}

/// The first row of a diff's table: the largest change.
fn first_table_row(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|l| l.contains('%'))
        .expect("a table row")
}

#[test]
fn a_function_going_from_10_to_20_percent_is_a_regression() {
    let (dir, base, new) = base_and_new("ten_to_twenty", &program(1000), &program(2000));

    let text = btprof(&dir, &["diff", &base, &new]);
    let report = text.describe();
    assert_eq!(text.code, Some(1), "{report}");
    let first_row = first_table_row(&text.stdout);
    assert!(
        first_row.contains("REGRESSED") && first_row.ends_with("app::hot"),
        "the regression is not the first row: {first_row}\n{report}"
    );
    assert!(first_row.contains("+10.00"), "{report}");
    assert!(text.stdout.contains("result: REGRESSION"), "{report}");
    assert!(
        text.stdout.contains("two-proportion z-test"),
        "the report should say which test it applied\n{report}"
    );

    let as_json = btprof(&dir, &["diff", &base, &new, "--format", "json"]);
    assert_eq!(as_json.code, Some(1), "{}", as_json.describe());
    let v = json(&as_json);
    assert_eq!(v["regressed"], true);
    assert_eq!(v["regressions"], serde_json::json!(["app::hot"]));
    let hot = &v["functions"][0];
    assert_eq!(hot["name"], "app::hot");
    let change = hot["self_change_points"].as_f64().expect("a number");
    assert!((change - 10.0).abs() < 1e-9, "{change}");
    assert_eq!(hot["base"]["self_samples"], 1000);
    assert_eq!(hot["new"]["self_samples"], 2000);

    let md = btprof(&dir, &["diff", &base, &new, "--format", "markdown"]);
    assert_eq!(md.code, Some(1), "{}", md.describe());
    assert!(
        md.stdout.starts_with("### btprof diff: regression"),
        "{}",
        md.describe()
    );
    assert!(
        md.stdout.contains("| REGRESSED | `app::hot` |"),
        "{}",
        md.describe()
    );
}

/// Folded text where `app::hot`'s own time is a loop of std helpers
/// inlined into it, as btprof records a release build: the leaf is
/// `core::hint::black_box<u64>` or `core::num::uint_macros::wrapping_mul`.
fn program_with_inlined_std(hot: u64) -> String {
    let rest = 10_000 - hot;
    format!(
        "main-thread;main;app::run;app::hot;core::hint::black_box<u64> {}\n\
         main-thread;main;app::run;app::hot;core::num::uint_macros::wrapping_mul {}\n\
         main-thread;main;app::run;app::parse;core::hint::black_box<u64> {}\n\
         main-thread;main;app::run;app::parse {}\n",
        hot / 2,
        hot - hot / 2,
        rest / 2,
        rest - rest / 2,
    )
}

#[test]
fn self_time_of_inlined_std_helpers_names_the_users_function() {
    let (dir, base, new) = base_and_new(
        "inlined_std",
        &program_with_inlined_std(2000),
        &program_with_inlined_std(4000),
    );

    // Default: the verdict names the function holding the loop.
    let own = btprof(&dir, &["diff", &base, &new, "--format", "json"]);
    assert_eq!(own.code, Some(1), "{}", own.describe());
    let v = json(&own);
    assert_eq!(v["regressions"], serde_json::json!(["app::hot"]), "{v:#}");
    assert_eq!(v["gate"]["self_frame"], "own-code");
    let text = btprof(&dir, &["diff", &base, &new]);
    assert!(
        text.stdout
            .contains("std/core/alloc frames counts to the innermost frame"),
        "the gate line should say where std self time goes\n{}",
        text.describe()
    );

    // `--self-frame leaf`: the helper's own leaf, as the flamegraph shows.
    let leaf = btprof(
        &dir,
        &[
            "diff",
            &base,
            &new,
            "--format",
            "json",
            "--self-frame",
            "leaf",
        ],
    );
    assert_eq!(leaf.code, Some(1), "{}", leaf.describe());
    let v = json(&leaf);
    let regressed: Vec<&str> = v["regressions"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert!(
        !regressed.contains(&"app::hot")
            && regressed.contains(&"core::num::uint_macros::wrapping_mul"),
        "{v:#}"
    );
}

#[test]
fn identical_and_rescaled_profiles_do_not_regress() {
    let dir = TempDir::new("btprof-compare-test", "identical");
    let base = dir.file("base.folded", &program(1000));
    // The same shares in a run three times as long.
    let tripled: String = program(1000)
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            format!("{stack} {}\n", n.parse::<u64>().unwrap() * 3)
        })
        .collect();
    let new = dir.file("new.folded", &tripled);
    let run = btprof(&dir, &["diff", &base, &new]);
    run.assert_stdout(0, &["result: no regression"]);
}

#[test]
fn gate_options_change_the_verdict() {
    let (dir, base, new) = base_and_new("gate_options", &program(1000), &program(2000));
    let high = btprof(&dir, &["diff", &base, &new, "--threshold", "15"]);
    assert_eq!(high.code, Some(0), "{}", high.describe());
    let few = btprof(&dir, &["diff", &base, &new, "--min-samples", "5000"]);
    assert_eq!(few.code, Some(0), "{}", few.describe());
    // `app::run`'s total share falls as `hot`'s rises; `hot` is a leaf, so
    // gating on total share still finds it.
    let total = btprof(
        &dir,
        &["diff", &base, &new, "--share", "total", "--skip-root"],
    );
    assert_eq!(total.code, Some(1), "{}", total.describe());
    assert!(
        !total.stdout.contains("main-thread"),
        "--skip-root should keep thread names out\n{}",
        total.describe()
    );
}

#[test]
fn bad_input_is_named_and_exits_2() {
    let dir = TempDir::new("btprof-compare-test", "bad_input");
    let good = dir.file("good.folded", "t;main;a 10\n");
    let malformed = dir.file("bad.folded", "t;main;a 10\n\nt;main;b ten\n");
    let empty = dir.file("empty.folded", "");
    let blank = dir.file("blank.folded", "\n\n");
    let missing = path_str(&dir.path("missing.folded")).to_owned();

    let cases: [(&str, &[&str]); 5] = [
        (
            &malformed,
            &[
                "bad.folded:3:",
                "`ten` is not a sample count",
                "t;main;b ten",
            ],
        ),
        (&empty, &["empty.folded is empty"]),
        (&blank, &["blank.folded holds no folded stacks", "blank"]),
        (&missing, &["cannot read", "missing.folded", "No such file"]),
        (&good, &[]),
    ];
    for (file, needles) in cases {
        if needles.is_empty() {
            continue;
        }
        for args in [
            vec!["diff", good.as_str(), file],
            vec!["diff", file, good.as_str()],
            vec!["report", file],
            vec!["flamegraph", file, "-o", "out.svg"],
        ] {
            let run = btprof(&dir, &args);
            let report = format!("btprof {args:?}\n{}", run.describe());
            assert_eq!(run.code, Some(2), "{report}");
            for needle in needles {
                assert!(
                    run.stderr.contains(needle),
                    "stderr lacks {needle:?}\n{report}"
                );
            }
            assert!(!run.stderr.contains("panicked"), "{report}");
            assert!(run.stdout.is_empty(), "printed a report anyway\n{report}");
        }
    }
    assert!(!dir.path("out.svg").exists(), "wrote an SVG from bad input");
}

#[test]
fn usage_errors_exit_2() {
    let dir = TempDir::new("btprof-compare-test", "usage");
    let good = dir.file("good.folded", "t;main;a 10\n");
    for args in [
        vec!["diff", good.as_str()],
        vec!["diff", &good, &good, "--alpha", "2"],
        vec!["diff", &good, &good, "--threshold", "-1"],
        vec!["diff", &good, &good, "--share", "leaf"],
        vec!["report"],
        vec!["--pid-self", "diff", &good, &good],
    ] {
        let run = btprof(&dir, &args);
        assert_eq!(run.code, Some(2), "btprof {args:?}\n{}", run.describe());
    }
    let alpha = btprof(&dir, &["diff", &good, &good, "--alpha", "2"]);
    assert!(
        alpha.stderr.contains("between 0 and 1"),
        "{}",
        alpha.describe()
    );
    let out = dir.path("unwritable-dir/x.svg");
    let unwritable = btprof(&dir, &["diff", &good, &good, "-o", path_str(&out)]);
    unwritable.assert_stderr(2, "x.svg");
}

#[test]
fn help_teaches_the_commands_and_the_gate() {
    let dir = TempDir::new("btprof-compare-test", "help");
    let top = btprof(&dir, &["--help"]);
    assert_eq!(top.code, Some(0));
    for needle in ["diff", "report", "flamegraph", "--slow", "btprof diff "] {
        assert!(
            top.stdout.contains(needle),
            "top help lacks {needle}\n{}",
            top.describe()
        );
    }
    let diff = btprof(&dir, &["diff", "--help"]);
    for needle in [
        "two-proportion z-test",
        "Bonferroni",
        "--threshold",
        "--min-samples",
        "--negated-output",
        "--self-frame",
        "0 no regression, 1 regression, 2 bad input",
    ] {
        assert!(
            diff.stdout.contains(needle),
            "diff help lacks {needle}\n{}",
            diff.describe()
        );
    }
}

#[test]
fn report_lists_top_functions_by_self_and_total() {
    let dir = TempDir::new("btprof-compare-test", "report");
    let file = dir.file("p.folded", &program(3000));
    let run = btprof(&dir, &["report", &file, "--top", "2", "--skip-root"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let rows: Vec<&str> = run.stdout.lines().filter(|l| l.contains('%')).collect();
    assert_eq!(rows.len(), 4, "{}", run.describe());
    assert!(
        rows[0].starts_with("  30.00%") && rows[0].ends_with("app::hot"),
        "{rows:?}"
    );
    assert!(
        rows[2].contains("86.00%") && rows[2].ends_with("app::run"),
        "{rows:?}"
    );
    assert!(!run.stdout.contains("main-thread"), "{}", run.describe());

    let as_json = btprof(&dir, &["report", &file, "--format", "json"]);
    let v = json(&as_json);
    assert_eq!(v["samples"], 10_000);
    assert_eq!(v["top_by_self"][0]["name"], "app::hot");
}

#[test]
fn flamegraph_rerenders_a_folded_file() {
    let dir = TempDir::new("btprof-compare-test", "flamegraph");
    let file = dir.file("run.folded", &program(1000));
    let run = btprof(
        &dir,
        &[
            "flamegraph",
            &file,
            "--title",
            "Nightly",
            "--inverted",
            "--width",
            "900",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let svg = fs::read_to_string(dir.path("run.svg")).expect("run.svg written beside the input");
    assert!(
        svg.contains("Nightly") && svg.contains("width=\"900\""),
        "{}",
        &svg[..svg.len().min(600)]
    );
    assert!(svg.contains("app::hot (1,000 samples") || svg.contains("app::hot (1000 samples"));

    let svg_input = dir.file("x.svg", "t;a 1\n");
    let refused = btprof(&dir, &["flamegraph", &svg_input]);
    refused.assert_stderr(2, "-o");
}

/// Attempts at a faithful profile before a real-run test gives up.
const PROFILE_ATTEMPTS: usize = 3;
/// Worker samples a real-run profile needs for the diff's significance
/// test to see a 15-point change; on a loaded machine the workers get
/// less CPU per wall-second, so the run is made longer until it has them.
const MIN_WORKER_SAMPLES: u64 = 1500;
/// The longest run tried.
const MAX_SECONDS: u64 = 16;

/// Profiles the built-in workload into `name` until its self-check passes
/// with at least [`MIN_WORKER_SAMPLES`] worker samples: runs start at 2 s
/// and double (up to [`MAX_SECONDS`]) while the workers got too little CPU
/// for that many samples; at most [`PROFILE_ATTEMPTS`] failed self-checks.
/// Returns the passing run and the folded path.
///
/// The diff can only be judged on profiles that are faithful: on a machine
/// busy with other work a run's samples can miss the workload's true
/// split by several points (the self-check then fails, as the CLI tests'
/// own self-check test would), and two such profiles differ for real. A
/// profile that passes is one whose every share is within the
/// self-check's tolerance of the measured truth.
fn faithful_profile(dir: &TempDir, name: &str, extra: &[&str]) -> (Run, String) {
    let folded = path_str(&dir.path(name)).to_owned();
    let svg = format!("{folded}.svg");
    let mut seconds = 2;
    let mut failures = Vec::new();
    while failures.len() < PROFILE_ATTEMPTS {
        let duration = format!("{seconds}s");
        // Machine functions as leaves: the workload's own code is
        // `timed_spin`, an `#[inline(always)]` helper of every workload
        // function, so with inlined frames shown (and std helpers counted
        // to it, `--self-frame own-code`) the self share of slowed `beta`
        // is `timed_spin`'s, which does not change; `--no-inline` makes
        // each function's self time the code inlined into it.
        let mut args = vec![
            "--pid-self",
            "--no-inline",
            "--hz",
            "1000",
            "--duration",
            &duration,
            "--quiet",
            "--folded",
            &folded,
            "--output",
            &svg,
        ];
        args.extend(extra);
        let run = btprof(dir, &args);
        if run.code != Some(0) {
            failures.push(run.describe());
            continue;
        }
        let samples = worker_samples(&run.stdout);
        if samples >= MIN_WORKER_SAMPLES || seconds >= MAX_SECONDS {
            return (run, folded);
        }
        seconds *= 2;
    }
    // A faithful run fails its self-check by chance only past 4 SE on a
    // share (6.3e-5 two-sided, under 4e-4 for six): three such failures
    // are 5e-11. What fails here is a machine too busy for faithful runs.
    panic!(
        "btprof {name} {extra:?}: no faithful profile in {PROFILE_ATTEMPTS} attempts \
         (is the machine busy?)\n{}",
        failures.join("\n\n")
    );
}

/// The true share (percent) of each workload function a self-check
/// measured, in its table's order ("  alpha  24.02%  23.83%  +0.19 ...").
fn truth_shares(stdout: &str) -> Vec<(String, f64)> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with("function shares of "))
        .skip(2)
        .map_while(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // function, measured%, truth%, points, allowed, verdict
            if cols.len() != 6 || !cols[1].ends_with('%') {
                return None;
            }
            let truth = cols[2].strip_suffix('%')?.parse().ok()?;
            Some((cols[0].to_owned(), truth))
        })
        .collect()
}

/// The worker samples a self-check reports ("function shares of N worker
/// samples").
fn worker_samples(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("function shares of "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn real_runs_find_a_slowed_function_and_no_change_between_equal_runs() {
    let dir = TempDir::new("btprof-compare-test", "real_runs");
    let (first, base) = faithful_profile(&dir, "base.folded", &[]);
    let (second, again) = faithful_profile(&dir, "again.folded", &[]);
    // `beta` runs on both worker threads, so doubling its work raises its
    // share by about 15 points however the scheduler splits the CPU
    // between the two threads. The self-check measures the truth, so it
    // passes for the slowed workload too.
    let (_slowed, slow) = faithful_profile(&dir, "slow.folded", &["--slow", "beta"]);

    let found = btprof(&dir, &["diff", &base, &slow]);
    let report = format!("{}\n\nbase run:\n{}", found.describe(), first.stdout);
    // Binomial model, 1,500 samples a run: the change's SE is 1.7 points,
    // the z bar (about 4 at alpha/m) 6.7 points; a rise of 13.7 (the least
    // seen, docs/diff.md) falls under it with P 1.4e-5. Ring shares vary less.
    assert_eq!(found.code, Some(1), "{report}");
    let first_row = first_table_row(&found.stdout);
    assert!(
        first_row.contains("REGRESSED") && first_row.ends_with("workload::beta"),
        "beta is not named first: {first_row}\n{report}"
    );

    // Which share each function truly had depends on how the scheduler
    // split the CPU between the two worker threads (`alpha` runs on one,
    // the chain on the other), which a loaded machine changes from run to
    // run: the self-checks measure it. The diff must not call a regression
    // beyond that true difference plus its usual 2-point threshold.
    let (truth_a, truth_b) = (truth_shares(&first.stdout), truth_shares(&second.stdout));
    assert!(
        truth_a.len() == 6 && truth_b.len() == 6,
        "no self-check table of the six workload functions\n{}\n{}",
        first.stdout,
        second.stdout
    );
    let truth_gap = truth_a
        .iter()
        .zip(truth_b)
        .map(|((a, x), (b, y))| {
            assert_eq!(*a, b, "self-check tables list the same functions");
            (x - y).abs()
        })
        .fold(0.0_f64, f64::max);
    let threshold = format!("{:.2}", 2.0 + truth_gap);
    let same = btprof(&dir, &["diff", &base, &again, "--threshold", &threshold]);
    // Not a binomial tail (the z-test alone allows 1e-3): the threshold gives
    // both runs' errors 2 points beyond the true gap; ring shares sit within
    // about 0.5 of the truth, and 0 of 81 faithful pairs failed at 2 points.
    assert_eq!(
        same.code,
        Some(0),
        "two runs of the same workload were called a regression\n{}\n\nfirst run:\n{}\nsecond run:\n{}",
        same.describe(),
        first.stdout,
        second.stdout
    );
}

/// A run metadata sidecar as btprof writes it beside `run.folded`.
fn sidecar(hz: u32, mode: &str) -> String {
    format!(
        r#"{{
  "btprof_version": "0.1.0", "program": "app", "host": "ci",
  "start_time": "2026-11-21T00:00:00.000Z", "start_unix_secs": 1795219200.0,
  "duration_secs": 10.0, "mode": "{mode}", "requested_hz": {hz},
  "achieved_hz": {hz}.0, "samples": 10000, "missed_ticks": 0,
  "truncated_walks": 0, "failed_samples": 0, "overflow_samples": 0, "threads": 2
}}"#
    )
}

#[test]
fn run_metadata_beside_the_files_warns_when_runs_do_not_compare() {
    let (dir, base, new) = base_and_new("sidecars", &program(1000), &program(1000));
    dir.file("base.json", &sidecar(1000, "cpu"));
    dir.file("new.json", &sidecar(99, "wall"));
    let run = btprof(&dir, &["diff", &base, &new]);
    run.assert_stdout(
        0,
        &[
            "different rates (base 1000 Hz, new 99 Hz)",
            "different modes (base cpu, new wall)",
        ],
    );

    // Metadata that cannot be read is warned about; the stacks still compare.
    dir.file("new.json", "{ not json");
    let run = btprof(&dir, &["diff", &base, &new]);
    run.assert_stderr(0, "new.json");
    assert!(
        !run.stdout.contains("different modes"),
        "{}",
        run.describe()
    );
}
