//! Whole-run checks of a several-run diff: runs of one side that disagree
//! with the others are named, so that a broken run is not silently
//! averaged into its side's mean.

use super::diff_options::DiffOptions;
use super::function_diff::RunSummary;
use super::functions::FunctionTable;

/// A run with fewer than this fraction of its side's median samples (or
/// more than its inverse times) is named: a run cut short, or one that
/// ran something else.
const SAMPLES_RATIO: f64 = 0.5;
/// At most this many functions are named per side; the rest are counted.
const NAMED_FUNCTIONS: usize = 5;

/// Warnings about runs of either side that disagree with the rest of
/// their side: sample counts far from the side's median, and functions
/// with at least `min_samples` samples (gated share) in some runs and
/// none at all in others. Sides of one run have nothing to disagree with.
pub(crate) fn disagreements(
    base: (&str, &[RunSummary], &[FunctionTable]),
    new: (&str, &[RunSummary], &[FunctionTable]),
    options: &DiffOptions,
) -> Vec<String> {
    let mut out = Vec::new();
    for (side, runs, tables) in [base, new] {
        if runs.len() < 2 {
            continue;
        }
        out.extend(sample_counts(side, runs));
        out.extend(partial_functions(side, runs, tables, options));
    }
    out
}

fn sample_counts(side: &str, runs: &[RunSummary]) -> Vec<String> {
    let mut counts: Vec<u64> = runs.iter().map(|r| r.samples).collect();
    counts.sort_unstable();
    let median = if counts.len() % 2 == 1 {
        counts[counts.len() / 2] as f64
    } else {
        (counts[counts.len() / 2 - 1] + counts[counts.len() / 2]) as f64 / 2.0
    };
    runs.iter()
        .filter(|r| r.samples > 0)
        .filter_map(|r| {
            let ratio = r.samples as f64 / median;
            let word = if ratio < SAMPLES_RATIO {
                "under half"
            } else if ratio > 1.0 / SAMPLES_RATIO {
                "over twice"
            } else {
                return None;
            };
            Some(format!(
                "{side} run {} has {} samples, {word} the median of its side ({median:.0}): \
                 was it cut short or busy with something else? Its shares count as much \
                 as any other run's",
                r.source, r.samples
            ))
        })
        .collect()
}

fn partial_functions(
    side: &str,
    runs: &[RunSummary],
    tables: &[FunctionTable],
    options: &DiffOptions,
) -> Vec<String> {
    let metric = options.metric;
    let gated = |t: &FunctionTable, name: &str| {
        t.get(name).map_or(0, |f| match metric {
            super::diff_options::Metric::SelfShare => f.self_samples,
            super::diff_options::Metric::TotalShare => f.total_samples,
        })
    };
    let mut names: Vec<&str> = tables
        .iter()
        .flat_map(|t| t.functions().iter().map(|f| f.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let partial: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            let counts: Vec<u64> = tables.iter().map(|t| gated(t, name)).collect();
            let most = counts.iter().copied().max().unwrap_or(0);
            if most < options.min_samples.max(1) || !counts.contains(&0) {
                return None;
            }
            let missing: Vec<&str> = runs
                .iter()
                .zip(&counts)
                .filter(|(_, &c)| c == 0)
                .map(|(r, _)| r.source.as_str())
                .collect();
            Some(format!(
                "{name} ({most} {} samples in one run, none in {})",
                metric.as_str(),
                missing.join(", ")
            ))
        })
        .collect();
    if partial.is_empty() {
        return Vec::new();
    }
    let more = partial.len().saturating_sub(NAMED_FUNCTIONS);
    let mut list = partial[..partial.len().min(NAMED_FUNCTIONS)].join("; ");
    if more > 0 {
        list.push_str(&format!("; and {more} more"));
    }
    vec![format!(
        "the {side} runs disagree on which functions ran: {list}; a function missing \
         from a run counts as 0% there"
    )]
}
