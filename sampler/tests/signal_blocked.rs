//! A thread found blocking the profiling signal on the sampler-thread
//! clock (where perf events are refused) is looked at again while it
//! runs, not only at listings of the threads: in a process with thousands
//! of threads listings are far apart (each reads every thread's clock,
//! so they are spaced by their cost), and such a thread's mask was looked
//! at again only every 20 of them, seconds later. A thread that blocked
//! signals for a while and then unblocked went unsampled all that time.
#![cfg(target_os = "linux")]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use btprof_sampler::{Mode, RawProfile, SampleClock, Sampler, SamplerConfig};

/// Idle threads: enough that listings come hundreds of milliseconds apart.
const IDLE_THREADS: usize = 5000;

/// The most sampler wakeups from its unblocking to its first sample: the
/// sampler looks at such a thread at least every 100 ms while it runs,
/// and wakes at most 2 ms apart.
const SAMPLED_WITHIN: u64 = 150;

/// Wakeups after which the test gives up waiting for that sample.
const GIVE_UP: u64 = 600;

/// One thread that spins with every signal blocked until told to unblock,
/// then spins on until stopped.
struct Blocker {
    tid: u64,
    unblock: Arc<AtomicBool>,
    unblocked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Blocker {
    fn start() -> Blocker {
        let (unblock, unblocked, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let tid = Arc::new(AtomicU64::new(0));
        let thread = {
            let (unblock, unblocked, stop, tid) = (
                unblock.clone(),
                unblocked.clone(),
                stop.clone(),
                tid.clone(),
            );
            thread::Builder::new()
                .name("btp-blocks-once".into())
                .spawn(move || {
                    support::block_every_signal();
                    tid.store(btprof_sampler::current_thread_id(), Ordering::Release);
                    while !unblock.load(Ordering::Relaxed) {
                        std::hint::black_box(btprof_testkit::spin_cpu(
                            Duration::from_millis(1),
                            100_000,
                        ));
                    }
                    support::unblock_every_signal();
                    unblocked.store(true, Ordering::Release);
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::black_box(btprof_testkit::spin_cpu(
                            Duration::from_millis(1),
                            100_000,
                        ));
                    }
                })
                .expect("spawn")
        };
        while tid.load(Ordering::Acquire) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        Blocker {
            tid: tid.load(Ordering::Acquire),
            unblock,
            unblocked,
            stop,
            thread,
        }
    }

    fn finish(self) {
        self.unblock.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the blocking thread");
    }
}

/// The periods counted as lost to a blocked signal on thread `tid`.
fn signal_blocked_of(raw: &RawProfile, tid: u64) -> u64 {
    raw.stats
        .thread_cpu
        .iter()
        .find(|t| t.tid == tid)
        .map_or(0, |t| t.signal_blocked)
}

/// A busy thread blocks every signal until the sampler confirmed that it
/// does, then unblocks: its first sample comes within [`SAMPLED_WITHIN`]
/// wakeups. Counted in wakeups, so a busy machine that delays them
/// changes nothing.
#[test]
fn a_thread_that_unblocks_the_signal_is_sampled_again_between_listings() {
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let (release, wait) = mpsc::channel::<()>();
    let wait = Arc::new(Mutex::new(wait));
    let idle: Vec<_> = (0..IDLE_THREADS)
        .map(|_| {
            let wait = wait.clone();
            thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let _ = wait.lock().map(|w| w.recv());
                })
                .expect("spawn an idle thread")
        })
        .collect();
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        clock: Some(SampleClock::SamplerThread),
        ..SamplerConfig::default()
    })
    .expect("start");
    let progress = sampler.progress();
    let listings = || progress.listings.load(Ordering::Acquire);
    let ticks = || progress.ticks.load(Ordering::Acquire);
    let blocker = Blocker::start();
    let since = Instant::now();
    loop {
        let raw = sampler.collect(false).expect("a live profile");
        if signal_blocked_of(&raw, blocker.tid) > 0 {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the thread that blocks every signal was never counted as blocking it: {:?}",
            raw.stats.clock
        );
        thread::sleep(Duration::from_millis(5));
    }
    blocker.unblock.store(true, Ordering::Relaxed);
    while !blocker.unblocked.load(Ordering::Acquire) {
        thread::sleep(Duration::from_millis(1));
    }
    let (unblocked_at, from) = (listings(), ticks());
    let mut now = from;
    let sampled = loop {
        let raw = sampler.collect(false).expect("a live profile");
        if support::samples_and_cpu_of(&raw, blocker.tid).0 > 0 {
            break true;
        }
        if now >= from + GIVE_UP {
            break false;
        }
        now = support::wait_ticks(&sampler, now, 1);
    };
    let (wakeups, listed) = (ticks() - from, listings() - unblocked_at);
    blocker.finish();
    let raw = sampler.stop().expect("stop");
    drop(release);
    for t in idle {
        t.join().expect("an idle thread");
    }
    println!(
        "measured: first sample {wakeups} wakeups after it unblocked ({listed} listings between)"
    );
    assert_eq!(raw.stats.clock, SampleClock::SamplerThread);
    assert!(
        sampled && wakeups <= SAMPLED_WITHIN,
        "no sample within {wakeups} wakeups after it unblocked ({listed} listings between)"
    );
}
