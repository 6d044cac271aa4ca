//! Continuous profiling and embedding: periodic dumps, snapshots, the
//! stack limit, the dump signal and the scope guard, against real threads
//! of this test process.
#![cfg(target_os = "linux")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::folded::TABLE_FULL_FRAME;
use btprof::scope::ScopeBuilder;
use btprof::{Profiler, ProfilerBuilder, RunInfo, Symbolize};
use btprof_testkit::thread_cpu_ns;

/// One profiler per process: tests in this file take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh, empty directory under the target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("continuous-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Spins until `stop`, publishing its CPU time in `cpu_ns` about every
/// millisecond (reading it is a system call, and kernel time is not
/// sampled, so not much more often).
#[inline(never)]
fn continuous_spin(stop: &AtomicBool, cpu_ns: &AtomicU64) -> u64 {
    let mut x = 3u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..500_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
    x
}

/// A busy thread until the returned guard is dropped.
struct Busy {
    stop: Arc<AtomicBool>,
    cpu_ns: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Busy {
    /// Waits until the thread used `more` CPU time beyond now: tests wait
    /// for the CPU their threads get, so a loaded machine only slows them.
    fn wait_for_cpu(&self, more: Duration) {
        btprof_testkit::wait_for_cpu(&self.cpu_ns, more, Duration::from_secs(60));
    }
}

fn busy(name: &str) -> Busy {
    let stop = Arc::new(AtomicBool::new(false));
    let cpu_ns = Arc::new(AtomicU64::new(0));
    let (stop2, cpu2) = (stop.clone(), cpu_ns.clone());
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || continuous_spin(&stop2, &cpu2))
        .unwrap();
    Busy {
        stop,
        cpu_ns,
        thread: Some(thread),
    }
}

/// Asserts that `profile` holds about one sample per millisecond of the
/// CPU time its threads used (1000 Hz), however loaded the machine was,
/// and at least `min_samples` of them.
fn assert_samples_follow_cpu(profile: &btprof::Profile, min_samples: u64) {
    let stats = profile.stats().expect("a recorded profile has stats");
    let cpu = stats.sampled_cpu().as_secs_f64();
    let samples = profile.total_samples();
    // Not a random count: each thread's samples are its whole periods of
    // CPU time, less at most one a thread for its last part. Each caller's
    // bar is 75-80% of the CPU it waited for: a gross loss fails, not a small one.
    assert!(samples >= min_samples, "{samples} samples ({stats:?})");
    let rate = samples as f64 / cpu;
    // Not random: whole periods on the ring clock, owed periods paid by
    // weighted samples on the others; short only by each thread's last
    // part of a period, under 2% of the 350 samples of the smallest run
    // (982-1001 per CPU-second on all three clocks beside four busy
    // processes). 5% catches one record in ten lost, which 20% let pass.
    assert!(
        (950.0..=1050.0).contains(&rate),
        "{samples} samples for {cpu:.3} s of CPU: {rate:.0} per CPU-second ({stats:?})"
    );
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// The files in `dir` with extension `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// Waits until the profiler's dump counters satisfy `done` (at most 30 s),
/// rather than for a fixed wall time: on a busy machine, or with a cold
/// page cache for the first symbolisation, a window can take longer than
/// its interval, and windows merge.
fn wait_for_dumps(profiler: &btprof::Profiler, done: impl Fn(&btprof::DumpStats) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done(&profiler.dump_stats()) {
        assert!(
            std::time::Instant::now() < deadline,
            "dumps still {:?} after 30 s",
            profiler.dump_stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Samples in a folded file: the sum of its counts.
fn folded_samples(path: &Path) -> u64 {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

/// A profiler that dumps a window into `dir` every `period`. Window timing
/// is tested with it, not symbolisation: the first DWARF load of this
/// unoptimised test binary (full debug info, all dependencies) takes
/// seconds under load and would merge windows, so inline frames are off.
fn dumping_every(period: Duration, dir: &Path) -> ProfilerBuilder {
    Profiler::builder()
        .symbolize(Symbolize {
            inline_frames: false,
        })
        .dump_every(period)
        .dump_dir(dir)
}

#[test]
fn periodic_dumps_add_up_to_the_whole_run() {
    let _turn = turn();
    let dir = scratch("dumps");
    let work = busy("dumped");
    let profiler = dumping_every(Duration::from_millis(200), &dir)
        .dump_svg(true)
        .start()
        .unwrap();
    wait_for_dumps(&profiler, |s| s.written >= 4);
    work.wait_for_cpu(Duration::from_millis(100));
    let (profile, stats) = profiler.stop_with_dump_stats().unwrap();

    let folded = files(&dir, "folded");
    // At least the 4 windows waited for and the last partial one; on a
    // loaded machine waiting for CPU time may add a few. Wall time, not a
    // sample count: 60 windows is 12 s spent waiting for 100 ms of CPU.
    assert!(
        (4..=60).contains(&folded.len()),
        "{} windows: {stats:?}",
        folded.len()
    );
    assert_eq!(stats.written as usize, folded.len(), "{stats:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert_eq!(files(&dir, "svg").len(), folded.len());
    assert!(
        files(&dir, "tmp").is_empty(),
        "no half-written file is left"
    );
    let mut sum = 0;
    for path in &folded {
        let samples = folded_samples(path);
        let info = RunInfo::read_sidecar(path).unwrap().expect("a sidecar");
        assert_eq!(info.samples, samples, "{}", path.display());
        assert_eq!(info.requested_hz, 1000);
        let text = fs::read_to_string(path).unwrap();
        assert!(text.contains("continuous_spin"));
        assert!(
            !text.lines().any(|l| l.starts_with("btprof-")),
            "the profiler's own threads are never sampled:\n{text}"
        );
        sum += samples;
    }
    assert_eq!(sum, profile.total_samples());
    assert_eq!(profile.total_samples(), profile.stats().unwrap().samples);
    // At least 100 ms of the thread's CPU after the 4 windows (and what it
    // got during them): 100 whole periods or more, not random; 80 is 80%.
    assert_samples_follow_cpu(&profile, 80);
}

#[test]
fn keep_deletes_the_oldest_windows() {
    let _turn = turn();
    let dir = scratch("keep");
    fs::write(dir.join("someone-elses.folded"), "a;b 1\n").unwrap();
    let _work = busy("kept");
    let profiler = dumping_every(Duration::from_millis(100), &dir)
        .keep(2)
        .start()
        .unwrap();
    wait_for_dumps(&profiler, |s| s.written >= 4);
    let (_, stats) = profiler.stop_with_dump_stats().unwrap();
    assert!(stats.written >= 4, "{stats:?}");
    assert_eq!(stats.removed, stats.written - 2, "{stats:?}");
    let folded = files(&dir, "folded");
    assert_eq!(
        folded.len(),
        3,
        "2 windows and the file btprof did not write"
    );
    assert!(dir.join("someone-elses.folded").exists());
    assert_eq!(files(&dir, "json").len(), 2);
}

#[test]
fn an_unwritable_dump_dir_is_counted_and_sampling_goes_on() {
    let _turn = turn();
    let dir = scratch("unwritable");
    // A file where the directory should be: creating it fails.
    let blocked = dir.join("not-a-dir");
    fs::write(&blocked, "").unwrap();
    let work = busy("unwritable");
    let profiler = Profiler::builder()
        .dump_every(Duration::from_millis(100))
        .dump_dir(&blocked)
        .start()
        .unwrap();
    wait_for_dumps(&profiler, |s| s.failed >= 2);
    work.wait_for_cpu(Duration::from_millis(150));
    let live = profiler.dump_stats();
    let (profile, stats) = profiler.stop_with_dump_stats().unwrap();
    assert!(live.failed >= 2, "{live:?}");
    assert_eq!(stats.written, 0);
    assert!(
        stats.last_error.as_deref().unwrap().contains("not-a-dir"),
        "{stats:?}"
    );
    // Sampling went on, at the full rate per CPU-second. At least 150 ms
    // of the thread's CPU: 150 whole periods or more, not a random count.
    assert_samples_follow_cpu(&profile, 120);
}

#[test]
fn snapshots_grow_while_sampling_goes_on() {
    let _turn = turn();
    let work = busy("snapshotted");
    let profiler = Profiler::builder().start().unwrap();
    work.wait_for_cpu(Duration::from_millis(200));
    let first = profiler.snapshot().unwrap();
    work.wait_for_cpu(Duration::from_millis(200));
    let second = profiler.snapshot().unwrap();
    let last = profiler.stop().unwrap();
    // 200 ms of CPU is 200 samples at 1000 Hz, loaded machine or not:
    // whole periods, not a random count. The 50 left cover records still
    // in the rings and periods a late timer skipped; a lost window is 200.
    assert!(first.total_samples() > 150, "{:?}", first.stats());
    assert!(
        second.total_samples() > first.total_samples() + 150,
        "{:?}",
        second.stats()
    );
    // At least 400 ms of the thread's CPU: 400 whole periods or more.
    assert_samples_follow_cpu(&last, 300);
    assert!(last.total_samples() >= second.total_samples());
    let names = |p: &btprof::Profile| p.folded_lines(Default::default()).join("\n");
    assert!(names(&first).contains("continuous_spin"));
}

#[test]
fn a_dump_signal_writes_a_dump() {
    let _turn = turn();
    let dir = scratch("signal");
    let _work = busy("signalled");
    let profiler = Profiler::builder()
        .dump_dir(&dir)
        .dump_on_signal(libc::SIGUSR2)
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the profiler handles SIGUSR2 now; raise has no preconditions.
    unsafe { libc::raise(libc::SIGUSR2) };
    // The first dump loads the symbol tables, which takes seconds on a
    // loaded machine; a signal never handled still fails, later.
    let deadline = Instant::now() + Duration::from_secs(30);
    while profiler.dump_stats().written == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(profiler.dump_stats().written, 1);
    drop(profiler);
    // The previous disposition is back.
    // SAFETY: querying the current action into a zeroed struct.
    let action = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old);
        old
    };
    assert_eq!(action.sa_sigaction, libc::SIG_DFL);
}

/// `depth` nested calls of itself, then a short spin: every depth is a
/// distinct stack.
#[inline(never)]
fn recurse(depth: u32, x: u64) -> u64 {
    if depth == 0 {
        let mut y = x;
        for i in 0..2_000 {
            y = std::hint::black_box(y.wrapping_mul(31).wrapping_add(i));
        }
        return y;
    }
    std::hint::black_box(recurse(depth - 1, x.wrapping_add(1))) ^ 1
}

#[test]
fn the_stack_limit_counts_overflow_under_a_visible_frame() {
    let _turn = turn();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let worker = std::thread::spawn(move || {
        let mut seed = 1u64;
        while !stop2.load(Ordering::Relaxed) {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            std::hint::black_box(recurse((seed >> 33) as u32 % 200, seed));
        }
    });
    let profiler = Profiler::builder().max_stacks(20).start().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let profile = profiler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();

    let full: Vec<_> = profile
        .stacks()
        .filter(|s| s.frames().eq([TABLE_FULL_FRAME]))
        .collect();
    assert!(!full.is_empty(), "overflow is shown");
    // Random depths of 0-199 give 200 stacks or more, none over 1% of the
    // samples: once 20 fill the table a sample misses them with probability
    // 0.8 or more, so 6 more all in it is under 0.2^6 = 6.4e-5 (26 ms of CPU).
    assert!(profile.overflow_samples() > 0);
    assert_eq!(
        profile.total_samples(),
        profile.stats().unwrap().samples,
        "nothing dropped"
    );
    assert_eq!(
        profile.run_info().unwrap().overflow_samples,
        profile.overflow_samples()
    );
}

#[inline(never)]
fn scope_guard_workload(until: Instant) -> u64 {
    let mut x = 5u64;
    while Instant::now() < until {
        for i in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(i));
        }
    }
    x
}

#[test]
fn a_scope_guard_writes_files_naming_the_work() {
    let _turn = turn();
    let dir = scratch("scope");
    let scope = ScopeBuilder::new("scope guard test")
        .dir(&dir)
        .always()
        .start();
    assert!(scope.is_active());
    std::hint::black_box(scope_guard_workload(
        Instant::now() + Duration::from_millis(300),
    ));
    let written = scope
        .finish()
        .unwrap()
        .expect("an active scope writes files");
    assert_eq!(written.folded, dir.join("scope_guard_test.folded"));
    let folded = fs::read_to_string(&written.folded).unwrap();
    assert!(folded.contains("scope_guard_workload"), "{folded}");
    let svg = fs::read_to_string(written.svg.expect("samples, so an svg")).unwrap();
    assert!(svg.contains("scope_guard_workload"));
    let info = RunInfo::read_sidecar(&written.folded).unwrap().unwrap();
    assert_eq!(info.samples, folded_samples(&written.folded));

    // Not switched on: no profiler, no files.
    if !btprof::scope::enabled_by_env() {
        let off = btprof::profile_scope("scope_not_enabled");
        assert!(!off.is_active());
        assert_eq!(off.finish().unwrap(), None);
    }
}
