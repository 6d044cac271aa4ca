//! An application that keeps btprof on and dumps a profile every second.
//!
//! ```text
//! cargo run --release --example continuous -- [SECONDS] [DIR]
//! ```
//!
//! Two worker threads handle "requests" (parsing and hashing), the profiler
//! writes one folded file, JSON sidecar and SVG per second into DIR
//! (default `target/btprof-example`) and keeps the newest five; `stop`
//! then returns the whole run. Send SIGUSR2 for an extra dump
//! (`kill -USR2 PID`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn parse_request(seed: u64) -> Vec<u64> {
    (0..2_000)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i) % 1_000)
        .collect()
}

#[inline(never)]
fn hash_fields(fields: &[u64]) -> u64 {
    fields.iter().fold(0xcbf2_9ce4_8422_2325, |h, &f| {
        (h ^ f).wrapping_mul(0x100_0000_01b3)
    })
}

#[inline(never)]
fn handle_request(seed: u64) -> u64 {
    let fields = parse_request(seed);
    (0..3).fold(0, |acc, _| acc ^ hash_fields(&fields))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(Ok(5), |s| s.parse())?;
    let dir = args
        .next()
        .unwrap_or_else(|| "target/btprof-example".to_owned());

    let profiler = btprof::Profiler::builder()
        .hz(1000)
        .dump_every(Duration::from_secs(1))
        .dump_dir(&dir)
        .keep(5)
        .dump_svg(true)
        .dump_on_signal(btprof::DUMP_SIGNAL)
        .start()?;
    println!(
        "profiling pid {} for {seconds} s; dumps in {dir}",
        std::process::id()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("request-worker-{i}"))
                .spawn(move || {
                    let mut seed = i;
                    while !stop.load(Ordering::Relaxed) {
                        seed = std::hint::black_box(handle_request(seed));
                    }
                })
        })
        .collect::<Result<_, _>>()?;

    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(500));
        let d = profiler.dump_stats();
        println!(
            "  {:>4.1} s: {} dumps written, {} failed",
            started.elapsed().as_secs_f64(),
            d.written,
            d.failed
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let (profile, dumps) = profiler.stop_with_dump_stats()?;
    println!(
        "{} samples in all; {} windows written, {} kept, last: {}",
        profile.total_samples(),
        dumps.written,
        dumps.written - dumps.removed,
        dumps
            .last_written
            .as_deref()
            .map_or("none".into(), |p| p.display().to_string())
    );
    Ok(())
}
