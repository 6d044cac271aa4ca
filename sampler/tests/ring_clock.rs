//! Where perf events are allowed the kernel samples every thread into ring
//! buffers, with no signal: threads that block every signal are sampled at
//! the asked rate like any other.
//!
//! A signal-based profiler gets nothing from such threads (their signal
//! would stay queued, or be taken by their `sigwait`), and programs that
//! handle signals through `signalfd` block them in every thread. Each
//! test below spins such threads beside two CPU hogs and holds their
//! samples per CPU-second of their own clocks to at least 950 at 1000 Hz:
//! the count is per CPU time, so the hogs change nothing but how long it
//! takes. Where perf events are refused the tests say so and check
//! nothing else (the sampler-thread and POSIX clocks are checked in
//! `host_unchanged`, which counts such threads' lost samples instead).
#![cfg(target_os = "linux")]

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use btprof_sampler::{Mode, RawProfile, SampleClock, Sampler, SamplerConfig};
use btprof_testkit::{hogs::Hogs, spin_cpu, thread_cpu, with_watchdog};

mod support;
use support::{block_every_signal, samples_and_cpu_of, unblock_every_signal};

/// CPU time each signal-blocking thread spins while sampled.
const SPIN: Duration = Duration::from_secs(2);
/// The least samples per CPU-second of a thread's own clock at 1000 Hz.
const MIN_RATE: f64 = 950.0;

/// A spin in a function of its own, so samples can be told by their leaf.
#[inline(never)]
fn blocked_spin(work: Duration) -> u64 {
    spin_cpu(work, 200_000)
}

/// One sampler per process: the tests take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn start() -> Sampler {
    Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start")
}

/// Samples per CPU-second of thread `tid`: its samples over the CPU time
/// the sampler accounted to it.
fn rate_of(raw: &RawProfile, tid: u64) -> (u64, Duration, f64) {
    let (samples, cpu) = samples_and_cpu_of(raw, tid);
    (samples, cpu, samples as f64 / cpu.as_secs_f64().max(1e-9))
}

/// Whether the run used the perf ring clock; says so when it could not.
fn on_rings(raw: &RawProfile) -> bool {
    if raw.stats.clock != SampleClock::Perf {
        println!(
            "NOT CHECKED: perf events are refused here (clock {}), so no thread is sampled \
             into a ring",
            raw.stats.clock
        );
        return false;
    }
    true
}

/// A thread that blocks every signal, found at start, spinning 2 s of CPU.
#[test]
fn a_thread_blocking_every_signal_is_sampled_at_the_rate() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("a signal-blocking thread", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let go = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let spinner = {
            let go = go.clone();
            thread::Builder::new()
                .name("blocks-all".into())
                .spawn(move || {
                    block_every_signal();
                    tid_tx.send(btprof_sampler::current_thread_id()).unwrap();
                    while !go.load(Ordering::Acquire) {
                        thread::sleep(Duration::from_millis(1));
                    }
                    let before = thread_cpu();
                    std::hint::black_box(blocked_spin(SPIN));
                    thread_cpu() - before
                })
                .unwrap()
        };
        let tid = tid_rx.recv().unwrap();
        let sampler = start();
        go.store(true, Ordering::Release);
        let spun = spinner.join().unwrap();
        let raw = sampler.stop().expect("stop");
        if !on_rings(&raw) {
            return;
        }
        let (samples, cpu, rate) = rate_of(&raw, tid);
        println!(
            "measured: {samples} samples in {cpu:?} of accounted CPU ({spun:?} spun): \
             {rate:.1} per CPU-second; {} ring threads, {} timer threads, {} lost to its mask",
            raw.stats.ring_threads, raw.stats.timer_threads, raw.stats.signal_blocked_samples
        );
        // Not random: accounted from the sampler's first listing, a moment
        // after `go`, so up to 100 ms of the 2 s may fall before it; a thread
        // left unaccounted shows as 0.
        assert!(
            cpu >= SPIN - Duration::from_millis(100),
            "its CPU time was accounted: {cpu:?}"
        );
        // Not random: ring samples are its whole periods of task clock, short
        // of its CPU clock only by periods a late VM timer skips (0.2-0.6%, see
        // `threads_born_together_keep_their_own_periods`) and 2 at the ends.
        assert!(rate >= MIN_RATE, "{rate:.1} samples per CPU-second");
        assert_eq!(raw.stats.signal_blocked_samples, 0);
    });
}

/// A `signalfd` program: the main thread blocks every signal before it
/// creates any thread, so every thread inherits the mask, and reads its
/// signals from a descriptor. Two workers are found at start, one is
/// born while sampling; each spins 1 s of CPU.
#[test]
fn a_signalfd_program_is_sampled_at_the_rate() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("a signalfd program", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        block_every_signal();
        // SAFETY: an empty-then-filled set for a new signalfd.
        let sfd = unsafe {
            let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
            libc::sigemptyset(set.as_mut_ptr());
            libc::sigaddset(set.as_mut_ptr(), libc::SIGINT);
            libc::signalfd(-1, set.as_ptr(), libc::SFD_CLOEXEC)
        };
        assert!(sfd >= 0, "signalfd: {}", std::io::Error::last_os_error());
        let stolen_before = btprof_testkit::steal_time_all_cpus().unwrap_or_default();
        let barrier = Arc::new(Barrier::new(3));
        let worker = |name: &str, barrier: Option<Arc<Barrier>>| {
            thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    if let Some(barrier) = barrier {
                        barrier.wait();
                    }
                    let tid = btprof_sampler::current_thread_id();
                    std::hint::black_box(blocked_spin(SPIN / 2));
                    tid
                })
                .unwrap()
        };
        let found = [
            worker("sfd-found-0", Some(barrier.clone())),
            worker("sfd-found-1", Some(barrier.clone())),
        ];
        let sampler = start();
        barrier.wait();
        let born = worker("sfd-born", None);
        let mut tids: Vec<u64> = found.into_iter().map(|h| h.join().unwrap()).collect();
        tids.push(born.join().unwrap());
        let raw = sampler.stop().expect("stop");
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(sfd) };
        unblock_every_signal();
        if !on_rings(&raw) {
            return;
        }
        for tid in tids {
            let (samples, cpu, rate) = rate_of(&raw, tid);
            println!(
                "measured: thread {tid}: {samples} samples in {cpu:?}: {rate:.1} per CPU-second"
            );
            // Not random: each worker is accounted from before its spin (found
            // at start behind the barrier, or from its birth); 20 ms is slack
            // at the ends, 2%, and a thread left unaccounted shows as 0.
            assert!(
                cpu >= SPIN / 2 - Duration::from_millis(20),
                "thread {tid}: CPU accounted {cpu:?}"
            );
            let st = &raw.stats;
            // Not random, as in the test above: whole periods of task clock,
            // short only of a late VM timer's skips (under 1%) and 2 at the
            // ends; a thread the rings do not take gets none.
            assert!(
                rate >= MIN_RATE,
                "thread {tid}: {rate:.1} samples per CPU-second (run: {} lost to a full ring, \
                 {} failed, {:?} stolen from the CPUs while it ran)",
                st.lost_samples,
                st.failed_samples,
                btprof_testkit::steal_time_all_cpus()
                    .unwrap_or_default()
                    .saturating_sub(stolen_before)
            );
        }
        assert_eq!(raw.stats.signal_blocked_samples, 0);
        assert!(raw.stats.ring_threads >= 3, "{:?}", raw.stats);
    });
}

/// Frames in [`deep_frames`]'s recursion: with its ~100-byte frames,
/// deeper than the kernel's call chains reach (127 frames) and than the
/// stack a ring sample copies for CFI (16 KiB), but within the depth the
/// test asks for.
const DEEP_FRAMES: u32 = 450;

/// Recurses `depth` times with a padded frame, then spins `work` of CPU.
#[inline(never)]
fn deep_frames(depth: u32, work: Duration) -> u64 {
    let pad = std::hint::black_box([u64::from(depth); 8]);
    if depth == 0 {
        return blocked_spin(work);
    }
    // Used after the call, so the recursion is not a tail call.
    deep_frames(depth - 1, work).wrapping_add(std::hint::black_box(pad)[3])
}

/// A thread whose stack is deeper than its ring samples reach is handed to
/// a timer of its own, whose handler walks the frame-pointer chain as deep
/// as asked: its stacks are complete but for the few samples taken before
/// the sampler saw that they were cut. Without the hand-off none are.
#[test]
fn a_thread_deeper_than_ring_samples_reach_gets_complete_stacks() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("a deep thread", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let sampler = Sampler::start(SamplerConfig {
            hz: 1000,
            mode: Mode::Cpu,
            max_depth: 500,
            ..SamplerConfig::default()
        })
        .expect("start");
        let deep = thread::Builder::new()
            .name("deep".into())
            .spawn(|| {
                std::hint::black_box(deep_frames(DEEP_FRAMES, SPIN / 2));
                btprof_sampler::current_thread_id()
            })
            .unwrap();
        let tid = deep.join().unwrap();
        let raw = sampler.stop().expect("stop");
        if !on_rings(&raw) {
            return;
        }
        let (mut samples, mut complete) = (0, 0);
        for (key, count) in raw.table.iter() {
            if raw.threads[key.thread as usize].tid != tid {
                continue;
            }
            samples += count;
            if key.frames.len() > DEEP_FRAMES as usize && !key.end.is_truncated() {
                complete += count;
            }
        }
        println!(
            "measured: {complete} of {samples} samples complete, {} on rings, {} threads \
             handed to timers",
            raw.stats.ring_samples, raw.stats.timer_threads
        );
        // A precondition, not random: 1 s spun is ~1000 whole periods; 300
        // only makes sure there are enough to judge the share below.
        assert!(samples >= 300, "{samples} samples: {:?}", raw.stats);
        assert!(raw.stats.timer_threads >= 1, "{:?}", raw.stats);
        // Not random: only samples before the hand-off are cut, and it waits
        // for a collection, 20 ms at most on the rings: about 20 of ~1000
        // periods. 10% leaves 5 times that; without the hand-off all are cut.
        assert!(
            complete * 100 >= samples * 90,
            "{complete} of {samples} samples complete"
        );
    });
}

/// The longest a `stop` may take here, median of three. The sampler
/// thread sleeps up to 100 ms between collections at 100 Hz, and the
/// kernel writes final counts for only some of the threads that exit
/// together: `stop` used to sleep out the first and wait 200 ms for the
/// second, so every stop took 200-300 ms.
const STOP_BOUND: Duration = Duration::from_millis(60);

/// `stop` returns at once, at a rate where the sampler thread sleeps long
/// between collections, asked right after a collection, and after threads
/// born while sampling have exited.
#[test]
fn stop_returns_promptly_after_born_threads_exit() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("stopping promptly", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let mut took = Vec::new();
        for _ in 0..3 {
            let sampler = Sampler::start(SamplerConfig {
                hz: 100,
                mode: Mode::Cpu,
                ..SamplerConfig::default()
            })
            .expect("start");
            let workers: Vec<_> = (0..4)
                .map(|_| thread::spawn(|| spin_cpu(Duration::from_millis(50), 20_000)))
                .collect();
            for w in workers {
                std::hint::black_box(w.join().unwrap());
            }
            // Right after a collection: the sampler thread has its whole
            // sleep ahead of it.
            let ticks = sampler.progress().ticks.load(Ordering::Relaxed);
            while sampler.progress().ticks.load(Ordering::Relaxed) == ticks {
                thread::sleep(Duration::from_micros(200));
            }
            let asked = Instant::now();
            let raw = sampler.stop().expect("stop");
            took.push(asked.elapsed());
            if !on_rings(&raw) {
                return;
            }
        }
        took.sort();
        println!("measured: stops took {took:?}");
        // A latency, not a count: with the 3 stops independent, the median
        // passes 60 ms with chance 3q^2 - 2q^3, under 1e-4 while fewer than 1
        // stop in 173 does (q < 0.0058). The bug's stops took 200-300 ms.
        assert!(took[1] <= STOP_BOUND, "median stop {:?}", took[1]);
    });
}

/// CPU time each renaming thread spends under each of its two names:
/// shorter than the time between two reads of the rings (20 ms at
/// 1000 Hz), so that samples under both names are often read together.
const PER_NAME: Duration = Duration::from_millis(30);

/// Spins [`PER_NAME`] as `btp-first`, renames itself `btp-second` and
/// spins as long again; returns the CPU time it used under each name.
fn spin_under_two_names() -> (Duration, Duration) {
    support::name_self(c"btp-first");
    let start = thread_cpu();
    std::hint::black_box(spin_cpu(PER_NAME, 20_000));
    let renamed = thread_cpu();
    support::name_self(c"btp-second");
    std::hint::black_box(spin_cpu(PER_NAME, 20_000));
    (renamed - start, thread_cpu() - renamed)
}

/// A thread that renames itself is counted under each name for the CPU
/// time it used under it: the rings' name-change records put each sample
/// under the name its thread had when the kernel took it, not the one it
/// has when the sampler reads the rings (which would move the samples
/// read together with a rename to the new name), nor the one a listing
/// last read. Four threads found at start and sixteen born while
/// sampling, one at a time, each renaming itself once.
#[test]
fn a_renamed_thread_is_counted_under_each_name_for_its_time() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("renaming threads", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let found: Vec<_> = (0..4)
            .map(|_| {
                let (go_tx, go_rx) = mpsc::channel::<()>();
                let thread = thread::spawn(move || {
                    go_rx.recv().unwrap();
                    spin_under_two_names()
                });
                (go_tx, thread)
            })
            .collect();
        let sampler = start();
        support::wait_until_listed(&sampler, found.len() + 1);
        let mut spent = Vec::new();
        for (go, thread) in found {
            go.send(()).unwrap();
            spent.push(thread.join().unwrap());
        }
        for _ in 0..16 {
            spent.push(thread::spawn(spin_under_two_names).join().unwrap());
        }
        let raw = sampler.stop().expect("stop");
        if !on_rings(&raw) {
            return;
        }
        let first = support::samples_named(&raw, "btp-first");
        let second = support::samples_named(&raw, "btp-second");
        let cpu_first: Duration = spent.iter().map(|s| s.0).sum();
        let cpu_second: Duration = spent.iter().map(|s| s.1).sum();
        let truth = cpu_first.as_secs_f64() / (cpu_first + cpu_second).as_secs_f64();
        let share = first as f64 / (first + second).max(1) as f64;
        println!(
            "measured: {first} samples as btp-first, {second} as btp-second; share of the \
             first {:.1}% against {:.1}% of the CPU ({cpu_first:?}, {cpu_second:?})",
            share * 100.0,
            truth * 100.0
        );
        // A precondition, not random: 20 threads x 60 ms are ~1200 whole
        // periods, short only of skipped ones (under 1%).
        assert!(first + second > 1000, "{first} + {second} samples");
        // Not random: a thread's samples under a name are its whole periods
        // there, +-1: over 20 threads 1.7 points at most, stolen time about 1
        // more. The bug moves up to 20 of each thread's 30 ms, 33 points.
        assert!(
            (share - truth).abs() <= 0.05,
            "the first name's share of samples {:.1}% against its share of the CPU {:.1}%",
            share * 100.0,
            truth * 100.0
        );
    });
}

/// The thread [`renamed_as_events_open`] renames.
static RENAMED_TID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Renames thread [`RENAMED_TID`] through its `comm` file, as the thread
/// would by naming itself at that moment. Runs on the sampler thread, so
/// it never panics: a rename that fails shows in the test's counts.
fn renamed_as_events_open() {
    let tid = RENAMED_TID.load(Ordering::Acquire);
    let _ = std::fs::write(format!("/proc/self/task/{tid}/comm"), "btp-new-name");
}

/// Clears the hook when dropped, also when the test panics, so that the
/// other tests' samplers never run it.
struct BeforeRingEvents;

impl BeforeRingEvents {
    fn run(hook: fn()) -> BeforeRingEvents {
        btprof_sampler::test_hooks::run_before_ring_events(Some(hook));
        BeforeRingEvents
    }
}

impl Drop for BeforeRingEvents {
    fn drop(&mut self) {
        btprof_sampler::test_hooks::run_before_ring_events(None);
    }
}

/// A thread found at start whose name changes after the first listing
/// read it but before the ring events opened on it (a thread names itself
/// as it starts, and on a busy machine it may first run just then) leaves
/// no rename record in the rings: its samples must still carry the new
/// name, not the one that listing read. A test hook renames it at that
/// moment, and the listings after start are held back, so only the
/// samples themselves can bring the new name. (Beside two hogs in a full
/// test run, a thread spawned just before `start` once had all its 300
/// samples under its old name.)
#[test]
fn a_thread_renamed_as_its_events_open_keeps_its_new_name() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("renamed as events open", Duration::from_secs(60), || {
        let _hogs = Hogs::start(2);
        let go = Arc::new(AtomicBool::new(false));
        let worker = {
            let go = go.clone();
            thread::Builder::new()
                .name("btp-old-name".into())
                .spawn(move || {
                    RENAMED_TID.store(btprof_sampler::current_thread_id(), Ordering::Release);
                    while !go.load(Ordering::Acquire) {
                        thread::sleep(Duration::from_millis(1));
                    }
                    blocked_spin(Duration::from_millis(300))
                })
                .unwrap()
        };
        while RENAMED_TID.load(Ordering::Acquire) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        let hook = BeforeRingEvents::run(renamed_as_events_open);
        let sampler = start();
        drop(hook);
        let held = support::HookOn::new(btprof_sampler::test_hooks::hold_back_listings);
        // Past its first 100 ms, when a young thread's name is read again
        // at its samples.
        thread::sleep(Duration::from_millis(300));
        go.store(true, Ordering::Release);
        worker.join().unwrap();
        let raw = sampler.stop().expect("stop");
        drop(held);
        if !on_rings(&raw) {
            return;
        }
        let old = support::samples_named(&raw, "btp-old-name");
        let new = support::samples_named(&raw, "btp-new-name");
        println!("measured: {new} samples under the new name, {old} under the old");
        // A precondition, not random: 300 ms spun is ~300 whole periods; 100
        // shows they were taken. The bug, all under the old name, fails below.
        assert!(
            new >= 100,
            "{new} samples under the new name, {old} under the old"
        );
        // Not a chance count: the rename came before its events opened, so
        // any sample under the old name is the bug.
        assert_eq!(old, 0, "samples under the name read before the rename");
    });
}

/// With every thread on the rings and none coming or going, the sampler
/// thread reads the rings without listing the threads each time (at
/// 100 Hz it wakes every 100 ms, and lists them at most about once a
/// second); a thread born meanwhile is found within a few wakeups all the
/// same, since its birth shows. Counted in the sampler's own wakeups, so a
/// busy machine that delays them changes nothing.
#[test]
fn a_steady_set_of_threads_is_listed_only_when_it_changes() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("listing only on change", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let config = SamplerConfig {
            hz: 100,
            mode: Mode::Cpu,
            ..SamplerConfig::default()
        };
        let seen = support::Listings::counted("ring clock: listings only on change", config, 15);
        if !on_rings(&seen.raw) {
            return;
        }
        // Once a thread has a timer of its own (one the rings cut short
        // is handed to one), a timer needs a listing to find a new thread,
        // and the put-off is 100 ms. Seen once in many runs here, with the
        // sampler waking every 20 ms, as it does with any timer open.
        let most = match seen.raw.stats.timer_threads {
            0 => seen.window.as_secs() + 2,
            _ => seen.window.as_millis() as u64 / 100 + 2,
        };
        // Not random, counted in wakeups (every 100 ms): a listing at most once
        // a second, 2 more at the window's ends, against 15 if each wakeup
        // listed; the birth shows in the rings within 4 wakeups.
        seen.check(most, 4);
    });
}

/// A pool that winds down, one thread after another, with every thread on
/// the rings: each exit shows in the rings as the thread count falls, so
/// the threads are not listed again at each exit (each listing reads every
/// thread's clock: at 512 threads they were most of the sampler thread's
/// time). Counted in the sampler's own wakeups (every 100 ms at 100 Hz),
/// so a busy machine that delays them changes nothing.
#[test]
fn threads_that_exit_one_by_one_are_not_listed_again_each_time() {
    const THREADS: usize = 12;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("exits without listings", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let pool: Vec<_> = (0..THREADS)
            .map(|_| {
                let stop = Arc::new(AtomicBool::new(false));
                let spinner = {
                    let stop = stop.clone();
                    thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            std::hint::black_box(spin_cpu(Duration::from_millis(2), 200_000));
                        }
                    })
                };
                (stop, spinner)
            })
            .collect();
        let sampler = Sampler::start(SamplerConfig {
            hz: 100,
            mode: Mode::Cpu,
            ..SamplerConfig::default()
        })
        .expect("start");
        let progress = sampler.progress();
        let mut ticks = support::wait_ticks(&sampler, 0, 3);
        let listed = progress.listings.load(Ordering::Acquire);
        let since = Instant::now();
        for (stop, spinner) in pool {
            stop.store(true, Ordering::Relaxed);
            spinner.join().unwrap();
            ticks = support::wait_ticks(&sampler, ticks, 1);
        }
        // One more, for the last exit's record.
        support::wait_ticks(&sampler, ticks, 1);
        let listings = progress.listings.load(Ordering::Acquire) - listed;
        let window = since.elapsed();
        let raw = sampler.stop().expect("stop");
        println!(
            "measured: {listings} listings over {window:?} as {THREADS} threads exited one \
             per wakeup; threads on the rings {}, on timers {}",
            raw.stats.ring_threads, raw.stats.timer_threads
        );
        if !on_rings(&raw) {
            return;
        }
        assert_eq!(
            raw.stats.timer_threads, 0,
            "a thread was handed to a timer, which needs listings"
        );
        // Not random: listings still come at least once a second, and one
        // may find a thread gone whose exit record was not read yet; listed
        // again at each exit, the 12 exits would bring 12 or more.
        let most = window.as_secs() + 3;
        assert!(
            listings <= most,
            "{listings} listings as {THREADS} threads exited over {window:?}, at most {most} \
             expected"
        );
    });
}

/// Two threads born while sampling, taking turns on one CPU, each get
/// samples for their own CPU time. The kernel marks the event copies of
/// threads born to the same creator as clones, and two such threads that
/// follow each other on a CPU swap their events rather than stop one's and
/// start the other's, so a period one thread began ended on the other:
/// without the creator's anchor (an event not inherited) the longer thread
/// here got 1004-1007 samples for 1.000 CPU-seconds in 3 runs of 4.
///
/// Each thread's samples are held to the kernel's own count of its task
/// clock (read at its exit, kept as its CPU time by the
/// `kernel_counts_only` hook; `inherit_stat` keeps counts with their
/// thread when the kernel swaps the events, so periods that move to the
/// other thread show as samples beyond it). That clock, which paces the
/// samples, is not the thread's CPU clock on a virtual machine: it runs on
/// while the hypervisor has stolen the CPU from under the thread, and its
/// timer skips the periods such a pause overran. The CPU clock leaves
/// stolen time out. On this project's VMs the two differed by up to 2%
/// per thread while the test ran (a 1.0006 s thread: 1.0217 s counted),
/// which failed a bar of 3 samples against the CPU clock in 7 of 12 runs
/// beside two hogs and a build, and 2 of 6 on an idle machine.
#[test]
fn threads_born_together_keep_their_own_periods() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog(
        "born threads' own periods",
        Duration::from_secs(120),
        || {
            let _counts = support::HookOn::new(btprof_sampler::test_hooks::kernel_counts_only);
            let _hogs = Hogs::start(2);
            let sampler = Sampler::start(SamplerConfig {
                hz: 1000,
                mode: Mode::Cpu,
                ..SamplerConfig::default()
            })
            .expect("start");
            let take_turns = |work: Duration| {
                thread::spawn(move || {
                    let cpu = btprof_testkit::pin_to_one_cpu().expect("held to one CPU");
                    let stolen_before = btprof_testkit::steal_time(cpu).unwrap_or_default();
                    let tid = btprof_sampler::current_thread_id();
                    while thread_cpu() < work {
                        std::hint::black_box(spin_cpu(Duration::from_millis(1), 20_000));
                    }
                    let stolen = btprof_testkit::steal_time(cpu)
                        .unwrap_or_default()
                        .saturating_sub(stolen_before);
                    (tid, thread_cpu(), stolen)
                })
            };
            let threads = [
                take_turns(Duration::from_millis(1000)),
                take_turns(Duration::from_millis(500)),
            ];
            let ran: Vec<(u64, Duration, Duration)> =
                threads.into_iter().map(|t| t.join().unwrap()).collect();
            let raw = sampler.stop().expect("stop");
            if !on_rings(&raw) {
                return;
            }
            let s = &raw.stats;
            let run = format!(
                "run: {} samples, {} failed, {} lost to a full ring, {} of exited threads, \
                 threads on rings {} and timers {}",
                s.samples,
                s.failed_samples,
                s.lost_samples,
                s.exited_threads,
                s.ring_threads,
                s.timer_threads
            );
            for (tid, cpu, stolen) in ran {
                let (samples, counted) = samples_and_cpu_of(&raw, tid);
                println!(
                    "measured: {samples} samples for {counted:?} of task clock, {cpu:?} of CPU, \
                     {stolen:?} stolen from its CPU"
                );
                let (counted_ms, stolen_ms) =
                    (counted.as_millis() as i64, stolen.as_millis() as i64);
                // Periods moved between the threads show as samples beyond
                // the count. Below it: the timer fires late now and then
                // on a VM and skips the periods it overran (0.2-0.6% of
                // them here with nothing stolen), and a stolen pause longer
                // than a period is skipped whole. Not random: the count is the
                // kernel's own whole periods, so the bar has no noise term.
                let fewest = counted_ms - 3 - counted_ms / 100 - stolen_ms;
                assert!(
                    samples as i64 <= counted_ms + 3 && samples as i64 >= fewest,
                    "{samples} samples for {counted:?} of its task clock at 1000 Hz \
                     ({stolen:?} stolen from its CPU; {run})"
                );
                // The count is this thread's own: its CPU clock, give or
                // take the stolen time and the two clocks' drift (up to 2% a
                // thread on these VMs, above). Not random.
                let off = counted.abs_diff(cpu);
                assert!(
                    off <= stolen + cpu / 50,
                    "its task clock counted {counted:?} for {cpu:?} of CPU, {stolen:?} \
                     stolen ({run})"
                );
            }
        },
    );
}

/// A born thread's CPU time, as the sampler counts it at its exit, is its
/// own CPU clock's, not the kernel's task clock's, which on a virtual
/// machine also counts what the host stole while the thread was on its
/// CPU (once 7% of a recorded program's time in a CI run). Threads that
/// run in slices beside two hogs, of 300 ms and 600 ms, exit while
/// sampling goes on: each is counted within 1% and 2 periods of what its
/// own clock said as it ended.
#[test]
fn born_threads_cpu_at_exit_is_their_own_clocks() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("born threads' CPU", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let sampler = start();
        let threads: Vec<_> = [300, 600]
            .into_iter()
            .map(|ms| {
                thread::spawn(move || {
                    let tid = btprof_sampler::current_thread_id();
                    while thread_cpu() < Duration::from_millis(ms) {
                        std::hint::black_box(spin_cpu(Duration::from_millis(1), 20_000));
                        // Slices: the rings see it come and go.
                        thread::sleep(Duration::from_micros(200));
                    }
                    (tid, thread_cpu())
                })
            })
            .collect();
        let ran: Vec<(u64, Duration)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // Their exit records are read while sampling goes on.
        thread::sleep(Duration::from_millis(200));
        let raw = sampler.stop().expect("stop");
        if !on_rings(&raw) {
            return;
        }
        for (tid, cpu) in ran {
            let (samples, counted) = samples_and_cpu_of(&raw, tid);
            println!("measured: {counted:?} counted for {cpu:?} of CPU, {samples} samples");
            let off = counted.abs_diff(cpu);
            // Not random: the count is its clock at its exit, its own read a
            // moment before, apart by its exit path (1% and 2 periods allowed);
            // the task clock, the bug, adds what the host stole, up to 7%.
            assert!(
                off <= cpu / 100 + Duration::from_millis(2),
                "counted {counted:?} for a thread whose clock said {cpu:?} as it ended \
                 ({samples} samples)"
            );
        }
    });
}

/// Sleeps on the sampler thread just before the ring events open, as a
/// busy machine may hold it there (opening and mapping a ring per thread
/// takes time, and the sampler thread may be preempted).
fn slow_to_open() {
    thread::sleep(Duration::from_millis(200));
}

/// A thread found at start that runs while the sampler opens the ring
/// events: its CPU time before its event opened is no sample's, so it is
/// not counted as sampled. (A CI run once reported 780 samples per
/// CPU-second of a thread spinning through the start.)
#[test]
fn cpu_time_before_the_events_open_is_not_counted_as_sampled() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    with_watchdog("slow to open", Duration::from_secs(120), || {
        let _hogs = Hogs::start(2);
        let stop = Arc::new(AtomicBool::new(false));
        let spun_ns = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (tid_tx, tid_rx) = mpsc::channel();
        let spinner = {
            let (stop, spun_ns) = (stop.clone(), spun_ns.clone());
            thread::Builder::new()
                .name("through-start".into())
                .spawn(move || {
                    tid_tx.send(btprof_sampler::current_thread_id()).unwrap();
                    while !stop.load(Ordering::Acquire) {
                        std::hint::black_box(blocked_spin(Duration::from_millis(5)));
                        spun_ns.store(thread_cpu().as_nanos() as u64, Ordering::Release);
                    }
                })
                .unwrap()
        };
        let tid = tid_rx.recv().unwrap();
        let hook = BeforeRingEvents::run(slow_to_open);
        let sampler = start();
        // The hook ran at the first listing, which `start` may not wait for.
        support::wait_until_listed(&sampler, 1);
        drop(hook);
        // 500 ms of its CPU after the events opened, at least.
        let from = spun_ns.load(Ordering::Acquire);
        while spun_ns.load(Ordering::Acquire) < from + 500_000_000 {
            thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Release);
        spinner.join().unwrap();
        let raw = sampler.stop().expect("stop");
        if !on_rings(&raw) {
            return;
        }
        let (samples, cpu, rate) = rate_of(&raw, tid);
        println!(
            "measured: {samples} samples in {cpu:?} of accounted CPU: {rate:.1} per CPU-second"
        );
        // Not random: whole periods of task clock over the CPU time from
        // its event's opening (see the first test). The bug counts the
        // 200 ms hold's CPU too: 865 per CPU-second beside two busy
        // processes, less on a quiet machine.
        assert!(rate >= MIN_RATE, "{rate:.1} samples per CPU-second");
    });
}
