//! The stall watchdog on the process's main thread, the thread an app's
//! hang is usually on: the main thread beats, stalls 600 ms in a named
//! function, and beats again, beside two CPU hogs. Exactly one stall of
//! 300-700 ms must be reported, with that function in at least 90% of its
//! backtraces. A test binary of its own (no test harness), so its main
//! thread is this file's `main`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::{Stall, Watchdog};
use btprof_testkit::hogs::Hogs;

#[inline(never)]
fn main_thread_stalls_here(how_long: Duration) {
    let t = Instant::now();
    while t.elapsed() < how_long {
        std::hint::black_box(0);
    }
}

/// Beats every millisecond for `how_long`.
fn beat_for(heartbeat: &btprof::Heartbeat, how_long: Duration) {
    let t = Instant::now();
    while t.elapsed() < how_long {
        heartbeat.beat();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the callback saw of each stall: duration, backtraces, backtraces
/// in the stalled function, finished.
type Seen = Arc<Mutex<Vec<(Duration, usize, u64, bool)>>>;

fn main() {
    let _hogs = Hogs::start(2);
    // Loads the symbol tables, so the stall's first backtrace is not spent
    // reading them.
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    // The defaults: a 250 ms threshold, a backtrace every 10 ms.
    let watchdog = Watchdog::builder()
        .on_stall(move |stall: &Stall| {
            let hits = stall
                .stacks()
                .iter()
                .filter(|(stack, _)| stack.contains("main_thread_stalls_here"))
                .map(|(_, n)| *n as u64)
                .sum();
            s.lock()
                .unwrap()
                .push((stall.duration(), stall.backtraces(), hits, stall.finished()));
        })
        .start()
        .unwrap();
    let heartbeat = watchdog.watch_current_thread("main").unwrap();
    beat_for(&heartbeat, Duration::from_millis(200));
    main_thread_stalls_here(Duration::from_millis(600));
    beat_for(&heartbeat, Duration::from_millis(300));
    drop(heartbeat);
    watchdog.stop();
    let seen = seen.lock().unwrap().clone();
    println!("main-thread stalls: {seen:?}");
    assert_eq!(seen.len(), 1, "exactly one stall: {seen:?}");
    let (duration, backtraces, hits, finished) = seen[0];
    assert!(finished, "{seen:?}");
    assert!(
        (Duration::from_millis(300)..=Duration::from_millis(700)).contains(&duration),
        "stall of {duration:?}"
    );
    assert!(
        backtraces > 0 && hits * 10 >= backtraces as u64 * 9,
        "main_thread_stalls_here in {hits} of {backtraces} backtraces"
    );
    println!("main-thread stall: ok");
}
