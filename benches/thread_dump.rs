//! What a thread dump costs the threads it looks at, and the caller.
//!
//! - **Hold**: how long each interrupted thread is kept from running, from
//!   the capture handler's entry to its exit (Linux; suspend to resume on
//!   macOS): a register read, a 32 KiB stack copy and a frame-pointer walk,
//!   no symbolisation. Target: median at most 100 µs.
//! - **Capture**: the whole [`ThreadDump::capture`] as the caller sees it
//!   (listing, every thread's capture, CFI unwinding, symbolisation with
//!   the warm resolver cache), and the raw capture alone
//!   ([`btprof_sampler::one_shot::capture_threads`], no symbols).
//! - Baseline, in the same run: one `getpid` system call round trip and
//!   one `/proc/self/task/TID/stat` read, the floors the per-thread costs
//!   are built from, so a slower machine shows as such.
//!
//! Two scenarios: 10 threads, all spinning (every one interrupted), and
//! 200 threads of which 10 spin and 190 sleep in `nanosleep` (read from
//! outside, never interrupted). Medians over `BTPROF_BENCH_RUNS` rounds
//! (default 5) of 20 captures each.
//!
//! `cargo bench --bench thread_dump`. Always exits 0: it reports, it does
//! not gate.
//!
//! Writes its latest results to `docs/results/thread_dump.md`.

#[cfg(target_os = "linux")]
#[path = "support/results.rs"]
mod results;

#[cfg(target_os = "linux")]
fn main() {
    use std::hint::black_box;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use btprof_testkit::measure::median;

    let mut results = results::Results::new(
        "thread_dump",
        "What a thread dump costs",
        "cargo bench --bench thread_dump",
    );
    let mut rows = Vec::new();
    let rounds = btprof_testkit::measure::runs(5);

    // Baselines.
    let started = Instant::now();
    for _ in 0..10_000 {
        // SAFETY: getpid has no preconditions.
        black_box(unsafe { libc::getpid() });
    }
    let syscall_us = started.elapsed().as_secs_f64() * 1e6 / 10_000.0;
    let stat = format!("/proc/self/task/{}/stat", std::process::id());
    let started = Instant::now();
    for _ in 0..1000 {
        black_box(std::fs::read(&stat).unwrap());
    }
    let stat_us = started.elapsed().as_secs_f64() * 1e6 / 1000.0;
    println!("baseline: getpid {syscall_us:.2} µs, /proc stat read {stat_us:.1} µs");

    for (total, spinning) in [(10usize, 10usize), (200, 10)] {
        let stop = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..total)
            .map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("bench-{i}"))
                    .spawn(move || {
                        if i < spinning {
                            let mut x = 0u64;
                            while !stop.load(Relaxed) {
                                x = black_box(x.wrapping_add(1));
                            }
                        } else {
                            while !stop.load(Relaxed) {
                                std::thread::sleep(Duration::from_millis(200));
                            }
                        }
                    })
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        // Warm the resolver and the unwinder.
        btprof::ThreadDump::capture().unwrap();
        let (mut holds, mut captures, mut raws, mut interrupted) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut round_holds = Vec::new();
            let mut round_captures = Vec::new();
            let mut round_raws = Vec::new();
            let mut round_interrupted = Vec::new();
            for _ in 0..20 {
                let started = Instant::now();
                let dump = btprof::ThreadDump::capture().unwrap();
                round_captures.push(started.elapsed().as_secs_f64() * 1e3);
                let held: Vec<f64> = dump
                    .threads()
                    .iter()
                    .filter_map(|t| t.held())
                    .map(|d| d.as_secs_f64() * 1e6)
                    .collect();
                round_interrupted.push(held.len() as f64);
                round_holds.extend(held);
                let started = Instant::now();
                black_box(btprof_sampler::one_shot::capture_threads().unwrap());
                round_raws.push(started.elapsed().as_secs_f64() * 1e3);
            }
            holds.push(median(round_holds));
            captures.push(median(round_captures));
            raws.push(median(round_raws));
            interrupted.push(median(round_interrupted));
        }
        stop.store(true, Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let hold = median(holds);
        let (interrupted, capture, raw) = (median(interrupted), median(captures), median(raws));
        let verdict = if hold <= 100.0 { "met" } else { "missed" };
        println!(
            "{total} threads ({spinning} spinning): hold median {hold:.1} µs per interrupted \
             thread ({interrupted:.0} interrupted per dump; {:.0} x getpid) [target <= 100 µs: \
             {verdict}]; capture {capture:.2} ms with symbols, {raw:.2} ms raw ({:.1} x a stat \
             read per thread)",
            hold / syscall_us,
            raw * 1e3 / total as f64 / stat_us,
        );
        rows.push(vec![
            format!("{total} ({spinning} spinning)"),
            format!("{interrupted:.0}"),
            format!("{hold:.1} ({verdict})"),
            format!("{capture:.2}"),
            format!("{raw:.2}"),
        ]);
    }
    results.paragraph(&format!(
        "Medians of {rounds} rounds of 20 captures. Baselines in the same run: `getpid` \
         {syscall_us:.2} µs, a `/proc/self/task/TID/stat` read {stat_us:.1} µs. *Hold*: how long \
         each interrupted thread is kept from running (target at most 100 µs); *capture*: \
         `ThreadDump::capture` with symbols, and the raw capture alone."
    ));
    results.table(
        &[
            "threads",
            "interrupted per dump",
            "hold per thread, µs",
            "capture, ms",
            "raw capture, ms",
        ],
        &rows,
    );
    results.write();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("thread_dump bench: no capture backend measured on this platform");
}
