//! What sampling costs as the thread count grows: a pool of N threads
//! (2, 8, 32, 128, 512) that wait on a barrier while an embedded cpu-mode
//! [`btprof_sampler::Sampler`] starts at 1000 Hz, then share a fixed
//! amount of arithmetic (2-3 CPU-seconds in all), on the
//! perf clock and on the sampler-thread clock, interleaved with the same
//! pool unprofiled.
//!
//! Per pool size and clock, medians over `BTPROF_BENCH_RUNS` rounds
//! (default 3): samples per worker CPU-second (weighted: each sample
//! counted by the periods it stands for, from the profile's stack table;
//! and distinct, from the whole run's count), the workers' CPU taken per
//! sample (their `CLOCK_THREAD_CPUTIME_ID`, summed, less the unprofiled
//! pool's, over the samples), and the profiler's own CPU (the sampler
//! thread's, per sample and as a share of one core).
//!
//! The threads are found at start (listed before the barrier opens), not
//! born under the sampler: the case of a server's idle pool that bursts.
//!
//! `cargo bench --bench many_threads`. Linux only. Always exits 0: it
//! reports, it does not gate.
//!
//! Writes its latest results to `docs/results/many_threads.md`.

#[cfg(target_os = "linux")]
#[path = "support/results.rs"]
mod results;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("many_threads: the perf and sampler-thread clocks are Linux only; not measured");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Barrier};
    use std::time::{Duration, Instant};

    use btprof_sampler::{Mode, RawProfile, SampleClock, Sampler, SamplerConfig};
    use btprof_testkit::measure::{self, median};
    use btprof_testkit::thread_cpu;

    const HZ: u32 = 1000;
    const POOLS: [usize; 5] = [2, 8, 32, 128, 512];
    /// The pool's shared work, as calibrated on one thread alone (the
    /// pool's own CPU clocks measure less, about 0.7 of it: the table's
    /// unprofiled CPU column).
    const WORK: Duration = Duration::from_secs(3);
    const CLOCKS: [SampleClock; 2] = [SampleClock::Perf, SampleClock::SamplerThread];

    /// A serial multiply-xorshift chain the optimiser cannot fold away.
    #[inline(never)]
    fn pool_work(iters: u64, seed: u64) -> u64 {
        let mut x = seed | 1;
        for i in 0..iters {
            x = x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(i | 1);
            x ^= x >> 29;
        }
        x
    }

    /// Iterations of [`pool_work`] per second on one thread alone (the
    /// fastest of three probes, to ignore a preempted one).
    fn calibrate() -> u64 {
        black_box(pool_work(black_box(5_000_000), 1));
        let probe = 50_000_000;
        let best = (0..3)
            .map(|_| {
                let t = Instant::now();
                black_box(pool_work(black_box(probe), 7));
                t.elapsed()
            })
            .min()
            .expect("three probes");
        (probe as f64 / best.as_secs_f64()) as u64
    }

    /// One pool's run.
    struct PoolOut {
        /// The workers' own CPU clocks, summed (s).
        worker_cpu: f64,
        /// The workers' thread ids.
        tids: Vec<u64>,
    }

    /// Starts `n` threads that wait on a barrier, calls `ready` with the
    /// count (to start a sampler and let it list them), opens the
    /// barrier, and joins them.
    fn run_pool(n: usize, iters: u64, ready: impl FnOnce(usize)) -> PoolOut {
        let barrier = Arc::new(Barrier::new(n + 1));
        let each = iters / n as u64;
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let barrier = barrier.clone();
                std::thread::Builder::new()
                    .name(format!("pool-{i}"))
                    .stack_size(256 << 10)
                    .spawn(move || {
                        let tid = btprof_sampler::current_thread_id();
                        barrier.wait();
                        let cpu0 = thread_cpu();
                        black_box(pool_work(each, 0x9e37_79b9 + i as u64));
                        (tid, (thread_cpu() - cpu0).as_secs_f64())
                    })
                    .expect("spawn a pool thread")
            })
            .collect();
        ready(n);
        barrier.wait();
        let (tids, cpu): (Vec<u64>, Vec<f64>) = threads
            .into_iter()
            .map(|t| t.join().expect("a pool thread"))
            .unzip();
        PoolOut {
            worker_cpu: cpu.iter().sum(),
            tids,
        }
    }

    /// Waits until `sampler` has listed `threads` threads (on the ring
    /// clock: opened their events), at most 30 s.
    fn wait_until_listed(sampler: &Sampler, threads: usize) {
        let since = Instant::now();
        while (sampler.progress().threads.load(Ordering::Relaxed) as usize) < threads
            && since.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One profiled run's figures.
    #[derive(Clone, Copy)]
    struct Profiled {
        worker_cpu: f64,
        /// The workers' samples, weighted, from the stack table.
        samples: f64,
        /// Samples of the whole run, each counted once.
        distinct: f64,
        sampler_cpu: f64,
        duration: f64,
        lost: f64,
    }

    fn profiled(n: usize, iters: u64, clock: SampleClock) -> Result<Profiled, String> {
        let config = SamplerConfig {
            hz: HZ,
            mode: Mode::Cpu,
            clock: Some(clock),
            ..SamplerConfig::default()
        };
        let mut sampler = None;
        let mut error = None;
        let pool = run_pool(n, iters, |n| match Sampler::start(config) {
            Ok(s) => {
                // Every pool thread listed (and on the ring clock its
                // event open) before the barrier opens.
                wait_until_listed(&s, n);
                sampler = Some(s);
            }
            Err(e) => error = Some(e.to_string()),
        });
        let raw = sampler
            .ok_or_else(|| error.unwrap_or_default())?
            .stop()
            .map_err(|e| e.to_string())?;
        let s = &raw.stats;
        Ok(Profiled {
            worker_cpu: pool.worker_cpu,
            samples: worker_samples(&raw, &pool.tids) as f64,
            distinct: s.recorded as f64,
            sampler_cpu: s.sampler_cpu.as_secs_f64(),
            duration: s.duration.as_secs_f64(),
            lost: s.lost_samples as f64,
        })
    }

    fn worker_samples(raw: &RawProfile, tids: &[u64]) -> u64 {
        raw.table
            .iter()
            .filter(|(k, _)| {
                raw.threads
                    .get(k.thread as usize)
                    .is_some_and(|t| tids.contains(&t.tid))
            })
            .map(|(_, c)| c)
            .sum()
    }

    pub(crate) fn main() {
        let mut results = crate::results::Results::new(
            "many_threads",
            "Sampling pools of many threads",
            "cargo bench --bench many_threads",
        );
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        let runs = measure::runs(3);
        let iters = (calibrate() as f64 * WORK.as_secs_f64()) as u64;
        println!(
            "many threads: pools of {POOLS:?} threads share {iters} iterations (~{} s calibrated), Sampler at {HZ} Hz cpu mode, {runs} rounds, nproc={}",
            WORK.as_secs(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        // [pool][clock] per round; baseline per pool per round.
        let mut prof: Vec<[Vec<Profiled>; 2]> = POOLS.iter().map(|_| Default::default()).collect();
        let mut base: Vec<Vec<f64>> = vec![Vec::new(); POOLS.len()];
        let mut refused: [Option<String>; 2] = Default::default();
        for round in 0..runs {
            for (p, &n) in POOLS.iter().enumerate() {
                for k in 0..3 {
                    match (round + k) % 3 {
                        0 => base[p].push(run_pool(n, iters, |_| {}).worker_cpu),
                        c => {
                            let c = c - 1;
                            if refused[c].is_some() {
                                continue;
                            }
                            match profiled(n, iters, CLOCKS[c]) {
                                Ok(out) => prof[p][c].push(out),
                                Err(e) => refused[c] = Some(e),
                            }
                        }
                    }
                }
            }
            eprintln!("  [many threads] round {}/{runs} done", round + 1);
        }
        for (c, why) in refused.iter().enumerate() {
            if let Some(why) = why {
                println!("  {} not measured: {why}", CLOCKS[c].short_name());
                notes.push(format!("{} not measured: {why}.", CLOCKS[c].short_name()));
            }
        }
        println!(
            "  {:>7} {:<6} {:>10} {:>10} {:>10} {:>12} {:>10} {:>8} {:>6}",
            "threads",
            "clock",
            "weighted",
            "distinct",
            "taken us",
            "unprof. CPU",
            "sampler us",
            "% core",
            "lost"
        );
        for (p, &n) in POOLS.iter().enumerate() {
            let b = median(base[p].clone());
            for (c, clock) in CLOCKS.iter().enumerate() {
                let runs = &prof[p][c];
                if runs.is_empty() {
                    continue;
                }
                let med = |f: &dyn Fn(&Profiled) -> f64| median(runs.iter().map(f).collect());
                println!(
                    "  {n:>7} {:<6} {:>10.1} {:>10.1} {:>10.2} {b:>12.3} {:>10.2} {:>8.2} {:>6.0}",
                    clock.short_name(),
                    med(&|r| r.samples / r.worker_cpu),
                    med(&|r| r.distinct / r.worker_cpu),
                    med(&|r| (r.worker_cpu - b) / r.samples * 1e6),
                    med(&|r| r.sampler_cpu / r.samples * 1e6),
                    med(&|r| r.sampler_cpu / r.duration * 100.0),
                    med(&|r| r.lost),
                );
                rows.push(vec![
                    n.to_string(),
                    clock.short_name().to_owned(),
                    format!("{:.1}", med(&|r| r.samples / r.worker_cpu)),
                    format!("{:.1}", med(&|r| r.distinct / r.worker_cpu)),
                    format!("{:.2}", med(&|r| (r.worker_cpu - b) / r.samples * 1e6)),
                    format!("{b:.3}"),
                    format!("{:.2}", med(&|r| r.sampler_cpu / r.samples * 1e6)),
                    format!("{:.2}", med(&|r| r.sampler_cpu / r.duration * 100.0)),
                    format!("{:.0}", med(&|r| r.lost)),
                ]);
            }
        }
        println!("  weighted: the workers' samples per worker CPU-second; distinct: the run's distinct samples per worker CPU-second");
        println!("  taken: (workers' CPU - the unprofiled pool's median) / weighted samples; sampler: its CPU per weighted sample, and as % of a core");
        println!("  (reported, not enforced; exit status is always 0)");
        results.paragraph(&format!(
            "Pools of {POOLS:?} threads, found at start, share {iters} iterations (about {} s \
             calibrated) under a cpu-mode `Sampler` at {HZ} Hz; medians of {runs} rounds, \
             interleaved with the pool unprofiled. *Weighted*: the workers' samples per worker \
             CPU-second; *distinct*: the run's distinct samples per worker CPU-second; *taken*: \
             (the workers' CPU less the unprofiled pool's median) per weighted sample, µs; \
             *sampler*: its CPU per weighted sample, µs, and as % of a core. {}",
            WORK.as_secs(),
            notes.join(" ")
        ));
        results.table(
            &[
                "threads",
                "clock",
                "weighted",
                "distinct",
                "taken, µs",
                "unprofiled CPU, s",
                "sampler, µs",
                "sampler, % of a core",
                "lost",
            ],
            &rows,
        );
        results.write();
    }
}
