//! What the sampler's tests that check profiles share: the names of a
//! sampled stack's frames and the samples of a named thread. Helpers that
//! tests of other crates use too (the thread's CPU clock, the watchdog)
//! are in `btprof-testkit`.

// Shared by several test binaries, each using part of it.
#![allow(dead_code)]

use btprof_sampler::RawProfile;
use btprof_symbols::Resolver;

/// Names the calling thread `name` (at most 15 bytes).
#[cfg(target_os = "linux")]
pub fn name_self(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes
    // names the calling thread.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

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

/// A cpu-mode sampler at 1000 Hz on `clock`, started.
pub fn cpu_sampler_at_1000_hz(clock: btprof_sampler::SampleClock) -> btprof_sampler::Sampler {
    btprof_sampler::Sampler::start(btprof_sampler::SamplerConfig {
        hz: 1000,
        mode: btprof_sampler::Mode::Cpu,
        clock: Some(clock),
        ..btprof_sampler::SamplerConfig::default()
    })
    .expect("start")
}

/// A cpu-mode sampler at 1000 Hz on the sampler-thread clock, started.
#[cfg(target_os = "linux")]
pub fn sampler_thread_clock_at_1000_hz() -> btprof_sampler::Sampler {
    cpu_sampler_at_1000_hz(btprof_sampler::SampleClock::SamplerThread)
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

/// What [`count_listings`] saw.
pub struct Listings {
    /// Listings of the threads in `wakeups` wakeups of the sampler thread,
    /// which took `window`.
    pub listings: u64,
    pub wakeups: u64,
    pub window: std::time::Duration,
    /// Wakeups from a thread's birth to the one whose listing found it.
    pub born_found_after: Option<u64>,
    /// The least CPU time either spinning thread got in `window`, as a
    /// share of it.
    pub spinner_share: f64,
    pub raw: btprof_sampler::RawProfile,
}

impl std::fmt::Display for Listings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} listings in {} wakeups over {:?} (each spinner on a CPU {:.0}% of it or \
             more); a thread born next listed {:?} wakeups after its birth; threads on the \
             rings {}, on timers {}",
            self.listings,
            self.wakeups,
            self.window,
            self.spinner_share * 100.0,
            self.born_found_after,
            self.raw.stats.ring_threads,
            self.raw.stats.timer_threads
        )
    }
}

/// Below this share of the window on a CPU, a spinning thread is not
/// "kept running" in the listing rules' sense: between its time slices a
/// listing finds it stopped and is not put off. Beside two busy processes
/// on 2 CPUs each spinner gets about 40%.
const KEPT_RUNNING: f64 = 0.2;

impl Listings {
    /// Counts listings as [`count_listings`] does, again (at most three
    /// times in all, see [`btprof_testkit::stats::judge`]) while a spinning
    /// thread got less than [`KEPT_RUNNING`] of the window: the rules put
    /// listings off only while the threads keep running, so a machine
    /// that starves them brings listings the bars do not allow for.
    pub fn counted(what: &str, config: btprof_sampler::SamplerConfig, wakeups: u64) -> Listings {
        use btprof_testkit::stats::{judge, Attempt};
        judge(what, |_| {
            let seen = count_listings(config.clone(), wakeups);
            if seen.spinner_share < KEPT_RUNNING {
                Attempt::Starved(format!(
                    "a spinning thread ran {:.0}% of the {:?} counted",
                    seen.spinner_share * 100.0,
                    seen.window
                ))
            } else {
                Attempt::Judge(seen)
            }
        })
    }

    /// Prints what was seen, then asserts at most `most` listings in the
    /// window and the born thread listed within `found_within` wakeups.
    pub fn check(&self, most: u64, found_within: u64) {
        println!("measured: {self}");
        // Not random: listings are the sampler's own decisions, counted in its
        // wakeups; each caller says how `most` follows from its listing rule
        // and what the bug would bring.
        assert!(
            self.listings <= most,
            "{} listings in {:?}, at most {most} expected",
            self.listings,
            self.window
        );
        let found = self
            .born_found_after
            .expect("the born thread was never listed");
        // Not random either: wakeups to a listing, seen at the test's 5 ms
        // looks; the callers say what `found_within` allows.
        assert!(
            found <= found_within,
            "listed {found} wakeups after its birth"
        );
    }
}

/// Waits until the sampler thread woke `n` more times than `from`;
/// returns its wakeups then.
pub fn wait_ticks(sampler: &btprof_sampler::Sampler, from: u64, n: u64) -> u64 {
    use std::sync::atomic::Ordering;
    loop {
        let now = sampler.progress().ticks.load(Ordering::Acquire);
        if now >= from + n {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Samples two threads that spin throughout with `config`; once the
/// start settled, counts the listings of the threads in `wakeups` of the
/// sampler thread's wakeups, then starts a third spinning thread and
/// counts the wakeups until a listing finds it (30 at most).
pub fn count_listings(config: btprof_sampler::SamplerConfig, wakeups: u64) -> Listings {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let stop = Arc::new(AtomicBool::new(false));
    // Each spinner publishes its CPU time (ns) after every 5 ms of it.
    let spinner = |stop: Arc<AtomicBool>, cpu: Arc<AtomicU64>| {
        move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(btprof_testkit::spin_cpu(Duration::from_millis(5), 200_000));
                cpu.store(
                    btprof_testkit::thread_cpu().as_nanos() as u64,
                    Ordering::Relaxed,
                );
            }
        }
    };
    let cpus: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut workers: Vec<_> = cpus
        .iter()
        .map(|cpu| std::thread::spawn(spinner(stop.clone(), cpu.clone())))
        .collect();
    let cpu_now = || -> Vec<u64> { cpus.iter().map(|c| c.load(Ordering::Relaxed)).collect() };
    let sampler = btprof_sampler::Sampler::start(config).expect("start");
    let progress = sampler.progress();
    let ticks = wait_ticks(&sampler, 0, 3);
    let (listed, since, cpu_from) = (
        progress.listings.load(Ordering::Acquire),
        Instant::now(),
        cpu_now(),
    );
    let ticks = wait_ticks(&sampler, ticks, wakeups);
    let listings = progress.listings.load(Ordering::Acquire) - listed;
    let window = since.elapsed();
    let spinner_share = cpu_now()
        .iter()
        .zip(&cpu_from)
        .map(|(to, from)| to.saturating_sub(*from) as f64 / window.as_nanos().max(1) as f64)
        .fold(f64::INFINITY, f64::min);
    let known = progress.threads.load(Ordering::Acquire);
    workers.push(std::thread::spawn(spinner(stop.clone(), Arc::default())));
    let (mut born_found_after, mut last) = (None, ticks);
    while born_found_after.is_none() && last < ticks + 30 {
        last = wait_ticks(&sampler, last, 1);
        if progress.threads.load(Ordering::Acquire) > known {
            born_found_after = Some(last - ticks);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let raw = sampler.stop().expect("stop");
    Listings {
        listings,
        wakeups,
        window,
        born_found_after,
        spinner_share,
        raw,
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

// Each test crate uses a part of this module.
#[allow(unused_imports)]
pub use btprof_testkit::signal_mask::{block_every_signal, unblock_every_signal};

/// A test hook turned on until dropped, also when the test panics, so
/// that the other tests of its binary run without it. `set` is the hook's
/// switch (`btprof_sampler::test_hooks::hold_back_listings`, say).
pub struct HookOn(fn(bool));

impl HookOn {
    pub fn new(set: fn(bool)) -> HookOn {
        set(true);
        HookOn(set)
    }
}

impl Drop for HookOn {
    fn drop(&mut self) {
        (self.0)(false);
    }
}

/// Sets this process's `resource` limit, soft and hard, to `value`.
#[cfg(target_os = "linux")]
pub fn set_limit(resource: libc::__rlimit_resource_t, value: u64) {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: a valid resource and limit, for this process only.
    assert_eq!(unsafe { libc::setrlimit(resource, &limit) }, 0);
}

/// What threads spun by their own CPU clocks: each one's id and time.
pub type Spun = std::sync::Mutex<Vec<(u64, std::time::Duration)>>;

/// Spins `spin` of this thread's CPU time (`batch` iterations between
/// looks at its clock), then adds what its clock says it spun to `spun`.
pub fn spin_and_record(spin: std::time::Duration, batch: u32, spun: &Spun) {
    let start = btprof_testkit::thread_cpu();
    std::hint::black_box(btprof_testkit::spin_cpu(spin, batch));
    let ran = btprof_testkit::thread_cpu() - start;
    let tid = btprof_sampler::current_thread_id();
    spun.lock().unwrap().push((tid, ran));
}

/// What thread `tid` spun, from [`spin_and_record`].
pub fn spun_by(spun: &Spun, tid: u64) -> std::time::Duration {
    let spun = spun.lock().unwrap();
    spun.iter().find(|r| r.0 == tid).expect("each worker ran").1
}
