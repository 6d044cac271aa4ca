//! Continuous profiling: memory stays bounded when a program produces
//! endless distinct stacks, and periodic dumps do not slow the sampler.
//!
//! A worker recurses to a random depth (up to 120), choosing one of two
//! functions at every level, so almost every sample is a stack never seen
//! before (2^depth shapes). Each variant runs in a child process of its own,
//! because peak RSS (`ru_maxrss`) is per process:
//!
//! - `none`: the workload alone, the baseline;
//! - `limited`: the profiler at 1000 Hz with a limit of [`LIMIT`] stacks
//!   and a dump every second (folded + sidecar into a scratch directory);
//! - `unlimited`: the same without a limit, to show what the limit saves.
//!
//! The profiled variants run for `BTPROF_BENCH_SECS` (default 5) and three
//! times as long: bounded memory means the longer run peaks no higher.
//! Reported per variant (median of `BTPROF_BENCH_RUNS`, default 3): peak
//! RSS, its growth over the baseline, distinct stacks kept, samples counted
//! as overflow, and the achieved tick rate against the 99% target.
//!
//! `cargo bench --bench continuous`.
//! Always exits 0: it reports, it does not gate.
//!
//! Writes its latest results to `docs/results/continuous.md`.

#[path = "support/results.rs"]
mod results;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use btprof_testkit::measure::{fields, median, peak_rss_kib};

const HZ: u32 = 1000;
const MAX_RECURSION: u64 = 120;
const TARGET_RATE_PCT: f64 = 99.0;
/// Distinct stacks the `limited` variant keeps: small enough that the
/// workload reaches it within seconds.
const LIMIT: usize = 2048;
/// Busy threads in the workload.
const WORKERS: u64 = 2;

#[inline(never)]
fn left(depth: u64, rng: u64) -> u64 {
    step(depth, rng) ^ 1
}

#[inline(never)]
fn right(depth: u64, rng: u64) -> u64 {
    step(depth, rng) ^ 2
}

/// One level: spin a little at the bottom, else go left or right.
fn step(depth: u64, rng: u64) -> u64 {
    if depth == 0 {
        let mut x = rng;
        for i in 0..20_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        return x;
    }
    let next = rng
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    if next >> 63 == 0 {
        std::hint::black_box(left(depth - 1, next))
    } else {
        std::hint::black_box(right(depth - 1, next))
    }
}

fn worker(stop: &AtomicBool) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ btprof_sampler::current_thread_id();
    while !stop.load(Ordering::Relaxed) {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        std::hint::black_box(step((rng >> 33) % MAX_RECURSION, rng));
    }
}

/// The child: runs one variant and prints one result line.
fn child(variant: &str, secs: u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WORKERS)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || worker(&stop))
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("btprof-bench-continuous-{}", std::process::id()));
    let profiler = match variant {
        "none" => None,
        "limited" | "unlimited" => {
            let builder = btprof::Profiler::builder()
                .hz(HZ)
                .dump_every(Duration::from_secs(1))
                .dump_dir(&dir)
                .keep(3)
                .max_stacks(if variant == "limited" {
                    LIMIT
                } else {
                    usize::MAX / 64
                });
            Some(builder.start().expect("start profiler"))
        }
        other => panic!("unknown variant {other}"),
    };
    std::thread::sleep(Duration::from_secs(secs));
    let (stacks, overflow, rate, dumps) = match profiler {
        Some(p) => {
            let (profile, dumps) = p.stop_with_dump_stats().expect("stop");
            (
                profile.distinct_stacks(),
                profile.overflow_samples(),
                profile.stats().map_or(0.0, |s| s.achieved_hz()),
                dumps.written,
            )
        }
        None => (0, 0, 0.0, 0),
    };
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("worker");
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "RESULT rss_kib={} stacks={stacks} overflow={overflow} rate={rate:.1} dumps={dumps}",
        peak_rss_kib()
    );
}

#[derive(Default, Clone, Copy)]
struct Result {
    rss_kib: f64,
    stacks: f64,
    overflow: f64,
    rate: f64,
    dumps: f64,
}

fn run_child(variant: &str, secs: u64) -> Result {
    let out = Command::new(std::env::current_exe().expect("own path"))
        .args(["--child", variant, &secs.to_string()])
        .output()
        .expect("run child");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "child {variant} failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let mut r = Result::default();
    for (k, v) in fields(&line["RESULT ".len()..]) {
        match k {
            "rss_kib" => r.rss_kib = v,
            "stacks" => r.stacks = v,
            "overflow" => r.overflow = v,
            "rate" => r.rate = v,
            "dumps" => r.dumps = v,
            _ => {}
        }
    }
    r
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let secs = args[i + 2].parse().expect("seconds");
        return child(&args[i + 1], secs);
    }
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(default)
    };
    let mut report = results::Results::new(
        "continuous",
        "Continuous profiling: memory and rate with dumps",
        "cargo bench --bench continuous",
    );
    let runs = env("BTPROF_BENCH_RUNS", 3) as usize;
    let secs = env("BTPROF_BENCH_SECS", 5);
    let limit = btprof_sampler::Limit::stacks(LIMIT);
    let default = btprof_sampler::Limit::stacks(btprof::DEFAULT_MAX_STACKS);
    let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
    println!(
        "btprof continuous benchmark: {runs} runs, {WORKERS} threads recursing to random depths, {HZ} Hz, a dump every second"
    );
    println!(
        "  limit here: {} stacks = {:.1} MiB per table (default {} stacks = {:.1} MiB); a window and the running total: 2 tables",
        limit.stacks,
        mib(limit.max_bytes()),
        default.stacks,
        mib(default.max_bytes())
    );
    let long = secs * 3;
    let variants = [
        ("none", secs),
        ("limited", secs),
        ("limited", long),
        ("unlimited", secs),
        ("unlimited", long),
    ];
    let mut results: Vec<Vec<Result>> = vec![Vec::new(); variants.len()];
    for round in 0..runs {
        for (i, &(v, secs)) in variants.iter().enumerate() {
            let r = run_child(v, secs);
            eprintln!(
                "  round {}/{runs} {v} {secs} s: peak RSS {:.1} MiB, {} stacks, {} overflow, {:.1} Hz",
                round + 1,
                r.rss_kib / 1024.0,
                r.stacks,
                r.overflow,
                r.rate
            );
            results[i].push(r);
        }
    }
    let base = median(results[0].iter().map(|r| r.rss_kib).collect());
    let mut rows = Vec::new();
    println!();
    println!(
        "  {:<16} {:>14} {:>14} {:>12} {:>12} {:>10} {:>7}",
        "variant", "peak RSS MiB", "over base MiB", "stacks", "overflow", "rate Hz", "dumps"
    );
    for (i, (v, secs)) in variants.iter().enumerate() {
        let m = |f: fn(&Result) -> f64| median(results[i].iter().map(f).collect());
        let rss = m(|r| r.rss_kib);
        let label = format!("{v} {secs} s");
        println!(
            "  {label:<16} {:>14.1} {:>14.1} {:>12.0} {:>12.0} {:>10.1} {:>7.0}",
            rss / 1024.0,
            (rss - base) / 1024.0,
            m(|r| r.stacks),
            m(|r| r.overflow),
            m(|r| r.rate),
            m(|r| r.dumps)
        );
        rows.push(vec![
            label,
            format!("{:.1}", rss / 1024.0),
            format!("{:.1}", (rss - base) / 1024.0),
            format!("{:.0}", m(|r| r.stacks)),
            format!("{:.0}", m(|r| r.overflow)),
            format!("{:.1}", m(|r| r.rate)),
            format!("{:.0}", m(|r| r.dumps)),
        ]);
    }
    let limited_rate = median(results[1..=2].iter().flatten().map(|r| r.rate).collect());
    let pct = limited_rate / f64::from(HZ) * 100.0;
    println!();
    println!(
        "  achieved rate with dumps every second: {pct:.2}% of {HZ} Hz (target >= {TARGET_RATE_PCT}%) {}",
        if pct >= TARGET_RATE_PCT { "PASS" } else { "UNDER TARGET" }
    );
    report.paragraph(&format!(
        "{WORKERS} threads recursing to random depths (almost every sample a new stack), \
         {HZ} Hz, a dump every second; each variant a child process, medians of {runs} runs. \
         `limited` keeps at most {} stacks per table ({:.1} MiB; the default is {} stacks, \
         {:.1} MiB); `none` is the workload unprofiled.",
        limit.stacks,
        mib(limit.max_bytes()),
        default.stacks,
        mib(default.max_bytes())
    ));
    report.table(
        &[
            "variant",
            "peak RSS, MiB",
            "over `none`, MiB",
            "stacks kept",
            "overflow samples",
            "rate, Hz",
            "dumps",
        ],
        &rows,
    );
    report.paragraph(&format!(
        "Achieved rate with a dump every second: {pct:.2}% of {HZ} Hz (target at least \
         {TARGET_RATE_PCT}%: {}).",
        if pct >= TARGET_RATE_PCT {
            "met"
        } else {
            "missed"
        }
    ));
    report.write();
}
