//! Wall mode: a thread blocked from before sampling starts until it stops
//! is shown where it waits, not cut to its system call. Its stack is read
//! from outside; the first tick comes before the module list is read, and
//! a stack read then, or not read for want of budget, used to stand for
//! the whole run: one frame, `[btprof: truncated]`, for every sample.

#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use btprof::{FoldOptions, Mode, Profiler};

const OFF_CPU: &str = "[btprof: off-cpu]";

/// Reads one byte: blocks until the test writes it.
#[inline(never)]
fn blocked_throughout(stream: &mut UnixStream) -> usize {
    let mut byte = [0u8; 1];
    stream.read(&mut byte).unwrap_or(0)
}

/// The state letter of thread `tid` (`S` while it sleeps in a call).
fn state_of(tid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn a_thread_blocked_throughout_is_shown_where_it_waits() {
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
    let count = |keep: &dyn Fn(&str) -> bool| -> u64 {
        lines
            .iter()
            .filter(|l| l.starts_with("wall-blocked;") && keep(l))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    };
    let off_cpu = count(&|l| l.contains(OFF_CPU));
    let named = count(&|l| l.contains(OFF_CPU) && l.contains("blocked_throughout"));
    let ours: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("wall-blocked;"))
        .collect();
    println!("measured: {named} of {off_cpu} off-CPU samples name blocked_throughout");
    // About a second of ticks; the first few may stand on the system
    // call alone, until the stack is read with the modules known.
    assert!(off_cpu >= 100, "{off_cpu} off-CPU samples\n{ours:#?}");
    assert!(
        named * 10 >= off_cpu * 9,
        "{named} of {off_cpu} off-CPU samples name the function it waits in\n{ours:#?}"
    );
}
