//! The regression rules applied to one function: its counts on each side
//! in, a verdict, its test statistic and what decided it out. See
//! [`diff`](super::diff) for the rules themselves.

use super::diff_options::{DiffOptions, Metric, Rule};
use super::function_diff::{Decided, FunctionDiff, Presence, Samples, Verdict};
use super::functions::FunctionTable;
use super::significance::{normal_upper_tail, student_t_upper_tail, two_proportion_z, welch_t};

/// One function's counts in each run of one side.
pub(crate) struct SideCounts {
    /// `(self, total)` samples per run.
    counts: Vec<(u64, u64)>,
    /// All samples per run.
    totals: Vec<u64>,
    /// `(self, total)` shares per run weighted per thread, which then
    /// stand for the plain shares (see `per_thread`).
    weighted: Option<Vec<(f64, f64)>>,
    metric: Metric,
}

impl SideCounts {
    /// The counts of `name` in each of `tables` (0 where it is absent).
    pub(crate) fn of(name: &str, tables: &[FunctionTable], metric: Metric) -> SideCounts {
        SideCounts {
            counts: tables
                .iter()
                .map(|t| {
                    t.get(name)
                        .map_or((0, 0), |f| (f.self_samples, f.total_samples))
                })
                .collect(),
            totals: tables.iter().map(FunctionTable::total_samples).collect(),
            weighted: None,
            metric,
        }
    }

    /// The same counts, judged by these per-run `(self, total)` shares
    /// (one per run) instead of the plain ones.
    pub(crate) fn with_shares(self, shares: Vec<(f64, f64)>) -> SideCounts {
        debug_assert_eq!(shares.len(), self.counts.len());
        SideCounts {
            weighted: Some(shares),
            ..self
        }
    }

    /// Each run's `(self, total)` share.
    fn run_shares(&self) -> Vec<(f64, f64)> {
        match &self.weighted {
            Some(shares) => shares.clone(),
            None => self
                .counts
                .iter()
                .zip(&self.totals)
                .map(|(&(s, t), &n)| (share(s, n), share(t, n)))
                .collect(),
        }
    }

    fn gated(&self, (s, t): (u64, u64)) -> u64 {
        match self.metric {
            Metric::SelfShare => s,
            Metric::TotalShare => t,
        }
    }

    /// The gated count summed over the runs.
    fn gated_sum(&self) -> u64 {
        self.counts.iter().map(|&c| self.gated(c)).sum()
    }

    /// The gated share of each run (0 for a run without samples).
    fn gated_shares(&self) -> Vec<f64> {
        self.run_shares()
            .into_iter()
            .map(|(s, t)| match self.metric {
                Metric::SelfShare => s,
                Metric::TotalShare => t,
            })
            .collect()
    }

    fn present(&self) -> bool {
        self.counts.iter().any(|&(_, t)| t > 0)
    }

    /// Counts summed; shares pooled (summed counts over summed totals)
    /// or, with `mean`, the mean of the runs' shares.
    fn samples(&self, mean: bool) -> Samples {
        let (s, t) = self
            .counts
            .iter()
            .fold((0, 0), |(a, b), &(s, t)| (a + s, b + t));
        let (self_share, total_share) = if mean {
            let shares = self.run_shares();
            let runs = shares.len().max(1) as f64;
            let (a, b) = shares
                .iter()
                .fold((0.0, 0.0), |(a, b), &(s, t)| (a + s, b + t));
            (a / runs, b / runs)
        } else {
            let n: u64 = self.totals.iter().sum();
            (share(s, n), share(t, n))
        };
        Samples {
            self_samples: s,
            total_samples: t,
            self_share,
            total_share,
        }
    }
}

fn share(count: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        count as f64 / total as f64
    }
}

/// The regression rule with everything it needs besides one function.
pub(crate) struct Gate<'a> {
    options: &'a DiffOptions,
    rule: Rule,
    /// False for settings that fail validation, or an empty side: report,
    /// judge nothing.
    valid: bool,
}

impl<'a> Gate<'a> {
    pub(crate) fn new(options: &'a DiffOptions, rule: Rule, valid: bool) -> Gate<'a> {
        Gate {
            options,
            rule,
            valid,
        }
    }

    /// The Bonferroni divisor over these functions' counts: all of them
    /// for sampling noise (as the one-run rule always counted), those
    /// with at least `min_samples` per run on average over both sides for
    /// run-to-run spread. At least 1.
    pub(crate) fn tests(&self, sides: &[(SideCounts, SideCounts)]) -> usize {
        let counted = match self.rule {
            Rule::SamplingNoise => sides.len(),
            Rule::RunToRunSpread => sides
                .iter()
                .filter(|(b, n)| {
                    let runs = (b.counts.len() + n.counts.len()) as u64;
                    b.gated_sum() + n.gated_sum() >= self.options.min_samples * runs
                })
                .count(),
        };
        counted.max(1)
    }

    /// Applies the rule to one function.
    pub(crate) fn judge(
        &self,
        name: String,
        base: SideCounts,
        new: SideCounts,
        per_test_alpha: f64,
    ) -> FunctionDiff {
        let metric = self.options.metric;
        let presence = match (base.present(), new.present()) {
            (true, true) => Presence::Both,
            (false, _) => Presence::New,
            (_, false) => Presence::Vanished,
        };
        let spread = self.rule == Rule::RunToRunSpread;
        let (base_s, new_s) = (base.samples(spread), new.samples(spread));
        let (base_runs, new_runs) = (base.gated_shares(), new.gated_shares());
        let (statistic, degrees_of_freedom, p_value) = if spread {
            let (t, df) = welch_t(&base_runs, &new_runs).unwrap_or((0.0, 1.0));
            (t, Some(df), student_t_upper_tail(t, df))
        } else {
            let (a, n_a) = (base.gated_sum(), base.totals.iter().sum());
            let (b, n_b) = (new.gated_sum(), new.totals.iter().sum());
            let z = two_proportion_z(a, n_a, b, n_b);
            (z, None, normal_upper_tail(z))
        };
        // Samples per run on average: the one run's count with one run.
        let per_run = |c: &SideCounts| c.gated_sum() as f64 / c.counts.len().max(1) as f64;
        let change = (new_s.share(metric) - base_s.share(metric)) * 100.0;
        let threshold = self.options.threshold_for(self.rule);
        let min_samples = self.options.min_samples as f64;
        let decided = if change > threshold {
            if per_run(&new) < min_samples {
                Decided::Samples
            } else if p_value < per_test_alpha {
                Decided::ThresholdAndNoise
            } else {
                Decided::Noise
            }
        } else if -change > threshold {
            // The p-value of shrinking: the other tail.
            let shrink_p = match degrees_of_freedom {
                Some(df) => student_t_upper_tail(-statistic, df),
                None => normal_upper_tail(-statistic),
            };
            if per_run(&base) < min_samples {
                Decided::Samples
            } else if shrink_p < per_test_alpha {
                Decided::ThresholdAndNoise
            } else {
                Decided::Noise
            }
        } else {
            Decided::Threshold
        };
        let verdict = match decided {
            _ if !self.valid => Verdict::Unchanged,
            Decided::ThresholdAndNoise if change > 0.0 => Verdict::Regressed,
            Decided::ThresholdAndNoise => Verdict::Improved,
            _ => Verdict::Unchanged,
        };
        FunctionDiff {
            name,
            base: base_s,
            new: new_s,
            base_runs,
            new_runs,
            presence,
            statistic,
            degrees_of_freedom,
            p_value,
            verdict,
            decided,
        }
    }
}
