//! `btprof --pid-self --dump-threads`: the workload's thread dump shows
//! its busy workers walked to their entry and the waiting thread blocked
//! in `read`, as text and as JSON.

#[cfg(target_os = "linux")]
#[test]
fn the_dump_shows_busy_workers_and_a_thread_blocked_in_read() {
    use std::process::Command;
    const BIN: &str = env!("CARGO_BIN_EXE_btprof");
    let out = Command::new(BIN)
        .args(["--pid-self", "--dump-threads"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("\"btprof-wait\" (blocked in read)"), "{text}");
    let waiting = text
        .split("\n\n")
        .find(|t| t.contains("\"btprof-wait\""))
        .unwrap();
    assert!(waiting.contains("wait_for_input"), "{waiting}");
    for worker in ["\"btprof-work-0\" (", "\"btprof-work-1\" ("] {
        let block = text.split("\n\n").find(|t| t.contains(worker)).unwrap();
        assert!(block.contains("worker_main"), "{block}");
        assert!(!block.contains("walk stopped"), "{block}");
    }

    let out = Command::new(BIN)
        .args(["--pid-self", "--dump-threads", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let threads = json["threads"].as_array().unwrap();
    let waiting = threads.iter().find(|t| t["name"] == "btprof-wait").unwrap();
    assert_eq!(waiting["state"], "blocked");
    assert_eq!(waiting["syscall"], "read");
    assert_eq!(waiting["complete"], true);
}

#[cfg(not(target_os = "linux"))]
#[test]
fn the_dump_shows_busy_workers_and_a_thread_blocked_in_read() {
    println!("no thread dump backend on this platform: not run");
}
