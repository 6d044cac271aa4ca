//! What symbolising with inline frames costs at stop, measured against
//! names-only symbolisation (what btprof did before inline expansion) in
//! the same run.
//!
//! Each round profiles a self-check-like workload for 5 s at 1000 Hz
//! (`cpu` mode, with [`btprof_sampler::Sampler`] directly, so the raw
//! profile can be symbolised twice) and then times:
//!
//! - `sampler stop`: stopping the sampler (joins, collects the table);
//! - `names only`: [`Profile::from_raw_with`] without inline frames, with a
//!   fresh resolver, as [`btprof::Profiler::stop`] makes one (module
//!   discovery, symbol tables on first use);
//! - `inline`: the same with inline frames (also DWARF, loaded lazily);
//! - `inline, warm`: the same raw profile again with the inline resolver
//!   already loaded: the cost of each later dump or snapshot of a running
//!   profiler, which keeps its resolver.
//!
//! The two fresh variants run in alternating order, so page-cache warmth
//! and drift hit both alike. Stop time = sampler stop + symbolisation;
//! the target is stop(inline) <= 1.20 x stop(names only), medians of
//! `BTPROF_BENCH_RUNS` rounds (default 5), and `inline, warm` under
//! 100 ms.
//!
//! `cargo bench --bench symbolize`. Always exits 0: it reports, it does
//! not gate.

// Only `median` of the shared helpers is needed here.
#[allow(dead_code)]
#[path = "support/measure.rs"]
mod measure;

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{Profile, Symbolize};
use btprof_sampler::{Mode, Sampler, SamplerConfig};
use btprof_symbols::Resolver;

const HZ: u32 = 1000;
const PROFILE_TIME: Duration = Duration::from_secs(5);
const TARGET_RATIO: f64 = 1.20;
const TARGET_WARM_MS: f64 = 100.0;

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

struct Round {
    stop_ms: f64,
    names_ms: f64,
    inline_ms: f64,
    warm_ms: f64,
    samples: u64,
    stacks: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn round(inline_first: bool) -> Round {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("bench-work-{i}"))
                .spawn(move || worker(i, &stop))
                .expect("spawn worker")
        })
        .collect();
    let sampler = Sampler::start(SamplerConfig {
        hz: HZ,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start sampler");
    std::thread::sleep(PROFILE_TIME);
    let t = Instant::now();
    let raw = sampler.stop().expect("stop sampler");
    let stop_ms = ms(t.elapsed());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker");
    }

    let symbolize = |inline_frames: bool| {
        let t = Instant::now();
        let mut resolver = Resolver::for_current_process().expect("modules");
        let profile = Profile::from_raw_with(&raw, &mut resolver, Symbolize { inline_frames });
        (ms(t.elapsed()), profile, resolver)
    };
    let (names, inline) = if inline_first {
        let inline = symbolize(true);
        (symbolize(false), inline)
    } else {
        let names = symbolize(false);
        (names, symbolize(true))
    };
    let (inline_ms, profile, mut resolver) = inline;
    assert!(
        profile.has_inlined_frames(),
        "no inlined frames: the bench binary has no DWARF line tables"
    );
    let t = Instant::now();
    let warm = Profile::from_raw_with(&raw, &mut resolver, Symbolize::default());
    let warm_ms = ms(t.elapsed());
    assert_eq!(warm.total_samples(), profile.total_samples());
    Round {
        stop_ms,
        names_ms: names.0,
        inline_ms,
        warm_ms,
        samples: profile.total_samples(),
        stacks: profile.distinct_stacks(),
    }
}

fn main() {
    let runs: usize = std::env::var("BTPROF_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    println!(
        "symbolize: {runs} rounds of a {} s, {HZ} Hz cpu-mode profile of 2 workers",
        PROFILE_TIME.as_secs()
    );
    let mut rounds = Vec::new();
    for i in 0..runs {
        let r = round(i % 2 == 1);
        println!(
            "  round {}: {} samples, {} stacks; sampler stop {:.1} ms, names only {:.1} ms, \
             inline {:.1} ms, inline warm {:.1} ms",
            i + 1,
            r.samples,
            r.stacks,
            r.stop_ms,
            r.names_ms,
            r.inline_ms,
            r.warm_ms
        );
        rounds.push(r);
    }
    let med = |f: fn(&Round) -> f64| measure::median(rounds.iter().map(f).collect());
    let (stop, names, inline, warm) = (
        med(|r| r.stop_ms),
        med(|r| r.names_ms),
        med(|r| r.inline_ms),
        med(|r| r.warm_ms),
    );
    let ratio = med(|r| (r.stop_ms + r.inline_ms) / (r.stop_ms + r.names_ms));
    println!("medians: sampler stop {stop:.1} ms, names only {names:.1} ms, inline {inline:.1} ms, inline warm {warm:.1} ms");
    println!(
        "stop time with inline frames / names only: {ratio:.3} (target <= {TARGET_RATIO:.2}) {}",
        if ratio <= TARGET_RATIO { "ok" } else { "OVER" }
    );
    println!(
        "warm resolve (each dump, snapshot): {warm:.1} ms (target < {TARGET_WARM_MS:.0} ms) {}",
        if warm < TARGET_WARM_MS { "ok" } else { "OVER" }
    );
}
