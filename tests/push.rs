//! Pushing windows to a Pyroscope server, against a receiver that
//! decodes them as the server does (`push_support`): what arrives, and
//! what a server that is down, slow, failing or refusing does to the
//! profiler (nothing the application sees, bounded memory, a bounded stop).
#![cfg(feature = "push")]

mod push_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::{Profiler, Push, PushStats};
use push_support::{Behaviour, Receiver};

/// One profiler per process: the tests take turns.
static TURN: Mutex<()> = Mutex::new(());

/// A thread that spins until dropped, so every window has samples.
struct Spinner(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Spinner {
    fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::Builder::new()
            .name("push-spin".into())
            .spawn(move || {
                let mut x = 0u64;
                while !s.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
            .unwrap();
        Spinner(stop, Some(t))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(t) = self.1.take() {
            t.join().unwrap();
        }
    }
}

/// Waits until `done` (polled), at most 30 s.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "30 s without {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn push_stats(profiler: &Profiler) -> PushStats {
    profiler.dump_stats().push.expect("pushing")
}

/// Messages the profiler reported, collected.
fn collector() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&str) + Send + Sync + 'static,
) {
    let messages = Arc::new(Mutex::new(Vec::new()));
    let m = messages.clone();
    (messages, move |s: &str| {
        m.lock().unwrap().push(s.to_owned())
    })
}

#[test]
fn every_window_arrives_once_with_its_labels() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Accept]);
    let _spin = Spinner::start();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(receiver.url())
                .service_name("btprof-test")
                .label("env", "ci")
                .tenant("team-a")
                .interval(Duration::from_millis(200)),
        )
        .start()
        .unwrap();
    wait_for("four windows pushed", || push_stats(&profiler).pushed >= 4);
    let (profile, stats) = profiler.stop_with_dump_stats().unwrap();
    let push = stats.push.unwrap();
    let accepted = receiver.accepted();
    println!(
        "measured: {} windows pushed, {} bytes, {} samples in all; stats {push:?}",
        accepted.len(),
        push.bytes_sent,
        profile.total_samples()
    );
    assert_eq!(receiver.invalid(), Vec::<String>::new());
    assert_eq!(accepted.len() as u64, push.pushed);
    assert_eq!(push.pushed, push.windows, "{push:?}");
    assert_eq!((push.dropped, push.unsent, push.retried), (0, 0, 0));
    let mut ids: Vec<&str> = accepted.iter().map(|p| p.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), accepted.len(), "each window once");
    // The windows add up to the run (empty windows are not sent).
    let pushed: i64 = accepted.iter().map(|p| p.samples()).sum();
    assert_eq!(pushed as u64, profile.total_samples());
    assert_eq!(push.samples_pushed, profile.total_samples());
    let mut last_start = 0;
    for p in &accepted {
        assert_eq!(p.label("service_name"), Some("btprof-test"));
        assert_eq!(p.label("env"), Some("ci"));
        assert_eq!(p.label("__name__"), Some("process_cpu"));
        assert_eq!(
            p.label("pid"),
            Some(std::process::id().to_string().as_str())
        );
        assert_eq!(p.label("mode"), Some("cpu"));
        for own in ["host", "version"] {
            assert!(p.label(own).is_some(), "{own} missing: {:?}", p.labels);
        }
        let clock = p.label("clock").unwrap_or("none");
        assert!(["perf", "thread"].contains(&clock), "{clock}");
        assert!(p
            .headers
            .contains(&("x-scope-orgid".into(), "team-a".into())));
        let types: Vec<(&str, &str)> = p
            .profile
            .sample_type
            .iter()
            .map(|t| {
                let s = |i: i64| p.profile.string_table[i as usize].as_str();
                (s(t.r#type), s(t.unit))
            })
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!(p.profile.period, 1_000_000);
        assert!(p.profile.duration_nanos > 0);
        assert!(p.profile.time_nanos > last_start, "windows in order");
        last_start = p.profile.time_nanos;
    }
    check_with_go_pprof(&accepted[0].raw, &[]);
}

/// `go tool pprof -raw` reads a pushed profile, with the sample types and
/// each of `shows`, or the test says it could not check.
fn check_with_go_pprof(raw: &[u8], shows: &[&str]) {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        println!(
            "NOT CHECKED: go is not installed, so `go tool pprof` did not read a pushed profile"
        );
        return;
    }
    let path = std::env::temp_dir().join(format!("btprof-push-{}.pb.gz", std::process::id()));
    std::fs::write(&path, raw).unwrap();
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("samples/count cpu/nanoseconds"), "{text}");
    for part in shows {
        assert!(text.contains(part), "{part} not in:\n{text}");
    }
    println!("checked: go tool pprof -raw read a pushed profile");
}

#[test]
fn sample_labels_arrive_and_those_the_server_refuses_are_left_out_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Accept]);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    // `bad-name` breaks the name rule; `env` is a series label's name.
    let labels = [
        ("endpoint", "checkout"),
        ("bad-name", "x"),
        ("env", "other"),
    ];
    let labelled = std::thread::Builder::new()
        .name("push-labelled".into())
        .spawn(move || {
            btprof::with_labels(&labels, || {
                let mut x = 0u64;
                while !s.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .unwrap();
    let (messages, report) = collector();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(receiver.url())
                .service_name("btprof-test")
                .label("env", "ci")
                .interval(Duration::from_millis(200))
                .on_error(report),
        )
        .start()
        .unwrap();
    wait_for("three windows pushed", || push_stats(&profiler).pushed >= 3);
    let (profile, stats) = profiler.stop_with_dump_stats().unwrap();
    stop.store(true, Ordering::Relaxed);
    labelled.join().unwrap();
    let push = stats.push.unwrap();
    let said = messages.lock().unwrap();
    println!("measured: {push:?}; said {said:?}");
    assert_eq!(receiver.invalid(), Vec::<String>::new());
    assert_eq!(push.pushed, push.windows, "{push:?}");
    let accepted = receiver.accepted();
    let mut arrived = 0;
    for p in &accepted {
        for (labels, samples) in p.sample_labels() {
            let thread = labels.iter().find(|(k, _)| *k == "thread").map(|l| l.1);
            let others: Vec<_> = labels.iter().filter(|(k, _)| *k != "thread").collect();
            if thread == Some("push-labelled") {
                assert_eq!(others, [&("endpoint", "checkout")], "{labels:?}");
                arrived += samples;
            } else {
                assert_eq!(others, Vec::<&(&str, &str)>::new(), "{labels:?}");
            }
        }
    }
    // Every labelled sample of the run arrived with its label.
    let recorded: u64 = profile
        .stacks()
        .filter(|s| s.labels().get("endpoint") == Some("checkout"))
        .map(|s| s.count())
        .sum();
    assert!(recorded > 0, "no labelled sample recorded");
    assert_eq!(arrived as u64, recorded);
    for name in ["\"bad-name\"", "\"env\""] {
        let about: Vec<_> = said.iter().filter(|m| m.contains(name)).collect();
        assert_eq!(about.len(), 1, "{name} said once: {said:?}");
    }
    assert!(said.len() == 2, "nothing else said: {said:?}");
    let labelled_window = accepted
        .iter()
        .find(|p| p.sample_labels().iter().any(|(l, _)| l.len() > 1))
        .expect("a window with labelled samples");
    check_with_go_pprof(&labelled_window.raw, &["endpoint:[checkout]"]);
}

#[test]
fn a_server_down_at_start_gets_the_queued_windows_in_order() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // A free port, closed again: nothing listens there yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let _spin = Spinner::start();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(format!("http://{addr}"))
                .interval(Duration::from_millis(200))
                // Room for every window made while retries back off (up to
                // seconds on a loaded machine): order is under test here,
                // the queue's bound in the hung-server test.
                .queue_windows(64)
                .on_error(|_| {}),
        )
        .start()
        .unwrap();
    wait_for("three windows and a failed attempt", || {
        let s = push_stats(&profiler);
        s.windows >= 3 && s.retried >= 1
    });
    let receiver = Receiver::start(&addr.to_string(), &[Behaviour::Accept]);
    let queued = push_stats(&profiler).windows;
    wait_for("the queued windows delivered", || {
        receiver.accepted().len() as u64 >= queued
    });
    let (_, stats) = profiler.stop_with_dump_stats().unwrap();
    let push = stats.push.unwrap();
    let accepted = receiver.accepted();
    println!("measured: {push:?}");
    assert_eq!(push.dropped, 0, "every window fits the queue");
    assert_eq!(accepted.len() as u64, push.windows);
    let starts: Vec<i64> = accepted.iter().map(|p| p.profile.time_nanos).collect();
    assert!(
        starts.windows(2).all(|w| w[0] < w[1]),
        "in order: {starts:?}"
    );
}

#[test]
fn a_server_that_never_answers_costs_a_bounded_queue_and_stop() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Hang]);
    let _spin = Spinner::start();
    let (messages, report) = collector();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(receiver.url())
                .interval(Duration::from_millis(100))
                .queue_windows(2)
                .request_timeout(Duration::from_secs(30))
                .flush_timeout(Duration::from_millis(500))
                .on_error(report),
        )
        .start()
        .unwrap();
    wait_for("windows dropped from the full queue", || {
        push_stats(&profiler).dropped >= 3
    });
    // While the server hangs, an application thread's work takes what it
    // takes unprofiled, and memory does not grow with the windows made.
    let app = Instant::now();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let app_took = app.elapsed();
    // Ten windows first, so that one-time costs (the symbol cache's first
    // loads, allocator arenas) fall before the span that is measured.
    wait_for("ten more windows", || push_stats(&profiler).dropped >= 13);
    let rss_before = btprof_testkit::measure::current_rss_kib();
    wait_for("ten windows more again", || {
        push_stats(&profiler).dropped >= 23
    });
    let rss_after = btprof_testkit::measure::current_rss_kib();
    let queued = push_stats(&profiler).queued;
    println!("measured: 50 sleeps of 10 ms took {app_took:?}; RSS {rss_before:?} -> {rss_after:?} KiB over ten dropped windows; {queued} queued");
    // 0.5 s of sleeps; a push on the application's path would wait out the
    // 30 s request timeout.
    assert!(app_took < Duration::from_secs(10), "{app_took:?}");
    assert!(queued <= 2, "{queued} windows queued past the bound of 2");
    // Each window is a few KiB and only two are kept; the allowance is for
    // the allocator and the symbol cache, far under what a queue that kept
    // every window of a long outage would take.
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        assert!(
            after < before + 8 * 1024,
            "RSS grew from {before} to {after} KiB"
        );
    }
    let began = Instant::now();
    let (_, stats) = profiler.stop_with_dump_stats().unwrap();
    let stopped_in = began.elapsed();
    let push = stats.push.unwrap();
    println!(
        "measured: stop took {stopped_in:?}; {push:?}; said {:?}",
        messages.lock().unwrap()
    );
    // The bound is 0.5 s; the rest is the last window's symbolising.
    assert!(stopped_in < Duration::from_secs(5), "{stopped_in:?}");
    assert_eq!(push.pushed, 0);
    assert!(push.unsent >= 1 && push.unsent <= 2, "{push:?}");
    // The window in flight stays queued until it is sent.
    assert_eq!(push.dropped + push.unsent, push.windows, "{push:?}");
    let said = messages.lock().unwrap();
    assert_eq!(
        said.iter().filter(|m| m.contains("queue is full")).count(),
        1,
        "said once: {said:?}"
    );
}

#[test]
fn server_errors_are_retried_until_it_recovers() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = Receiver::start(
        "127.0.0.1:0",
        &[
            Behaviour::Status(500),
            Behaviour::ResetMidBody,
            Behaviour::Status(503),
            Behaviour::Accept,
        ],
    );
    let _spin = Spinner::start();
    let (messages, report) = collector();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(receiver.url())
                .interval(Duration::from_millis(200))
                // The back-off waits 3.5-7 s over the three failures: room
                // for every window meanwhile.
                .queue_windows(64)
                .on_error(report),
        )
        .start()
        .unwrap();
    wait_for("a window after the failures", || {
        !receiver.accepted().is_empty()
    });
    let (_, stats) = profiler.stop_with_dump_stats().unwrap();
    let push = stats.push.unwrap();
    println!("measured: {push:?}; said {:?}", messages.lock().unwrap());
    assert_eq!(push.retried, 3, "{push:?}");
    assert_eq!(
        push.pushed, push.windows,
        "every window in the end: {push:?}"
    );
    assert_eq!(receiver.accepted().len() as u64, push.windows);
    let said = messages.lock().unwrap();
    assert!(said[0].contains("HTTP 500"), "{said:?}");
    assert_eq!(
        said.len(),
        2,
        "each trouble once, then the recovery: {said:?}"
    );
    assert!(said.iter().any(|m| m.contains("sending again")), "{said:?}");
}

#[test]
fn refused_credentials_are_said_once_and_not_retried() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let receiver = Receiver::start("127.0.0.1:0", &[Behaviour::Status(401)]);
    let _spin = Spinner::start();
    let (messages, report) = collector();
    let profiler = Profiler::builder()
        .push(
            Push::pyroscope(receiver.url())
                .bearer_token("wrong")
                .interval(Duration::from_millis(100))
                .on_error(report),
        )
        .start()
        .unwrap();
    wait_for("five windows", || push_stats(&profiler).windows >= 5);
    let (_, stats) = profiler.stop_with_dump_stats().unwrap();
    let push = stats.push.unwrap();
    println!("measured: {push:?}; {} requests", receiver.requests());
    assert_eq!(receiver.requests(), 1, "no retry loop");
    assert_eq!(push.pushed, 0);
    assert_eq!(push.dropped, push.windows);
    let said = messages.lock().unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("401") && said[0].contains("credentials"),
        "{said:?}"
    );
}

#[test]
fn labels_the_server_would_refuse_fail_the_start() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let err = Profiler::builder()
        .push(Push::pyroscope("http://127.0.0.1:9").label("team-name", "x"))
        .start()
        .err()
        .expect("refused");
    assert!(err.to_string().contains("team-name"), "{err}");
}
