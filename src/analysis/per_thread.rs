//! Shares weighted per thread ([`DiffOptions::per_thread`]): each run's
//! share of a function as it would be if every run had split its samples
//! between its threads (root frames) as the runs do on average.
//!
//! In a program whose threads each run for as long as the program runs
//! (a server under a fixed-length load, btprof's built-in workload), how
//! the scheduler splits CPU time between the threads changes from run to
//! run, and a function's share of all samples moves with the split when
//! its threads spend different shares of their time in it. Its share of
//! each thread's samples does not. So a run's weighted share of function
//! `f` is `sum over threads T of w_T * f_T / n_T`: `f_T` its samples
//! under root `T` in that run, `n_T` the run's samples under `T`, and
//! `w_T` the mean over all runs of both sides of `T`'s fraction of the
//! run's samples. The weights are the same for every run, so the split
//! of any one run drops out, while a function that takes more of its
//! thread's time moves as before.
//!
//! In a program that does a fixed amount of work, the split is not noise:
//! a thread that takes longer because a function in it got slower is the
//! regression, and weighting hides it when the function is most of its
//! thread's time. Such programs do not need the weighting: their shares
//! follow the work, whatever the scheduler does.
//!
//! [`DiffOptions::per_thread`]: super::diff::DiffOptions::per_thread

use std::collections::BTreeMap;

use super::functions::{FunctionTable, SelfFrame};
use crate::profile::Profile;

/// A function's `(self, total)` share (0..=1) in each run of a side.
pub(crate) type RunShares = Vec<(f64, f64)>;

/// One run's tables per root frame, with the run's samples under each.
struct RunByRoot {
    tables: Vec<(String, FunctionTable)>,
    samples: u64,
}

/// Every run of both sides split by root frame, and the roots' weights.
pub(crate) struct PerThread {
    base: Vec<RunByRoot>,
    new: Vec<RunByRoot>,
    /// Each root's mean fraction of a run's samples, over all runs.
    weights: BTreeMap<String, f64>,
}

impl PerThread {
    /// Splits every run by root frame and weighs the roots.
    pub(crate) fn new(base: &[Profile], new: &[Profile], self_frame: SelfFrame) -> PerThread {
        let split = |runs: &[Profile]| -> Vec<RunByRoot> {
            runs.iter()
                .map(|p| RunByRoot {
                    tables: FunctionTable::by_root(p, self_frame),
                    samples: p.total_samples(),
                })
                .collect()
        };
        let (base, new) = (split(base), split(new));
        let runs = (base.len() + new.len()).max(1) as f64;
        let mut weights = BTreeMap::new();
        for run in base.iter().chain(&new).filter(|r| r.samples > 0) {
            for (root, table) in &run.tables {
                let fraction = table.total_samples() as f64 / run.samples as f64;
                *weights.entry(root.clone()).or_insert(0.0) += fraction / runs;
            }
        }
        PerThread { base, new, weights }
    }

    /// `name`'s weighted `(self, total)` shares in each base run and each
    /// new run (0..=1).
    pub(crate) fn shares(&self, name: &str) -> (RunShares, RunShares) {
        let of = |runs: &[RunByRoot]| -> RunShares {
            runs.iter().map(|run| self.weighted(run, name)).collect()
        };
        (of(&self.base), of(&self.new))
    }

    fn weighted(&self, run: &RunByRoot, name: &str) -> (f64, f64) {
        // A root absent from this run adds nothing: the function had no
        // time there.
        run.tables.iter().fold((0.0, 0.0), |(s, t), (root, table)| {
            let w = self.weights.get(root).copied().unwrap_or(0.0);
            match table.get(name) {
                Some(f) => (
                    s + w * table.share(f.self_samples),
                    t + w * table.share(f.total_samples),
                ),
                None => (s, t),
            }
        })
    }

    /// The roots and their weights, heaviest first.
    #[cfg(test)]
    fn weights(&self) -> Vec<(&str, f64)> {
        let mut all: Vec<(&str, f64)> = self
            .weights
            .iter()
            .map(|(root, &w)| (root.as_str(), w))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(text: &str) -> Profile {
        Profile::read_folded_from(text.as_bytes(), "test").unwrap()
    }

    #[test]
    fn a_run_s_split_between_threads_drops_out() {
        // `f` is 20% of thread a and 40% of thread b in every run; the
        // runs split their samples 50/50, 80/20 and 20/80.
        let runs = [
            folded("a;f 100\na;g 400\nb;f 200\nb;g 300\n"),
            folded("a;f 160\na;g 640\nb;f 80\nb;g 120\n"),
            folded("a;f 40\na;g 160\nb;f 320\nb;g 480\n"),
        ];
        let per_thread = PerThread::new(&runs[..1], &runs[1..], SelfFrame::Leaf);
        let (base, new) = per_thread.shares("f");
        // The weights are the mean split, 50/50: 0.5 * 0.2 + 0.5 * 0.4.
        for (s, t) in base.iter().chain(&new) {
            assert!(
                (s - 0.3).abs() < 1e-12 && (t - 0.3).abs() < 1e-12,
                "{s} {t}"
            );
        }
        assert_eq!(per_thread.weights(), vec![("a", 0.5), ("b", 0.5)]);
        // Unweighted, the same runs' shares of `f` are 30%, 24% and 36%.
        let plain: Vec<f64> = runs
            .iter()
            .map(|p| {
                let t = FunctionTable::new(p, true);
                t.share(t.get("f").unwrap().self_samples)
            })
            .collect();
        assert_eq!(plain, vec![0.3, 0.24, 0.36]);
    }

    #[test]
    fn a_function_that_takes_more_of_its_thread_still_moves() {
        // `f` goes from 20% to 30% of thread a; thread b has none.
        let base = [folded("a;f 200\na;g 800\nb;h 1000\n")];
        let new = [folded("a;f 300\na;g 700\nb;h 1000\n")];
        let (b, n) = PerThread::new(&base, &new, SelfFrame::Leaf).shares("f");
        assert!((b[0].0 - 0.1).abs() < 1e-12 && (n[0].0 - 0.15).abs() < 1e-12);
    }
}
