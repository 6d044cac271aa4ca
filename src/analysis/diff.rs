//! Comparing profiles: which functions take a bigger share of the
//! samples, and is that more than noise? One run per side, or several.
//!
//! Every run is normalised by its own total, so runs of different length
//! compare. For every function (a frame name, summed over threads; see
//! [`functions`](super::functions)) the report gives its self and total
//! share on each side and the change in percentage points, sorted by the
//! largest increase of the gated share.
//!
//! # The regression rules
//!
//! Which rule judges depends on how many runs each side has ([`Rule`]).
//!
//! **One run per side (or fewer than three on either side):** a function
//! has **regressed** when all three hold for its gated share ([`Metric`],
//! self by default):
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
//! With two runs on a side, that side's runs are pooled (their samples
//! added) and judged by this rule; the report shows their spread but
//! does not test it: two runs say too little about it.
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
//! none of 81).
//!
//! **At least three runs per side:** run-to-run noise is measured rather
//! than assumed. A function has regressed when its mean share (each
//! run's share weighing the same) grew by more than
//! [`DiffOptions::spread_threshold_points`] (default 1.0), it has at
//! least `min_samples` samples per new run on average, and Welch's t-test
//! on the per-run shares gives a one-sided p-value below
//! [`DiffOptions::spread_alpha`] (default 0.05) over `m`, where `m`
//! counts the functions with at least `min_samples` samples per run on
//! average over both sides (the others can never regress; filtering on
//! the pooled mean, which says nothing of the change's direction, keeps
//! the correction valid).
//!
//! With [`DiffOptions::per_thread`], each run's share is weighted per
//! thread, so that the split of CPU time between threads drops out (see
//! [`per_thread`](super::per_thread) for when that is right).
//!
//! Either way a function whose share fell by the mirror rule is reported
//! as **improved**; that never fails the gate.

pub use super::significance::{normal_upper_tail, student_t_upper_tail, two_proportion_z, welch_t};

use std::collections::BTreeSet;

pub use super::diff_options::{DiffOptions, Metric, Rule};
pub use super::function_diff::{
    Decided, FunctionDiff, Presence, RunSummary, Samples, Spread, Verdict,
};
use super::functions::FunctionTable;
use super::gate::{Gate, SideCounts};
use super::per_thread::PerThread;
use super::run_checks;
use crate::profile::{Profile, RunInfo};

/// The result of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffReport {
    /// The base runs.
    pub base: Vec<RunSummary>,
    /// The new runs.
    pub new: Vec<RunSummary>,
    /// The settings used.
    pub options: DiffOptions,
    /// The rule that judged.
    pub rule: Rule,
    /// Functions tested: the Bonferroni divisor.
    pub tests: usize,
    /// The p-value a change must be under: the rule's alpha over `tests`.
    pub per_test_alpha: f64,
    /// Every function of either side: regressions first, then by the size
    /// of the gated share's change, growth or shrinkage alike (ties by
    /// name).
    pub functions: Vec<FunctionDiff>,
    /// Reasons the runs may not compare like for like: different rates or
    /// modes, runs of one side that disagree (named).
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

    /// Functions seen only in the new run(s), in report order.
    pub fn new_functions(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_presence(Presence::New)
    }

    /// Functions seen only in the base run(s), in report order.
    pub fn vanished_functions(&self) -> impl Iterator<Item = &FunctionDiff> + '_ {
        self.with_presence(Presence::Vanished)
    }

    /// The threshold in points the rule applied.
    pub fn threshold_points(&self) -> f64 {
        self.options.threshold_for(self.rule)
    }

    /// The family-wise alpha the rule applied.
    pub fn alpha(&self) -> f64 {
        self.options.alpha_for(self.rule)
    }

    /// Whether shares were weighted per thread
    /// ([`DiffOptions::per_thread`], which the one-run rule ignores).
    pub fn per_thread(&self) -> bool {
        self.options.per_thread && self.rule == Rule::RunToRunSpread
    }

    /// What the change was held against, in a sentence: under
    /// [`Rule::SamplingNoise`] it says that run-to-run noise was not
    /// measured, which a reader of a one-run gate needs to know.
    pub fn noise_note(&self) -> String {
        let (b, n) = (self.base.len(), self.new.len());
        let min = Rule::MIN_RUNS_FOR_SPREAD;
        match self.rule {
            Rule::RunToRunSpread => {
                format!("tested against the spread between runs ({b} base, {n} new)")
            }
            Rule::SamplingNoise if b <= 1 && n <= 1 => format!(
                "run-to-run noise was not measured (one run per side): the change is \
                 held against sampling noise alone; profile {min} runs per side to test it"
            ),
            Rule::SamplingNoise => format!(
                "run-to-run noise was not tested ({b} base, {n} new runs; it takes {min} \
                 per side): each side's runs are pooled and held against sampling noise"
            ),
        }
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
    compare_runs(
        std::slice::from_ref(base),
        std::slice::from_ref(new),
        options,
    )
}

/// Compares several runs of the base with several runs of the new
/// version: with at least three on each side, against the spread between
/// runs; otherwise each side's runs are pooled and judged as one run (see
/// the [module docs](self)). Runs of one side that disagree (one with far
/// fewer samples than the others, a function in some runs but not in
/// others) are named in the warnings. An empty side judges nothing and
/// says so.
pub fn compare_runs(base: &[Profile], new: &[Profile], options: &DiffOptions) -> DiffReport {
    let rule = Rule::for_runs(base.len(), new.len());
    let per_thread = options.per_thread && rule == Rule::RunToRunSpread;
    // Weighting per thread takes the root frames for thread labels.
    let skip_root = options.skip_root || per_thread;
    let table = |p: &Profile| FunctionTable::with_self_frame(p, skip_root, options.self_frame);
    let base_tables: Vec<FunctionTable> = base.iter().map(table).collect();
    let new_tables: Vec<FunctionTable> = new.iter().map(table).collect();
    let names: BTreeSet<&str> = base_tables
        .iter()
        .chain(&new_tables)
        .flat_map(|t| t.functions().iter().map(|f| f.name.as_str()))
        .collect();
    let mut warnings = Vec::new();
    let invalid = options.validate().err();
    let empty_side = base.is_empty() || new.is_empty();
    let gate = Gate::new(options, rule, invalid.is_none() && !empty_side);
    let weighted = per_thread.then(|| PerThread::new(base, new, options.self_frame));
    let sides: Vec<(SideCounts, SideCounts)> = names
        .iter()
        .map(|name| {
            let (b, n) = (
                SideCounts::of(name, &base_tables, options.metric),
                SideCounts::of(name, &new_tables, options.metric),
            );
            match &weighted {
                None => (b, n),
                Some(w) => {
                    let (bs, ns) = w.shares(name);
                    (b.with_shares(bs), n.with_shares(ns))
                }
            }
        })
        .collect();
    let tests = gate.tests(&sides);
    let per_test_alpha = options.alpha_for(rule) / tests as f64;
    let mut functions: Vec<FunctionDiff> = names
        .iter()
        .zip(sides)
        .map(|(name, (b, n))| gate.judge((*name).to_owned(), b, n, per_test_alpha))
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

    let summaries = |runs: &[Profile], tables: &[FunctionTable], side: &str| -> Vec<RunSummary> {
        runs.iter()
            .zip(tables)
            .enumerate()
            .map(|(i, (p, t))| RunSummary {
                source: match p.source_name() {
                    Some(name) => name.to_owned(),
                    None if runs.len() == 1 => side.to_owned(),
                    None => format!("{side} {}", i + 1),
                },
                samples: p.total_samples(),
                stacks: p.distinct_stacks(),
                functions: t.functions().len(),
                run_info: p.run_info().cloned(),
            })
            .collect()
    };
    let (base_runs, new_runs) = (
        summaries(base, &base_tables, "base"),
        summaries(new, &new_tables, "new"),
    );
    warnings.extend(RunInfo::differences(
        base.first().and_then(Profile::run_info),
        new.first().and_then(Profile::run_info),
    ));
    if let Some(why) = invalid {
        warnings.push(format!("nothing was judged: {why}"));
    }
    if options.per_thread && !per_thread {
        warnings.push(format!(
            "shares were not weighted per thread: that takes {} runs per side",
            Rule::MIN_RUNS_FOR_SPREAD
        ));
    }
    for (side, runs) in [("base", &base_runs), ("new", &new_runs)] {
        if runs.is_empty() {
            warnings.push(format!(
                "the {side} side has no runs: nothing can be compared"
            ));
        }
        for run in runs.iter().filter(|r| r.samples == 0) {
            warnings.push(format!(
                "the {side} profile ({}) has no samples: nothing can be compared",
                run.source
            ));
        }
    }
    warnings.extend(run_checks::disagreements(
        ("base", &base_runs, &base_tables),
        ("new", &new_runs, &new_tables),
        options,
    ));
    let shared = functions.iter().any(|f| f.presence == Presence::Both);
    let has_samples = |runs: &[RunSummary]| runs.iter().any(|r| r.samples > 0);
    if !shared && has_samples(&base_runs) && has_samples(&new_runs) {
        warnings.push(
            "the profiles have no function in common: are they of the same program?".to_owned(),
        );
    }
    DiffReport {
        base: base_runs,
        new: new_runs,
        options: options.clone(),
        rule,
        tests,
        per_test_alpha,
        functions,
        warnings,
    }
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
