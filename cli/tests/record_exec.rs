//! A process that `exec`s keeps what it recorded before: the library
//! writes the old image's profile first, whichever `exec` function the
//! program calls. The C library's list and path-searching functions
//! (`execl`, `execle`, `execlp`, `execvp`) reach the system call without
//! going through `execve`, so each needs interposing of its own.

#![cfg(target_os = "linux")]

mod record_support;

use std::time::Duration;

use record_support::*;

/// Runs `programs/exec_after_work.c` exec'ing itself through `how`, and
/// checks the profile has its CPU-second before the exec, and the new
/// image's work after it, under one pid.
fn keeps_samples_across(scratch: &Scratch, how: &str) {
    let interposed = cfg!(target_arch = "x86_64") && rustc_defines_variadic_entry_points();
    if how.starts_with("execl") && !interposed {
        println!(
            "NOT CHECKED: {how} is interposed only on x86_64, by a library built with Rust 1.88 \
             or later"
        );
        return;
    }
    let Some(exe) = framed_program(scratch, "exec_after_work.c", "worker") else {
        return;
    };
    let raw = scratch.path(&format!("raw-{how}"));
    // The `p` functions find `worker` on PATH.
    let path = format!(
        "{}:{}",
        scratch.0.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = std::process::Command::new(BIN)
        .current_dir(&scratch.0)
        .env("PATH", path)
        // The new image checks it got the environment.
        .env("EXEC_MARK", "1")
        .args(["record", "--raw-dir", raw.to_str().unwrap(), "--"])
        .arg(&exe)
        .arg(how)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_limited(child, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{how}: {}: {stderr}", out.status);
    let lines = folded(&scratch.path("btprof.folded"));
    let before = samples_in(&lines, "before_exec");
    let after = samples_in(&lines, "after_exec");
    let truth = measured(&text(&out.stdout))["before"];
    println!("{how}: before_exec {before} samples ({truth:.3} CPU-s), after_exec {after}");
    // Lost, it would be none; kept, about one period per CPU-millisecond
    // (the default clock delivered 88-90% of the rate here). Whole periods,
    // not random: a lost-or-kept bar (lost is 0), 8-10 points under what
    // was seen; not a chance tail.
    assert!(before as f64 >= 0.8 * truth * 1000.0, "{how}: {lines:?}");
    // The new image's 0.2 CPU-s, about 200 whole periods: none is a new
    // image left unprofiled, not chance.
    assert!(after > 0, "{how}: {lines:?}");
    // One process: both images under roots with the same pid, the old
    // one's profile written at the exec.
    let pids: Vec<String> = roots(&lines)
        .iter()
        .map(|r| r.rsplit_once(" (").unwrap().1.to_owned())
        .collect();
    assert!(pids.windows(2).all(|w| w[0] == w[1]), "{how}: {pids:?}");
    let ended_by: Vec<String> = std::fs::read_dir(&raw)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let record: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            record["ended_by"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert!(ended_by.iter().any(|e| e == "exec"), "{how}: {ended_by:?}");
}

/// Whether the `rustc` building this (the one on PATH, as cargo's is)
/// is 1.88 or later, where the library interposes the list functions
/// (`preload/build.rs`).
fn rustc_defines_variadic_entry_points() -> bool {
    let version = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_none_or(|m| m >= 88)
}

#[test]
fn execl_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execl"), "execl");
}

#[test]
fn execle_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execle"), "execle");
}

#[test]
fn execlp_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execlp"), "execlp");
}

#[test]
fn execvp_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execvp"), "execvp");
}

#[test]
fn execv_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execv"), "execv");
}

#[test]
fn execve_keeps_what_the_old_image_recorded() {
    keeps_samples_across(&Scratch::new("execve"), "execve");
}

/// An `exec` the library does not see (the system call made directly, as
/// on macOS every `exec` is) leaves the old image's start marker with no
/// profile; the new image, profiled under the same pid, shows it was an
/// `exec`, and the summary says so instead of "ended without exit".
#[test]
fn an_exec_the_library_does_not_see_is_named_as_exec() {
    let scratch = Scratch::new("exec-syscall");
    let Some(exe) = framed_program(&scratch, "exec_after_work.c", "worker") else {
        return;
    };
    let out = std::process::Command::new(BIN)
        .current_dir(&scratch.0)
        .env("EXEC_MARK", "1")
        .args(["record", "--"])
        .arg(&exe)
        .arg("syscall")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_limited(out, Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("btprof: no profile from worker ("))
        .unwrap_or_else(|| panic!("no line for the old image: {stderr}"));
    assert!(line.contains("it called exec"), "{line}");
    let lines = folded(&scratch.path("btprof.folded"));
    assert!(samples_in(&lines, "after_exec") > 0, "{lines:?}");
}
