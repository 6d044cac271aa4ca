//! `btprof record`'s options that reach into every process it profiles:
//! `--clock` forces the clock each process's sampler runs on.

#![cfg(target_os = "linux")]

mod record_support;

use std::time::Duration;

use record_support::*;

/// A few hundred milliseconds of shell arithmetic: work on the main
/// thread of a program that needs no compiler.
const SHELL_WORK: &str = "i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done";

#[test]
fn clock_forced_is_the_one_every_process_ran_on() {
    let scratch = Scratch::new("clock");
    let raw = scratch.path("raw");
    // thread is never the default where perf events are allowed: a line
    // naming it came from the option. (Where they are refused it is the
    // default, and the line proves nothing.)
    let (name, described, recorded) = ("thread", "sampler-thread ticks", "sampler-thread");
    let _ = std::fs::remove_dir_all(&raw);
    let out = record(
        &scratch,
        &[
            "--clock",
            name,
            "--raw-dir",
            raw.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            SHELL_WORK,
        ],
        Duration::from_secs(120),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("--clock {name}: {stdout}{stderr}");
    assert!(out.status.success(), "{stderr}");
    let status = stdout
        .lines()
        .find(|l| l.starts_with("profiled "))
        .unwrap_or_else(|| panic!("no status line: {stdout}"));
    // The clock, then its threads per clock where it counts them.
    let after = status
        .split_once(&format!("cpu mode, {described}"))
        .map(|(_, rest)| rest);
    assert!(
        after.is_some_and(|rest| rest.starts_with(';') || rest.starts_with(" (")),
        "{status}"
    );
    assert_eq!(raw_record(&raw)["clock"], recorded);
    // Forced, the fallback is no surprise: nothing said.
    assert!(!stderr.contains("btprof: sh ("), "{stderr}");
}

#[test]
fn a_clock_that_is_not_one_is_refused_with_the_choices() {
    let scratch = Scratch::new("clock-bad");
    let marker = scratch.path("ran");
    let touch = format!("touch {}", marker.display());
    let out = record(
        &scratch,
        &["--clock", "hpet", "--", "sh", "-c", &touch],
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    println!("{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value 'hpet'"), "{stderr}");
    assert!(stderr.contains("use perf or thread"), "{stderr}");
    assert!(!marker.exists(), "the command ran");

    // The retired POSIX clock: refused, saying why and what remains.
    let out = record(
        &scratch,
        &["--clock", "posix", "--", "sh", "-c", &touch],
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("POSIX timer clock was retired") && stderr.contains("use perf or thread"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command ran");

    // Wall mode has one clock: a kernel one asked for is refused too,
    // before anything runs.
    let out = record(
        &scratch,
        &[
            "--mode", "wall", "--clock", "perf", "--", "sh", "-c", &touch,
        ],
        Duration::from_secs(60),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--clock perf is for cpu mode"), "{stderr}");
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn a_forced_perf_clock_the_kernel_refuses_is_said_not_replaced() {
    let scratch = Scratch::new("clock-refused");
    let mut cmd = std::process::Command::new(BIN);
    cmd.current_dir(&scratch.0)
        .args(["record", "--clock", "perf", "--", "sh", "-c", SHELL_WORK])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    btprof_testkit::seccomp::refuse_perf_event_open(&mut cmd, libc::EACCES);
    let out = wait_limited(cmd.spawn().unwrap(), Duration::from_secs(120));
    let stderr = text(&out.stderr);
    println!("{stderr}");
    // The command ran all the same, unprofiled.
    assert!(out.status.success(), "{stderr}");
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("the perf clock was asked for, but the kernel refuses it"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].starts_with("btprof: sh ("), "{stderr}");
    assert!(stderr.contains("no process wrote a profile"), "{stderr}");
}
