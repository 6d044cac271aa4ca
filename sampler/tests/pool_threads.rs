//! A pool that replaces its threads does not fill the stack table: with `share_stacks_by_name`, threads of one name count
//! their stacks under one thread, so each distinct stack is stored once,
//! not once per thread id. Without it, or for a name the kernel may have
//! cut to 15 bytes, each thread keeps its own. Runs under a watchdog, on
//! both sampling paths.
#![cfg(target_os = "linux")]

use std::thread;
use std::time::Duration;

use btprof_sampler::{Mode, RawProfile, Sampler, SamplerConfig, FORCE_SAMPLER_THREAD_ENV};

use btprof_testkit::{spin_cpu, with_watchdog};

/// Pool threads, run one after another.
const THREADS: usize = 60;
/// CPU time each spins: long enough to be listed and sampled.
const WORK: Duration = Duration::from_millis(10);
const SHORT_NAME: &str = "pool-task";
/// 15 bytes once the kernel cuts it: a name that may have been cut.
const LONG_NAME: &str = "pool-task-with-a-long-name";

#[inline(never)]
fn pool_work() {
    std::hint::black_box(spin_cpu(WORK, 2000));
}

/// Runs the pool under a sampler; returns the profile and the threads'
/// ids.
fn run(share: bool, name: &str) -> (RawProfile, Vec<u64>) {
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        share_stacks_by_name: share,
        ..SamplerConfig::default()
    })
    .expect("start");
    let tids = (0..THREADS)
        .map(|_| {
            thread::Builder::new()
                .name(name.into())
                .spawn(|| {
                    pool_work();
                    btprof_sampler::current_thread_id()
                })
                .unwrap()
                .join()
                .unwrap()
        })
        .collect();
    (sampler.stop().expect("stop"), tids)
}

/// How many thread entries, stack entries and samples the pool has.
fn pool_counts(raw: &RawProfile, name: &str) -> (usize, usize, u64) {
    let cut = &name[..name.len().min(15)];
    let threads = raw.threads.iter().filter(|t| t.name == cut).count();
    let (mut stacks, mut samples) = (0, 0);
    for (key, count) in raw.table.iter() {
        if raw.threads[key.thread as usize].name == cut {
            stacks += 1;
            samples += count;
        }
    }
    (threads, stacks, samples)
}

fn check(path: &str) {
    let (shared, tids) = run(true, SHORT_NAME);
    let (apart, _) = run(false, SHORT_NAME);
    let (long, _) = run(true, LONG_NAME);
    let s = pool_counts(&shared, SHORT_NAME);
    let a = pool_counts(&apart, SHORT_NAME);
    let l = pool_counts(&long, LONG_NAME);
    println!(
        "measured ({path}): {THREADS} pool threads of {} ms CPU: \
         shared by name: {} thread entries, {} stacks, {} samples; \
         kept apart: {} thread entries, {} stacks, {} samples; \
         a cut name, sharing on: {} thread entries, {} stacks, {} samples",
        WORK.as_millis(),
        s.0,
        s.1,
        s.2,
        a.0,
        a.1,
        a.2,
        l.0,
        l.1,
        l.2
    );
    // A precondition, not a rate check (born_threads.rs checks short threads'
    // rates): each run is 60 threads x 10 ms, ~600 whole periods; 60, one a
    // thread, makes sure there are stacks to compare.
    assert!(
        s.2 >= THREADS as u64 && a.2 >= THREADS as u64 && l.2 >= THREADS as u64,
        "{path}: too few samples of the pool to judge"
    );
    assert_eq!(s.0, 1, "{path}: one thread entry for the whole pool");
    let first = shared
        .threads
        .iter()
        .find(|t| t.name == SHORT_NAME)
        .unwrap();
    assert!(
        tids.contains(&first.tid),
        "{path}: the shared entry is one of the pool's threads"
    );
    // Not random: the bug counted entries, 1 here; every thread spins 10
    // periods, and 30 of 60 only leaves room for threads the sampler missed.
    assert!(
        shared.stats.threads_seen >= (THREADS / 2) as u64,
        "{path}: threads_seen counts threads, not entries: {}",
        shared.stats.threads_seen
    );
    // Not random, as above: shared by mistake, the pool has 1 entry; 30 of
    // 60 leaves room for threads never sampled.
    assert!(
        a.0 >= THREADS / 2,
        "{path}: kept apart, each sampled thread has its own entry ({} of {THREADS})",
        a.0
    );
    // Not random, as above: a cut name shared by mistake gives 1 entry.
    assert!(
        l.0 >= THREADS / 2,
        "{path}: a name the kernel may have cut is never shared ({} entries)",
        l.0
    );
    // Not random: kept apart, each of the 30 or more sampled threads has
    // stack entries of its own; shared, they are the few stacks of one loop.
    assert!(
        s.1 * 2 < a.1,
        "{path}: shared by name, the pool's stacks are stored once ({} entries), \
         not once per thread ({} entries)",
        s.1,
        a.1
    );
}

#[test]
fn a_pool_of_one_name_shares_its_stacks() {
    with_watchdog("the pool", Duration::from_secs(120), || {
        check("per-thread timers or their fallback");
        // This binary runs this one test, and the sampler reads the
        // variable when it starts.
        std::env::set_var(FORCE_SAMPLER_THREAD_ENV, "1");
        check("sampler thread");
    });
}
