//! Behaviour of the stall watchdog, each test beside two CPU hogs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::{Stall, Watchdog};
use btprof_testkit::hogs::Hogs;

type Seen = Arc<Mutex<Vec<(String, Duration, usize, usize, bool)>>>;

fn watchdog(seen: &Seen, dir: Option<&std::path::Path>) -> Watchdog {
    let s = Arc::clone(seen);
    let mut b = Watchdog::builder()
        .threshold(Duration::from_millis(250))
        .sample_every(Duration::from_millis(10))
        .on_stall(move |st: &Stall| {
            let hits = st
                .stacks()
                .iter()
                .filter(|(k, _)| k.contains("stall_here"))
                .map(|(_, v)| *v)
                .sum();
            let mut folded = Vec::new();
            st.write_folded(&mut folded).unwrap();
            s.lock().unwrap().push((
                st.thread_name().to_owned(),
                st.duration(),
                st.backtraces(),
                hits,
                st.finished(),
            ));
        });
    if let Some(d) = dir {
        b = b.dir(d);
    }
    b.start().unwrap()
}

#[inline(never)]
fn stall_here(how_long: Duration) {
    let t = Instant::now();
    while t.elapsed() < how_long {
        std::hint::black_box(0);
    }
}

#[test]
fn one_stall_is_reported_with_its_function() {
    let _hogs = Hogs::start(2);
    // Loads the symbol tables, so the first backtrace of a stall is not
    // spent reading them.
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let dir = std::env::temp_dir().join(format!("btprof-watchdog-{}", std::process::id()));
    let wd = watchdog(&seen, Some(&dir));
    let wd = Arc::new(wd);
    let w = Arc::clone(&wd);
    std::thread::spawn(move || {
        let hb = w.watch_current_thread("stally").unwrap();
        for _ in 0..100 {
            hb.beat();
            std::thread::sleep(Duration::from_millis(1));
        }
        stall_here(Duration::from_millis(600));
        for _ in 0..300 {
            hb.beat();
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .join()
    .unwrap();
    Arc::into_inner(wd).expect("only owner").stop();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (name, dur, n, hits, finished) = &seen[0];
    assert_eq!(name, "stally");
    assert!(*finished);
    assert!(
        *dur >= Duration::from_millis(300) && *dur <= Duration::from_millis(700),
        "{dur:?}"
    );
    assert!(*n > 0 && *hits * 10 >= *n * 9, "{hits} of {n}");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let find = |ext: &str| {
        files
            .iter()
            .find(|f| {
                let f = f.to_string_lossy();
                f.starts_with("stall-stally-") && f.ends_with(ext)
            })
            .map(|f| dir.join(f))
    };
    assert!(
        find(".folded").is_some() && find(".json").is_some() && find(".svg").is_some(),
        "{files:?}"
    );
    let svg = std::fs::read_to_string(find(".svg").unwrap()).unwrap();
    assert!(svg.contains("<svg"), "not an SVG: {svg:.200}");
    assert!(svg.contains("stall_here"), "no stall_here frame in the SVG");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn steady_beats_give_no_stall() {
    let _hogs = Hogs::start(2);
    // Loads the symbol tables, so the first backtrace of a stall is not
    // spent reading them.
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let wd = watchdog(&seen, None);
    let hb = wd.watch_current_thread("steady").unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        hb.beat();
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(hb);
    wd.stop();
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn stall_at_stop_is_unfinished() {
    let _hogs = Hogs::start(2);
    // Loads the symbol tables, so the first backtrace of a stall is not
    // spent reading them.
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let wd = Arc::new(watchdog(&seen, None));
    let w = Arc::clone(&wd);
    let t = std::thread::spawn(move || {
        let hb = w.watch_current_thread("stuck").unwrap();
        drop(w);
        hb.beat();
        stall_here(Duration::from_millis(1200));
        hb.beat();
    });
    std::thread::sleep(Duration::from_millis(700));
    Arc::into_inner(wd).map(Watchdog::stop).unwrap_or(());
    t.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(!seen[0].4, "{seen:?}");
}

const CHILD: &str = "BTPROF_WATCHDOG_PAUSE_CHILD";

/// Stopping and continuing the whole process holds every thread alike,
/// the beating one included, so it must not be reported. The test runs
/// itself again as a child that beats and reports its stall count; the
/// parent stops it for a second in the middle.
#[test]
fn whole_process_pause_gives_no_stall() {
    if std::env::var_os(CHILD).is_some() {
        let seen: Seen = Arc::default();
        let wd = watchdog(&seen, None);
        let hb = wd.watch_current_thread("paused").unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(4) {
            hb.beat();
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(hb);
        wd.stop();
        println!("WATCHDOG-STALLS {}", seen.lock().unwrap().len());
        return;
    }
    let _hogs = Hogs::start(2);
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "whole_process_pause_gives_no_stall",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: `pid` is our own child, not yet waited for.
    let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(rc, 0);
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: as above.
    let rc = unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("WATCHDOG-STALLS "))
        .unwrap_or_else(|| panic!("no count in {text}"));
    assert_eq!(line, "WATCHDOG-STALLS 0");
}
