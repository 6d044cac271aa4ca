//! Two threads taking each other's backtrace at once both finish, with
//! each other's function in the backtrace.
//!
//! On macOS every backtrace suspends its thread, and Mach's
//! `thread_suspend` returns once its target is off the CPU, which a
//! thread waiting in its own `thread_suspend` is: two suspends that cross
//! would leave both threads suspended for good. Stops take turns through
//! one lock. On Linux the captures share one slot and take turns too.
//! `scripts/mac-first-run` runs this test on a Mac.

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btprof::{backtrace, Thread};

/// Backtraces each thread takes of the other.
const ROUNDS: usize = 200;

#[inline(never)]
fn take_backtraces_of(other: Thread, start: &Barrier) -> usize {
    start.wait();
    let mut named = 0;
    for _ in 0..ROUNDS {
        let bt = backtrace(&other).unwrap();
        named += usize::from(bt.frames().iter().any(|f| {
            f.function()
                .is_some_and(|n| n.contains("take_backtraces_of"))
        }));
    }
    // Stays in this function until the other thread is done with it.
    start.wait();
    named
}

#[test]
fn two_threads_taking_each_others_backtrace_both_finish() {
    // Loads the symbol tables first, so the rounds are captures.
    backtrace(&Thread::current()).unwrap();
    let start = Arc::new(Barrier::new(2));
    let (ids_tx, ids_rx) = mpsc::channel();
    let (to_first, first_gets) = mpsc::channel::<Thread>();
    let (to_second, second_gets) = mpsc::channel::<Thread>();
    let mut threads: Vec<Option<JoinHandle<usize>>> = [first_gets, second_gets]
        .into_iter()
        .map(|gets| {
            let (ids_tx, start) = (ids_tx.clone(), Arc::clone(&start));
            Some(std::thread::spawn(move || {
                ids_tx.send(Thread::current()).unwrap();
                take_backtraces_of(gets.recv().unwrap(), &start)
            }))
        })
        .collect();
    let (a, b) = (ids_rx.recv().unwrap(), ids_rx.recv().unwrap());
    to_first.send(b).unwrap();
    to_second.send(a).unwrap();
    // Not random: two crossing suspends freeze both threads for good, and
    // 400 backtraces take well under a second on any machine that runs
    // tests; ten minutes only bounds a run that froze.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut named = Vec::new();
    while named.len() < 2 {
        for slot in &mut threads {
            if slot.as_ref().is_some_and(JoinHandle::is_finished) {
                // A thread that panicked fails the test at once.
                match slot.take().unwrap().join() {
                    Ok(n) => named.push(n),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "the two threads froze each other"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every backtrace was taken while the other thread was inside
    // take_backtraces_of (each waits there for the other before leaving).
    assert!(
        named.iter().all(|&n| n * 10 >= ROUNDS * 9),
        "backtraces naming take_backtraces_of: {named:?} of {ROUNDS} each"
    );
}
