//! Measurement 5: every cpu-mode clock against `perf record`, at 100 Hz
//! and 1000 Hz, in the same rounds as a no-profiler baseline.
//!
//! Each row runs measurement 2's job in a child process of its own
//! ([`child`](crate::child)), so that perf can record it and a seccomp
//! filter can refuse it perf events; the baseline runs the same way. Rows:
//! perf's (`perf record -e cpu-clock -F <hz> --call-graph fp`, skipped
//! with a message where perf is missing or refused), btprof's default
//! clock (the perf clock where perf events are allowed), the
//! sampler-thread clock forced, and btprof's default under a
//! seccomp filter that refuses `perf_event_open` (what detection then
//! picks).

use std::time::Duration;

use btprof_sampler::SampleClock;

use crate::child::{self, ChildOut, Spec};
use crate::report::{say, summarize, verdict};

/// How long one worker's loop should take alone.
pub(crate) const CLOCK_JOB: Duration = Duration::from_secs(3);
/// The rates measured.
const RATES: [u32; 2] = [100, 1000];
/// Targets (reported, not enforced).
const RING_VS_PERF: f64 = 1.25;
const LOW_RATE_VS_HIGH: f64 = 1.3;
const WALL_AT_100_PCT: f64 = 0.3;
const WALL_VS_PERF: f64 = 1.5;
const SAMPLER_US: f64 = 5.0;
const SAMPLER_CORE_PCT: f64 = 0.3;

/// Who samples a row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Perf,
    /// btprof on this clock (`None`: its own choice), perf events refused
    /// by seccomp or not.
    Btprof(Option<SampleClock>, bool),
}

impl Who {
    const ALL: [Who; 4] = [
        Who::Perf,
        Who::Btprof(None, false),
        Who::Btprof(Some(SampleClock::SamplerThread), false),
        Who::Btprof(None, true),
    ];

    fn label(self) -> &'static str {
        match self {
            Who::Perf => "perf record",
            Who::Btprof(None, false) => "btprof default",
            Who::Btprof(Some(SampleClock::SamplerThread), _) => "btprof --clock thread",
            Who::Btprof(Some(SampleClock::Perf), _) => "btprof --clock perf",
            Who::Btprof(None, true) => "btprof, perf refused",
        }
    }
}

/// Medians of one row.
#[derive(Clone, Copy)]
pub(crate) struct RowResult {
    who: Who,
    hz: u32,
    /// The clock that ran (perf's row: none).
    clock: Option<SampleClock>,
    wall_pct: f64,
    /// Workers' CPU less the baseline's, per weighted / distinct sample (us).
    worker_us: f64,
    worker_distinct_us: f64,
    /// The sampler thread's (or perf's) CPU per weighted / distinct sample
    /// (us) and as a share of one core (%).
    sampler_us: f64,
    sampler_distinct_us: f64,
    sampler_core_pct: f64,
    /// The same while the job ran, without the sampler's start and stop
    /// (btprof's rows only): per weighted sample (us), share of a core (%).
    steady_us: f64,
    steady_core_pct: f64,
    /// The sampler thread's wakeups a second while the job ran, and what
    /// that many wakeups cost per sample at the measured floor (us).
    wakeups_per_s: f64,
    waking_us: f64,
}

pub(crate) struct ClocksResult {
    rows: Vec<RowResult>,
    perf_skipped: Option<String>,
    /// The baseline's worker-CPU spread as a cost per sample at each rate
    /// (us), and its wall spread (%).
    noise_us: [f64; 2],
    wall_noise_pct: f64,
    /// CPU time per timed wakeup of a thread that does nothing else,
    /// beside the job's workers (us).
    wakeup_floor_us: f64,
}

pub(crate) fn measure_clocks(runs: usize, iters: u64) -> ClocksResult {
    let perf_skipped = child::perf_probe().err();
    if let Some(why) = &perf_skipped {
        say!("  [clocks] perf's rows skipped: {why}");
    }
    let variants: Vec<(Who, u32)> = RATES
        .iter()
        .flat_map(|&hz| Who::ALL.iter().map(move |&w| (w, hz)))
        .filter(|&(w, _)| w != Who::Perf || perf_skipped.is_none())
        .collect();
    let mut base: Vec<ChildOut> = Vec::new();
    let mut floors = Vec::new();
    let mut prof: Vec<Vec<Option<ChildOut>>> = vec![Vec::new(); variants.len()];
    let baseline = Spec {
        iters,
        hz: 0,
        clock: None,
        probe: false,
    };
    for round in 0..runs {
        // The baseline and every row, the order rotated each round so
        // that drift hits each alike.
        let n = variants.len() + 1;
        let mut this_base = None;
        for k in 0..n {
            let i = (round * 3 + k) % n;
            if i == variants.len() {
                this_base = Some(child::run(baseline, false).expect("baseline child"));
                continue;
            }
            let (who, hz) = variants[i];
            let result = match who {
                Who::Perf => child::run_under_perf(baseline, hz),
                Who::Btprof(clock, refused) => child::run(
                    Spec {
                        hz,
                        clock,
                        ..baseline
                    },
                    refused,
                ),
            };
            if let Err(e) = &result {
                say!("  [clocks] {} at {hz} Hz failed: {e}", who.label());
            }
            prof[i].push(result.ok());
        }
        let probe = Spec {
            probe: true,
            ..baseline
        };
        match child::run(probe, false) {
            Ok(out) => floors.push(out.wakeup_us),
            Err(e) => say!("  [clocks] the wakeup probe failed: {e}"),
        }
        let b = this_base.expect("the baseline ran");
        eprintln!(
            "  [clocks] round {}/{runs}: baseline wall {:.3} s, worker CPU {:.3} s",
            round + 1,
            b.wall,
            b.worker_cpu
        );
        base.push(b);
    }

    let base_cpu = summarize(&base.iter().map(|b| b.worker_cpu).collect::<Vec<_>>());
    let base_wall = summarize(&base.iter().map(|b| b.wall).collect::<Vec<_>>());
    let worker_cpu_s = base_cpu.median;
    let floor = if floors.is_empty() {
        summarize(&[f64::NAN])
    } else {
        summarize(&floors)
    };
    println!();
    let title = format!(
        "[5] clocks: measurement 2's job (2 threads, ~{} s each calibrated), each row a child process, {runs} rounds with the baseline",
        CLOCK_JOB.as_secs()
    );
    println!("{title}");
    crate::report::section(
        &title,
        &[
            "row",
            "Hz",
            "clock",
            "wall % (range)",
            "worker µs/sample",
            "/distinct",
            "sampler µs/sample",
            "/distinct",
            "sampler % core",
            "steady µs/sample",
            "steady % core",
            "wakeups/s",
            "waking µs/sample",
            "samples/CPU-s (weighted/distinct)",
        ],
    );
    say!(
        "  worker = (workers' CLOCK_THREAD_CPUTIME_ID - median baseline's) / samples; sampler = the sampler thread's CPU (perf: perf's process) / samples"
    );
    say!(
        "  baseline: wall {:.3} s (spread {:.3}-{:.3}), worker CPU {:.3} s (spread {:.3}-{:.3})",
        base_wall.median,
        base_wall.min,
        base_wall.max,
        base_cpu.median,
        base_cpu.min,
        base_cpu.max
    );
    println!(
        "  {:<24} {:>5} {:<8} {:>14} {:>9} {:>10} {:>9} {:>10} {:>7} {:>7} {:>7} {:>7} {:>7} {:>13}",
        "row",
        "Hz",
        "clock",
        "wall % (range)",
        "worker us",
        "/distinct",
        "sampler",
        "/distinct",
        "% core",
        "steady",
        "% core",
        "wake/s",
        "waking",
        "samples/CPU-s"
    );
    let mut rows = Vec::new();
    for (i, &(who, hz)) in variants.iter().enumerate() {
        let ok: Vec<(ChildOut, ChildOut)> = prof[i]
            .iter()
            .zip(&base)
            .filter_map(|(p, b)| p.map(|p| (p, *b)))
            .collect();
        if ok.is_empty() {
            say!("  {:<24} {hz:>5} not measured", who.label());
            continue;
        }
        let med = |f: &dyn Fn(&ChildOut, &ChildOut) -> f64| {
            summarize(&ok.iter().map(|(p, b)| f(p, b)).collect::<Vec<_>>())
        };
        let wall = med(&|p, b| (p.wall / b.wall - 1.0) * 100.0);
        let clock = ok[0].0.clock();
        let r = RowResult {
            who,
            hz,
            clock,
            wall_pct: wall.median,
            worker_us: med(&|p, _| (p.worker_cpu - worker_cpu_s) / p.samples * 1e6).median,
            worker_distinct_us: med(&|p, _| (p.worker_cpu - worker_cpu_s) / p.distinct * 1e6)
                .median,
            sampler_us: med(&|p, _| p.sampler_cpu / p.samples * 1e6).median,
            sampler_distinct_us: med(&|p, _| p.sampler_cpu / p.distinct * 1e6).median,
            sampler_core_pct: med(&|p, _| p.sampler_cpu / p.duration * 100.0).median,
            steady_us: med(&|p, _| p.steady_cpu / p.steady_samples * 1e6).median,
            steady_core_pct: med(&|p, _| p.steady_cpu / p.steady_duration * 100.0).median,
            wakeups_per_s: med(&|p, _| p.steady_wakeups / p.steady_duration).median,
            waking_us: med(&|p, _| p.steady_wakeups * floor.median / p.steady_samples).median,
        };
        let rate = med(&|p, _| p.samples / p.worker_cpu).median;
        let distinct_rate = med(&|p, _| p.distinct / p.worker_cpu).median;
        crate::report::record_row(vec![
            who.label().to_string(),
            hz.to_string(),
            clock.map_or("-", SampleClock::short_name).to_owned(),
            format!("{:+.2} ({:+.1}..{:+.1})", r.wall_pct, wall.min, wall.max),
            format!("{:.2}", r.worker_us),
            format!("{:.2}", r.worker_distinct_us),
            format!("{:.2}", r.sampler_us),
            format!("{:.2}", r.sampler_distinct_us),
            format!("{:.3}", r.sampler_core_pct),
            format!("{:.2}", r.steady_us),
            format!("{:.3}", r.steady_core_pct),
            format!("{:.0}", r.wakeups_per_s),
            format!("{:.2}", r.waking_us),
            format!("{rate:.0} / {distinct_rate:.0}"),
        ]);
        println!(
            "  {:<24} {hz:>5} {:<8} {:>5.2} ({:>+5.1}..{:>+4.1}) {:>9.2} {:>10.2} {:>9.2} {:>10.2} {:>7.3} {:>7.2} {:>7.3} {:>7.0} {:>7.2} {:>6.0}/{:<6.0}",
            who.label(),
            clock.map_or("-", SampleClock::short_name),
            r.wall_pct,
            wall.min,
            wall.max,
            r.worker_us,
            r.worker_distinct_us,
            r.sampler_us,
            r.sampler_distinct_us,
            r.sampler_core_pct,
            r.steady_us,
            r.steady_core_pct,
            r.wakeups_per_s,
            r.waking_us,
            rate,
            distinct_rate
        );
        rows.push(r);
    }
    say!("  samples/CPU-s: weighted/distinct, per worker CPU-second");
    say!(
        "  sampler: the whole run's CPU over its samples, so fixed costs (perf's start-up and exit, the sampler's start and stop) weigh 10x more at 100 Hz"
    );
    say!(
        "  steady: the sampler thread's CPU while the job ran (start-up and stop left out: what a profiler left on pays), per sample and as a share of a core"
    );
    say!(
        "  wake/s: the sampler thread's wakeups a second while the job ran; waking: what that many wakeups cost per sample at the floor below"
    );
    say!(
        "  wakeup floor: a thread that parks {} ms at a time and does nothing else, beside the job's workers, uses {:.2} us of CPU per wakeup (spread {:.2}-{:.2})",
        crate::wakeups::INTERVAL.as_millis(),
        floor.median,
        floor.min,
        floor.max
    );
    let noise_us =
        RATES.map(|hz| (base_cpu.max - base_cpu.min) / (worker_cpu_s * f64::from(hz)) * 1e6);
    let wall_noise_pct = (base_wall.max - base_wall.min) / base_wall.median * 100.0;
    say!(
        "  noise floor: the baseline's worker CPU spread is {:.2} us per sample at 100 Hz, {:.2} at 1000 Hz; its wall spread {wall_noise_pct:.2}%",
        noise_us[0], noise_us[1]
    );
    ClocksResult {
        rows,
        perf_skipped,
        noise_us,
        wall_noise_pct,
        wakeup_floor_us: floor.median,
    }
}

impl ClocksResult {
    fn find(&self, who: Who, hz: u32) -> Option<&RowResult> {
        self.rows.iter().find(|r| r.who == who && r.hz == hz)
    }

    /// The summary lines: each target, met or not.
    pub(crate) fn print_summary(&self) {
        let ring = Who::Btprof(None, false);
        let noise = |hz: u32| self.noise_us[usize::from(hz == 1000)];
        let judged = |ok: bool, near: bool| {
            if near {
                "INCONCLUSIVE (within noise)"
            } else {
                verdict(ok)
            }
        };
        say!(
            "  clocks (measurement 5; default clock here: {}):",
            self.find(ring, 1000)
                .and_then(|r| r.clock)
                .map_or("?", SampleClock::short_name)
        );
        if let Some(why) = &self.perf_skipped {
            say!("    perf's rows not measured ({why}); the targets against perf are not judged");
        }
        if let (Some(r), Some(p)) = (self.find(ring, 1000), self.find(Who::Perf, 1000)) {
            let limit = p.worker_us * RING_VS_PERF;
            say!(
                "    ring clock per sample at 1000 Hz: {:.2} us vs perf's {:.2} us = {:.2}x (target <= {RING_VS_PERF}x) {}",
                r.worker_us,
                p.worker_us,
                r.worker_us / p.worker_us,
                judged(r.worker_us <= limit, (r.worker_us - limit).abs() <= noise(1000))
            );
            let limit = p.wall_pct.max(0.0) * WALL_VS_PERF;
            say!(
                "    ring clock wall at 1000 Hz: {:+.2}% vs perf's {:+.2}% (target <= {WALL_VS_PERF}x perf's) {}",
                r.wall_pct,
                p.wall_pct,
                judged(r.wall_pct <= limit, (r.wall_pct - limit).abs() <= self.wall_noise_pct)
            );
        }
        if let (Some(lo), Some(hi)) = (self.find(ring, 100), self.find(ring, 1000)) {
            let limit = hi.worker_us * LOW_RATE_VS_HIGH;
            say!(
                "    ring clock per sample at 100 Hz: {:.2} us vs {:.2} us at 1000 Hz = {:.2}x (target <= {LOW_RATE_VS_HIGH}x) {}",
                lo.worker_us,
                hi.worker_us,
                lo.worker_us / hi.worker_us,
                judged(lo.worker_us <= limit, (lo.worker_us - limit).abs() <= noise(100))
            );
        }
        if let Some(r) = self.find(ring, 100) {
            say!(
                "    {} wall at 100 Hz: {:+.2}% (target <= {WALL_AT_100_PCT}%) {}",
                ring.label(),
                r.wall_pct,
                judged(
                    r.wall_pct <= WALL_AT_100_PCT,
                    (r.wall_pct - WALL_AT_100_PCT).abs() <= self.wall_noise_pct
                )
            );
        }
        // Judged on the steady figures: a continuous profiler pays its
        // start-up once (shown beside them, as the whole run's).
        for r in self.rows.iter().filter(|r| r.who != Who::Perf) {
            let ok =
                r.steady_us <= SAMPLER_US && (r.hz != 100 || r.steady_core_pct <= SAMPLER_CORE_PCT);
            say!(
                "    sampler thread, {} ({}) at {} Hz: {:.2} us per sample, {:.3}% of a core while sampling (whole run with start and stop: {:.2} us, {:.3}%; {:.0} wakeups a second, {:.2} us per sample at {:.2} us per wakeup) (target <= {SAMPLER_US} us{}) {}",
                r.who.label(),
                r.clock.map_or("?", SampleClock::short_name),
                r.hz,
                r.steady_us,
                r.steady_core_pct,
                r.sampler_us,
                r.sampler_core_pct,
                r.wakeups_per_s,
                r.waking_us,
                self.wakeup_floor_us,
                if r.hz == 100 {
                    format!(", <= {SAMPLER_CORE_PCT}%")
                } else {
                    String::new()
                },
                verdict(ok)
            );
        }
    }
}
