//! What symbolising with inline frames costs at stop, measured against
//! names-only symbolisation (what btprof did before inline expansion) in
//! the same run, as a user of [`Profiler`] sees it.
//!
//! Each round profiles a self-check-like workload (two threads, a hot
//! `#[inline(always)]` loop under five functions) four times, for 5 s at
//! 1000 Hz (`cpu` mode), each with a [`Profiler`] of its own, and times
//! [`Profiler::stop`] (stopping the sampler, symbolising the whole run):
//!
//! - `names only`: [`Symbolize`] without inline frames and without the
//!   warm-up: the stop as it was before inline expansion, the baseline;
//! - `names only, warm`: the same with the warm-up on (it then loads the
//!   symbol tables during the run), for comparison;
//! - `inline, cold`: inline frames, warm-up off: the stop loads every
//!   module's symbols and DWARF itself (the default before the warm-up);
//! - `inline, warm`: inline frames with the warm-up on (the default): the
//!   `btprof-warm` thread loaded them during the run.
//!
//! The workers run on while the profiler stops, as in `btprof
//! --pid-self` (the stop then shares the 2 cores with them);
//! `BTPROF_BENCH_STOP_WORKERS_FIRST=1` stops them first, as the earlier
//! version of this bench symbolised (on idle cores, but with the workers'
//! exit sampled, new code for the stop to resolve).
//!
//! The four run in rotating order, so page-cache warmth and drift hit
//! all alike. The target is stop(inline, warm) <= 1.20 x stop(names
//! only), the median of the per-round ratios over `BTPROF_BENCH_RUNS`
//! rounds (default 5). It also reports what the warm-up cost (its
//! thread's CPU time, passes, DWARF loads) and what the stop still loaded
//! itself.
//!
//! `cargo bench --bench symbolize`. Always exits 0: it reports, it does
//! not gate.
//!
//! Writes its latest results to `docs/results/symbolize.md`.

#[path = "support/results.rs"]
mod results;

use btprof_testkit::measure;
use btprof_testkit::workers::Workers;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use btprof::{Mode, Profiler, Symbolize, WarmUpStats};

const HZ: u32 = 1000;
const PROFILE_TIME: Duration = Duration::from_secs(5);
const TARGET_RATIO: f64 = 1.20;

/// The hot loop, inlined into each caller, as the self-check's
/// `timed_spin`.
#[inline(always)]
fn spin(n: u64) -> u64 {
    let mut x = black_box(n);
    for i in 0..n {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

#[inline(never)]
fn alpha() -> u64 {
    spin(1_200_000)
}

#[inline(never)]
fn beta() -> u64 {
    spin(400_000)
}

#[inline(never)]
fn chain_inner() -> u64 {
    spin(800_000)
}

#[inline(never)]
fn chain_middle() -> u64 {
    spin(200_000) ^ chain_inner()
}

#[inline(never)]
fn chain_outer() -> u64 {
    spin(200_000) ^ chain_middle()
}

#[inline(never)]
fn worker(index: usize, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        if index == 0 {
            black_box(alpha() ^ beta());
        } else {
            black_box(beta() ^ chain_outer());
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Names,
    NamesWarm,
    InlineCold,
    InlineWarm,
}

struct Run {
    stop_ms: f64,
    samples: u64,
    stacks: usize,
    warm: WarmUpStats,
    stop_loads: u64,
}

struct Round {
    names: Run,
    names_warm: Run,
    cold: Run,
    warm: Run,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn run(variant: Variant, workers_first: bool) -> Run {
    let workers = Workers::start(2, "bench-work-", worker);
    let profiler = Profiler::builder()
        .hz(HZ)
        .mode(Mode::Cpu)
        .symbolize(Symbolize {
            inline_frames: matches!(variant, Variant::InlineCold | Variant::InlineWarm),
        })
        .warm_up(matches!(variant, Variant::NamesWarm | Variant::InlineWarm))
        .start()
        .expect("start profiler");
    std::thread::sleep(PROFILE_TIME);
    let mut workers = Some(workers);
    if workers_first {
        workers.take().expect("once").stop();
    }
    let warm = profiler.warm_up_stats();
    let t = Instant::now();
    let profile = profiler.stop().expect("stop profiler");
    let stop_ms = ms(t.elapsed());
    let stop_loads = btprof::test_hooks::stop_dwarf_loads();
    if let Some(workers) = workers {
        workers.stop();
    }
    if matches!(variant, Variant::InlineCold | Variant::InlineWarm) {
        assert!(
            profile.has_inlined_frames(),
            "no inlined frames: the bench binary has no DWARF line tables"
        );
    }
    Run {
        stop_ms,
        samples: profile.total_samples(),
        stacks: profile.distinct_stacks(),
        warm,
        stop_loads,
    }
}

fn round(index: usize, workers_first: bool) -> Round {
    let order = [
        Variant::Names,
        Variant::InlineCold,
        Variant::InlineWarm,
        Variant::NamesWarm,
    ];
    let mut runs: Vec<(Variant, Run)> = (0..order.len())
        .map(|i| order[(index + i) % order.len()])
        .map(|v| (v, run(v, workers_first)))
        .collect();
    let mut take = |v: Variant| {
        let at = runs.iter().position(|(w, _)| *w == v).expect("ran");
        runs.swap_remove(at).1
    };
    Round {
        names: take(Variant::Names),
        names_warm: take(Variant::NamesWarm),
        cold: take(Variant::InlineCold),
        warm: take(Variant::InlineWarm),
    }
}

fn main() {
    let mut results = results::Results::new(
        "symbolize",
        "Symbolising at stop, with inline frames",
        "cargo bench --bench symbolize",
    );
    let runs = measure::runs(5);
    let workers_first =
        std::env::var_os("BTPROF_BENCH_STOP_WORKERS_FIRST").is_some_and(|v| v == "1");
    println!(
        "symbolize: {runs} rounds of four {} s, {HZ} Hz cpu-mode profiles of 2 workers, \
         stopped {} the profiler",
        PROFILE_TIME.as_secs(),
        if workers_first { "before" } else { "after" }
    );
    let mut rounds = Vec::new();
    for i in 0..runs {
        let r = round(i, workers_first);
        println!(
            "  round {}: stop names only {:.1} ms ({} samples, {} stacks), warmed up {:.1} ms; inline cold {:.1} ms \
             ({} DWARF loads); inline warm {:.1} ms ({} DWARF loads at stop; warm-up {} passes, \
             {} addresses, {} DWARF loads, {:.1} ms CPU)",
            i + 1,
            r.names.stop_ms,
            r.names.samples,
            r.names.stacks,
            r.names_warm.stop_ms,
            r.cold.stop_ms,
            r.cold.stop_loads,
            r.warm.stop_ms,
            r.warm.stop_loads,
            r.warm.warm.passes,
            r.warm.warm.addresses,
            r.warm.warm.dwarf_loads,
            ms(r.warm.warm.cpu_time),
        );
        rounds.push(r);
    }
    let med = |f: fn(&Round) -> f64| measure::median(rounds.iter().map(f).collect());
    let (names, names_warm, cold, warm, cpu) = (
        med(|r| r.names.stop_ms),
        med(|r| r.names_warm.stop_ms),
        med(|r| r.cold.stop_ms),
        med(|r| r.warm.stop_ms),
        med(|r| ms(r.warm.warm.cpu_time)),
    );
    let cold_ratio = med(|r| r.cold.stop_ms / r.names.stop_ms);
    let warm_ratio = med(|r| r.warm.stop_ms / r.names.stop_ms);
    println!(
        "medians: stop names only {names:.1} ms (warmed up {names_warm:.1} ms), inline cold {cold:.1} ms, inline warm {warm:.1} ms; \
         warm-up CPU {cpu:.1} ms per run"
    );
    println!("stop with inline frames, cold / names only: {cold_ratio:.3}");
    println!(
        "stop with inline frames, warmed up / names only: {warm_ratio:.3} (target <= {TARGET_RATIO:.2}) {}",
        if warm_ratio <= TARGET_RATIO { "ok" } else { "OVER" }
    );
    results.paragraph(&format!(
        "`Profiler::stop` of a {} s, {HZ} Hz cpu-mode profile of two workers, medians of {runs} \
         rounds; the workers stopped {} the profiler. Ratios are medians of the per-round \
         ratios to *names only* (target for *inline, warm*: at most {TARGET_RATIO:.2}).",
        PROFILE_TIME.as_secs(),
        if workers_first { "before" } else { "after" }
    ));
    results.table(
        &["stop", "ms", "ratio to names only"],
        &[
            vec![
                "names only".to_owned(),
                format!("{names:.1}"),
                "1.000".to_owned(),
            ],
            vec![
                "names only, warmed up".to_owned(),
                format!("{names_warm:.1}"),
                String::new(),
            ],
            vec![
                "inline frames, cold".to_owned(),
                format!("{cold:.1}"),
                format!("{cold_ratio:.3}"),
            ],
            vec![
                "inline frames, warmed up (the default)".to_owned(),
                format!("{warm:.1}"),
                format!("{warm_ratio:.3}"),
            ],
        ],
    );
    results.paragraph(&format!(
        "The warm-up thread's CPU time: {cpu:.1} ms per run."
    ));
    results.write();
}
