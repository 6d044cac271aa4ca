//! The regression gate with several runs per side: which rule judges,
//! the run-to-run rule's conditions one by one on exact shares, no false
//! alarms on seeded noisy runs, and the whole-run checks that name runs
//! which disagree with their side.

use btprof::diff::{
    compare, compare_runs, student_t_upper_tail, welch_t, Decided, DiffOptions, DiffReport,
    FunctionDiff, Rule, Verdict,
};
use btprof::Profile;
use btprof_testkit::synthetic::{Program, SplitMix64};

/// A run of 100,000 samples of which `hot` has `hot_per_100k` (and `rest`
/// the others): exact shares, no sampling noise.
fn run(hot_per_100k: u64, source: &str) -> Profile {
    let text = format!(
        "t;main;hot {hot_per_100k}\nt;main;rest {}\n",
        100_000 - hot_per_100k
    );
    Profile::read_folded_from(text.as_bytes(), source).expect("folded text parses")
}

/// Runs whose `hot` shares are these percentages.
fn runs(percent: &[f64], side: &str) -> Vec<Profile> {
    percent
        .iter()
        .enumerate()
        .map(|(i, p)| run((p * 1000.0).round() as u64, &format!("{side}-{i}")))
        .collect()
}

fn hot(report: &DiffReport) -> &FunctionDiff {
    report
        .functions
        .iter()
        .find(|f| f.name == "hot")
        .expect("hot is in the report")
}

#[test]
fn three_runs_a_side_test_the_spread_and_fewer_pool_the_runs() {
    let opts = DiffOptions::default();
    for (n, rule) in [
        (1, Rule::SamplingNoise),
        (2, Rule::SamplingNoise),
        (3, Rule::RunToRunSpread),
        (5, Rule::RunToRunSpread),
    ] {
        let base = runs(&vec![20.0; n], "b");
        let new = runs(&vec![21.5; n], "n");
        let r = compare_runs(&base, &new, &opts);
        assert_eq!(r.rule, rule, "{n} runs a side");
        assert_eq!(hot(&r).base_runs.len(), n);
    }
    // One side short of three is enough to pool both.
    let r = compare_runs(&runs(&[20.0; 2], "b"), &runs(&[21.5; 4], "n"), &opts);
    assert_eq!(r.rule, Rule::SamplingNoise);
    assert!(r.noise_note().contains("not tested"), "{}", r.noise_note());
    let one = compare(&run(20_000, "b"), &run(21_500, "n"), &opts);
    assert!(
        one.noise_note()
            .contains("run-to-run noise was not measured"),
        "{}",
        one.noise_note()
    );
}

#[test]
fn a_change_beyond_the_spread_regresses_at_the_lower_threshold() {
    // +1.5 points, runs within 0.3 of each other: Welch's t is large.
    let base = [20.0, 20.3, 20.1];
    let new = [21.6, 21.5, 21.8];
    let r = compare_runs(&runs(&base, "b"), &runs(&new, "n"), &DiffOptions::default());
    let f = hot(&r);
    assert_eq!(r.rule, Rule::RunToRunSpread);
    assert_eq!(f.verdict, Verdict::Regressed, "{f:?}");
    assert_eq!(f.decided, Decided::ThresholdAndNoise);
    assert!((f.change_points(r.options.metric) - 1.5).abs() < 1e-9);
    assert!((r.threshold_points() - 1.0).abs() < 1e-12);
    // The statistic is Welch's t of the per-run shares.
    let (t, df) = welch_t(&f.base_runs, &f.new_runs).unwrap();
    assert!((f.statistic - t).abs() < 1e-9 && f.degrees_of_freedom == Some(df));
    assert!((f.p_value - student_t_upper_tail(t, df)).abs() < 1e-15);
    assert!(f.p_value < r.per_test_alpha, "{f:?} {}", r.per_test_alpha);
    // `hot` and `rest` are the functions with samples to be tested.
    assert_eq!(r.tests, 2);
    // The same +1.5 points from one run each is under the one-run rule's
    // 2-point threshold.
    let one = compare(
        &run(20_000, "b"),
        &run(21_500, "n"),
        &DiffOptions::default(),
    );
    assert_eq!(hot(&one).verdict, Verdict::Unchanged);
    assert_eq!(hot(&one).decided, Decided::Threshold);
}

#[test]
fn each_condition_of_the_spread_rule_is_needed() {
    let opts = DiffOptions::default();
    let verdict = |base: &[f64], new: &[f64], opts: &DiffOptions| {
        let r = compare_runs(&runs(base, "b"), &runs(new, "n"), opts);
        let f = hot(&r);
        (f.verdict, f.decided)
    };
    // Same mean change (+1.5), runs spread over 4 points: within noise.
    assert_eq!(
        verdict(&[18.0, 22.0, 20.3], &[23.5, 19.6, 21.6], &opts),
        (Verdict::Unchanged, Decided::Noise)
    );
    // Tiny spread but under the threshold.
    assert_eq!(
        verdict(&[20.0, 20.01, 20.02], &[20.8, 20.81, 20.82], &opts),
        (Verdict::Unchanged, Decided::Threshold)
    );
    // Too few samples per new run.
    let few = DiffOptions {
        min_samples: 30_000,
        ..opts.clone()
    };
    assert_eq!(
        verdict(&[20.0, 20.3, 20.1], &[21.6, 21.5, 21.8], &few),
        (Verdict::Unchanged, Decided::Samples)
    );
    // The threshold option moves the run-to-run rule's bar.
    let high = DiffOptions {
        spread_threshold_points: 2.0,
        ..opts.clone()
    };
    assert_eq!(
        verdict(&[20.0, 20.3, 20.1], &[21.6, 21.5, 21.8], &high),
        (Verdict::Unchanged, Decided::Threshold)
    );
    // The mirror rule: a fall beyond the spread is an improvement.
    assert_eq!(
        verdict(&[21.6, 21.5, 21.8], &[20.0, 20.3, 20.1], &opts),
        (Verdict::Improved, Decided::ThresholdAndNoise)
    );
}

#[test]
fn noisy_runs_of_one_program_give_no_regression_in_at_least_99_of_100_trials() {
    // Each run's shares move by a point or so (the first leaf's share is
    // drawn around 30% with a standard deviation of 1 point), and each run
    // samples 5,000 to 10,000 times on top: the spread the rule must hold
    // changes against. Seeded, so the same draws every time: it cannot
    // fail by chance. What it checks: the correction holds the chance of
    // any alarm in a trial to spread_alpha = 0.05 when per-run shares are
    // normal, and the 1-point threshold only lowers it (the first leaf's
    // mean moves by more than a point in about one trial in seven).
    let program = Program::typical(30);
    let mut rng = SplitMix64::new(0x5eed_0003);
    let mut normal = || {
        // Irwin-Hall: the sum of 12 uniforms minus 6 is close to normal.
        (0..12).map(|_| rng.next_f64()).sum::<f64>() - 6.0
    };
    let jitters: Vec<f64> = (0..600).map(|_| normal()).collect();
    let mut rng = SplitMix64::new(0x5eed_0004);
    let mut alarms = Vec::new();
    for trial in 0..100 {
        let mut side = |k: usize| -> Vec<Profile> {
            (0..3)
                .map(|i| {
                    let share = 0.30 + jitters[trial * 6 + k * 3 + i] / 100.0;
                    let n = 5_000 + rng.below(5_001);
                    let text = program.with_share(0, share).sample(n, &mut rng);
                    Profile::read_folded_from(text.as_bytes(), "run").unwrap()
                })
                .collect()
        };
        let (base, new) = (side(0), side(1));
        let r = compare_runs(&base, &new, &DiffOptions::default());
        if r.regressed() {
            alarms.push((
                trial,
                r.regressions().map(|f| f.name.clone()).collect::<Vec<_>>(),
            ));
        }
    }
    assert!(alarms.len() <= 1, "{alarms:?}");
}

#[test]
fn runs_that_disagree_with_their_side_are_named() {
    let opts = DiffOptions::default();
    // base-1 has a tenth of the others' samples.
    let short =
        Profile::read_folded_from("t;main;hot 2000\nt;main;rest 8000\n".as_bytes(), "base-1")
            .unwrap();
    let base = vec![run(20_000, "base-0"), short, run(20_100, "base-2")];
    let new = runs(&[20.0, 20.1, 20.2], "n");
    let r = compare_runs(&base, &new, &opts);
    let warned = |needles: &[&str]| {
        r.warnings
            .iter()
            .any(|w| needles.iter().all(|n| w.contains(n)))
    };
    assert!(
        warned(&["base run base-1", "10000 samples", "under half"]),
        "{:?}",
        r.warnings
    );
    // A function in one new run only, with many samples there.
    let odd = Profile::read_folded_from(
        "t;main;hot 20000\nt;main;rest 70000\nt;main;gc 10000\n".as_bytes(),
        "n-odd",
    )
    .unwrap();
    let new = vec![run(20_000, "n-0"), odd, run(20_000, "n-2")];
    let r = compare_runs(&runs(&[20.0; 3], "b"), &new, &opts);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("new runs disagree") && w.contains("gc") && w.contains("n-0, n-2")),
        "{:?}",
        r.warnings
    );
    // Runs that agree: no warning.
    let r = compare_runs(&runs(&[20.0; 3], "b"), &runs(&[20.0; 3], "n"), &opts);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn an_empty_side_judges_nothing_and_says_so() {
    let r = compare_runs(&[], &runs(&[30.0; 3], "n"), &DiffOptions::default());
    assert!(!r.regressed());
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("base side has no runs")),
        "{:?}",
        r.warnings
    );
}
