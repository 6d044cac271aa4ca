//! Shares weighted per thread (`DiffOptions::per_thread`, `btprof diff
//! --per-thread`): a run's split of CPU time between its threads drops
//! out, a function that takes more of its thread's time still regresses,
//! and what the weighting cannot see (a thread that takes longer doing the
//! same) is what the docs say it cannot.

use btprof::diff::{compare_runs, DiffOptions, DiffReport, FunctionDiff, Verdict};
use btprof::Profile;

/// A run of 100,000 samples, `a_percent` of them on thread `a`, the rest
/// on `b`; `hot` is `hot_in_a` percent of thread `a`'s samples and
/// `hot_in_b` percent of `b`'s, `rest` the others.
fn run(a_percent: f64, hot_in_a: f64, hot_in_b: f64, source: &str) -> Profile {
    let a = (a_percent * 1000.0).round() as u64;
    let b = 100_000 - a;
    let hot = |n: u64, percent: f64| (n as f64 * percent / 100.0).round() as u64;
    let (ha, hb) = (hot(a, hot_in_a), hot(b, hot_in_b));
    let text = format!(
        "a;main;hot {ha}\na;main;rest {}\nb;main;hot {hb}\nb;main;rest {}\n",
        a - ha,
        b - hb
    );
    Profile::read_folded_from(text.as_bytes(), source).expect("folded text parses")
}

/// Runs with these splits (thread `a`'s percent of the samples) and
/// `hot`'s percent of each thread, `(a, b)` per run.
fn runs(splits: &[f64], hot: &[(f64, f64)], side: &str) -> Vec<Profile> {
    splits
        .iter()
        .zip(hot)
        .enumerate()
        .map(|(i, (&s, &(ha, hb)))| run(s, ha, hb, &format!("{side}-{i}")))
        .collect()
}

fn hot(report: &DiffReport) -> &FunctionDiff {
    report
        .functions
        .iter()
        .find(|f| f.name == "hot")
        .expect("hot is in the report")
}

fn per_thread() -> DiffOptions {
    DiffOptions {
        per_thread: true,
        ..DiffOptions::default()
    }
}

/// `hot` is about 20% of thread `a` and 26% of `b`, as the built-in
/// workload's `beta` is of its two workers; the runs split their samples
/// between the threads anywhere from 30/70 to 70/30.
const BASE_SPLITS: [f64; 3] = [30.0, 70.0, 50.0];
const NEW_SPLITS: [f64; 3] = [70.0, 30.0, 45.0];
const BASE_HOT: [(f64, f64); 3] = [(20.0, 26.0), (20.1, 26.1), (19.9, 25.9)];

#[test]
fn a_change_within_each_thread_is_found_whatever_the_split() {
    // +1.5 points of each thread's samples.
    let new_hot = [(21.5, 27.5), (21.6, 27.4), (21.4, 27.6)];
    let base = runs(&BASE_SPLITS, &BASE_HOT, "b");
    let new = runs(&NEW_SPLITS, &new_hot, "n");

    // Plain shares move with the split by more than the change: the
    // spread between runs hides it.
    let plain = compare_runs(&base, &new, &DiffOptions::default());
    let f = hot(&plain);
    assert_eq!(f.verdict, Verdict::Unchanged, "{f:?}");
    assert!(!plain.per_thread());

    // Weighted per thread, every run counts as split as the runs are on
    // mean, about 50/50): the change is 1.5 points and the spread a tenth of one.
    let weighted = compare_runs(&base, &new, &per_thread());
    let f = hot(&weighted);
    assert_eq!(f.verdict, Verdict::Regressed, "{f:?}");
    assert!(weighted.per_thread());
    let change = f.change_points(weighted.options.metric);
    assert!((change - 1.5).abs() < 0.01, "{change}");
    for share in f.base_runs.iter().chain(&f.new_runs) {
        assert!((0.229..0.246).contains(share), "{share}");
    }
    // Thread names are labels, not functions, when weighting.
    assert!(weighted.functions.iter().all(|f| f.name != "a"));
}

#[test]
fn runs_that_differ_only_in_their_split_do_not_regress() {
    let base = runs(&BASE_SPLITS, &BASE_HOT, "b");
    let new = runs(&NEW_SPLITS, &BASE_HOT, "n");
    for options in [DiffOptions::default(), per_thread()] {
        let r = compare_runs(&base, &new, &options);
        assert!(!r.regressed(), "{:?}", hot(&r));
    }
}

#[test]
fn a_thread_that_takes_longer_doing_the_same_is_not_seen() {
    // A fixed amount of work: `hot` is all of thread `a`, which goes from
    // 30% to 40% of the samples because `hot` got slower. Its share of
    // its thread stays 100%: weighting per thread cannot see it, the
    // plain shares do. This is why the weighting is not the default.
    let base = runs(&[30.0, 30.2, 29.8], &[(100.0, 0.0); 3], "b");
    let new = runs(&[40.0, 40.2, 39.8], &[(100.0, 0.0); 3], "n");
    let plain = compare_runs(&base, &new, &DiffOptions::default());
    assert_eq!(hot(&plain).verdict, Verdict::Regressed);
    let weighted = compare_runs(&base, &new, &per_thread());
    assert_eq!(hot(&weighted).verdict, Verdict::Unchanged);
}

#[test]
fn fewer_than_three_runs_a_side_are_not_weighted_and_say_so() {
    let base = runs(&BASE_SPLITS[..1], &BASE_HOT[..1], "b");
    let new = runs(&NEW_SPLITS[..1], &BASE_HOT[..1], "n");
    let r = compare_runs(&base, &new, &per_thread());
    assert!(!r.per_thread());
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("not weighted per thread")),
        "{:?}",
        r.warnings
    );
}
