//! End-to-end tests of `btprof diff` with several runs per side: the
//! run-to-run rule's report and exit codes, directories and patterns as
//! sides, `--min-runs`, and bad input named with exit 2. Every profile is
//! a folded file with exact counts: nothing here depends on sampling.

mod run_support;

use btprof_testkit::temp_dir::TempDir;
use run_support::{path_str, run_in, Run};

/// A run of 100,000 samples, `hot_per_100k` of them in `app::hot`.
fn run_text(hot_per_100k: u64) -> String {
    let rest = 100_000 - hot_per_100k;
    format!(
        "main;app::run;app::hot {hot_per_100k}\n\
         main;app::run;app::parse {}\n\
         main;app::run;app::render {}\n",
        rest / 2,
        rest - rest / 2
    )
}

/// Writes `DIR/SIDE/run-I.folded` for each share (percent) of `app::hot`
/// and returns the paths.
fn side(dir: &TempDir, side: &str, hot_percent: &[f64]) -> Vec<String> {
    std::fs::create_dir_all(dir.path(side)).unwrap();
    hot_percent
        .iter()
        .enumerate()
        .map(|(i, p)| {
            dir.file(
                &format!("{side}/run-{i}.folded"),
                &run_text((p * 1000.0).round() as u64),
            )
        })
        .collect()
}

/// `btprof diff --base BASE... --new NEW... EXTRA...`.
fn diff(dir: &TempDir, base: &[String], new: &[String], extra: &[&str]) -> Run {
    let mut args = vec!["diff", "--base"];
    args.extend(base.iter().map(String::as_str));
    args.push("--new");
    args.extend(new.iter().map(String::as_str));
    args.extend(extra);
    run_in(dir, &args)
}

#[test]
fn three_runs_a_side_find_a_change_beyond_their_spread() {
    let dir = TempDir::new("btprof-compare-runs", "beyond_spread");
    let base = side(&dir, "base", &[20.0, 20.3, 20.1]);
    let new = side(&dir, "new", &[21.6, 21.5, 21.8]);
    let found = diff(&dir, &base, &new, &[]);
    found.assert_stdout(
        1,
        &[
            "Welch's t-test",
            "tested against the spread between runs (3 base, 3 new)",
            "base self range",
            "20.00–20.30%",
            "21.50–21.80%",
            "threshold+noise",
            "result: REGRESSION",
        ],
    );
    let row = found
        .stdout
        .lines()
        .find(|l| l.ends_with("app::hot"))
        .expect("a row for app::hot");
    assert!(row.contains("REGRESSED") && row.contains("+1.50"), "{row}");

    let json = diff(&dir, &base, &new, &["--format", "json"]).json();
    assert_eq!(json["gate"]["rule"], "run-to-run-spread");
    assert_eq!(json["gate"]["threshold_points"], 1.0);
    assert_eq!(json["gate"]["alpha"], 0.05);
    assert_eq!(json["base"].as_array().unwrap().len(), 3);
    let hot = &json["functions"][0];
    assert_eq!(hot["name"], "app::hot");
    assert_eq!(hot["decided_by"], "threshold+noise");
    assert_eq!(hot["base_runs"]["percent"].as_array().unwrap().len(), 3);
    assert!((hot["base_runs"]["max_percent"].as_f64().unwrap() - 20.3).abs() < 1e-9);
    assert!(hot["degrees_of_freedom"].as_f64().unwrap() > 1.0);

    // The same mean change in runs spread over four points: noise.
    let noisy_base = side(&dir, "noisy-base", &[18.0, 22.0, 20.3]);
    let noisy_new = side(&dir, "noisy-new", &[23.5, 19.6, 21.6]);
    let noisy = diff(&dir, &noisy_base, &noisy_new, &[]);
    noisy.assert_stdout(0, &["result: no regression"]);
    let row = noisy
        .stdout
        .lines()
        .find(|l| l.ends_with("app::hot"))
        .expect("a row for app::hot");
    assert!(row.contains(" noise "), "{row}");
    // --threshold sets the bar of the run-to-run rule too.
    diff(&dir, &base, &new, &["--threshold", "2"]).assert_stdout(0, &["no regression"]);
}

#[test]
fn one_run_a_side_says_noise_was_not_measured() {
    let dir = TempDir::new("btprof-compare-runs", "one_run");
    let base = side(&dir, "base", &[20.0]);
    let new = side(&dir, "new", &[21.5]);
    for run in [
        diff(&dir, &base, &new, &[]),
        run_in(&dir, &["diff", &base[0], &new[0]]),
    ] {
        run.assert_stdout(
            0,
            &[
                "run-to-run noise was not measured",
                "two-proportion z-test",
                "more than 2.00 points",
            ],
        );
    }
    // Two runs a side: pooled, the spread shown but not tested.
    let base = side(&dir, "base2", &[20.0, 20.2]);
    let new = side(&dir, "new2", &[21.5, 21.6]);
    let two = diff(&dir, &base, &new, &[]);
    two.assert_stdout(0, &["run-to-run noise was not tested", "20.00–20.20%"]);
    assert!(
        two.stderr.contains("tested with 3 or more"),
        "{}",
        two.describe()
    );
}

#[test]
fn directories_and_patterns_stand_for_their_runs() {
    let dir = TempDir::new("btprof-compare-runs", "directories");
    side(&dir, "base", &[20.0, 20.3, 20.1]);
    side(&dir, "new", &[21.6, 21.5, 21.8]);
    // Not a run: only *.folded files of a directory count.
    dir.file("base/notes.txt", "not a profile\n");
    let by_dir = run_in(&dir, &["diff", "--base", "base", "--new", "new/"]);
    by_dir.assert_stdout(1, &["(3 base, 3 new)", "REGRESSED"]);
    let by_pattern = run_in(
        &dir,
        &[
            "diff",
            "--base",
            "base/run-*.folded",
            "--new",
            "new/run-?.folded",
        ],
    );
    by_pattern.assert_stdout(1, &["(3 base, 3 new)", "REGRESSED"]);
    assert_eq!(by_dir.stdout, by_pattern.stdout);
}

#[test]
fn bad_sides_exit_2_naming_what_is_wrong() {
    let dir = TempDir::new("btprof-compare-runs", "bad_sides");
    let base = side(&dir, "base", &[20.0, 20.3, 20.1]);
    let new = side(&dir, "new", &[21.6, 21.5]);
    std::fs::create_dir_all(dir.path("empty")).unwrap();
    let missing = path_str(&dir.path("base/missing.folded")).to_owned();
    let malformed = dir.file("new/bad.folded", "main;app::hot 10\nmain;app::hot ten\n");

    let with = |extra: &str| -> Vec<String> {
        let mut files = base.clone();
        files.push(extra.to_owned());
        files
    };
    // A missing file on either side, and a malformed one.
    diff(&dir, &with(&missing), &new, &[]).assert_stderr(2, "missing.folded");
    diff(&dir, &new, &with(&missing), &[]).assert_stderr(2, "missing.folded");
    diff(&dir, &base, &[malformed], &[]).assert_stderr(2, "bad.folded:2:");
    // A directory without runs, a pattern that matches nothing.
    run_in(&dir, &["diff", "--base", "empty", "--new", "new"])
        .assert_stderr(2, "empty holds no .folded files");
    run_in(&dir, &["diff", "--base", "base/*.perf", "--new", "new"])
        .assert_stderr(2, "no file matches");
    // --min-runs: the new side has 2.
    let short = diff(&dir, &base, &new, &["--min-runs", "3"]);
    short.assert_stderr(2, "the new side has 2 run(s), fewer than --min-runs 3");
    assert!(short.stdout.is_empty(), "{}", short.describe());
    diff(&dir, &base, &new, &["--min-runs", "2"]).assert_stdout(0, &["no regression"]);
    // Three files without saying which side each is on; one side only.
    let three = run_in(&dir, &["diff", &base[0], &base[1], &base[2]]);
    assert_eq!(three.code, Some(2), "{}", three.describe());
    let one_side = run_in(&dir, &["diff", "--base", &base[0]]);
    assert_eq!(one_side.code, Some(2), "{}", one_side.describe());
    for run in [three, one_side] {
        assert!(!run.stderr.contains("panicked"), "{}", run.describe());
    }
}

#[test]
fn a_file_that_cannot_be_read_is_named() {
    let dir = TempDir::new("btprof-compare-runs", "unreadable");
    let base = side(&dir, "base", &[20.0, 20.3, 20.1]);
    let new = side(&dir, "new", &[21.6, 21.5, 21.8]);
    // A file without read permission, where permissions hold (root reads
    // anything).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: root reads files without read permission");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let locked = dir.file("locked.folded", &run_text(20_000));
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut files = base.clone();
    files.push(locked);
    diff(&dir, &files, &new, &[]).assert_stderr(2, "locked.folded");
}

#[test]
fn per_thread_weighting_is_named_in_the_report_and_refused_for_one_run() {
    let dir = TempDir::new("btprof-compare-runs", "per_thread");
    // Two threads: `app::hot` is 20% of thread `a` and 30% of thread `b`
    // in every run, whose split between the threads moves.
    let write = |side: &str, splits: &[u64]| -> Vec<String> {
        std::fs::create_dir_all(dir.path(side)).unwrap();
        splits
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let b = 1000 - a;
                let text = format!(
                    "a;app::hot {}\na;app::rest {}\nb;app::hot {}\nb;app::rest {}\n",
                    a / 5,
                    a - a / 5,
                    b * 3 / 10,
                    b - b * 3 / 10
                );
                dir.file(&format!("{side}/run-{i}.folded"), &text)
            })
            .collect()
    };
    let base = write("base", &[300, 500, 700]);
    let new = write("new", &[700, 300, 500]);
    let run = diff(&dir, &base, &new, &["--per-thread", "--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let json = run.json();
    assert_eq!(json["gate"]["per_thread"], true);
    assert_eq!(json["gate"]["skip_root"], true);
    let hot = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "app::hot")
        .unwrap()
        .clone();
    // Every run weighted 50/50: 25% each, whatever its split.
    for share in hot["base_runs"]["percent"].as_array().unwrap() {
        assert!((share.as_f64().unwrap() - 25.0).abs() < 1e-9, "{hot}");
    }
    let text = diff(&dir, &base, &new, &["--per-thread"]);
    text.assert_stdout(0, &["shares weighted per thread"]);

    let one = diff(&dir, &base[..1], &new[..1], &["--per-thread"]);
    one.assert_stdout(0, &["warning: shares were not weighted per thread"]);
}
