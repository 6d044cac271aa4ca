//! A pool of 512 threads that wait, then burst: the profile must still
//! count nearly all of their CPU time.
//!
//! Servers run pools of hundreds of threads that sit idle and then burst.
//! The threads here wait on a barrier while the profiler starts (so every
//! one of them is found at start, not born under it), then share a fixed
//! 2 CPU-seconds of work, beside two CPU hogs. At 1000 Hz the samples per
//! worker CPU-second must be at least 850, and the workers' CPU time must
//! be in the stats. Each thread runs about 4 ms, so a thread's last part
//! of a period, which a CPU-time clock never reaches, is a tenth of its
//! time: it must be counted. Without that the rate is about 830; before
//! the exits' time and the sampler thread's weight were seen to as well,
//! it was 263-660.
//!
//! Why not nearer 1000: on a virtual machine the kernel's task clock
//! skips a period now and then. Its timer forwards past the periods its
//! interrupt came late for, while the count (like the thread's CPU clock)
//! keeps them. Comparing each thread's samples with its final count, 8-20%
//! of the pool's threads came out one period short in every run, on the
//! code of today and of months before alike: 908-1001 per CPU-second
//! over 50 runs on the project's 2-core VM (926-997 over 120 runs two at
//! a time, each beside its own two hogs). The host's stolen time makes it
//! worse, so a run may also be short of 850 by no more than the periods
//! the host stole from all CPUs meanwhile.
//!
//! With 514 threads runnable on two CPUs the sampler thread's fair share
//! is less than reading the rings takes: it raises its weight where the
//! process may (root, `CAP_SYS_NICE`, `RLIMIT_NICE`). Where it may not,
//! the rings can fill and the kernel drop samples; the test then says so
//! and checks the CPU accounting only.
#![cfg(target_os = "linux")]

use std::time::Duration;

use btprof_sampler::{RawProfile, SampleClock, Sampler, SamplerConfig};
use btprof_testkit::{hogs::Hogs, spin_cpu, steal_time_all_cpus, with_watchdog};

mod support;
use support::{wait_until_listed, HeldThreads};

const THREADS: usize = 512;
/// CPU time all the workers share.
const WORK: Duration = Duration::from_secs(2);
const MIN_RATE: f64 = 850.0;

#[inline(never)]
fn pool_burst(work: Duration) -> u64 {
    spin_cpu(work, 20_000)
}

/// Runs the pool under a sampler on `clock`; returns the profile and the
/// workers' ids.
fn run(clock: SampleClock) -> (RawProfile, Vec<u64>) {
    let workers = HeldThreads::start(THREADS, "pool-", || {
        std::hint::black_box(pool_burst(WORK / THREADS as u32));
    });
    let sampler = support::cpu_sampler_at_1000_hz(clock);
    // Let the first listing find every worker (and open their events)
    // before they run.
    wait_until_listed(&sampler, THREADS);
    let tids = workers.release();
    (sampler.stop().expect("stop"), tids)
}

fn check(clock: SampleClock) {
    let stolen_before = steal_time_all_cpus().unwrap_or_default();
    let (raw, tids) = run(clock);
    let stolen = steal_time_all_cpus()
        .unwrap_or_default()
        .saturating_sub(stolen_before);
    let stats = &raw.stats;
    let samples: u64 = raw
        .table
        .iter()
        .filter(|(k, _)| tids.contains(&raw.threads[k.thread as usize].tid))
        .map(|(_, c)| c)
        .sum();
    let cpu: Duration = stats
        .thread_cpu
        .iter()
        .filter(|t| tids.contains(&t.tid))
        .map(|t| t.cpu)
        .sum();
    let rate = samples as f64 / cpu.as_secs_f64();
    println!(
        "measured: {clock}, {THREADS} threads: {samples} samples ({} distinct in the whole run) \
         in {cpu:?} of worker CPU: {rate:.1} per CPU-second; {} on rings, {} on timers; \
         {} lost to a full ring, {} failed, {} skipped, {} of exited threads; not covered {:?} \
         of {:?} process CPU; sampler thread {:?}; {stolen:?} stolen by the host",
        stats.recorded,
        stats.ring_threads,
        stats.timer_threads,
        stats.lost_samples,
        stats.failed_samples,
        stats.skipped_samples,
        stats.exited_threads,
        stats.unsampled_cpu(),
        stats.process_cpu,
        stats.sampler_cpu,
    );
    assert!(
        cpu >= WORK - Duration::from_millis(100),
        "the workers' CPU time was accounted: {cpu:?}"
    );
    if may_raise_weight() {
        // Not sampling noise: each worker's 4 periods are sampled whole,
        // and what moves the rate is the periods the kernel's task clock
        // skips, one for a share q of the threads (rate 1000 (1 - q/4)),
        // q growing with load: the lowest rate seen, 908, is q = 0.37, as
        // perf's worst (189 of 512). 850 is q = 0.6; losing the threads'
        // last part of a period still fails it (827-829). Stolen time
        // adds to the skips.
        let short = (MIN_RATE * cpu.as_secs_f64() - samples as f64).max(0.0);
        assert!(
            rate >= MIN_RATE || short <= stolen.as_secs_f64() * 1000.0,
            "{clock}: {rate:.1} samples per CPU-second, {short:.0} short of {MIN_RATE}; \
             {stolen:?} stolen by the host"
        );
    } else {
        println!(
            "NOT CHECKED: the rate at {THREADS} threads: this process may not raise the \
             sampler thread's weight (not root, no CAP_SYS_NICE or RLIMIT_NICE)"
        );
    }
}

/// Whether nice -10 is allowed: root, or `RLIMIT_NICE` of 30 and up
/// (`20 - nice`). (`CAP_SYS_NICE` alone is not looked for.)
fn may_raise_weight() -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getuid has no preconditions; getrlimit writes our local.
    unsafe {
        libc::getuid() == 0
            || (libc::getrlimit(libc::RLIMIT_NICE, &mut limit) == 0 && limit.rlim_cur >= 30)
    }
}

#[test]
fn a_pool_of_512_threads_is_counted_on_the_perf_clock() {
    with_watchdog("512 threads, perf clock", Duration::from_secs(180), || {
        let _hogs = Hogs::start(2);
        if Sampler::start(SamplerConfig {
            clock: Some(SampleClock::Perf),
            ..SamplerConfig::default()
        })
        .and_then(Sampler::stop)
        .is_err()
        {
            println!("NOT CHECKED: perf events are refused here");
            return;
        }
        check(SampleClock::Perf);
    });
}
