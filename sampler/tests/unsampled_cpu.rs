//! CPU time no sample covered is estimated and reported: threads that use less than one sampling period of CPU start and
//! exit between two listings of the threads and before a single period of
//! their CPU time is up, so no sample stands for their CPU time (threads
//! born while sampling are sampled from birth on the timer path, see
//! `born_threads.rs`, but a sample comes only at each whole period). `SamplerStats::unsampled_cpu` (the process's CPU clock less the
//! sampled threads' and the sampler's) must tell how much that was,
//! against the truth each short thread measures on its own clock. Runs
//! under a watchdog, on both sampling paths.
#![cfg(target_os = "linux")]

use std::thread;
use std::time::Duration;

use btprof_sampler::{Mode, Sampler, SamplerConfig, FORCE_SAMPLER_THREAD_ENV};

use btprof_testkit::{spin_cpu, thread_cpu, with_watchdog};

/// Short threads, run one after another.
const THREADS: usize = 300;
/// CPU time each short thread spins: under one period at 1000 Hz.
const WORK: Duration = Duration::from_micros(400);

/// Spins `WORK` of CPU on a new thread; returns its id and the CPU time
/// it used, measured at its end.
fn short_thread() -> (u64, Duration) {
    thread::spawn(|| {
        std::hint::black_box(spin_cpu(WORK, 200));
        (btprof_sampler::current_thread_id(), thread_cpu())
    })
    .join()
    .unwrap()
}

/// One run: the short threads' true CPU time, the part the sampled
/// threads' clocks account for, and the stats' estimate of the rest.
struct Run {
    short_cpu: Duration,
    short_sampled: Duration,
    unsampled: Duration,
    process: Duration,
}

fn run() -> Run {
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start");
    let (mut tids, mut short_cpu) = (Vec::new(), Duration::ZERO);
    for _ in 0..THREADS {
        let (tid, cpu) = short_thread();
        tids.push(tid);
        short_cpu += cpu;
    }
    let raw = sampler.stop().expect("stop");
    let s = &raw.stats;
    let short_sampled = tids.iter().filter_map(|&t| s.cpu_of(t)).sum();
    Run {
        short_cpu,
        short_sampled,
        unsampled: s.unsampled_cpu(),
        process: s.process_cpu,
    }
}

fn check(path: &str) {
    let r = run();
    let missed = r.short_cpu.saturating_sub(r.short_sampled);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "measured ({path}): {THREADS} threads of {} µs CPU: {:.1} ms in all, {:.1} ms of it \
         on sampled threads' clocks, {:.1} ms missed; estimate of CPU no sample covered: \
         {:.1} ms of the process's {:.1} ms",
        WORK.as_micros(),
        ms(r.short_cpu),
        ms(r.short_sampled),
        ms(missed),
        ms(r.unsampled),
        ms(r.process),
    );
    // Not random: the process's clock holds its exited threads' time, each
    // read by the thread at its end.
    assert!(
        r.process >= r.short_cpu,
        "the process's CPU time includes its threads'"
    );
    // The short threads are the point: most of their time is missed. Under a
    // period a thread has no ring sample; elsewhere a listing must find it
    // alive, Binomial(300, f): over half has P under 1e-4 while f <= 40%.
    assert!(
        missed * 2 >= r.short_cpu,
        "{path}: the short threads were mostly sampled; the test does not exercise missed time"
    );
    // The estimate finds what was missed; beyond it are only the main
    // thread's moments outside its clock readings (a tenth of the
    // process's time at most) and each short thread's start-up and exit
    // work in the kernel outside its own measurement, which on a loaded VM
    // came to 15-25 ms for the 300 threads: a quarter of what they missed.
    // Not random: the estimate holds all that was missed and those extras;
    // 10% (12 ms at most) is for clocks read apart. One that drops them is 0.
    assert!(
        r.unsampled * 10 >= missed * 9,
        "{path}: estimated {:.1} ms not covered, but {:.1} ms of the short threads' time was missed",
        ms(r.unsampled),
        ms(missed)
    );
    // A host allowance, not a chance bar: up to 30 ms and a tenth of the
    // process for that work, which grows on a busier machine; it catches
    // time counted twice beyond them.
    assert!(
        r.unsampled <= missed + missed / 4 + r.process / 10,
        "{path}: estimated {:.1} ms not covered, far above the {:.1} ms missed",
        ms(r.unsampled),
        ms(missed)
    );
}

#[test]
fn cpu_time_of_threads_never_sampled_is_estimated() {
    with_watchdog(
        &format!("{THREADS} short threads"),
        Duration::from_secs(120),
        || {
            check("per-thread timers or their fallback");
            // This binary runs this one test, and the sampler reads the
            // variable when it starts.
            std::env::set_var(FORCE_SAMPLER_THREAD_ENV, "1");
            check("sampler thread");
        },
    );
}
