//! The regression gate's settings ([`DiffOptions`]), the share it looks
//! at ([`Metric`]) and the rule that judges ([`Rule`]); see
//! [`diff`](super::diff) for the rules themselves.

#[cfg(doc)]
use super::functions::FunctionTable;
use super::functions::SelfFrame;

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

/// The regression gate's settings. See the [`diff`](super::diff) module
/// docs for the rules.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    /// The share the gate looks at.
    pub metric: Metric,
    /// Smallest growth, in percentage points, that can be a regression
    /// when sampling noise judges (fewer than three runs a side).
    pub threshold_points: f64,
    /// Smallest growth, in percentage points, that can be a regression
    /// when run-to-run spread judges (three runs a side or more): lower,
    /// because the test then sees how much runs really move.
    pub spread_threshold_points: f64,
    /// Fewest samples of the function in the new run (per new run on
    /// average, with several) for a regression.
    pub min_samples: u64,
    /// Accepted chance that sampling noise alone flags any function,
    /// before the Bonferroni division by the number of functions.
    pub alpha: f64,
    /// The same for run-to-run spread (three runs a side or more). Higher
    /// than [`alpha`](Self::alpha): with three runs a side Welch's test has
    /// two to four degrees of freedom, and at 0.001 it would find a
    /// 1.5-point change only in runs whose shares hardly vary at all. The
    /// 1-point threshold, which a change must pass as well, keeps the false
    /// alarms the laxer level allows rare.
    pub spread_alpha: f64,
    /// Treat each stack's first frame as a thread or process label, not a
    /// function (see [`FunctionTable::new`]).
    pub skip_root: bool,
    /// Which frame a sample's self time counts to: by default the
    /// innermost frame of code that is not Rust's standard library
    /// ([`SelfFrame::OwnCode`]), so that a regression inside a loop of
    /// inlined std helpers names the user's function, not
    /// `core::hint::black_box`.
    pub self_frame: SelfFrame,
    /// With three runs a side or more, judge each run's share of a
    /// function weighted per thread (each stack's first frame, which is
    /// then a label, as with `skip_root`): as if every run had split its
    /// samples between threads as the runs do on average. For programs
    /// whose threads each run for the whole run, where the scheduler's
    /// split is noise; wrong for a fixed amount of work, where a thread
    /// that takes longer is the regression (see
    /// [`per_thread`](super::per_thread)). Ignored, with a warning, under
    /// the one-run rule.
    pub per_thread: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            metric: Metric::SelfShare,
            threshold_points: 2.0,
            spread_threshold_points: 1.0,
            min_samples: 20,
            alpha: 0.001,
            spread_alpha: 0.05,
            skip_root: false,
            self_frame: SelfFrame::OwnCode,
            per_thread: false,
        }
    }
}

impl DiffOptions {
    /// Why these settings make no sense, if they do not.
    pub fn validate(&self) -> Result<(), String> {
        for threshold in [self.threshold_points, self.spread_threshold_points] {
            if !(threshold.is_finite() && (0.0..=100.0).contains(&threshold)) {
                return Err(format!(
                    "the threshold must be between 0 and 100 percentage points, not {threshold}"
                ));
            }
        }
        for alpha in [self.alpha, self.spread_alpha] {
            if !(alpha > 0.0 && alpha < 1.0) {
                return Err(format!(
                    "alpha must be a probability between 0 and 1 (exclusive), not {alpha}"
                ));
            }
        }
        Ok(())
    }

    /// The threshold in points `rule` applies.
    pub fn threshold_for(&self, rule: Rule) -> f64 {
        match rule {
            Rule::SamplingNoise => self.threshold_points,
            Rule::RunToRunSpread => self.spread_threshold_points,
        }
    }

    /// The family-wise alpha `rule` applies.
    pub fn alpha_for(&self, rule: Rule) -> f64 {
        match rule {
            Rule::SamplingNoise => self.alpha,
            Rule::RunToRunSpread => self.spread_alpha,
        }
    }
}

/// Which rule judged: what the noise a change is held against is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Fewer than three runs on a side: each side's runs are pooled and
    /// the change is tested against sampling noise alone (the pooled
    /// two-proportion z-test). Run-to-run noise is not measured.
    SamplingNoise,
    /// Three runs or more on each side: the change of the mean share is
    /// tested against the spread between runs (Welch's t-test).
    RunToRunSpread,
}

impl Rule {
    /// The fewest runs per side for [`Rule::RunToRunSpread`].
    pub const MIN_RUNS_FOR_SPREAD: usize = 3;

    /// The rule for these numbers of runs.
    pub fn for_runs(base: usize, new: usize) -> Rule {
        if base.min(new) >= Rule::MIN_RUNS_FOR_SPREAD {
            Rule::RunToRunSpread
        } else {
            Rule::SamplingNoise
        }
    }

    /// The test, as reports name it.
    pub const fn test_name(self) -> &'static str {
        match self {
            Rule::SamplingNoise => "one-sided pooled two-proportion z-test",
            Rule::RunToRunSpread => "one-sided Welch's t-test on per-run shares",
        }
    }
}
