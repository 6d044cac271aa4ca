//! Wall mode: a thread blocked from before sampling starts until it stops
//! is shown where it waits, not cut to its system call. Its stack is read
//! from outside; the first tick comes before the module list is read, and
//! a stack read then, or not read for want of budget, used to stand for
//! the whole run: one frame, `[btprof: truncated]`, for every sample. A
//! thread that blocks every signal is shown where it waits too: off CPU
//! it needs no signal.

#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use btprof::{FoldOptions, Mode, Profiler};

const OFF_CPU: &str = "[btprof: off-cpu]";

/// One profiler per process: the tests take turns.
static PROFILER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Reads one byte: blocks until the test writes it.
#[inline(never)]
fn blocked_throughout(stream: &mut UnixStream) -> usize {
    let mut byte = [0u8; 1];
    stream.read(&mut byte).unwrap_or(0)
}

/// The samples of the folded `lines` of thread `thread` that `keep`
/// selects.
fn samples_of(lines: &[String], thread: &str, keep: &dyn Fn(&str) -> bool) -> u64 {
    let prefix = format!("{thread};");
    lines
        .iter()
        .filter(|l| l.starts_with(&prefix) && keep(l))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// The state letter of thread `tid` (`S` while it sleeps in a call).
fn state_of(tid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn a_thread_blocked_throughout_is_shown_where_it_waits() {
    let _turn = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::Builder::new()
        .name("wall-blocked".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx
                .send(unsafe { libc::syscall(libc::SYS_gettid) })
                .unwrap();
            std::hint::black_box(blocked_throughout(&mut rx))
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while state_of(tid) != Some('S') {
        assert!(Instant::now() < deadline, "the waiter never blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
    let profiler = Profiler::builder()
        .hz(1000)
        .mode(Mode::Wall)
        .start()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let profile = profiler.stop().unwrap();
    tx.write_all(b"x").unwrap();
    assert_eq!(waiter.join().unwrap(), 1);

    let lines = profile.folded_lines(FoldOptions::default());
    let count = |keep: &dyn Fn(&str) -> bool| samples_of(&lines, "wall-blocked", keep);
    let off_cpu = count(&|l| l.contains(OFF_CPU));
    let named = count(&|l| l.contains(OFF_CPU) && l.contains("blocked_throughout"));
    let ours: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("wall-blocked;"))
        .collect();
    println!("measured: {named} of {off_cpu} off-CPU samples name blocked_throughout");
    // About a second of ticks; the first few may stand on the system
    // call alone, until the stack is read with the modules known. Not
    // random: one per wakeup the sampler got in the second (missed ones are
    // skipped); 100 allows 90% missed, and a thread never counted fails.
    assert!(off_cpu >= 100, "{off_cpu} off-CPU samples\n{ours:#?}");
    // Not random: only ticks before the modules are read miss the name;
    // 10% is 100 ms of them at the full rate. The bug named none.
    assert!(
        named * 10 >= off_cpu * 9,
        "{named} of {off_cpu} off-CPU samples name the function it waits in\n{ours:#?}"
    );
}

/// Reads one byte, after the thread ran with every signal blocked (into
/// a buffer of its own size, so that the linker does not fold it into
/// [`blocked_throughout`]).
#[inline(never)]
fn waits_after_running(stream: &mut UnixStream) -> usize {
    let mut bytes = [0u8; 2];
    stream.read(&mut bytes[..1]).unwrap_or(0)
}

/// A thread that blocks every signal is judged to block the profiling
/// signal once it runs, and its ticks on a CPU are lost (they would need
/// a signal); once it waits in a call it needs none, and is shown where
/// it waits, as any thread off CPU. Its waiting ticks used to be counted
/// as lost to the blocked signal too.
#[test]
fn a_thread_that_blocks_every_signal_is_shown_where_it_waits() {
    let _turn = PROFILER.lock().unwrap_or_else(|e| e.into_inner());
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::Builder::new()
        .name("wall-masked".into())
        .spawn(move || {
            btprof_testkit::signal_mask::block_every_signal();
            // SAFETY: gettid has no preconditions.
            tid_tx
                .send(unsafe { libc::syscall(libc::SYS_gettid) })
                .unwrap();
            go_rx.recv().unwrap();
            // Runs while sampled, so the sampler looks at its mask.
            std::hint::black_box(btprof_testkit::spin_cpu(
                Duration::from_millis(100),
                200_000,
            ));
            std::hint::black_box(waits_after_running(&mut rx))
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    let profiler = Profiler::builder()
        .hz(1000)
        .mode(Mode::Wall)
        .start()
        .unwrap();
    go_tx.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut waited = None;
    while Instant::now() < deadline {
        // Waiting in its read (its CPU time past the spin): 700 ms more.
        if state_of(tid) == Some('S') {
            let since = *waited.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_millis(700) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(waited.is_some(), "the thread never waited");
    let profile = profiler.stop().unwrap();
    tx.write_all(b"x").unwrap();
    assert_eq!(waiter.join().unwrap(), 1);

    let lines = profile.folded_lines(FoldOptions::default());
    let named = samples_of(&lines, "wall-masked", &|l| {
        l.contains(OFF_CPU) && l.contains("waits_after_running")
    });
    let stats = profile.stats().expect("a recorded profile has stats");
    let lost = stats
        .thread_cpu
        .iter()
        .find(|t| t.tid == tid as u64)
        .map_or(0, |t| t.signal_blocked);
    println!(
        "measured: {named} off-CPU samples name waits_after_running; {lost} ticks lost to the \
         blocked signal"
    );
    // 700 ms of waiting at 1000 Hz, on a busy machine perhaps fewer ticks.
    // Not random: one per wakeup; 300 allows 57% of them missed, a host
    // allowance, no tail. The bug, its waits lost to its mask, names none.
    assert!(named >= 300, "{named} samples where it waits\n{lines:#?}");
}
