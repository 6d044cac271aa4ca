//! Comparing two profiles: which functions take a bigger share of the
//! samples, and is that more than sampling noise?
//!
//! Both profiles are normalised by their own total, so runs of different
//! length compare. For every function (a frame name, summed over threads;
//! see [`functions`](super::functions)) the report gives its self and
//! total share in each run and the change in percentage points, sorted by
//! the largest increase of the gated share.
//!
//! # The regression rule
//!
//! A function has **regressed** when all three hold for its gated share
//! ([`Metric`], self by default):
//!
//! 1. the share grew by more than [`DiffOptions::threshold_points`]
//!    percentage points (default 2.0);
//! 2. it has at least [`DiffOptions::min_samples`] samples in the new run
//!    (default 20);
//! 3. a one-sided pooled two-proportion z-test says the growth is unlikely
//!    to be sampling noise: its p-value is below `alpha / m`, where `m` is
//!    the number of functions compared and [`DiffOptions::alpha`] (default
//!    0.001) the accepted chance that noise alone flags any function at
//!    all (a Bonferroni correction: hundreds of functions are tested at
//!    once, and at 0.05 each some would be flagged in almost every diff).
//!
//! The test treats samples as independent draws. A real program's samples
//! are not quite (one long call spans several ticks, phases vary from run
//! to run), which makes the test overconfident on big profiles; the
//! threshold in points is what keeps such small real-but-irrelevant shifts
//! from failing a build. It is 2 points rather than 1 because real runs
//! move by more than sampling noise: between pairs of faithful 2 s runs
//! of btprof's own workload on a shared 2-core VM, the self share of a
//! system-call leaf (`clock_gettime`) rose by up to 1.9 points, so a
//! 1-point threshold failed 3 of 47 pairs of identical runs (2 points:
//! none of 81). A function
//! whose share fell by the mirror rule is reported as **improved**; that
//! never fails the gate.

pub use super::significance::{normal_upper_tail, two_proportion_z};

use std::cmp::Ordering;

use super::functions::{FunctionSamples, FunctionTable, SelfFrame};
use crate::profile::{Profile, RunInfo};

/// Which share of a function the regression gate looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Samples where the function is the leaf: its own code got slower.
    #[default]
    SelfShare,
    /// Samples whose stack contains the function: it or anything it calls
    /// got slower.
    TotalShare,
}

impl Metric {
    /// `"self"` or `"total"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Metric::SelfShare => "self",
            Metric::TotalShare => "total",
        }
    }
}

/// The regression gate's settings. See the [module docs](self) for the rule.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    /// The share the gate looks at.
    pub metric: Metric,
    /// Smallest growth, in percentage points, that can be a regression.
    pub threshold_points: f64,
    /// Fewest samples of the function in the new run for a regression.
    pub min_samples: u64,
    /// Accepted chance that noise alone flags any function, before the
    /// Bonferroni division by the number of functions.
    pub alpha: f64,
    /// Treat each stack's first frame as a thread or process label, not a
    /// function (see [`FunctionTable::new`]).
    pub skip_root: bool,
    /// Which frame a sample's self time counts to: by default the
    /// innermost frame of code that is not Rust's standard library
    /// ([`SelfFrame::OwnCode`]), so that a regression inside a loop of
    /// inlined std helpers names the user's function, not
    /// `core::hint::black_box`.
    pub self_frame: SelfFrame,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            metric: Metric::SelfShare,
            threshold_points: 2.0,
            min_samples: 20,
            alpha: 0.001,
            skip_root: false,
            self_frame: SelfFrame::OwnCode,
        }
    }
}

impl DiffOptions {
    /// Why these settings make no sense, if they do not.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.threshold_points.is_finite() && (0.0..=100.0).contains(&self.threshold_points)) {
            return Err(format!(
                "the threshold must be between 0 and 100 percentage points, not {}",
                self.threshold_points
            ));
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(format!(
                "alpha must be a probability between 0 and 1 (exclusive), not {}",
                self.alpha
            ));
        }
        Ok(())
    }
}

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The profile's name: a path, or `base` / `new`.
    pub source: String,
    /// All samples.
    pub samples: u64,
    /// Distinct stacks.
    pub stacks: usize,
    /// Functions with at least one sample.
    pub functions: usize,
    /// How the run was taken, if known.
    pub run_info: Option<RunInfo>,
}

/// A function's samples and shares in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Samples {
    /// Samples with the function as leaf.
    pub self_samples: u64,
    /// Samples whose stack contains the function.
    pub total_samples: u64,
    /// `self_samples` over all samples of the run (0..=1).
    pub self_share: f64,
    /// `total_samples` over all samples of the run (0..=1).
    pub total_share: f64,
}

impl Samples {
    fn of(function: Option<&FunctionSamples>, table: &FunctionTable) -> Samples {
        let (s, t) = function.map_or((0, 0), |f| (f.self_samples, f.total_samples));
        Samples {
            self_samples: s,
            total_samples: t,
            self_share: table.share(s),
            total_share: table.share(t),
        }
    }

    /// The samples counted by `metric`.
    pub fn count(&self, metric: Metric) -> u64 {
        match metric {
            Metric::SelfShare => self.self_samples,
            Metric::TotalShare => self.total_samples,
        }
    }

    /// The share counted by `metric` (0..=1).
    pub fn share(&self, metric: Metric) -> f64 {
        match metric {
            Metric::SelfShare => self.self_share,
            Metric::TotalShare => self.total_share,
        }
    }
}

/// Whether a function was seen in both runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    /// In both.
    Both,
    /// Only in the new run.
    New,
    /// Only in the base run.
    Vanished,
}

/// What the gate concluded about a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Its share grew past the threshold, with enough samples, beyond noise.
    Regressed,
    /// Its share fell by the mirror rule. Never fails the gate.
    Improved,
    /// Neither.
    Unchanged,
}

/// One function compared across the two runs.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionDiff {
    /// The frame name.
    pub name: String,
    /// In the base run.
    pub base: Samples,
    /// In the new run.
    pub new: Samples,
    /// Whether it was seen in both runs.
    pub presence: Presence,
    /// The z statistic of the gated share's change (positive: grew).
    pub z: f64,
    /// One-sided p-value of growth, `P(Z >= z)`.
    pub p_value: f64,
    /// The gate's conclusion.
    pub verdict: Verdict,
}

impl FunctionDiff {
    /// Change of the self share, in percentage points.
    pub fn self_change_points(&self) -> f64 {
        self.change_points(Metric::SelfShare)
    }

    /// Change of the total share, in percentage points.
    pub fn total_change_points(&self) -> f64 {
        self.change_points(Metric::TotalShare)
    }

    /// Change of the share counted by `metric`, in percentage points.
    pub fn change_points(&self, metric: Metric) -> f64 {
        (self.new.share(metric) - self.base.share(metric)) * 100.0
    }
}

/// The result of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffReport {
    /// The base run.
    pub base: RunSummary,
    /// The new run.
    pub new: RunSummary,
    /// The settings used.
    pub options: DiffOptions,
    /// Functions tested: the Bonferroni divisor.
    pub tests: usize,
    /// The p-value a change must be under: `alpha / tests`.
    pub per_test_alpha: f64,
    /// Every function of either run: regressions first, then by the size
    /// of the gated share's change, growth or shrinkage alike (ties by
    /// name).
    pub functions: Vec<FunctionDiff>,
    /// Reasons the runs may not compare like for like.
    pub warnings: Vec<String>,
}

impl DiffReport {
    /// The functions that regressed, largest increase first.
    pub fn regressions(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_verdict(Verdict::Regressed)
    }

    /// The functions that improved, in report order (largest decrease
    /// first).
    pub fn improvements(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_verdict(Verdict::Improved)
    }

    /// Whether any function regressed: the gate's answer.
    pub fn regressed(&self) -> bool {
        self.regressions().next().is_some()
    }

    /// Functions seen only in the new run, in report order.
    pub fn new_functions(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_presence(Presence::New)
    }

    /// Functions seen only in the base run, in report order.
    pub fn vanished_functions(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_presence(Presence::Vanished)
    }

    fn with_verdict(&self, verdict: Verdict) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.functions.iter().filter(move |f| f.verdict == verdict)
    }

    fn with_presence(&self, presence: Presence) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.functions
            .iter()
            .filter(move |f| f.presence == presence)
    }
}

/// Compares two profiles: read from folded files
/// ([`Profile::read_folded`]) or recorded in this process. A recording is
/// compared as its folded file would be (thread names as root frames), so
/// the answer is the one `btprof diff` gives on the files; reports call
/// recordings `base` and `new`. Warnings say when their rates or modes
/// differ.
///
/// Settings that fail [`DiffOptions::validate`] judge nothing: every
/// verdict is [`Verdict::Unchanged`] and a warning says why.
pub fn compare(base: &Profile, new: &Profile, options: &DiffOptions) -> DiffReport {
    let base_table = FunctionTable::with_self_frame(base, options.skip_root, options.self_frame);
    let new_table = FunctionTable::with_self_frame(new, options.skip_root, options.self_frame);
    let pairs = join_by_name(base_table.functions(), new_table.functions());
    let tests = pairs.len().max(1);
    let per_test_alpha = options.alpha / tests as f64;
    let invalid = options.validate().err();
    let gate = Gate {
        options,
        valid: invalid.is_none(),
        per_test_alpha,
        base_samples: base_table.total_samples(),
        new_samples: new_table.total_samples(),
    };

    let mut functions: Vec<FunctionDiff> = pairs
        .into_iter()
        .map(|(b, n)| {
            let presence = match (b, n) {
                (Some(_), Some(_)) => Presence::Both,
                (None, _) => Presence::New,
                (_, None) => Presence::Vanished,
            };
            let name = b.or(n).map(|f| f.name.clone()).unwrap_or_default();
            let (base_s, new_s) = (Samples::of(b, &base_table), Samples::of(n, &new_table));
            gate.judge(name, base_s, new_s, presence)
        })
        .collect();
    let metric = options.metric;
    // Regressions first, then the largest changes either way: what a
    // reader of the first rows needs to see.
    functions.sort_by(|a, b| {
        let regressed = |f: &FunctionDiff| f.verdict != Verdict::Regressed;
        regressed(a)
            .cmp(&regressed(b))
            .then_with(|| {
                b.change_points(metric)
                    .abs()
                    .total_cmp(&a.change_points(metric).abs())
            })
            .then_with(|| a.name.cmp(&b.name))
    });

    let name = |p: &Profile, side: &'static str| p.source_name().unwrap_or(side).to_owned();
    let summary = |p: &Profile, side, t: &FunctionTable| RunSummary {
        source: name(p, side),
        samples: p.total_samples(),
        stacks: p.distinct_stacks(),
        functions: t.functions().len(),
        run_info: p.run_info().cloned(),
    };
    let mut warnings = RunInfo::differences(base.run_info(), new.run_info());
    if let Some(why) = invalid {
        warnings.push(format!("nothing was judged: {why}"));
    }
    for (side, p) in [("base", base), ("new", new)] {
        if p.is_empty() {
            warnings.push(format!(
                "the {side} profile ({}) has no samples: nothing can be compared",
                name(p, side)
            ));
        }
    }
    let shared = functions.iter().any(|f| f.presence == Presence::Both);
    if !shared && !base.is_empty() && !new.is_empty() {
        warnings.push(
            "the profiles have no function in common: are they of the same program?".to_owned(),
        );
    }
    DiffReport {
        base: summary(base, "base", &base_table),
        new: summary(new, "new", &new_table),
        options: options.clone(),
        tests,
        per_test_alpha,
        functions,
        warnings,
    }
}

/// The regression rule with everything it needs besides one function.
struct Gate<'a> {
    options: &'a DiffOptions,
    /// False for settings that fail validation: report, judge nothing.
    valid: bool,
    per_test_alpha: f64,
    base_samples: u64,
    new_samples: u64,
}

impl Gate<'_> {
    /// Applies the rule to one function.
    fn judge(&self, name: String, base: Samples, new: Samples, presence: Presence) -> FunctionDiff {
        let (options, metric) = (self.options, self.options.metric);
        let (a, b) = (base.count(metric), new.count(metric));
        let z = two_proportion_z(a, self.base_samples, b, self.new_samples);
        let p_value = normal_upper_tail(z);
        let change = (new.share(metric) - base.share(metric)) * 100.0;
        let verdict = if !self.valid {
            Verdict::Unchanged
        } else if change > options.threshold_points
            && b >= options.min_samples
            && p_value < self.per_test_alpha
        {
            Verdict::Regressed
        } else if -change > options.threshold_points
            && a >= options.min_samples
            && normal_upper_tail(-z) < self.per_test_alpha
        {
            Verdict::Improved
        } else {
            Verdict::Unchanged
        };
        FunctionDiff {
            name,
            base,
            new,
            presence,
            z,
            p_value,
            verdict,
        }
    }
}

/// Pairs two name-sorted lists by name: every function of either, with
/// its entry on each side if any.
fn join_by_name<'a>(
    base: &'a [FunctionSamples],
    new: &'a [FunctionSamples],
) -> Vec<(Option<&'a FunctionSamples>, Option<&'a FunctionSamples>)> {
    let mut out = Vec::with_capacity(base.len().max(new.len()));
    let (mut b, mut n) = (base.iter().peekable(), new.iter().peekable());
    loop {
        let order = match (b.peek(), n.peek()) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        out.push(match order {
            Ordering::Less => (b.next(), None),
            Ordering::Greater => (None, n.next()),
            Ordering::Equal => (b.next(), n.next()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
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
}
