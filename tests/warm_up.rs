//! The resolver's warm-up: while a profiler runs, its `btprof-warm` thread
//! loads the DWARF the sampled stacks need, so that the stop loads
//! (nearly) none itself, and the profile is the same as without it.
//!
//! Counts, not timings: what the stop loaded is
//! `btprof::test_hooks::stop_dwarf_loads()` (the resolver's
//! `dwarf_loads`: module DWARF read, `addr2line` contexts built).
#![cfg(target_os = "linux")]

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::{FoldOptions, Mode, Profile, Profiler};

/// One profiler per process: tests in this file take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Always inlined into [`warm_caller`], so its frames need DWARF.
#[inline(always)]
fn warm_hot(x: u64) -> u64 {
    let mut x = x;
    for i in 0..20_000 {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

#[inline(never)]
fn warm_caller(stop: &AtomicBool) -> u64 {
    let mut x = 3u64;
    while !stop.load(Ordering::Relaxed) {
        x = warm_hot(x);
    }
    x
}

/// Long enough to hold a few hundred samples of a spinner on a loaded
/// machine, and whatever it takes until `ready` says so (bounded only so
/// that a broken warm-up fails instead of hanging).
fn record(warm_up: bool, ready: impl Fn(&Profiler) -> bool) -> Profile {
    let stop = Arc::new(AtomicBool::new(false));
    // One spinner: the warm thread runs at a low priority (it must not
    // disturb the host), so on two cores a second spinner would leave it
    // a few percent of one, and the test would wait for the warm-up.
    let worker = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("warm-spin-0".into())
            .spawn(move || warm_caller(&stop))
            .unwrap()
    };
    // Only the spinner is sampled: this thread, which polls and then
    // stops the profiler, would add samples in code that only the stop
    // runs (btprof's stop path, libc's join), each a load of its own.
    let excluded = btprof_sampler::exclude_current_thread();
    assert!(excluded.is_some(), "no room to exclude the test's thread");
    let profiler = Profiler::builder()
        .hz(1000)
        .mode(Mode::Cpu)
        .warm_up(warm_up)
        .start()
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(300);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let samples = profiler.progress().samples.load(Ordering::Relaxed);
        if (samples >= 300 && ready(&profiler)) || Instant::now() > give_up {
            break;
        }
    }
    let stats = profiler.warm_up_stats();
    let profile = profiler.stop().unwrap();
    drop(excluded);
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    if warm_up {
        println!("warm-up: {stats:?}");
    }
    profile
}

/// The spinner's folded stacks (the other threads' depend on timing).
fn spinner_stacks(profile: &Profile) -> BTreeSet<String> {
    profile
        .folded_lines(FoldOptions::default())
        .iter()
        .filter(|l| l.starts_with("warm-spin-"))
        .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
        .collect()
}

#[test]
fn after_a_warm_up_the_stop_loads_no_dwarf_and_finds_the_same_frames() {
    let _turn = turn();
    // Without the warm-up the stop loads the DWARF of the test binary and
    // of libc (or finds libc has none: a load too).
    let cold = record(false, |_| true);
    let cold_loads = btprof::test_hooks::stop_dwarf_loads();
    assert!(
        cold_loads >= 2,
        "a cold stop loaded only {cold_loads} times: the counter counts nothing"
    );

    // With it, wait until a copy of the table taken after the spinner's
    // 300 samples has been resolved: everything it runs was resolved
    // before the stop. (Not "a pass found nothing new": passes are made
    // only for new stacks, and one spinner's loop soon has none.)
    let first_copy = Cell::new(None);
    let last = Cell::new((0, 0));
    let warm = record(true, |profiler| {
        let stats = profiler.warm_up_stats();
        last.set((stats.passes, stats.addresses));
        let first = first_copy.get().unwrap_or(stats.copies);
        first_copy.set(Some(first));
        stats.copies >= first + 2 && stats.caught_up
    });
    let warm_loads = btprof::test_hooks::stop_dwarf_loads();
    println!("stop loads: cold {cold_loads}, after the warm-up {warm_loads}");
    let (passes, addresses) = last.get();
    assert!(passes >= 1, "the warm-up made no pass");
    assert!(addresses > 0, "the warm-up resolved nothing");
    // Only the spinner is sampled (btprof's threads never are, the
    // test's is excluded): at most one load, for a pc of its loop that
    // a sample first reached after the warm-up's last copy. Not a chance
    // count: its loop's few pcs are reached within ms; the bug, no warm-up
    // sharing its work with the stop, loads as often as cold (2 or more).
    assert!(
        warm_loads <= 1,
        "the stop loaded DWARF {warm_loads} times after the warm-up (cold: {cold_loads})"
    );

    // Same frames either way: inline expansion included.
    let (cold, warm) = (spinner_stacks(&cold), spinner_stacks(&warm));
    assert!(
        warm.iter()
            .any(|s| s.contains("warm_caller;") && s.contains("warm_hot")),
        "no inlined frame under the caller: {warm:?}"
    );
    let common: Vec<_> = warm.intersection(&cold).collect();
    assert!(
        !common.is_empty(),
        "no spinner stack in common:\ncold {cold:?}\nwarm {warm:?}"
    );
}

#[test]
fn with_dumps_the_warm_thread_and_the_dump_thread_share_the_resolver() {
    let _turn = turn();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("warm-up-dumps");
    let _ = std::fs::remove_dir_all(&dir);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let worker = std::thread::Builder::new()
        .name("warm-spin-0".into())
        .spawn(move || warm_caller(&stop2))
        .unwrap();
    // A dump far away: only the warm thread resolves before the stop.
    let profiler = Profiler::builder()
        .dump_every(Duration::from_secs(600))
        .dump_dir(&dir)
        .start()
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(300);
    while Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
        let stats = profiler.warm_up_stats();
        if stats.passes >= 1 && stats.addresses > 0 {
            break;
        }
    }
    let snapshot = profiler.snapshot().unwrap();
    let (profile, dumps) = profiler.stop_with_dump_stats().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    assert_eq!(dumps.windows, 1, "{dumps:?}");
    assert!(profile.total_samples() >= snapshot.total_samples());
    assert!(
        spinner_stacks(&profile)
            .iter()
            .any(|s| s.contains("warm_caller")),
        "{:?}",
        spinner_stacks(&profile)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
