//! What pushing costs: btprof's own CPU time with a push every second to
//! a local receiver, against the same run without pushing.
//!
//! A spinner thread runs under a profiler at 100 Hz (cpu mode) for
//! `BTPROF_BENCH_SECS` (default 200) per round, alternately with
//! `push(interval 1 s)` to a receiver on loopback (in this process; it
//! decodes every push as Pyroscope would) and without, `BTPROF_BENCH_RUNS`
//! rounds each (default 3: ten minutes of each in all). Measured before
//! each stop: the CPU time of btprof's threads (those named `btprof*`,
//! from `/proc/self/task/*/schedstat`), per second of the round. Pushing
//! adds the dump thread's cutting, symbolising and encoding of each window
//! and the push thread's request. Reported: the medians, their difference
//! in percent of a core, and the bytes per window.
//!
//! `cargo bench --features push --bench push` (Linux). Writes
//! `docs/results/push.md`.
//! Always exits 0: it reports, it does not gate.

#[path = "../tests/push_support/mod.rs"]
mod push_support;
#[path = "support/results.rs"]
mod results;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{Profiler, Push};
use btprof_testkit::measure::median;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU nanoseconds of this process's threads named `btprof*`, in all
/// and by name.
fn btprof_cpu_ns() -> (u64, Vec<(String, u64)>) {
    let mut by_name: Vec<(String, u64)> = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if !comm.starts_with("btprof") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let ns = stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        match by_name.iter_mut().find(|(n, _)| n == comm) {
            Some((_, total)) => *total += ns,
            None => by_name.push((comm.to_owned(), ns)),
        }
    }
    (by_name.iter().map(|(_, ns)| ns).sum(), by_name)
}

#[inline(never)]
fn spin(stop: &AtomicBool) {
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// One round: btprof's CPU per second of it (in percent of a core), and
/// with pushing the bytes per window and windows pushed.
fn round(secs: u64, receiver: Option<&push_support::Receiver>) -> (f64, Option<(f64, u64)>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let spinner = std::thread::spawn(move || spin(&s));
    let mut builder = Profiler::builder().hz(100);
    if let Some(r) = receiver {
        builder = builder.push(Push::pyroscope(r.url()).interval(Duration::from_secs(1)));
    }
    let (before, _) = btprof_cpu_ns();
    let began = Instant::now();
    let profiler = builder.start().expect("start");
    std::thread::sleep(Duration::from_secs(secs));
    let (after, by_name) = btprof_cpu_ns();
    let used = after.saturating_sub(before);
    let wall = began.elapsed().as_secs_f64();
    let threads: Vec<String> = by_name
        .iter()
        .map(|(name, ns)| format!("{name} {:.3}%", *ns as f64 / 1e9 / wall * 100.0))
        .collect();
    println!("  by thread: {}", threads.join(", "));
    let (_, stats) = profiler.stop_with_dump_stats().expect("stop");
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let pct = used as f64 / 1e9 / wall * 100.0;
    let push = stats
        .push
        .map(|p| (p.bytes_sent as f64 / p.pushed.max(1) as f64, p.pushed));
    (pct, push)
}

fn main() {
    if !cfg!(target_os = "linux") {
        println!("push bench: Linux only (it reads /proc)");
        return;
    }
    let mut results = results::Results::new(
        "push",
        "Pushing's cost",
        "cargo bench --features push --bench push",
    );
    let secs = env_u64("BTPROF_BENCH_SECS", 200);
    let runs = env_u64("BTPROF_BENCH_RUNS", 3);
    let receiver = push_support::Receiver::start("127.0.0.1:0", &[push_support::Behaviour::Accept]);
    let (mut with, mut without, mut bytes, mut windows) = (vec![], vec![], vec![], 0);
    for run in 1..=runs {
        let (base, _) = round(secs, None);
        let (pushing, push) = round(secs, Some(&receiver));
        let (per_window, pushed) = push.unwrap_or_default();
        println!(
            "round {run}/{runs}: btprof's threads {base:.3}% of a core without pushing, \
             {pushing:.3}% with ({pushed} windows, {per_window:.0} bytes each)"
        );
        without.push(base);
        with.push(pushing);
        bytes.push(per_window);
        windows += pushed;
    }
    let invalid = receiver.invalid();
    let (w, wo, b) = (median(with), median(without), median(bytes));
    println!(
        "btprof's threads: {wo:.3}% of a core without pushing, {w:.3}% with (difference {:.3}); \
         {b:.0} bytes per window; {windows} windows pushed, {} refused",
        w - wo,
        invalid.len()
    );
    results.paragraph(&format!(
        "A spinner thread under a profiler at 100 Hz, {runs} rounds of {secs} s each with a push \
         every second to a receiver on loopback and {runs} without (medians)."
    ));
    results.table(
        &["", "btprof's threads, % of a core"],
        &[
            vec!["without pushing".to_owned(), format!("{wo:.3}")],
            vec!["with pushing".to_owned(), format!("{w:.3}")],
            vec!["difference".to_owned(), format!("{:.3}", w - wo)],
        ],
    );
    results.paragraph(&format!(
        "Bytes per window (gzipped pprof in a PushRequest): {b:.0}. Windows pushed: {windows}; \
         refused by the receiver: {}.",
        invalid.len()
    ));
    results.write();
}
