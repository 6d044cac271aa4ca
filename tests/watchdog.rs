//! Behaviour of the stall watchdog, each test beside two CPU hogs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::{Stall, Watchdog};
use btprof_testkit::hogs::Hogs;

type Seen = Arc<Mutex<Vec<(String, Duration, usize, usize, bool)>>>;

/// The tests take turns, so that each runs beside its own two hogs and no
/// more: stall durations are measured in wall time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// Beats every millisecond for `how_long`.
fn beat_for(heartbeat: &btprof::Heartbeat, how_long: Duration) {
    let t = Instant::now();
    while t.elapsed() < how_long {
        heartbeat.beat();
        std::thread::sleep(Duration::from_millis(1));
    }
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
    let _serial = serial();
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
    // Not random: the 600 ms wall-clock spin passes the 250 ms threshold
    // whatever the load; a second stall needs a 250 ms wait for a CPU
    // after a 1 ms sleep.
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (name, dur, n, hits, finished) = &seen[0];
    assert_eq!(name, "stally");
    assert!(*finished);
    // A wall-time gap, not a count: 1 ms of sleep, the 600 ms spin, waits
    // for a CPU at either end and the coarse clock's tick (never under 300).
    // Over 700 needs ~95 ms of waiting beside two hogs: a latency bar.
    assert!(
        *dur >= Duration::from_millis(300) && *dur <= Duration::from_millis(700),
        "{dur:?}"
    );
    // Not random: every backtrace of the stall is taken inside stall_here
    // but perhaps one as it leaves; about 35 in the 350 ms past the
    // threshold, so 3 may miss. It catches backtraces of the wrong place.
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
    let _serial = serial();
    let _hogs = Hogs::start(2);
    // Loads the symbol tables, so the first backtrace of a stall is not
    // spent reading them.
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let wd = watchdog(&seen, None);
    let hb = wd.watch_current_thread("steady").unwrap();
    beat_for(&hb, Duration::from_secs(5));
    drop(hb);
    wd.stop();
    // Not random: a stall needs 250 ms between two beats 1 ms apart, a
    // 250 ms wait for a CPU beside two hogs (a whole-process pause is
    // not reported), a latency no computable tail describes.
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[test]
fn stall_at_stop_is_unfinished() {
    let _serial = serial();
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
    // Not random: the 1200 ms spin outlasts the 700 ms before the stop, so
    // the stall is under way at the stop once the thread beat within 450 ms
    // of its spawn (a wait for a CPU, not a count).
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(!seen[0].4, "{seen:?}");
}

/// Set in the child run of the slow-symbol-load test.
const SLOW_SYMBOLS_CHILD: &str = "BTPROF_WATCHDOG_SLOW_SYMBOLS_CHILD";

/// A first symbol load that takes three thresholds (as hundreds of images
/// can on a Mac) is the watchdog's own work, not a pause of the whole
/// process: one stall, finished, whether the load happens when the
/// watchdog starts or in the stall's first backtrace.
#[test]
fn a_slow_first_symbol_load_is_not_taken_for_a_pause() {
    let test = "a_slow_first_symbol_load_is_not_taken_for_a_pause";
    if std::env::var_os(SLOW_SYMBOLS_CHILD).is_some() {
        // A fresh process: nothing has loaded the symbol tables yet.
        let seen: Seen = Arc::default();
        let wd = Arc::new(watchdog(&seen, None));
        let w = Arc::clone(&wd);
        std::thread::spawn(move || {
            let hb = w.watch_current_thread("stally").unwrap();
            // Past the load, if the watchdog does it as it starts.
            beat_for(&hb, Duration::from_millis(1500));
            stall_here(Duration::from_millis(600));
            beat_for(&hb, Duration::from_millis(300));
        })
        .join()
        .unwrap();
        Arc::into_inner(wd).expect("only owner").stop();
        for (_, _, backtraces, _, finished) in seen.lock().unwrap().iter() {
            println!("WATCHDOG-STALL {finished} {backtraces}");
        }
        return;
    }
    let _serial = serial();
    let _hogs = Hogs::start(2);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(SLOW_SYMBOLS_CHILD, "1")
        .env("BTPROF_TEST_SLOW_RESOLVER_MS", "750")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let stalls: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("WATCHDOG-STALL "))
        .collect();
    // Not random: the 600 ms spin passes the 250 ms threshold whatever
    // the load; taken for a pause, the load cut it into an unfinished
    // stall and a second one.
    assert_eq!(stalls.len(), 1, "{text}");
    assert!(stalls[0].starts_with("true "), "{text}");
}

/// Which child run a test of a whole-process pause asked for.
const PAUSE_CHILD: &str = "BTPROF_WATCHDOG_PAUSE_CHILD";

/// The child's part of a pause test: watches this thread, beats for 4 s
/// (or, for `"stall"`, stalls in `stall_here` for 2 s first), and prints
/// each stall it saw as `WATCHDOG-STALL <finished> <backtraces>` and their
/// count. Returns false where this run is not such a child.
fn pause_child() -> bool {
    let Some(how) = std::env::var_os(PAUSE_CHILD) else {
        return false;
    };
    let seen: Seen = Arc::default();
    let wd = watchdog(&seen, None);
    let hb = wd.watch_current_thread("paused").unwrap();
    println!("WATCHDOG-WATCHING");
    if how == "stall" {
        stall_here(Duration::from_secs(2));
    }
    beat_for(&hb, Duration::from_secs(4));
    drop(hb);
    wd.stop();
    for (_, _, backtraces, _, finished) in seen.lock().unwrap().iter() {
        println!("WATCHDOG-STALL {finished} {backtraces}");
    }
    println!("WATCHDOG-STALLS {}", seen.lock().unwrap().len());
    true
}

/// Runs test `test` of this binary again as a pause child of kind `how`,
/// beside two CPU hogs, stops it with SIGSTOP for a second `after` its
/// thread is watched, continues it, and returns what it printed. In the
/// child itself, runs the child's part and returns `None`.
fn pause_a_child(test: &str, how: &str, after: Duration) -> Option<String> {
    if pause_child() {
        return None;
    }
    let _serial = serial();
    let _hogs = Hogs::start(2);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(PAUSE_CHILD, how)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // Stopped only once it is watched, so the pause lands where it should
    // however slowly the child started.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("WATCHDOG-WATCHING") {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(n > 0, "the child ended before it was watched:\n{text}");
        text.push_str(&line);
    }
    std::thread::sleep(after);
    // SAFETY: `pid` is our own child, not yet waited for.
    let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(rc, 0);
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: as above.
    let rc = unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(rc, 0);
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    assert!(child.wait().unwrap().success(), "{text}");
    Some(text)
}

/// Stopping and continuing the whole process holds every thread alike,
/// the beating one included, so it must not be reported.
#[test]
fn whole_process_pause_gives_no_stall() {
    let test = "whole_process_pause_gives_no_stall";
    let Some(text) = pause_a_child(test, "beat", Duration::from_millis(500)) else {
        return;
    };
    // Not random: the pause is seen as the watchdog's own overslept sleep;
    // a stall outside it needs a 250 ms wait for a CPU between 1 ms beats.
    assert!(text.contains("WATCHDOG-STALLS 0"), "{text}");
}

/// A stall already under way when the whole process is held was real: it
/// is delivered as it stood, unfinished, with its backtraces, rather than
/// dropped with the pause. (The thread, still stuck after the pause, then
/// stalls anew and that one finishes.)
#[test]
fn a_stall_cut_by_a_pause_is_delivered_unfinished() {
    let test = "a_stall_cut_by_a_pause_is_delivered_unfinished";
    let Some(text) = pause_a_child(test, "stall", Duration::from_millis(700)) else {
        return;
    };
    let first = text
        .lines()
        .find(|l| l.starts_with("WATCHDOG-STALL "))
        .unwrap_or_else(|| panic!("no stall reported:\n{text}"));
    let mut fields = first.split_whitespace().skip(1);
    let (finished, backtraces) = (fields.next().unwrap(), fields.next().unwrap());
    assert_eq!(finished, "false", "{text}");
    // The stall runs 450 ms past the 250 ms threshold before the pause, a
    // backtrace every 10 ms: about 45. None needs the watchdog starved.
    assert!(backtraces.parse::<usize>().unwrap() > 0, "{text}");
}

const TRACED_CHILD: &str = "BTPROF_WATCHDOG_TRACED_CHILD";

/// A debugger holding a thread at a breakpoint is no stall of the
/// program's own, so while the process is traced nothing is reported.
/// The test runs itself again as a child that stalls once, twice:
/// untraced, where the stall must be reported (so the traced run's
/// silence means something), and traced, where it must not be.
///
/// Tracing without a debugger: on Linux the parent seizes the child's
/// main thread (`PTRACE_SEIZE`), whose `TracerPid` is the one
/// `/proc/self/status` shows; on macOS the child asks its parent to trace
/// it (`PT_TRACE_ME`), which marks the whole process `P_TRACED`. Neither
/// stops the child, and no signal reaches a traced thread in the run, so
/// the parent never has to resume it. Where tracing is refused (a seccomp
/// filter, a Yama policy), the test says NOT CHECKED and passes.
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[test]
fn a_stall_under_a_debugger_is_not_reported() {
    if let Some(mode) = std::env::var_os(TRACED_CHILD) {
        return traced_child(mode == "traced");
    }
    let _serial = serial();
    let _hogs = Hogs::start(2);
    let untraced = run_traced_child(false).expect("an untraced child");
    // Not random: an 800 ms wall-clock spin passes the 250 ms threshold
    // whatever the load.
    assert!(untraced >= 1, "the untraced child's stall was not reported");
    match run_traced_child(true) {
        Some(traced) => {
            println!(
                "WATCHDOG-DEBUGGER untraced: {untraced} stall(s) reported; traced: {traced} reported"
            );
            // Not random: while traced no stall is reported; the tracer is
            // in place (`become_traced`) before the watchdog starts.
            assert_eq!(traced, 0, "a stall was reported while traced");
        }
        None => println!("NOT CHECKED: this process may not trace its child"),
    }
}

/// The child of [`a_stall_under_a_debugger_is_not_reported`]: made
/// traced if asked, then beats, stalls 800 ms, beats, and prints how
/// many stalls the watchdog reported (or that it could not be traced).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn traced_child(traced: bool) {
    if traced {
        if let Err(why) = become_traced() {
            println!("WATCHDOG-UNTRACED {why}");
            return;
        }
    }
    btprof::backtrace(&btprof::Thread::current()).unwrap();
    let seen: Seen = Arc::default();
    let wd = watchdog(&seen, None);
    let hb = wd.watch_current_thread("debugged").unwrap();
    for _ in 0..300 {
        hb.beat();
        std::thread::sleep(Duration::from_millis(1));
    }
    stall_here(Duration::from_millis(800));
    for _ in 0..300 {
        hb.beat();
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(hb);
    wd.stop();
    println!("WATCHDOG-STALLS {}", seen.lock().unwrap().len());
}

/// Linux: waits for the parent's `PTRACE_SEIZE` to show as this
/// process's tracer.
#[cfg(target_os = "linux")]
fn become_traced() -> Result<(), String> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let tracer = status.lines().find_map(|l| l.strip_prefix("TracerPid:"));
        if tracer.is_some_and(|pid| pid.trim() != "0") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err("no tracer within 10 s".into())
}

/// macOS: asks to be traced by the parent, as a debugger that launched
/// the program would.
#[cfg(target_os = "macos")]
fn become_traced() -> Result<(), String> {
    // SAFETY: PT_TRACE_ME takes no pointer; it only marks this process
    // as traced by its parent.
    let rc = unsafe { libc::ptrace(libc::PT_TRACE_ME, 0, std::ptr::null_mut(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("PT_TRACE_ME: {}", std::io::Error::last_os_error()))
    }
}

/// Runs [`traced_child`] and returns the stalls it reported, or `None`
/// when it could not be traced.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn run_traced_child(traced: bool) -> Option<usize> {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_stall_under_a_debugger_is_not_reported",
            "--nocapture",
        ])
        .env(TRACED_CHILD, if traced { "traced" } else { "untraced" })
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    #[cfg(target_os = "linux")]
    if traced {
        let pid = child.id() as libc::pid_t;
        // SAFETY: attaches to our own child without stopping it; no
        // pointers are passed.
        let rc = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) };
        if rc != 0 {
            println!("PTRACE_SEIZE: {}", std::io::Error::last_os_error());
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    }
    // With a limit: a traced thread that got a signal would stop until
    // this process resumed it, which it never does.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child was still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(signal) = status.stopped_signal() {
        let _ = child.kill();
        panic!("the traced child stopped on signal {signal}");
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(status.success(), "{status}: {out}");
    if let Some(line) = out.lines().find(|l| l.starts_with("WATCHDOG-UNTRACED")) {
        println!("{line}");
        return None;
    }
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("WATCHDOG-STALLS "))
        .unwrap_or_else(|| panic!("no count in {out}"));
    Some(line.parse().unwrap())
}
