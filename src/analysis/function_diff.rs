//! What a comparison says about each run and each function: the samples
//! and shares per side, the test's outcome and what settled it.

use super::diff_options::Metric;
use crate::profile::RunInfo;

/// One run of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The profile's name: a path, or `base` / `new` (`base 2`, ... with
    /// several).
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

/// A function's samples and shares on one side.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Samples {
    /// Samples with the function as leaf (summed over the side's runs).
    pub self_samples: u64,
    /// Samples whose stack contains the function (summed likewise).
    pub total_samples: u64,
    /// Its self share (0..=1): of the one run; of the pooled runs under
    /// [`Rule::SamplingNoise`](super::diff::Rule::SamplingNoise); the mean of the runs' shares under
    /// [`Rule::RunToRunSpread`](super::diff::Rule::RunToRunSpread) (shares weighted per thread with
    /// [`DiffOptions::per_thread`](super::diff::DiffOptions::per_thread)).
    pub self_share: f64,
    /// Its total share (0..=1), the same way.
    pub total_share: f64,
}

impl Samples {
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

/// Whether a function was seen on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Presence {
    /// In both (in at least one run of each side).
    Both,
    /// Only in the new run(s).
    New,
    /// Only in the base run(s).
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

/// Which of the rule's conditions settled a function's verdict, for the
/// direction its share moved in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decided {
    /// The change was within the threshold.
    Threshold,
    /// The change passed the threshold, but the function had too few
    /// samples.
    Samples,
    /// The change passed the threshold but not the test: within noise
    /// (sampling noise, or the spread between runs).
    Noise,
    /// The change passed the threshold and the test: the verdict is
    /// regressed or improved.
    ThresholdAndNoise,
}

impl Decided {
    /// `threshold`, `samples`, `noise` or `threshold+noise`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decided::Threshold => "threshold",
            Decided::Samples => "samples",
            Decided::Noise => "noise",
            Decided::ThresholdAndNoise => "threshold+noise",
        }
    }
}

/// One function compared across the two sides.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionDiff {
    /// The frame name.
    pub name: String,
    /// On the base side.
    pub base: Samples,
    /// On the new side.
    pub new: Samples,
    /// The gated share (0..=1) in each base run, in run order (weighted
    /// per thread with [`DiffOptions::per_thread`](super::diff::DiffOptions::per_thread)).
    pub base_runs: Vec<f64>,
    /// The gated share (0..=1) in each new run, in run order.
    pub new_runs: Vec<f64>,
    /// Whether it was seen on both sides.
    pub presence: Presence,
    /// The test statistic of the gated share's change (positive: grew):
    /// z under [`Rule::SamplingNoise`](super::diff::Rule::SamplingNoise), Welch's t under
    /// [`Rule::RunToRunSpread`](super::diff::Rule::RunToRunSpread).
    pub statistic: f64,
    /// Welch's degrees of freedom; `None` for the z-test.
    pub degrees_of_freedom: Option<f64>,
    /// One-sided p-value of growth.
    pub p_value: f64,
    /// The gate's conclusion.
    pub verdict: Verdict,
    /// What settled it.
    pub decided: Decided,
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

/// How much a share varied between the runs of one side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Smallest share of a run (0..=1).
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Sample standard deviation; `None` with one run.
    pub sd: Option<f64>,
}

impl Spread {
    /// The spread of `shares`, `None` when there are none.
    pub fn of(shares: &[f64]) -> Option<Spread> {
        let (&first, rest) = shares.split_first()?;
        let (min, max) = rest
            .iter()
            .fold((first, first), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        let sd =
            (shares.len() >= 2).then(|| super::significance::mean_and_variance(shares).1.sqrt());
        Some(Spread { min, max, sd })
    }
}
