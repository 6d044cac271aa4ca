//! What the stall watchdog costs the program it watches.
//!
//! - **Beat**: [`Heartbeat::beat`] in a loop, in ns per call, against a
//!   baseline measured in the same rounds: a relaxed store to an
//!   `AtomicU64` through `black_box`, the least any heartbeat can cost.
//!   The ratio is the median of the per-round ratios, so a slower machine
//!   or a busier round moves both sides. For scale, `Instant::now()` is
//!   timed too: the clock a heartbeat would read without the coarse one.
//! - **Watchdog thread CPU**: 4 threads each beat every 1 ms for
//!   `BTPROF_BENCH_SECS` seconds (default 3), watched with the default
//!   threshold (250 ms); the watchdog thread's own CPU time as a percent
//!   of one core. Target: under 0.5%. Baseline, in the same rounds: the
//!   same 4 threads storing to an atomic every 1 ms with no watchdog, so
//!   the beating threads' own CPU (mostly waking from their sleeps) shows
//!   beside what the watchdog adds. Linux only: the watchdog thread is
//!   found by its name, `btprof-watchdog`, in `/proc/self/task/*/comm`,
//!   and its CPU read from its per-thread CPU clock, in nanoseconds
//!   (`/proc/self/task/*/stat` counts 10 ms ticks, too coarse for a
//!   thread that runs a few hundred microseconds a second).
//!
//! Medians of `BTPROF_BENCH_RUNS` rounds (default 5), variants
//! interleaved with the order alternating; the whole run takes about
//! 30 s with the defaults.
//!
//! `cargo bench --bench watchdog`. Always exits 0: it reports, it does
//! not gate.
//!
//! Writes its latest results to `docs/results/watchdog.md`.
//!
//! [`Heartbeat::beat`]: btprof::Heartbeat::beat

#[path = "support/results.rs"]
mod results;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use btprof::Watchdog;
use btprof_testkit::measure::{median, runs};

/// Calls timed per round for the beat and its atomic-store baseline.
const CALLS: u64 = 10_000_000;
/// Calls of `Instant::now()` per round: fewer, as on a VM without a
/// usable vDSO clock each one is a system call.
const CLOCK_CALLS: u64 = 1_000_000;

/// Nanoseconds per call of `body`, run `calls` times.
fn ns_per_call(calls: u64, mut body: impl FnMut(u64)) -> f64 {
    let started = Instant::now();
    for i in 0..calls {
        body(i);
    }
    started.elapsed().as_secs_f64() * 1e9 / calls as f64
}

fn beat_cost(rounds: usize, results: &mut Vec<Vec<String>>) {
    let watchdog = Watchdog::builder().start().expect("start a watchdog");
    let heartbeat = watchdog
        .watch_current_thread("bench")
        .expect("watch this thread");
    let slot = AtomicU64::new(0);
    let store = |i| black_box(&slot).store(i, Relaxed);
    let beat = |_| black_box(&heartbeat).beat();
    // Warm both loops (and the vDSO page) before timing.
    ns_per_call(CALLS / 10, store);
    ns_per_call(CALLS / 10, beat);
    let (mut stores, mut beats, mut ratios, mut clocks) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (s, b) = if round % 2 == 0 {
            let s = ns_per_call(CALLS, store);
            (s, ns_per_call(CALLS, beat))
        } else {
            let b = ns_per_call(CALLS, beat);
            (ns_per_call(CALLS, store), b)
        };
        let c = ns_per_call(CLOCK_CALLS, |_| {
            black_box(Instant::now());
        });
        eprintln!(
            "  round {}/{rounds}: store {s:.2} ns, beat {b:.2} ns, Instant::now {c:.1} ns",
            round + 1
        );
        stores.push(s);
        beats.push(b);
        ratios.push(b / s);
        clocks.push(c);
    }
    drop(heartbeat);
    watchdog.stop();
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(0.0, f64::max);
    let beat = median(beats);
    println!(
        "beat(): {beat:.2} ns per call; baseline relaxed AtomicU64 store {:.2} ns; \
         ratio {:.1}x (per-round range {low:.1}-{high:.1}x); for scale, Instant::now() {:.1} ns",
        median(stores.clone()),
        median(ratios.clone()),
        median(clocks.clone()),
    );
    results.push(vec![
        "`Heartbeat::beat()`, ns per call".into(),
        format!("{beat:.2}"),
        "".into(),
    ]);
    results.push(vec![
        "relaxed `AtomicU64` store, ns (baseline)".into(),
        format!("{:.2}", median(stores)),
        "".into(),
    ]);
    results.push(vec![
        "beat / store, per-round ratio".into(),
        format!("{:.1}x ({low:.1}-{high:.1}x)", median(ratios)),
        "".into(),
    ]);
    results.push(vec![
        "`Instant::now()`, ns (for scale)".into(),
        format!("{:.1}", median(clocks)),
        "".into(),
    ]);
}

#[cfg(target_os = "linux")]
mod cpu {
    //! The watchdog thread's CPU while 4 threads beat every millisecond.

    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use btprof::Watchdog;
    use btprof_testkit::measure::median;

    use super::black_box;

    /// Threads beating, each every millisecond.
    const BEATERS: usize = 4;
    /// The most of one core the watchdog thread may use, in percent.
    const CPU_TARGET_PCT: f64 = 0.5;
    /// The name the watchdog gives its thread.
    const THREAD_NAME: &str = "btprof-watchdog";

    /// CPU time of thread `tid` of this process, in nanoseconds: its
    /// per-thread CPU clock, the id glibc's `pthread_getcpuclockid` builds
    /// from a tid (`((!tid) << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED`).
    fn thread_cpu_ns(tid: i32) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; an id of a thread that is
        // gone only makes the call fail.
        let rc = unsafe { libc::clock_gettime((!tid << 3) | 6, &mut ts) };
        assert_eq!(rc, 0, "thread {tid}'s CPU clock");
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// The tid of the thread named `name`, waiting up to a second for it
    /// to name itself (a new thread sets its name once it runs).
    fn find_thread(name: &str) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
                let path = entry.expect("a task").path();
                let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                if comm.trim_end() == name {
                    let tid = path.file_name().unwrap().to_string_lossy().parse();
                    return tid.expect("a tid");
                }
            }
            assert!(Instant::now() < deadline, "no thread named {name}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One window's CPU, in percent of one core.
    struct Window {
        beaters: f64,
        watchdog: f64,
        stalls: usize,
    }

    /// `BEATERS` threads beating (or, without a watchdog, storing to an
    /// atomic) every millisecond for `secs`, with or without a watchdog.
    fn window(with_watchdog: bool, secs: f64) -> Window {
        let stalls = Arc::new(AtomicUsize::new(0));
        let watchdog = with_watchdog.then(|| {
            let stalls = Arc::clone(&stalls);
            Arc::new(
                Watchdog::builder()
                    .on_stall(move |_| {
                        stalls.fetch_add(1, Relaxed);
                    })
                    .start()
                    .expect("start a watchdog"),
            )
        });
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..BEATERS)
            .map(|i| {
                let (stop, cpu_ns) = (Arc::clone(&stop), Arc::clone(&cpu_ns));
                let watchdog = watchdog.clone();
                std::thread::Builder::new()
                    .name(format!("beater-{i}"))
                    .spawn(move || {
                        let heartbeat = watchdog.map(|w| w.watch_current_thread("beater").unwrap());
                        let slot = AtomicU64::new(0);
                        let started = btprof_testkit::thread_cpu_ns();
                        let mut n = 0;
                        while !stop.load(Relaxed) {
                            match &heartbeat {
                                Some(h) => h.beat(),
                                None => black_box(&slot).store(n, Relaxed),
                            }
                            n += 1;
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let used = btprof_testkit::thread_cpu_ns() - started;
                        cpu_ns.fetch_add(used, Relaxed);
                    })
                    .expect("spawn a beater")
            })
            .collect();
        let watchdog_tid = watchdog.as_ref().map(|_| find_thread(THREAD_NAME));
        let before = watchdog_tid.map(thread_cpu_ns);
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let watchdog_ns = watchdog_tid.zip(before).map(|(t, b)| thread_cpu_ns(t) - b);
        stop.store(true, Relaxed);
        for t in threads {
            t.join().expect("a beater");
        }
        let elapsed = started.elapsed().as_secs_f64();
        if let Some(w) = watchdog {
            Arc::into_inner(w).expect("the beaters are gone").stop();
        }
        let pct = |ns: u64| ns as f64 / 1e9 / elapsed * 100.0;
        Window {
            beaters: pct(cpu_ns.load(Relaxed)),
            watchdog: watchdog_ns.map_or(f64::NAN, pct),
            stalls: stalls.load(Relaxed),
        }
    }

    pub fn measure(rounds: usize, secs: f64, results: &mut Vec<Vec<String>>) {
        let (mut alone, mut watched, mut own) = (Vec::new(), Vec::new(), Vec::new());
        let mut stalls = 0;
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for with_watchdog in order {
                let w = window(with_watchdog, secs);
                if with_watchdog {
                    eprintln!(
                        "  round {}/{rounds} watched: beaters {:.3}%, watchdog thread {:.4}%, \
                         {} stalls",
                        round + 1,
                        w.beaters,
                        w.watchdog,
                        w.stalls
                    );
                    watched.push(w.beaters);
                    own.push(w.watchdog);
                    stalls += w.stalls;
                } else {
                    eprintln!(
                        "  round {}/{rounds} alone: beaters {:.3}%",
                        round + 1,
                        w.beaters
                    );
                    alone.push(w.beaters);
                }
            }
        }
        let own = median(own);
        println!(
            "watchdog thread: {own:.4}% of one core with {BEATERS} threads beating every 1 ms \
             [target < {CPU_TARGET_PCT}%: {}]; the {BEATERS} threads themselves: {:.3}% without \
             a watchdog, {:.3}% watched; {stalls} stalls reported (expected 0)",
            if own < CPU_TARGET_PCT {
                "met"
            } else {
                "missed"
            },
            median(alone.clone()),
            median(watched.clone()),
        );
        results.push(vec![
            format!("watchdog thread, % of a core ({BEATERS} threads beating every 1 ms)"),
            format!("{own:.4}"),
            format!(
                "< {CPU_TARGET_PCT}%: {}",
                if own < CPU_TARGET_PCT {
                    "met"
                } else {
                    "missed"
                }
            ),
        ]);
        results.push(vec![
            format!("the {BEATERS} beating threads, % of a core, no watchdog"),
            format!("{:.3}", median(alone)),
            "".into(),
        ]);
        results.push(vec![
            format!("the {BEATERS} beating threads, % of a core, watched"),
            format!("{:.3}", median(watched)),
            "".into(),
        ]);
        results.push(vec![
            "stalls reported (expected 0)".into(),
            stalls.to_string(),
            "".into(),
        ]);
    }
}

fn main() {
    let mut results = results::Results::new(
        "watchdog",
        "The stall watchdog's cost",
        "cargo bench --bench watchdog",
    );
    let mut rows = Vec::new();
    let rounds = runs(5);
    let secs = std::env::var("BTPROF_BENCH_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|&s| s > 0.0)
        .unwrap_or(3.0);
    println!(
        "btprof watchdog benchmark: {rounds} rounds (BTPROF_BENCH_RUNS), \
         {secs} s per CPU window (BTPROF_BENCH_SECS)"
    );
    beat_cost(rounds, &mut rows);
    #[cfg(target_os = "linux")]
    cpu::measure(rounds, secs, &mut rows);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = secs;
        println!(
            "watchdog thread CPU: not measured on this platform (the thread is found in /proc)"
        );
    }
    results.paragraph(&format!(
        "Medians of {rounds} rounds, variants interleaved; {secs} s per CPU window."
    ));
    results.table(&["measure", "median", "target"], &rows);
    results.write();
}
