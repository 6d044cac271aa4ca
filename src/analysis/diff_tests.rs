//! Unit tests of [`super`]: the one-run rule's conditions, total and
//! self shares, new and vanished functions, settings.

use super::*;

fn folded(text: &str, source: &str) -> Profile {
    Profile::read_folded_from(text.as_bytes(), source).unwrap()
}

/// The diff of two folded texts, read as the base and new runs, at the
/// default options.
fn compare_folded(base: &str, new: &str) -> DiffReport {
    compare(
        &folded(base, "b"),
        &folded(new, "n"),
        &DiffOptions::default(),
    )
}

fn find<'a>(r: &'a DiffReport, name: &str) -> &'a FunctionDiff {
    r.functions
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", r.functions))
}

#[test]
fn normalises_by_total_and_flags_a_real_increase() {
    // hot: 10% of 5000 -> 20% of 10000 samples (a run twice as long).
    let r = compare_folded("m;hot 500\nm;cold 4500\n", "m;hot 2000\nm;cold 8000\n");
    let hot = find(&r, "hot");
    assert!((hot.self_change_points() - 10.0).abs() < 1e-9);
    assert_eq!(hot.verdict, Verdict::Regressed);
    assert_eq!(find(&r, "cold").verdict, Verdict::Improved);
    assert_eq!(find(&r, "m").verdict, Verdict::Unchanged);
    assert_eq!(r.functions[0].name, "hot");
    assert!(r.regressed());
    assert_eq!(r.tests, 3);
    assert!((r.per_test_alpha - 0.001 / 3.0).abs() < 1e-15);
}

#[test]
fn same_shares_in_runs_of_different_length_are_not_a_change() {
    let r = compare_folded("m;a 300\nm;b 700\n", "m;a 3000\nm;b 7000\n");
    assert!(!r.regressed());
    for f in &r.functions {
        assert!(f.self_change_points().abs() < 1e-9, "{f:?}");
    }
}

#[test]
fn each_condition_of_the_rule_is_needed() {
    // +5 points with thousands of samples: regressed.
    let base = folded("m;f 1000\nm;g 9000\n", "b");
    let new = folded("m;f 1500\nm;g 8500\n", "n");
    let opts = DiffOptions::default();
    let f_verdict = |opts: &DiffOptions| find(&compare(&base, &new, opts), "f").verdict;
    assert_eq!(f_verdict(&opts), Verdict::Regressed);
    // Threshold above the change.
    let high = DiffOptions {
        threshold_points: 6.0,
        ..opts.clone()
    };
    assert_eq!(f_verdict(&high), Verdict::Unchanged);
    // Too few samples in the new run.
    let few = DiffOptions {
        min_samples: 1501,
        ..opts.clone()
    };
    assert_eq!(f_verdict(&few), Verdict::Unchanged);
    // Same +5 points on 100 samples: within noise.
    let base = folded("m;f 10\nm;g 90\n", "b");
    let new = folded("m;f 15\nm;g 85\n", "n");
    let small = DiffOptions {
        min_samples: 1,
        ..opts
    };
    let r = compare(&base, &new, &small);
    let f = find(&r, "f");
    assert!((f.self_change_points() - 5.0).abs() < 1e-9);
    assert!(f.p_value > r.per_test_alpha, "{f:?}");
    assert_eq!(f.verdict, Verdict::Unchanged);
}

#[test]
fn total_share_gates_on_callers() {
    // The leaf moves from under `a` to under `b`: self shares of the
    // leaf are unchanged, `b`'s total share grows by 40 points.
    let base = folded("m;a;leaf 800\nm;b;leaf 200\n", "b");
    let new = folded("m;a;leaf 400\nm;b;leaf 600\n", "n");
    let selfish = compare(&base, &new, &DiffOptions::default());
    assert!(!selfish.regressed());
    let total = DiffOptions {
        metric: Metric::TotalShare,
        ..DiffOptions::default()
    };
    let r = compare(&base, &new, &total);
    let regressed: Vec<&str> = r.regressions().map(|f| f.name.as_str()).collect();
    assert_eq!(regressed, ["b"]);
    assert!((find(&r, "b").total_change_points() - 40.0).abs() < 1e-9);
}

#[test]
fn new_and_vanished_functions_are_listed() {
    let r = compare_folded("m;old 100\nm;keep 900\n", "m;fresh 300\nm;keep 700\n");
    let names = |it: &mut dyn Iterator<Item = &FunctionDiff>| {
        it.map(|f| f.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&mut r.new_functions()), ["fresh"]);
    assert_eq!(names(&mut r.vanished_functions()), ["old"]);
    let fresh = find(&r, "fresh");
    assert_eq!(fresh.base, Samples::default());
    assert_eq!(fresh.verdict, Verdict::Regressed);
    // Regressions first, then by the size of the change either way.
    assert_eq!(
        names(&mut r.functions.iter()),
        ["fresh", "keep", "old", "m"]
    );
}

#[test]
fn skip_root_keeps_thread_names_out() {
    let base = folded("t-1;main;f 500\nt-1;main;g 500\n", "b");
    let new = folded("t-2;main;f 500\nt-2;main;g 500\n", "n");
    let total = DiffOptions {
        metric: Metric::TotalShare,
        ..DiffOptions::default()
    };
    // A renamed thread is a new "function" with a total share of 100%.
    assert!(compare(&base, &new, &total).regressed());
    let skip = DiffOptions {
        skip_root: true,
        ..total
    };
    let r = compare(&base, &new, &skip);
    assert!(!r.regressed(), "{:?}", r.functions);
    assert!(r.functions.iter().all(|f| !f.name.starts_with("t-")));
}

#[test]
fn warns_about_unrelated_profiles() {
    let r = compare(
        &folded("a;b 10\n", "b"),
        &folded("c;d 10\n", "n"),
        &DiffOptions::default(),
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("no function in common"));
}

#[test]
fn invalid_settings_judge_nothing_and_say_so() {
    let base = folded("m;f 100\nm;g 900\n", "b");
    let new = folded("m;f 900\nm;g 100\n", "n");
    let bad = DiffOptions {
        alpha: 5.0,
        ..DiffOptions::default()
    };
    let r = compare(&base, &new, &bad);
    assert!(r.functions.iter().all(|f| f.verdict == Verdict::Unchanged));
    assert!(
        r.warnings.iter().any(|w| w.contains("alpha")),
        "{:?}",
        r.warnings
    );
    assert!(compare(&base, &new, &DiffOptions::default()).regressed());
}

#[test]
fn options_are_validated() {
    assert!(DiffOptions::default().validate().is_ok());
    for bad in [
        DiffOptions {
            alpha: 0.0,
            ..DiffOptions::default()
        },
        DiffOptions {
            alpha: f64::NAN,
            ..DiffOptions::default()
        },
        DiffOptions {
            threshold_points: -1.0,
            ..DiffOptions::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}
