//! Thousands of idle threads on the sampler-thread clock (where perf
//! events are refused). Each listing of the threads reads every thread's
//! clock, so listings are spaced by their cost and come hundreds of
//! milliseconds apart; what must still come soon:
//!
//! - the listing after the one that registered the pool comes as soon as
//!   any later one, not a second later, so a thread started then is found
//!   soon: registering thousands of new threads (reading each one's name)
//!   is paid once and does not space the listings, and names are re-read
//!   only for threads that ran, so no listing costs several times another;
//! - an idle thread that starts to run is sampled without a listing: its
//!   wake timer tells the sampler within a scheduler tick of its running,
//!   and past the wake timers' limit the stats count the idle threads left
//!   without one;
//! - a thread started just after a listing is found before the next one,
//!   by the thread ids the kernel gave since;
//! - a thread found blocking the profiling signal is looked at again while
//!   it runs, not only at listings: its mask used to be looked at again
//!   every 20 of them, seconds later, and a thread that blocked signals
//!   for a while and then unblocked went unsampled all that time.
#![cfg(target_os = "linux")]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use btprof_sampler::{RawProfile, SampleClock, Sampler};

/// Idle threads: enough that listings come hundreds of milliseconds apart.
const IDLE_THREADS: usize = 5000;

/// One sampler at a time: each test runs its own pool and sampler.
static SAMPLER: Mutex<()> = Mutex::new(());

/// The gap after the listing that registered the pool, at most this many
/// times the shortest of the next gaps (both in wakeups of the sampler
/// thread). With registering counted in a listing's cost, 5,000 names
/// (50-70 ms of the sampler's CPU time) put the next listing 6-8 gaps
/// away, and a thread started then ran unseen all that time; now about 1.
const FIRST_GAP_WITHIN: f64 = 3.0;

/// Gaps measured after the first: names re-read for every thread came in
/// bursts that made every few gaps 3.5-4.5 times the shortest; now at
/// most 1.7 times.
const LATER_GAPS: usize = 4;

/// The most any of those gaps may exceed the shortest of them by.
const LATER_GAPS_WITHIN: f64 = 2.5;

/// Idle threads beside the one that wakes: with listings held back, their
/// number does not matter, only that they have wake timers too.
const WOKEN_POOL: usize = 500;

/// Wakeups after which the test gives up waiting for the woken thread's
/// first sample (quiet, it came 3-11 wakeups after it started).
const WOKEN_GIVE_UP: u64 = 3000;

/// A thread that spins, once told to if given a receiver, until finished.
struct Spinner {
    tid: u64,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Spinner {
    fn start(name: &str, go: Option<mpsc::Receiver<()>>) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let thread = {
            let stop = stop.clone();
            thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    tid_tx
                        .send(btprof_sampler::current_thread_id())
                        .expect("send the tid");
                    if go.is_some_and(|go| go.recv().is_err()) {
                        return;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::black_box(btprof_testkit::spin_cpu(
                            Duration::from_millis(1),
                            100_000,
                        ));
                    }
                })
                .expect("spawn a spinning thread")
        };
        let tid = tid_rx.recv().expect("the spinning thread's id");
        Spinner { tid, stop, thread }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the spinning thread");
    }
}

/// Waits for the sampler's next listing to end, holds the listings back
/// (a test hook) and calls `start`, which sets a thread spinning and
/// returns its id; then waits for that thread's first sample. Returns the
/// wakeups from the hold to that sample, or `None` after
/// [`WOKEN_GIVE_UP`] of them. Panics if more than one listing ended
/// meanwhile (one that began before the hold may).
fn first_sample_with_listings_held(sampler: &Sampler, start: impl FnOnce() -> u64) -> Option<u64> {
    let progress = sampler.progress();
    let listings = || progress.listings.load(Ordering::Acquire);
    let seen = listings();
    let mut now = progress.ticks.load(Ordering::Acquire);
    while listings() == seen {
        now = support::wait_ticks(sampler, now, 1);
    }
    let held = support::HookOn::new(btprof_sampler::test_hooks::hold_back_listings);
    let (held_at, from) = (listings(), now);
    let tid = start();
    let mut found_after = None;
    while found_after.is_none() && now < from + WOKEN_GIVE_UP {
        let raw = sampler.collect(false).expect("a live profile");
        if support::samples_and_cpu_of(&raw, tid).0 > 0 {
            found_after = Some(now - from);
        }
        now = support::wait_ticks(sampler, now, 1);
    }
    let listed_meanwhile = listings() - held_at;
    drop(held);
    // Not random: the hook holds listings back; only one that began before
    // the hold may end meanwhile.
    assert!(
        listed_meanwhile <= 1,
        "{listed_meanwhile} listings while they were held back"
    );
    found_after
}

/// Threads that wait, blocked, until the pool is dropped.
struct IdlePool {
    release: mpsc::Sender<()>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl IdlePool {
    fn start(n: usize) -> IdlePool {
        let (release, wait) = mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let threads = (0..n)
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
        IdlePool { release, threads }
    }

    fn finish(self) {
        drop(self.release);
        for t in self.threads {
            t.join().expect("an idle thread");
        }
    }
}

/// Registering a pool of idle threads does not space the listings that
/// follow, and names are not re-read for threads that never ran: the gap
/// after the listing that registered the pool is within
/// [`FIRST_GAP_WITHIN`] times the shortest of the next [`LATER_GAPS`], and
/// none of those exceeds the shortest by more than [`LATER_GAPS_WITHIN`].
/// Counted in wakeups of the same run, so a busy machine changes little.
#[test]
fn registering_a_pool_does_not_space_the_listings() {
    let _one = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let pool = IdlePool::start(IDLE_THREADS);
    let sampler = support::sampler_thread_clock_at_1000_hz();
    let progress = sampler.progress();
    let listings = || progress.listings.load(Ordering::Acquire);
    // The wakeup at which each listing was first seen, from the first.
    let mut at: Vec<u64> = Vec::new();
    let mut now = progress.ticks.load(Ordering::Acquire);
    let mut seen = 0;
    let since = Instant::now();
    while at.len() < LATER_GAPS + 2 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "only {} listings in a minute",
            at.len()
        );
        now = support::wait_ticks(&sampler, now, 1);
        let listed = listings();
        if listed != seen {
            assert!(
                seen > 0 || listed == 1,
                "listing {listed} came before the first was seen"
            );
            at.push(now);
            seen = listed;
        }
    }
    let raw = sampler.stop().expect("stop");
    pool.finish();
    let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let (first, later) = (gaps[0], &gaps[1..]);
    let shortest = *later.iter().min().expect("later gaps");
    let longest = *later.iter().max().expect("later gaps");
    println!("measured: wakeups between listings: {first} after the pool's, then {later:?}");
    assert_eq!(raw.stats.clock, SampleClock::SamplerThread);
    // No law to derive from: a gap is a listing's cost in wakeups beside 2
    // hogs. 3 is three times the ratio of ~1 noted above and under half the
    // bug's 6-8: a margin, not a 1e-4 derivation.
    assert!(
        first as f64 <= FIRST_GAP_WITHIN * shortest as f64,
        "{first} wakeups after the listing that registered the pool, against {later:?} later"
    );
    // No law either: 2.5 is 1.5 times the 1.7 noted above and under the
    // bug's 3.5-4.5, over only 4 gaps: a margin, not a 1e-4 derivation.
    assert!(
        longest as f64 <= LATER_GAPS_WITHIN * shortest as f64,
        "later listings {later:?} wakeups apart"
    );
}

/// A thread of the pool, idle at the listings so far, starts to spin
/// while the listings are held back (a test hook): it is sampled all the
/// same, told to the sampler by its wake timer. Found only by a listing,
/// it waited for one; on a busy machine an early listing, asked for by its
/// CPU time, could find it first, so the test holds them back rather than
/// race them.
#[test]
fn an_idle_thread_that_starts_to_run_is_found_between_listings() {
    let _one = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let pool = IdlePool::start(WOKEN_POOL);
    let (go, wait) = mpsc::channel::<()>();
    let sleeper = Spinner::start("btp-wakes-late", Some(wait));
    let sampler = support::sampler_thread_clock_at_1000_hz();
    support::wait_until_listed(&sampler, WOKEN_POOL + 1);
    // After a listing that saw the sleeper idle and armed its timer.
    let found_after = first_sample_with_listings_held(&sampler, || {
        go.send(()).expect("wake the sleeper");
        sleeper.tid
    });
    sleeper.finish();
    let raw = sampler.stop().expect("stop");
    pool.finish();
    println!(
        "measured: with listings held back, the woken thread's first sample {found_after:?} \
         wakeups after it started"
    );
    assert_eq!(raw.stats.clock, SampleClock::SamplerThread);
    // Not a chance bar: with listings held, only its wake timer brings it to
    // the sampler (3-11 wakeups, above); 3000, seconds, only lets a starved
    // machine run it. Without the timer it is never found.
    assert!(
        found_after.is_some(),
        "the woken thread had no sample in {WOKEN_GIVE_UP} wakeups without a listing"
    );
    // The stats say so: every idle thread was given a timer, and one told.
    // Not random: 500 in the pool and the sleeper, and its timer fired.
    assert!(
        raw.stats.wake_timers > WOKEN_POOL as u64 && raw.stats.wakes >= 1,
        "{} wake timers, {} wakes for a pool of {WOKEN_POOL} and the woken thread",
        raw.stats.wake_timers,
        raw.stats.wakes
    );
    assert_eq!(raw.stats.idle_without_wake_timer, 0);
}

/// A thread started while listings are held back (a test hook), in a
/// process of thousands of idle threads whose listings come about 0.2 s
/// apart, is sampled all the same: the sampler finds it by the thread ids
/// the kernel gave since the last listing. Found only by a listing, it ran
/// unseen until the next.
#[test]
fn a_thread_born_between_listings_is_found_without_one() {
    if std::fs::read_to_string("/proc/sys/kernel/ns_last_pid").is_err() {
        println!(
            "NOT CHECKED: /proc/sys/kernel/ns_last_pid cannot be read here, so new threads \
             wait for a listing"
        );
        return;
    }
    let _one = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let pool = IdlePool::start(IDLE_THREADS);
    let sampler = support::sampler_thread_clock_at_1000_hz();
    support::wait_until_listed(&sampler, IDLE_THREADS);
    // After a listing of the whole pool: listings are spaced by its cost.
    let mut newcomer = None;
    let found_after = first_sample_with_listings_held(&sampler, || {
        let started = Spinner::start("btp-newcomer", None);
        let tid = started.tid;
        newcomer = Some(started);
        tid
    });
    newcomer.expect("started").finish();
    let raw = sampler.stop().expect("stop");
    pool.finish();
    println!(
        "measured: with listings held back, the new thread's first sample {found_after:?} \
         wakeups after it started; {} threads found between listings",
        raw.stats.threads_found_between_listings
    );
    assert_eq!(raw.stats.clock, SampleClock::SamplerThread);
    // Not a chance bar, as above: with listings held, only the thread ids
    // given since can bring it; found by listings only, it never is.
    assert!(
        found_after.is_some(),
        "the new thread had no sample in {WOKEN_GIVE_UP} wakeups without a listing"
    );
    // Not random: the newcomer found above, counted.
    assert!(raw.stats.threads_found_between_listings >= 1);
}

/// A soft `RLIMIT_SIGPENDING` under which the sampler opens at most this
/// many wake timers (a quarter of the limit).
const LOW_SIGPENDING: u64 = 400;

/// Sets the soft `RLIMIT_SIGPENDING` while it lives, and puts it back.
struct SigpendingLimit(libc::rlimit);

impl SigpendingLimit {
    fn lower_to(soft: u64) -> SigpendingLimit {
        let mut was = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid resource and out-pointer.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_SIGPENDING, &mut was) };
        assert_eq!(read, 0, "getrlimit");
        let low = libc::rlimit {
            rlim_cur: soft.min(was.rlim_cur),
            rlim_max: was.rlim_max,
        };
        // SAFETY: as above; lowering a soft limit needs no privilege.
        let set = unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &low) };
        assert_eq!(set, 0, "setrlimit");
        SigpendingLimit(was)
    }
}

impl Drop for SigpendingLimit {
    fn drop(&mut self) {
        // SAFETY: the limits read before, with the hard limit unchanged.
        unsafe { libc::setrlimit(libc::RLIMIT_SIGPENDING, &self.0) };
    }
}

/// With more idle threads than wake timers may be opened (a quarter of
/// `RLIMIT_SIGPENDING`: each timer holds a queued-signal entry against
/// it), no more are opened, and the stats count the idle threads left
/// without one, so a profile says why they were looked at only at
/// listings.
#[test]
fn idle_threads_past_the_wake_timers_limit_are_counted() {
    let _one = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let pool = IdlePool::start(WOKEN_POOL);
    let limit = SigpendingLimit::lower_to(LOW_SIGPENDING);
    let cap = LOW_SIGPENDING / 4;
    let sampler = support::sampler_thread_clock_at_1000_hz();
    support::wait_until_listed(&sampler, WOKEN_POOL);
    // Two more listings: the pool is idle at both.
    let progress = sampler.progress();
    let listings = || progress.listings.load(Ordering::Acquire);
    let (seen, mut now) = (listings(), progress.ticks.load(Ordering::Acquire));
    while listings() < seen + 2 {
        now = support::wait_ticks(&sampler, now, 1);
    }
    let raw = sampler.stop().expect("stop");
    drop(limit);
    pool.finish();
    let s = &raw.stats;
    println!(
        "measured: {} wake timers, {} idle threads without one, limit {cap}",
        s.wake_timers, s.idle_without_wake_timer
    );
    assert_eq!(s.clock, SampleClock::SamplerThread);
    assert!(
        s.wake_timers <= cap,
        "{} wake timers opened past the limit of {cap}",
        s.wake_timers
    );
    assert!(
        s.idle_without_wake_timer >= WOKEN_POOL as u64 - cap,
        "{} idle threads counted without a wake timer; {} of the pool of {WOKEN_POOL} \
         could have none",
        s.idle_without_wake_timer,
        WOKEN_POOL as u64 - cap
    );
}

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
    let _one = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let pool = IdlePool::start(IDLE_THREADS);
    let sampler = support::sampler_thread_clock_at_1000_hz();
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
    pool.finish();
    println!(
        "measured: first sample {wakeups} wakeups after it unblocked ({listed} listings between)"
    );
    assert_eq!(raw.stats.clock, SampleClock::SamplerThread);
    // Not random: while it runs it is looked at every 100 ms, ~100 wakeups;
    // 50 more is room for a wakeup that finds it running beside the hogs. The
    // bug looked again 20 listings later, seconds.
    assert!(
        sampled && wakeups <= SAMPLED_WITHIN,
        "no sample within {wakeups} wakeups after it unblocked ({listed} listings between)"
    );
}
