//! `--push`: `btprof --pid-self` and `btprof record` send each window to
//! a Pyroscope server (the library's receiver, which decodes pushes as
//! the server does), and the windows add up to the run's folded file.

#[path = "../../tests/push_support/mod.rs"]
mod push_support;
mod record_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use push_support::{Behaviour, Pushed, Receiver};
use record_support::{framed_program, text, wait_limited, Scratch, BIN};

/// The samples of a folded file (`stack count` lines).
fn folded_total(path: &std::path::Path) -> i64 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(_, n)| n.parse::<i64>().unwrap())
        .sum()
}

/// Every window once, labelled, adding up to `total`.
fn check_windows(pushed: &[Pushed], total: i64, service: &str) {
    let mut ids: Vec<&str> = pushed.iter().map(|p| p.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), pushed.len(), "a window twice");
    let sum: i64 = pushed.iter().map(Pushed::samples).sum();
    assert_eq!(sum, total, "the windows add up to the folded file");
    for p in pushed {
        assert_eq!(p.label("service_name"), Some(service), "{:?}", p.labels);
        assert_eq!(p.label("env"), Some("ci"), "{:?}", p.labels);
    }
}

#[test]
fn pid_self_pushes_every_window() {
    let scratch = Scratch::new("push-self");
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Accept]);
    let child = Command::new(BIN)
        .current_dir(&scratch.0)
        .args(["--pid-self", "--duration", "3s", "--push", &receiver.url()])
        .args(["--push-interval", "500ms", "--service-name", "selfcheck"])
        .args(["--label", "env=ci", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_limited(child, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    println!("{stdout}{}", text(&out.stderr));
    assert!(out.status.success());
    let pushed = receiver.accepted();
    assert_eq!(receiver.invalid(), Vec::<String>::new());
    // 3 s in 500 ms windows: 6, and the stop's.
    assert!(pushed.len() >= 5, "{} windows", pushed.len());
    let said = format!("pushed {} of {} windows", pushed.len(), pushed.len());
    assert!(stdout.contains(&said), "{said:?} in {stdout}");
    check_windows(
        &pushed,
        folded_total(&scratch.path("btprof.folded")),
        "selfcheck",
    );
}

#[test]
fn record_has_each_process_push_its_windows() {
    let scratch = Scratch::new("push-record");
    let Some(program) = framed_program(&scratch, "two_threads.c", "two_threads") else {
        return;
    };
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Accept]);
    let child = Command::new(BIN)
        .current_dir(&scratch.0)
        .args(["record", "--push", &receiver.url(), "--push-interval", "1s"])
        .args(["--service-name", "two-threads", "--label", "env=ci", "--"])
        .arg(&program)
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_limited(child, Duration::from_secs(120));
    println!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success());
    let pushed = receiver.accepted();
    println!("measured: {} windows pushed", pushed.len());
    assert_eq!(receiver.invalid(), Vec::<String>::new());
    // Alpha spins 3 s of CPU: three windows at least.
    assert!(pushed.len() >= 3, "{} windows", pushed.len());
    check_windows(
        &pushed,
        folded_total(&scratch.path("btprof.folded")),
        "two-threads",
    );
    // The processes' records add up what each pushed.
    let said = format!("pushed {} of {} windows", pushed.len(), pushed.len());
    assert!(text(&out.stdout).contains(&said), "{said:?} in the output");
    let pid = pushed[0].label("pid").unwrap().to_owned();
    assert!(pushed.iter().all(|p| p.label("pid") == Some(pid.as_str())));
}

#[test]
fn a_label_the_server_would_refuse_stops_record_before_it_runs() {
    let scratch = Scratch::new("push-bad-label");
    let marker = scratch.path("ran");
    let out = Command::new(BIN)
        .current_dir(&scratch.0)
        .args([
            "record",
            "--push",
            "http://127.0.0.1:9",
            "--label",
            "team-name=x",
        ])
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("team-name"), "{stderr}");
    assert!(!marker.exists(), "the command ran");
}
