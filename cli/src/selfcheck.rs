//! Checks a profile of the built-in workload against the workload's own
//! measurements: rate, per-function shares, complete stacks, call chain.
//!
//! Everything is judged against CPU time, so the check means the same on
//! a busy machine as on an idle one: the rate is samples per CPU-second
//! each worker actually got (from its own CPU clock, as the profiler read
//! it), and the shares are compared with the split of CPU time the workers
//! measured inside each function.

use std::fmt;

use btprof::{Profile, Stats};

use crate::workload::{
    Truth, FUNCTIONS, INCLUSIVE_FUNCTIONS, INLINED, INLINED_LINES, THREADS, THREAD_PREFIX,
    THREAD_ROOT,
};

/// When the self-check fails.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Largest allowed gap between a function's measured and true share,
    /// in percentage points.
    pub max_share_error: f64,
    /// Smallest allowed fraction of worker stacks that reach the thread
    /// root.
    pub min_complete: f64,
    /// Smallest allowed samples per CPU-second of each worker, as a
    /// fraction of the requested rate.
    pub min_rate: f64,
    /// Largest allowed samples per CPU-second of each worker, as a
    /// fraction of the requested rate: more samples than the CPU a thread
    /// used is as wrong as fewer.
    pub max_rate: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_share_error: 3.0,
            min_complete: 0.95,
            min_rate: 0.90,
            max_rate: 1.10,
        }
    }
}

/// One workload function's result.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionShare {
    /// The function's name in the workload.
    pub name: &'static str,
    /// Fraction of worker samples with this function as the leaf (for
    /// `sort_in_libc`, anywhere in the stack: its leaves are in the C
    /// library).
    pub measured: f64,
    /// Fraction of worker CPU time measured inside the function.
    pub truth: f64,
    /// The largest gap allowed, in points: the threshold, or four standard
    /// errors of a share estimated from this many samples if that is more
    /// (on a busy machine a 3 s run may get only a few hundred samples,
    /// whose shares are that uncertain however faithful the sampler).
    pub allowed_points: f64,
}

/// Standard errors of sampling noise a share may be off by before the
/// check calls the profile wrong: four leaves one false alarm in about
/// 16,000 comparisons.
const NOISE_SIGMAS: f64 = 4.0;

impl FunctionShare {
    /// `measured - truth` in percentage points.
    pub fn error_points(&self) -> f64 {
        (self.measured - self.truth) * 100.0
    }

    /// Whether the gap is within what is allowed.
    pub fn ok(&self) -> bool {
        self.error_points().abs() <= self.allowed_points
    }

    /// `NAME measured M% but ran T% of the time (E points`: how the
    /// failure line of a share that is off begins, for functions and
    /// inlined frames alike.
    fn off_by(&self) -> String {
        format!(
            "{} measured {:.2}% but ran {:.2}% of the time ({:+.2} points",
            self.name,
            self.measured * 100.0,
            self.truth * 100.0,
            self.error_points(),
        )
    }
}

/// The self-check's findings.
#[derive(Clone, Debug)]
pub struct SelfCheck {
    /// Requested rate (samples per CPU-second in cpu mode).
    pub requested_hz: u32,
    /// Samples per CPU-second of each worker thread, in worker order:
    /// its samples over the CPU time its own clock says it used while
    /// sampled (0 when that CPU time is unknown).
    pub thread_rates: [f64; THREADS],
    /// CPU time each worker used while sampled, seconds.
    pub thread_cpu_secs: [f64; THREADS],
    /// Samples per wall-clock second per worker thread, averaged (for
    /// information: on a busy machine it is what the worker's share of a
    /// CPU allows).
    pub mean_wall_hz: f64,
    /// Worker samples in all.
    pub worker_samples: u64,
    /// Per function, in [`FUNCTIONS`] order.
    pub shares: Vec<FunctionShare>,
    /// Fraction of worker samples whose stack reaches the thread root.
    pub complete: f64,
    /// Fraction of `chain_inner` samples whose callers are exactly
    /// `chain_middle` then `chain_outer`.
    pub chain_intact: f64,
    /// The inlined function ([`INLINED`]) as its own frame; `None` when the
    /// profile has no inlined frames at all (no DWARF for the binary).
    pub inlined: Option<InlinedCheck>,
    /// The thresholds applied.
    pub thresholds: Thresholds,
}

/// How the `#[inline(always)]` [`INLINED`] showed up: per workload
/// function, its samples as an inlined frame directly under that function.
#[derive(Clone, Debug, PartialEq)]
pub struct InlinedCheck {
    /// Per function, in [`FUNCTIONS`] order: fraction of worker samples
    /// whose stack is `...;function;timed_spin[;...]` with `timed_spin`
    /// inlined, against the function's measured time (all spent in
    /// `timed_spin`).
    pub shares: Vec<FunctionShare>,
    /// Fraction of those frames whose file is `workload.rs` and whose
    /// line lies in `timed_spin`'s body.
    pub with_line: f64,
}

impl InlinedCheck {
    /// The largest gap to the truth, in percentage points.
    fn worst(&self) -> Option<&FunctionShare> {
        self.shares
            .iter()
            .max_by(|a, b| a.error_points().abs().total_cmp(&b.error_points().abs()))
    }
}

fn is_workload_fn(frame: &str, function: &str) -> bool {
    frame
        .strip_suffix(function)
        .is_some_and(|head| head.ends_with("workload::"))
}

impl SelfCheck {
    /// Compares `profile` with `truth`.
    pub fn evaluate(profile: &Profile, truth: &Truth, thresholds: Thresholds) -> SelfCheck {
        // Only a recording is evaluated; one without stats has no rate.
        let stats = profile
            .stats()
            .cloned()
            .unwrap_or_else(|| Stats::new(&Default::default()));
        let secs = stats.duration.as_secs_f64().max(1e-9);
        let thread_cpu_secs: [f64; THREADS] = std::array::from_fn(|i| {
            let name = format!("{THREAD_PREFIX}{i}");
            profile
                .threads()
                .find(|t| t.name == name)
                .and_then(|t| t.tid)
                .and_then(|tid| stats.cpu_of(tid))
                .map_or(0.0, |cpu| cpu.as_secs_f64())
        });
        let mut per_thread = [0u64; THREADS];
        let mut leaf_counts = [0u64; FUNCTIONS.len()];
        let (mut complete, mut inner, mut inner_intact) = (0u64, 0u64, 0u64);
        let mut inlined_counts = [0u64; FUNCTIONS.len()];
        let (mut inlined_frames, mut inlined_with_line) = (0u64, 0u64);
        for stack in profile.stacks() {
            // Shares, completeness and the call chain are judged on machine
            // functions (inlined frames left out), as before inline
            // expansion; the inlined frame is judged on its own below.
            let all: Vec<_> = stack
                .frame_ids()
                .iter()
                .map(|&id| profile.frame(id))
                .collect();
            let frames: Vec<&str> = all.iter().filter(|f| !f.inlined).map(|f| f.name).collect();
            let (count, truncated) = (stack.count(), stack.truncated());
            let Some(index) = stack
                .thread()
                .and_then(|t| t.strip_prefix(THREAD_PREFIX))
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|&i| i < THREADS)
            else {
                continue;
            };
            per_thread[index] += count;
            let leaf = frames.last().copied().unwrap_or("");
            if let Some(f) = FUNCTIONS.iter().position(|f| is_workload_fn(leaf, f)) {
                leaf_counts[f] += count;
                // The frame right after the leaf machine function: the
                // first inlined into it.
                let machine = all.iter().rposition(|f| !f.inlined);
                let first_inlined = machine.and_then(|m| all.get(m + 1));
                // With `line-tables-only` DWARF names an inlined function
                // without its path (no linkage name), so both forms count.
                let is_inlined_fn = |name: &str| name == INLINED || is_workload_fn(name, INLINED);
                if let Some(frame) = first_inlined.filter(|i| is_inlined_fn(i.name)) {
                    inlined_counts[f] += count;
                    inlined_frames += count;
                    let in_body = frame.file.is_some_and(|p| p.ends_with("workload.rs"))
                        && frame.line.is_some_and(|l| INLINED_LINES.contains(&l));
                    if in_body {
                        inlined_with_line += count;
                    }
                }
            }
            // A function whose time goes to the C library counts where the
            // walk found it among the callers (which needs CFI).
            for (f, name) in FUNCTIONS.iter().enumerate() {
                if INCLUSIVE_FUNCTIONS.contains(name)
                    && !is_workload_fn(leaf, name)
                    && frames.iter().any(|frame| is_workload_fn(frame, name))
                {
                    leaf_counts[f] += count;
                }
            }
            if !truncated && frames.iter().any(|f| is_workload_fn(f, THREAD_ROOT)) {
                complete += count;
            }
            if is_workload_fn(leaf, "chain_inner") {
                inner += count;
                let n = frames.len();
                if n >= 3
                    && is_workload_fn(frames[n - 2], "chain_middle")
                    && is_workload_fn(frames[n - 3], "chain_outer")
                {
                    inner_intact += count;
                }
            }
        }
        let worker_samples: u64 = per_thread.iter().sum();
        let fraction = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let truth_shares = truth.shares();
        // A share's error depends on how many stacks were observed, not on
        // how many periods they stand for: where samples carried several
        // periods each (the sampler-thread path on a busy machine), count
        // the independent observations.
        let observed = if stats.recorded > 0 && stats.samples > stats.recorded {
            (worker_samples as f64 * stats.recorded as f64 / stats.samples as f64).max(1.0)
        } else {
            worker_samples.max(1) as f64
        };

        let share_of = |counts: &[u64; FUNCTIONS.len()]| -> Vec<FunctionShare> {
            FUNCTIONS
                .iter()
                .enumerate()
                .map(|(i, &name)| {
                    let truth = truth_shares[i];
                    let noise = (truth * (1.0 - truth) / observed).sqrt();
                    FunctionShare {
                        name,
                        measured: fraction(counts[i], worker_samples),
                        truth,
                        allowed_points: thresholds
                            .max_share_error
                            .max(NOISE_SIGMAS * noise * 100.0),
                    }
                })
                .collect()
        };
        // A function whose time is in the C library (`sort_in_libc`) has
        // no timed_spin inlined into it: not judged here.
        let inlined = profile.has_inlined_frames().then(|| InlinedCheck {
            shares: share_of(&inlined_counts)
                .into_iter()
                .filter(|s| !INCLUSIVE_FUNCTIONS.contains(&s.name))
                .collect(),
            with_line: fraction(inlined_with_line, inlined_frames),
        });
        SelfCheck {
            requested_hz: stats.requested_hz,
            thread_rates: std::array::from_fn(|i| {
                if thread_cpu_secs[i] > 0.0 {
                    per_thread[i] as f64 / thread_cpu_secs[i]
                } else {
                    0.0
                }
            }),
            thread_cpu_secs,
            mean_wall_hz: worker_samples as f64 / THREADS as f64 / secs,
            worker_samples,
            shares: share_of(&leaf_counts),
            complete: fraction(complete, worker_samples),
            chain_intact: fraction(inner_intact, inner),
            inlined,
            thresholds,
        }
    }

    /// What failed, one line each; empty when the check passed.
    pub fn failures(&self) -> Vec<String> {
        let t = &self.thresholds;
        let mut failures = Vec::new();
        if self.worker_samples == 0 {
            failures.push("no samples of the workload threads".to_owned());
            return failures;
        }
        for (i, (&rate, &cpu)) in self
            .thread_rates
            .iter()
            .zip(&self.thread_cpu_secs)
            .enumerate()
        {
            if cpu <= 0.0 {
                failures.push(format!(
                    "{THREAD_PREFIX}{i}: its CPU time while sampled is unknown, so its rate cannot be judged"
                ));
            } else if !self.rate_ok(rate) {
                failures.push(format!(
                    "{THREAD_PREFIX}{i}: {rate:.1} samples per CPU-second is outside {:.0}..={:.0}",
                    t.min_rate * f64::from(self.requested_hz),
                    t.max_rate * f64::from(self.requested_hz),
                ));
            }
        }
        for s in &self.shares {
            if !s.ok() {
                failures.push(format!("{}, {:.2} allowed)", s.off_by(), s.allowed_points));
            }
        }
        if self.complete < t.min_complete {
            failures.push(format!(
                "only {:.2}% of stacks reach {THREAD_ROOT} (need {:.0}%)",
                self.complete * 100.0,
                t.min_complete * 100.0
            ));
        }
        if self.chain_intact < t.min_complete {
            failures.push(format!(
                "only {:.2}% of chain_inner stacks show chain_outer -> chain_middle -> chain_inner",
                self.chain_intact * 100.0
            ));
        }
        if let Some(inlined) = &self.inlined {
            for s in &inlined.shares {
                if !s.ok() {
                    failures.push(format!("inlined {INLINED} under {})", s.off_by()));
                }
            }
            if inlined.with_line < t.min_complete {
                failures.push(format!(
                    "only {:.2}% of inlined {INLINED} frames have their file and line (workload.rs:{}-{})",
                    inlined.with_line * 100.0,
                    INLINED_LINES.start(),
                    INLINED_LINES.end()
                ));
            }
        }
        failures
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures().is_empty()
    }

    fn rate_ok(&self, rate: f64) -> bool {
        let hz = f64::from(self.requested_hz);
        (self.thresholds.min_rate * hz..=self.thresholds.max_rate * hz).contains(&rate)
    }
}

impl fmt::Display for SelfCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.thresholds;
        let ok = |good: bool| if good { "ok" } else { "FAIL" };
        let rates: Vec<String> = self
            .thread_rates
            .iter()
            .zip(&self.thread_cpu_secs)
            .map(|(r, c)| format!("{r:.1} ({:.0} ms CPU)", c * 1e3))
            .collect();
        writeln!(
            f,
            "rate: {} samples per CPU-second per worker (requested {}; {:.1} samples per wall-second)  {}",
            rates.join(", "),
            self.requested_hz,
            self.mean_wall_hz,
            ok(self
                .thread_rates
                .iter()
                .zip(&self.thread_cpu_secs)
                .all(|(&r, &c)| c > 0.0 && self.rate_ok(r)))
        )?;
        writeln!(
            f,
            "function shares of {} worker samples (leaf = the interrupted function):",
            self.worker_samples
        )?;
        writeln!(
            f,
            "  {:<14} {:>9} {:>9} {:>8} {:>8}",
            "function", "measured", "truth", "points", "allowed"
        )?;
        for s in &self.shares {
            writeln!(
                f,
                "  {:<14} {:>8.2}% {:>8.2}% {:>+8.2} {:>8.2}  {}",
                s.name,
                s.measured * 100.0,
                s.truth * 100.0,
                s.error_points(),
                s.allowed_points,
                ok(s.ok())
            )?;
        }
        writeln!(
            f,
            "complete stacks: {:.2}% reach {THREAD_ROOT}  {}",
            self.complete * 100.0,
            ok(self.complete >= t.min_complete)
        )?;
        writeln!(
            f,
            "call chain: {:.2}% of chain_inner samples under chain_outer -> chain_middle  {}",
            self.chain_intact * 100.0,
            ok(self.chain_intact >= t.min_complete)
        )?;
        match &self.inlined {
            Some(inlined) => {
                let worst = inlined.worst();
                let good = inlined.shares.iter().all(FunctionShare::ok);
                write!(
                    f,
                    "inlined frame: {INLINED} under each function, largest gap {:+.2} points{}; \
                     {:.2}% with file and line  {}",
                    worst.map_or(0.0, FunctionShare::error_points),
                    worst.map_or(String::new(), |w| format!(" ({})", w.name)),
                    inlined.with_line * 100.0,
                    ok(good && inlined.with_line >= t.min_complete)
                )
            }
            None => write!(
                f,
                "inlined frame: not checked: the profile has no inlined frames (no DWARF \
                 line tables found for this binary; see docs/symbols.md)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use btprof::profile::Builder;

    use super::*;

    /// A 1 s profile of both workers whose leaves are split as `leaves`
    /// (samples per function, `FUNCTIONS` order), all under the thread root
    /// unless `truncated`; each worker used its share of 2 s of CPU in
    /// proportion to its samples at 1000 per CPU-second. Worker 0 runs
    /// alpha, beta and sort_in_libc; worker 1 the chain.
    fn profile(leaves: [u64; 6], truncated: bool) -> Profile {
        let w0 = leaves[0] + leaves[1] + leaves[5];
        let w1 = leaves[2..5].iter().sum::<u64>();
        let cpu_secs = [w0 as f64 / 1000.0, w1 as f64 / 1000.0];
        profile_with_stats(leaves, truncated, cpu_secs, |_| {})
    }

    /// As [`profile`] with whole stacks, each worker's CPU time given, in
    /// seconds.
    fn profile_with_cpu(leaves: [u64; 6], cpu_secs: [f64; 2]) -> Profile {
        profile_with_stats(leaves, false, cpu_secs, |_| {})
    }

    /// As [`profile`], with each worker's CPU time given, in seconds, and
    /// the stats adjusted by `adjust`.
    fn profile_with_stats(
        leaves: [u64; 6],
        truncated: bool,
        cpu_secs: [f64; 2],
        adjust: impl FnOnce(&mut Stats),
    ) -> Profile {
        let mut builder = Builder::new();
        add_worker_stacks(&mut builder, &leaves, truncated);
        let mut stats = worker_stats(cpu_secs);
        adjust(&mut stats);
        builder.finish(stats)
    }

    /// Adds each function's samples (`leaves`, in `FUNCTIONS` order, as
    /// many as given) on its worker's thread, under `worker_main` and the
    /// chain's callers; `sort_in_libc`'s end in the C library.
    fn add_worker_stacks(builder: &mut Builder, leaves: &[u64], truncated: bool) {
        for (i, &count) in leaves.iter().enumerate() {
            let mut frames = vec!["btprof_cli::workload::worker_main".to_owned()];
            for (at, name) in [(2..5, "chain_outer"), (3..5, "chain_middle")] {
                if at.contains(&i) {
                    frames.push(format!("btprof_cli::workload::{name}"));
                }
            }
            if i != 2 && i != 3 {
                frames.push(format!("btprof_cli::workload::{}", FUNCTIONS[i]));
            }
            if FUNCTIONS[i] == "sort_in_libc" {
                // Its samples' leaves are in the C library.
                frames.push("msort_with_tmp".into());
                frames.push("btprof_cli::workload::compare_u64".into());
            }
            let worker = usize::from((2..5).contains(&i));
            add_on_worker(
                builder,
                worker,
                frames.iter().map(|f| f.as_str()),
                truncated,
                count,
            );
        }
    }

    /// Adds `count` samples of `frames` (root first) on worker `worker`'s
    /// thread (tid 100 + worker).
    fn add_on_worker<'a>(
        builder: &mut Builder,
        worker: usize,
        frames: impl IntoIterator<Item = &'a str>,
        truncated: bool,
        count: u64,
    ) {
        let thread = builder
            .thread(
                &format!("{THREAD_PREFIX}{worker}"),
                Some(100 + worker as u64),
            )
            .unwrap();
        builder
            .add_stack(Some(thread), frames, truncated, count)
            .unwrap();
    }

    /// A 1 s recording's stats in which worker `i` used `cpu_secs[i]`.
    fn worker_stats(cpu_secs: [f64; 2]) -> Stats {
        let mut stats = Stats::new(&Default::default());
        stats.duration = Duration::from_secs(1);
        for (i, cpu) in cpu_secs.iter().enumerate() {
            stats.add_thread_cpu(100 + i as u64, Duration::from_secs_f64(*cpu));
        }
        stats
    }

    /// Timings with exactly the split of the faithful profile below.
    fn truth() -> Truth {
        Truth::from_ns([400, 500, 100, 100, 800, 100], 2000)
    }

    /// The check of `profile` against [`truth`] at the default thresholds.
    fn judge(profile: &Profile) -> SelfCheck {
        SelfCheck::evaluate(profile, &truth(), Thresholds::default())
    }

    /// Asserts that `check` passed, showing its failures and report if not.
    fn assert_passed(check: &SelfCheck) {
        assert!(check.passed(), "{:?}\n{check}", check.failures());
    }

    /// Asserts that one of `check`'s failures `says` what is expected.
    fn assert_a_failure(check: &SelfCheck, says: impl Fn(&str) -> bool) {
        let failures = check.failures();
        assert!(failures.iter().any(|f| says(f)), "{failures:?}");
    }

    #[test]
    fn a_faithful_profile_passes() {
        let check = judge(&profile([400, 500, 100, 100, 800, 100], false));
        assert_passed(&check);
        assert!(check.thread_rates.iter().all(|r| (r - 1000.0).abs() < 1e-6));
        assert_eq!(check.complete, 1.0);
        assert_eq!(check.chain_intact, 1.0);
    }

    #[test]
    fn a_share_off_by_more_than_the_threshold_fails() {
        // alpha sampled 5 points too often, beta 5 too rarely.
        let check = judge(&profile([500, 400, 100, 100, 800, 100], false));
        let failures = check.failures();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("alpha measured 25.00% but ran 20.00%"));
    }

    #[test]
    fn truncated_stacks_and_a_low_rate_fail() {
        let check = judge(&profile([400, 500, 100, 100, 800, 100], true));
        assert_a_failure(&check, |f| f.contains("reach worker_main"));
        // Half the samples for the same CPU time: 500 per CPU-second.
        let slow = judge(&profile_with_cpu([200, 250, 50, 50, 400, 50], [1.0, 1.0]));
        assert_a_failure(&slow, |f| f.contains("500.0 samples per CPU-second"));
    }

    #[test]
    fn few_samples_widen_the_allowance_but_a_wrong_profile_still_fails() {
        // 200 worker samples: alpha's share (true 20%) is uncertain by
        // 2.8 points per standard error, so 5 points off is noise...
        let noisy = judge(&profile([50, 40, 10, 10, 80, 10], false));
        assert!(noisy.shares[0].allowed_points > 11.0, "{noisy}");
        assert_passed(&noisy);
        // ...but 25 points off is not.
        let wrong = judge(&profile([90, 0, 10, 10, 80, 10], false));
        assert_a_failure(&wrong, |f| f.starts_with("alpha measured 45.00%"));
        // With many samples the threshold itself applies.
        let many = judge(&profile([4000, 5000, 1000, 1000, 8000, 1000], false));
        assert!(many.shares.iter().all(|s| s.allowed_points == 3.0));
    }

    #[test]
    fn samples_standing_for_several_periods_count_as_fewer_observations() {
        // 20,000 periods, but only 2,000 stacks were observed (each stood
        // for ten periods): alpha's share is as uncertain as with 2,000.
        let leaves = [4000, 5000, 1000, 1000, 8000, 1000];
        let with = |recorded| {
            let profile = profile_with_stats(leaves, false, [10.0, 10.0], |stats| {
                stats.samples = 20_000;
                stats.recorded = recorded;
            });
            judge(&profile)
        };
        let one_each = with(20_000);
        assert!(one_each.shares.iter().all(|s| s.allowed_points == 3.0));
        let heavy = with(200);
        assert!(heavy.shares[0].allowed_points > 11.0, "{heavy}");
    }

    #[test]
    fn a_busy_machine_does_not_fail_a_faithful_profile() {
        // Each worker got a fifth of a CPU for 1 s (other processes took
        // the rest): 200 samples per wall-second, but 1000 per CPU-second.
        let check = judge(&profile_with_cpu([40, 50, 10, 10, 80, 10], [0.1, 0.1]));
        assert_passed(&check);
        assert!((check.mean_wall_hz - 100.0).abs() < 1e-6);
    }

    #[test]
    fn too_many_samples_for_the_cpu_used_fail() {
        // 1.4 samples per millisecond of CPU: the old sampler's over-count
        // under load.
        let check = judge(&profile_with_cpu(
            [400, 500, 100, 100, 800, 100],
            [0.7, 0.7],
        ));
        assert_eq!(check.failures().len(), 2, "{:?}", check.failures());
        assert!(check.failures()[0].contains("1428.6 samples per CPU-second is outside 900..=1100"));
    }

    #[test]
    fn an_unknown_cpu_time_fails_rather_than_passing_blindly() {
        let check = judge(&profile_with_cpu(
            [400, 500, 100, 100, 800, 100],
            [1.0, 0.0],
        ));
        assert_eq!(
            check.failures(),
            vec![format!(
                "{THREAD_PREFIX}1: its CPU time while sampled is unknown, so its rate cannot be judged"
            )]
        );
    }

    /// What a frame-pointer-only walk makes of `sort_in_libc`: its samples
    /// keep the C library frames and lose every caller.
    #[test]
    fn a_libc_leaf_without_its_callers_fails() {
        // The faithful profile's stacks, with sort_in_libc's 100 samples
        // cut to their C library frames.
        let mut builder = Builder::new();
        add_worker_stacks(&mut builder, &[400, 500, 100, 100, 800], false);
        add_on_worker(
            &mut builder,
            0,
            ["msort_with_tmp", "btprof_cli::workload::compare_u64"],
            true,
            100,
        );
        let profile = builder.finish(worker_stats([1.0, 1.0]));
        let check = judge(&profile);
        assert_a_failure(&check, |f| {
            f.starts_with("sort_in_libc measured 0.00% but ran 5.00%")
        });
    }

    /// The faithful profile's stacks with `timed_spin` inlined under each
    /// leaf function, at `line`.
    fn profile_with_inlined(line: u32) -> Profile {
        use btprof::profile::FrameInfo;
        let plain = profile([400, 500, 100, 100, 800, 100], false);
        let mut builder = Builder::new();
        for stack in plain.stacks() {
            let tid = stack
                .thread_id()
                .and_then(|t| plain.threads().nth(t as usize))
                .and_then(|t| t.tid);
            let thread = builder.thread(stack.thread().unwrap(), tid).unwrap();
            let frames = stack.frames().map(FrameInfo::named).chain([FrameInfo {
                file: Some("/x/cli/src/workload.rs"),
                line: Some(line),
                inlined: true,
                ..FrameInfo::named(INLINED)
            }]);
            builder
                .add_frames(Some(thread), frames, false, stack.count())
                .unwrap();
        }
        builder.finish(plain.stats().unwrap().clone())
    }

    #[test]
    fn an_inlined_frame_under_each_function_is_judged_on_its_own() {
        let good = profile_with_inlined(*INLINED_LINES.start() + 1);
        let check = judge(&good);
        assert_passed(&check);
        let inlined = check.inlined.as_ref().expect("inlined frames seen");
        assert_eq!(inlined.with_line, 1.0);
        assert!((inlined.shares[4].measured - 0.4).abs() < 1e-9);
        // Lines outside timed_spin's body fail.
        let wrong = profile_with_inlined(*INLINED_LINES.end() + 1);
        let check = judge(&wrong);
        assert_a_failure(&check, |f| f.contains("file and line"));
        // Without inlined frames: said, not judged.
        let plain = judge(&profile([400, 500, 100, 100, 800, 100], false));
        assert!(plain.inlined.is_none());
        assert!(plain.to_string().contains("inlined frame: not checked"));
    }

    #[test]
    fn no_worker_samples_fails_plainly() {
        let check = judge(&profile([0; 6], false));
        assert_eq!(check.failures(), vec!["no samples of the workload threads"]);
    }

    #[test]
    fn matches_workload_functions_by_path_suffix() {
        assert!(is_workload_fn("btprof_cli::workload::alpha", "alpha"));
        assert!(!is_workload_fn("btprof_cli::workload::alphabet", "alpha"));
        assert!(!is_workload_fn("other::alpha", "alpha"));
        assert!(!is_workload_fn("workload::chain_inner", "chain_outer"));
    }
}
