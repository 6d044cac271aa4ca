//! btprof's own threads take no process signal: the sampler, dump,
//! warm-up and stall-watchdog threads block every maskable signal but the
//! synchronous fault signals, as `/proc/self/task/*/status` reports it
//! (`SigBlk`), while the application's threads keep theirs.
//!
//! A process-directed signal is delivered to any thread that does not
//! block it; run on the sampler while it holds a thread stopped, a handler
//! that locks or allocates can deadlock the process (macOS), and on Linux
//! it would interrupt the sampler in the middle of a tick. The fault
//! signals (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`) stay
//! unblocked: only the thread's own faulting instruction raises them, and
//! on macOS a blocked one makes the thread retry that instruction forever
//! instead of crashing.
#![cfg(target_os = "linux")]

use std::fs;
use std::time::{Duration, Instant};

use btprof::{Profiler, Watchdog};

/// `(name, SigBlk)` of every thread of this process.
fn thread_masks() -> Vec<(String, u64)> {
    let mut masks = Vec::new();
    for task in fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        // A thread may exit between listing and reading.
        let (Ok(comm), Ok(status)) = (
            fs::read_to_string(dir.join("comm")),
            fs::read_to_string(dir.join("status")),
        ) else {
            continue;
        };
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .expect("a SigBlk line");
        masks.push((comm.trim().to_owned(), blocked));
    }
    masks
}

/// The synchronous fault signals, which btprof's threads leave unblocked.
const FAULTS: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
];

fn bits(signals: &[i32]) -> u64 {
    signals.iter().fold(0, |b, sig| b | 1u64 << (sig - 1))
}

/// Every signal 1..=64 that a thread can block: all but `SIGKILL` and
/// `SIGSTOP`, and the two glibc reserves for itself (32, 33), which
/// `pthread_sigmask` silently leaves unblocked.
fn blockable() -> u64 {
    !bits(&[libc::SIGKILL, libc::SIGSTOP, 32, 33])
}

/// Every thread btprof spawns: the sampler crate's sampler thread, and the
/// root crate's dump, warm-up and watchdog threads (each name fits the 15
/// bytes Linux keeps).
const OWN_THREADS: [&str; 5] = [
    "btprof-sampler",
    "btprof-dump",
    "btprof-warm",
    "btprof-warm-tbl",
    "btprof-watchdog",
];

#[test]
fn every_btprof_thread_blocks_every_signal_but_the_fault_signals() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("own-threads-mask");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let profiler = Profiler::builder()
        .dump_every(Duration::from_secs(60))
        .dump_dir(&dir)
        .start()
        .unwrap();
    let watchdog = Watchdog::builder().start().unwrap();
    // Every thread exists once `start` returns; give the kernel's view a
    // moment on a loaded machine. A missing one fails below, by name.
    let deadline = Instant::now() + Duration::from_secs(5);
    let masks = loop {
        let masks = thread_masks();
        let has = |n: &str| masks.iter().any(|(name, _)| name == n);
        if OWN_THREADS.iter().all(|n| has(n)) || Instant::now() > deadline {
            break masks;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    watchdog.stop();
    profiler.stop().unwrap();

    let faults = bits(&FAULTS);
    let want = blockable() & !faults;
    for own in OWN_THREADS {
        let (_, blocked) = masks
            .iter()
            .find(|(name, _)| name == own)
            .unwrap_or_else(|| panic!("no thread named {own}: {masks:?}"));
        assert_eq!(
            blocked & want,
            want,
            "{own} leaves signals unblocked: SigBlk {blocked:016x}, missing {:016x}",
            want & !blocked
        );
        assert_eq!(
            blocked & faults,
            0,
            "{own} blocks a fault signal, so a fault in it would not crash: SigBlk {blocked:016x}"
        );
    }
    // The test's own thread (spawned by libtest, not by btprof) keeps the
    // mask it had: btprof blocked nothing outside its threads.
    let this = masks
        .iter()
        .filter(|(name, _)| !name.starts_with("btprof-"))
        .map(|(_, blocked)| *blocked)
        .min()
        .expect("the test's threads");
    assert_ne!(
        this & want,
        want,
        "every thread blocks everything: {masks:?}"
    );
}
