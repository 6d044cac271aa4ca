//! A stop signal sent to `btprof record` (`kill`, a CI runner's timeout)
//! is passed on to the command, which writes its profile and dies of it;
//! btprof writes the merged profile and exits as the command did. And a
//! program's own signals do not cut short the writing of its profile as
//! it ends.

mod record_support;

use std::time::{Duration, Instant};

use record_support::*;

#[test]
fn sigterm_to_btprof_ends_the_command_and_writes_its_profile() {
    let scratch = Scratch::new("sigterm");
    let (child, raw) = record_sleep_until_profiled(&scratch);
    let sent = Instant::now();
    // SAFETY: signals the btprof child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = wait_limited(child, Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}{stderr}");
    // Long before sleep's 100 s: it died of the signal btprof passed on. A
    // wall-time cap, not a chance bar: ms when passed on, 100 s when not.
    assert!(sent.elapsed() < Duration::from_secs(30), "{stderr}");
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("got SIGTERM while sleep ran"), "{stderr}");
    assert!(stderr.contains("sleep ("), "{stderr}");
    assert!(stderr.contains("died of SIGTERM"), "{stderr}");
    let record = assert_sleep_profiled_until(&scratch, &raw, &stderr, "signal SIGTERM");
    // The command is gone, not left running: btprof waited for it.
    let pid = record["pid"].as_i64().expect("a pid") as i32;
    // SAFETY: signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "sleep ({pid}) still runs");
}

/// `_exit` waits for the profile to be written while the program's own
/// signals interrupt it: each interruption is waited out, not taken for
/// the end of the wait. (Linux: macOS has no interposed `_exit`.)
#[cfg(target_os = "linux")]
#[test]
fn a_program_signalled_as_it_exits_still_writes_its_profile() {
    let scratch = Scratch::new("exit-signalled");
    let Some(program) = framed_program(&scratch, "exit_while_signalled.c", "exit_while_signalled")
    else {
        return;
    };
    let out = record(
        &scratch,
        &["--", program.to_str().unwrap()],
        Duration::from_secs(120),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("no profile"), "{stderr}");
    let lines = folded(&scratch.path("btprof.folded"));
    // Not random: 0.2 s of its CPU is ~200 whole periods; none is a profile
    // cut short as the program ended.
    assert!(samples_in(&lines, "work_before_exit") > 0, "{lines:?}");
}
