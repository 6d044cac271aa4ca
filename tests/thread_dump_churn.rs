//! Thread dumps while threads come and go: 10,000 captures beside threads
//! that are created and exit all the time must not crash, leak a file
//! descriptor, report an exiting thread as an error, or leave any thread
//! unable to run.
#![cfg(target_os = "linux")]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof::{ThreadDump, ThreadState};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn ten_thousand_captures_while_threads_come_and_go() {
    // Warm the resolver and unwinder once, so what they keep open is not
    // counted as a leak.
    ThreadDump::capture().unwrap();
    let fds_before = open_fds();
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(AtomicU64::new(0));
    // Two threads each spawning short-lived threads, one of them spinning
    // a little and one sleeping a little.
    let spawners: Vec<_> = (0..2)
        .map(|k| {
            let (stop, spawned) = (stop.clone(), spawned.clone());
            std::thread::Builder::new()
                .name(format!("churn-spawner-{k}"))
                .spawn(move || {
                    while !stop.load(Relaxed) {
                        let t = std::thread::Builder::new()
                            .name("churn-child".into())
                            .spawn(move || {
                                if k == 0 {
                                    let mut x = 0u64;
                                    for i in 0..20_000u64 {
                                        x = black_box(x ^ i);
                                    }
                                } else {
                                    std::thread::sleep(Duration::from_micros(200));
                                }
                            })
                            .unwrap();
                        t.join().unwrap();
                        spawned.fetch_add(1, Relaxed);
                    }
                })
                .unwrap()
        })
        .collect();
    let worker = {
        let (stop, progress) = (stop.clone(), progress.clone());
        std::thread::Builder::new()
            .name("churn-worker".into())
            .spawn(move || {
                while !stop.load(Relaxed) {
                    progress.fetch_add(1, Relaxed);
                    std::hint::spin_loop();
                }
            })
            .unwrap()
    };
    // The new thread sets its own name when it first runs.
    while progress.load(Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let started = Instant::now();
    let mut gone = 0u64;
    for _ in 0..10_000 {
        let dump = ThreadDump::capture().unwrap();
        gone += dump
            .threads()
            .iter()
            .filter(|t| t.state() == ThreadState::Gone)
            .count() as u64;
        // The worker is always there, walked to its start.
        assert!(dump.threads().iter().any(|t| t.name() == "churn-worker"));
    }
    let elapsed = started.elapsed();
    // Nothing left stopped: every thread still runs to its end.
    let before = progress.load(Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while progress.load(Relaxed) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(progress.load(Relaxed) > before, "the worker no longer runs");
    stop.store(true, Relaxed);
    for s in spawners {
        s.join().unwrap();
    }
    worker.join().unwrap();
    let fds_after = open_fds();
    println!(
        "10000 captures in {elapsed:?}, {} threads created and gone meanwhile, \
         {gone} seen exiting mid-capture; fds {fds_before} -> {fds_after}",
        spawned.load(Relaxed)
    );
    // A workload check, not a chance count: two spawners start threads one
    // after another throughout; 100 shows threads did come and go.
    assert!(spawned.load(Relaxed) > 100, "too few threads came and went");
    assert_eq!(fds_before, fds_after, "file descriptors leaked");
}
