//! The sampler against real busy threads of this test process: the rate,
//! the leaf and complete walks, windows, excluded threads.
//! Platform-neutral: on Linux it tests the signal backend, on macOS the
//! Mach one (built and linked by `scripts/check-macos`, run only on a Mac).
#![cfg(any(target_os = "linux", target_os = "macos"))]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use btprof_sampler::walker::WalkEnd;
use btprof_sampler::{
    current_thread_id, exclude_current_thread, Mode, SampleClock, Sampler, SamplerConfig,
};
use btprof_testkit::thread_cpu_ns;

use support::samples_named;

/// One sampler per process: the tests here take turns.
static SAMPLER: Mutex<()> = Mutex::new(());

/// What a spinning thread tells the test: its id and the CPU time it has
/// used so far. Tests wait for CPU time, not wall time, so a loaded machine
/// only makes them slower, never wrong.
#[derive(Default)]
struct Spinner {
    tid: AtomicU64,
    cpu_ns: AtomicU64,
}

impl Spinner {
    /// Waits until the spinner used `more` CPU time beyond now (or a
    /// minute passed, which the test's assertions then report).
    fn wait_for_cpu(&self, more: Duration) {
        btprof_testkit::wait_for_cpu(&self.cpu_ns, more, Duration::from_secs(60));
    }
}

#[inline(never)]
fn spin(stop: &AtomicBool, me: &Spinner) -> u64 {
    me.tid.store(current_thread_id(), Ordering::Relaxed);
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        // About a millisecond of user code per clock read: reading a thread
        // CPU clock is a system call, and CPU time spent in the kernel is
        // not sampled (the timers count user-mode overflows only).
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        me.cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
    x
}

/// Asserts that `samples` of a thread that used `cpu` are what `hz`
/// samples per CPU-second give (within `tolerance`, a fraction). On the
/// sampler-thread path (`BTPROF_FORCE_SAMPLER_THREAD=1`, or no perf
/// events) a machine so loaded that the thread is rarely running when the
/// sampler ticks loses samples (counted as late and skipped), so only half
/// the rate is required there; never more than the rate.
fn assert_rate(
    samples: u64,
    cpu: Duration,
    hz: u32,
    tolerance: f64,
    clock: SampleClock,
    context: &str,
) {
    let expected = cpu.as_secs_f64() * f64::from(hz);
    // A precondition, not random: the callers wait for 150 ms or more of the
    // thread's CPU, 150 periods; under 50 means the wait gave up.
    assert!(
        expected > 50.0,
        "{context}: too little CPU ({cpu:?}) to judge the rate"
    );
    let ratio = samples as f64 / expected;
    let low = match clock {
        SampleClock::Perf => 1.0 - tolerance,
        SampleClock::SamplerThread => 0.5,
    };
    // Not random: the timers' count is the thread's whole periods of CPU, +-2,
    // less a late VM timer's skips (0.2-0.6% on the rings). On the sampler
    // thread 0.5 is a survival bar: it catches only losing half the periods.
    assert!(
        (low..=1.0 + tolerance).contains(&ratio),
        "{context}: {samples} samples for {cpu:?} of CPU at {hz} Hz ({ratio:.3} of the rate)"
    );
}

#[test]
fn samples_a_busy_thread_with_the_spinning_function_as_leaf() {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let me = Arc::new(Spinner::default());
    let (s2, me2) = (stop.clone(), me.clone());
    let worker = std::thread::Builder::new()
        .name("busy".into())
        .spawn(move || spin(&s2, &me2))
        .unwrap();
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .unwrap();
    me.wait_for_cpu(Duration::from_millis(500));
    let raw = sampler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();

    let busy: Vec<u32> = (0..raw.threads.len() as u32)
        .filter(|&i| raw.threads[i as usize].name == "busy")
        .collect();
    let stacks: Vec<_> = raw
        .table
        .iter()
        .filter(|(k, _)| busy.contains(&k.thread))
        .collect();
    let samples: u64 = stacks.iter().map(|(_, c)| c).sum();
    // One sample per millisecond of the thread's CPU time, however loaded
    // the machine is: not random (see `assert_rate`), +-2 of ~500 periods is
    // 0.4%, and 10% catches a tenth lost or doubled.
    let cpu = raw
        .stats
        .cpu_of(me.tid.load(Ordering::Relaxed))
        .expect("the busy thread's CPU time");
    assert_rate(
        samples,
        cpu,
        1000,
        0.10,
        raw.stats.clock,
        &format!("{:?}", raw.stats),
    );
    // The pc (frame 0) lies in `spin` in almost every sample, and those
    // walks reach the end of the chain.
    let spin_start = spin as *const () as u64;
    let in_spin: u64 = stacks
        .iter()
        .filter(|(k, _)| (spin_start..spin_start + 4096).contains(&k.frames[0]))
        .filter(|(k, _)| k.end == WalkEnd::Complete && k.frames.len() > 3)
        .map(|(_, c)| c)
        .sum();
    let others: Vec<_> = stacks
        .iter()
        .filter(|(k, _)| {
            !(spin_start..spin_start + 4096).contains(&k.frames[0])
                || k.end != WalkEnd::Complete
                || k.frames.len() <= 3
        })
        .map(|(k, c)| (format!("{:#x}", k.frames[0]), k.end, k.frames.len(), c))
        .collect();
    // On the sampler-thread path a signal can still be taken at the return
    // of the clock read the spinner makes every millisecond (more often the
    // more loaded the machine: the thread is often preempted there), so
    // only three quarters are required of it; the timers sample in user
    // code only, where the CPU time went.
    let required = match raw.stats.clock {
        SampleClock::Perf => 95,
        SampleClock::SamplerThread => 75,
    };
    // On the rings, as if each sample fell at random: with 99% of its user
    // time in `spin` (all but the clock read's user side, every ~1 ms), walked
    // whole, Binomial(500, 0.99) falls under 95% with chance 2e-11.
    assert!(
        in_spin * 100 >= samples * required,
        "{in_spin} of {samples}; the others: {others:?}; {:?}",
        raw.stats
    );
}

#[test]
fn windows_add_up_and_an_excluded_thread_is_never_sampled() {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let counted = Arc::new(Spinner::default());
    let spawn = |name: &str, exclude: bool, me: Arc<Spinner>| {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _excluded = exclude.then(|| exclude_current_thread().expect("a free entry"));
                spin(&stop, &me)
            })
            .unwrap()
    };
    let workers = [
        spawn("counted", false, counted.clone()),
        spawn("excluded", true, Arc::default()),
    ];
    let sampler = Sampler::start(SamplerConfig::default()).unwrap();
    let mut windows = Vec::new();
    for _ in 0..3 {
        counted.wait_for_cpu(Duration::from_millis(150));
        windows.push(sampler.collect(true).unwrap());
    }
    counted.wait_for_cpu(Duration::from_millis(50));
    let snapshot = sampler.collect(false).unwrap();
    counted.wait_for_cpu(Duration::from_millis(100));
    let ticks = sampler.progress().ticks.load(Ordering::Relaxed);
    let last = sampler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    windows.push(last);

    for (i, w) in windows.iter().enumerate() {
        assert_eq!(
            w.stats.samples,
            w.table.samples(),
            "window {i}: {:?}",
            w.stats
        );
        // Each window's samples match the CPU time the thread used in it: not
        // random (see `assert_rate`), ~150 whole periods +-2 at the cuts (1.3%);
        // the rest of 15% is for periods the sampler thread owes across a cut.
        let cpu = w
            .stats
            .cpu_of(counted.tid.load(Ordering::Relaxed))
            .expect("the counted thread's CPU time");
        assert_rate(
            samples_named(w, "counted"),
            cpu,
            1000,
            0.15,
            w.stats.clock,
            &format!("window {i}: {:?}", w.stats),
        );
        assert_eq!(samples_named(w, "excluded"), 0, "window {i}");
        // Not random: each window lasts at least the 150 ms of CPU the thread
        // used in it, since CPU time cannot outrun wall time.
        assert!(w.stats.duration >= Duration::from_millis(50), "window {i}");
    }
    // The snapshot copied the last window without ending it.
    let last = windows.last().unwrap();
    assert!(snapshot.table.samples() <= last.table.samples());
    // A survival check: the snapshot came 50 ms of the thread's CPU into the
    // window, ~50 whole periods; none means the copy lost them.
    assert!(samples_named(&snapshot, "counted") > 0);
    // No tick is lost or counted twice between windows. Not random: `ticks`
    // was read before the stop, so the windows' sum is at least as large.
    let window_ticks: u64 = windows.iter().map(|w| w.stats.ticks).sum();
    assert!(
        window_ticks >= ticks,
        "{window_ticks} ticks in windows, {ticks} seen while running"
    );
}
