//! What the sampler's tests that check profiles share: the names of a
//! sampled stack's frames and the samples of a named thread. Helpers that
//! tests of other crates use too (the thread's CPU clock, the watchdog)
//! are in `btprof-testkit`.

// Shared by several test binaries, each using part of it.
#![allow(dead_code)]

use btprof_sampler::RawProfile;
use btprof_symbols::Resolver;

/// Samples recorded on threads named `name` (a name several threads
/// share counts them all).
pub fn samples_named(raw: &RawProfile, name: &str) -> u64 {
    raw.table
        .iter()
        .filter(|(k, _)| raw.threads[k.thread as usize].name == name)
        .map(|(_, c)| c)
        .sum()
}

/// The function names of a sampled stack's frames, leaf first: the leaf
/// is the interrupted pc, each caller a return address looked up one byte
/// back (inside its call instruction).
pub fn frame_names(resolver: &mut Resolver, frames: &[u64]) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let lookup = if i == 0 { a } else { a - 1 };
            resolver.resolve(lookup).name.to_string()
        })
        .collect()
}

/// The samples recorded on thread `tid` and the CPU time the sampler
/// accounted to it.
pub fn samples_and_cpu_of(raw: &RawProfile, tid: u64) -> (u64, std::time::Duration) {
    let samples = raw
        .table
        .iter()
        .filter(|(k, _)| raw.threads[k.thread as usize].tid == tid)
        .map(|(_, c)| c)
        .sum();
    let cpu = raw
        .stats
        .thread_cpu
        .iter()
        .find(|t| t.tid == tid)
        .map_or(std::time::Duration::ZERO, |t| t.cpu);
    (samples, cpu)
}

/// Waits until `sampler` has listed at least `threads` threads (and, on
/// the perf clock, opened their events), so that work started next is
/// sampled from its first moment. Panics after 30 s.
pub fn wait_until_listed(sampler: &btprof_sampler::Sampler, threads: usize) {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};
    let since = Instant::now();
    while (sampler.progress().threads.load(Ordering::Relaxed) as usize) < threads {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the sampler never listed {threads} threads"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Threads named `{prefix}{i}` that wait until [`HeldThreads::release`],
/// then run `work`: started before a sampler, so it finds them at start,
/// and released once it lists them.
pub struct HeldThreads {
    barrier: std::sync::Arc<std::sync::Barrier>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl HeldThreads {
    pub fn start(n: usize, prefix: &str, work: fn()) -> HeldThreads {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
        let threads = (0..n)
            .map(|i| {
                let barrier = barrier.clone();
                std::thread::Builder::new()
                    .name(format!("{prefix}{i}"))
                    .stack_size(256 << 10)
                    .spawn(move || {
                        let tid = btprof_sampler::current_thread_id();
                        barrier.wait();
                        work();
                        tid
                    })
                    .expect("spawn a held thread")
            })
            .collect();
        HeldThreads { barrier, threads }
    }

    /// Lets them run, waits for them, and returns their thread ids.
    pub fn release(self) -> Vec<u64> {
        self.barrier.wait();
        self.threads
            .into_iter()
            .map(|t| t.join().expect("a held thread"))
            .collect()
    }
}
