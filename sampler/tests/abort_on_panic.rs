//! A panic while the sampler holds a thread stopped aborts the process
//! instead of unwinding (unwinding could deadlock on a lock the stopped
//! thread holds), and any other panic goes on to the previous hook.
//!
//! Likewise a `thread_resume` that fails with a code that does not say the
//! thread is gone aborts, saying so with the code: the thread may still be
//! frozen, holding a lock the whole process needs. And a one-shot capture
//! (a thread dump, a watchdog's backtrace) in a process that never started
//! the sampler aborts on such a panic too.
//!
//! The expected outcome is the death of the process, so this test binary
//! has no libtest harness: it runs itself again as a child process, which
//! drives the shared sampling loop over a fake thread that panics inside
//! `thread_get_state` (or whose resume fails), and checks how the child
//! died.

mod fake_control;

use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;

use btprof_sampler::control::capture_all;
use btprof_sampler::walker::Arch;
use btprof_sampler::Mode;

use fake_control::driving::{sampling, OWN};
use fake_control::{FakeControl, FakeThread, Fault};

const CHILD_ENV: &str = "BTPROF_ABORT_ON_PANIC_CHILD";
const UNWOUND: &str = "child: an ordinary panic unwound";
const SURVIVED: &str = "child: survived a panic while a thread was stopped";
const RESUME_SURVIVED: &str = "child: survived a failed resume";
const CAPTURE_SURVIVED: &str = "child: survived a panic while a capture held a thread";

fn main() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("panic") => child(),
        Ok("resume") => resume_child(),
        Ok("capture") => capture_child(),
        _ => parent(),
    }
}

fn resume_child() {
    let frozen = FakeThread::new(10, "stays-frozen").with_fault(Fault::ResumeFails);
    let mut lp = sampling(FakeControl::new(OWN, vec![frozen]), Mode::Wall);
    let _ = lp.tick();
    eprintln!("{RESUME_SURVIVED}");
    std::process::exit(0);
}

/// A capture alone, with no sampling loop ever made in this process.
fn capture_child() {
    let panics = FakeThread::new(10, "panics").with_fault(Fault::PanicsWhileStopped);
    let mut fake = FakeControl::new(OWN, vec![panics]);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        capture_all(&mut fake, Arch::X86_64, &[], |_| false)
    }));
    eprintln!("{CAPTURE_SURVIVED}");
    std::process::exit(0);
}

fn child() {
    let panics = FakeThread::new(10, "panics").with_fault(Fault::PanicsWhileStopped);
    // Installs the hook.
    let mut lp = sampling(FakeControl::new(OWN, vec![panics]), Mode::Wall);

    // Outside a stopped window a panic unwinds as usual.
    assert!(catch_unwind(|| panic!("an ordinary panic")).is_err());
    eprintln!("{UNWOUND}");

    let _ = catch_unwind(AssertUnwindSafe(|| lp.tick()));
    eprintln!("{SURVIVED}");
    std::process::exit(0);
}

/// Runs this test binary again as the child `role`: how it ended, its
/// stderr, and both as a failure message.
fn run_child(role: &str) -> (std::process::ExitStatus, String, String) {
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(&exe)
        .env(CHILD_ENV, role)
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = format!("child {:?}, stderr:\n{stderr}", out.status);
    (out.status, stderr, report)
}

fn parent() {
    let (status, stderr, report) = run_child("panic");
    assert!(stderr.contains(UNWOUND), "{report}");
    assert!(!stderr.contains(SURVIVED), "{report}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{report}");
    assert!(
        stderr.contains("aborting, because unwinding could deadlock"),
        "{report}"
    );
    println!(
        "abort_on_panic: a panic while a thread was stopped aborted the child process (SIGABRT)"
    );

    let (status, stderr, report) = run_child("resume");
    assert!(!stderr.contains(RESUME_SURVIVED), "{report}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{report}");
    assert!(
        stderr.contains("rather than leave it frozen. code: 0x11"),
        "{report}"
    );
    println!("abort_on_panic: a resume failing with an unknown code aborted the child (SIGABRT)");

    let (status, stderr, report) = run_child("capture");
    assert!(!stderr.contains(CAPTURE_SURVIVED), "{report}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{report}");
    assert!(
        stderr.contains("aborting, because unwinding could deadlock"),
        "{report}"
    );
    println!("abort_on_panic: a panic while a capture held a thread aborted the child (SIGABRT)");
    println!("abort_on_panic: 3 passed, 0 failed");
}
