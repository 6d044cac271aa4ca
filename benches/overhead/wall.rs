//! Measurement 1: wall-time overhead of a `btprof::Profiler` on a busy job.

use std::time::Instant;

use crate::job::run_job;
use crate::report::{header, row, say};
use crate::{CLEAN_SHARE_PCT, HZ, TARGET_OVERHEAD_PCT, WORKERS};

pub(crate) struct WallResult {
    pub(crate) overhead_pct: f64,
    pub(crate) best_pct: f64,
    pub(crate) cpu_overhead_pct: f64,
    pub(crate) noisy: bool,
}

pub(crate) fn measure_wall(runs: usize, iters: u64) -> WallResult {
    let mut base = Vec::new();
    let mut prof = Vec::new();
    let mut paired = Vec::new();
    let mut stop_ms = Vec::new();
    let mut samples = Vec::new();
    let mut per_worker_hz = Vec::new();
    let mut per_cpu_sec = Vec::new();
    let mut achieved = Vec::new();
    let mut missed = Vec::new();
    let mut failed = Vec::new();
    let mut truncated = Vec::new();
    let mut base_util = Vec::new();
    let mut prof_util = Vec::new();
    let mut cpu_overhead = Vec::new();
    let mut clean = Vec::new();

    let profiled = || {
        let profiler = btprof::Profiler::builder()
            .hz(HZ)
            .mode(btprof::Mode::Cpu)
            .start()
            .expect("start profiler");
        let job = run_job(iters, None);
        let t = Instant::now();
        let profile = profiler.stop().expect("stop profiler");
        (
            job,
            t.elapsed(),
            profile.stats().expect("a recording has stats").clone(),
        )
    };

    for round in 0..runs {
        let (b, (p, stop, stats)) = if round % 2 == 0 {
            let b = run_job(iters, None);
            (b, profiled())
        } else {
            let p = profiled();
            (run_job(iters, None), p)
        };
        let (bw, pw) = (b.wall.as_secs_f64(), p.wall.as_secs_f64());
        base.push(bw);
        prof.push(pw);
        paired.push((pw / bw - 1.0) * 100.0);
        stop_ms.push(stop.as_secs_f64() * 1e3);
        samples.push(stats.samples as f64);
        per_worker_hz.push(stats.samples as f64 / WORKERS as f64 / pw);
        per_cpu_sec.push(stats.samples as f64 / p.worker_cpu().as_secs_f64());
        achieved.push(stats.achieved_hz());
        missed.push(stats.missed_ticks as f64);
        failed.push(stats.failed_samples as f64);
        truncated.push(stats.truncated() as f64);
        let (bc, pc) = (b.worker_cpu().as_secs_f64(), p.worker_cpu().as_secs_f64());
        base_util.push(bc / (WORKERS as f64 * bw) * 100.0);
        prof_util.push(pc / (WORKERS as f64 * pw) * 100.0);
        let sc = stats.sampler_cpu.as_secs_f64();
        cpu_overhead.push(((pc + sc) / bc - 1.0) * 100.0);
        // A round is undisturbed when this process (workers, and the
        // sampler on the profiled side) had both CPUs nearly all the time.
        let own_share = (pc + sc) / (WORKERS as f64 * pw) * 100.0;
        if bc / (WORKERS as f64 * bw) * 100.0 >= CLEAN_SHARE_PCT && own_share >= CLEAN_SHARE_PCT {
            clean.push((pw / bw - 1.0) * 100.0);
        }
        eprintln!(
            "  [wall] round {}/{runs}: baseline {bw:.3} s, profiled {pw:.3} s",
            round + 1
        );
    }

    header(&format!(
        "[1] wall-time overhead: {WORKERS} busy threads x {iters} iterations, Profiler at {HZ} Hz cpu mode"
    ));
    let b = row("baseline job wall, spawn..join (s)", &base, 3);
    let p = row("profiled job wall, spawn..join (s)", &prof, 3);
    let overhead_pct = (p.median / b.median - 1.0) * 100.0;
    say!(
        "  {:<44} {:>12.2}",
        "overhead, median/median - 1 (%)",
        overhead_pct
    );
    let best_pct = (p.min / b.min - 1.0) * 100.0;
    say!(
        "  {:<44} {:>12.2}",
        "overhead, min/min - 1 (%, least disturbed)",
        best_pct
    );
    row("overhead, per round paired (%)", &paired, 2);
    let cl = row(
        &format!("  undisturbed rounds only ({}/{runs}) (%)", clean.len()),
        &clean,
        2,
    );
    row("stop + symbolise, not in job wall (ms)", &stop_ms, 1);
    row("samples per run", &samples, 0);
    row(
        "samples/s per worker (samples/2/job wall)",
        &per_worker_hz,
        0,
    );
    row("samples per worker CPU-second", &per_cpu_sec, 0);
    row("baseline workers' CPU share of wall (%)", &base_util, 1);
    row("profiled workers' CPU share of wall (%)", &prof_util, 1);
    let c = row("CPU-time overhead, paired (%)", &cpu_overhead, 2);
    row("achieved tick rate (Hz)", &achieved, 0);
    row("missed ticks", &missed, 0);
    row("failed samples", &failed, 0);
    row("truncated walks", &truncated, 0);
    let spread_pct = (b.max - b.min) / b.median * 100.0;
    say!("  baseline spread (max-min)/median: {spread_pct:.2}%");
    say!(
        "  CPU-time overhead = (profiled worker CPU + sampler_cpu) / baseline worker CPU - 1; it ignores other load"
    );
    say!(
        "  undisturbed round: the workers (+ sampler) used >= {CLEAN_SHARE_PCT}% of {WORKERS} CPUs for the job's wall time"
    );
    // The median is trusted when most rounds ran undisturbed and those
    // all fall on the same side of the target.
    let straddles = cl.min <= TARGET_OVERHEAD_PCT && cl.max > TARGET_OVERHEAD_PCT;
    let noisy = clean.len() * 2 <= runs || straddles;
    if noisy {
        say!(
            "  NOTE: other load disturbed too many rounds, or the undisturbed ones fall on both sides of the"
        );
        say!(
            "        {TARGET_OVERHEAD_PCT}% target: the machine is noisy, treat the wall-time median with care"
        );
    } else if clean.len() < runs {
        say!(
            "  note: {} of {runs} rounds were disturbed by other load; the median absorbs them",
            runs - clean.len()
        );
    }
    WallResult {
        overhead_pct,
        best_pct,
        cpu_overhead_pct: c.median,
        noisy,
    }
}
