//! Runs each case in a child process and fails it if it outlives its limit.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One case: a body run in its own process, and how long it may take.
pub struct Case {
    pub name: &'static str,
    pub limit: Duration,
    pub body: fn(),
}

/// The ways cpu-mode samples are paced on Linux, by the name the clock
/// environment variable forces them with; every case runs under each,
/// because every fix must hold on each.
pub const CLOCKS: [(&str, &str); 2] = [("perf", "perf"), ("sampler thread", "thread")];

/// Runs the cases whose names contain one of `filters` (all without
/// filters), each in a child process, once per clock; returns the exit
/// code.
///
/// Cases run as many at a time as libtest would run tests
/// (`RUST_TEST_THREADS`, else one per CPU): most of their time is spent
/// waiting on children and sleeps, and one after another they were the
/// suite's slowest binary. Each case already judges what it measures by
/// the CPU its threads got, as it must beside other busy processes.
pub fn run_all(cases: &[Case], filters: &[&str]) -> i32 {
    let exe = std::env::current_exe().expect("own path");
    let runs: Vec<(&Case, &str, &str)> = cases
        .iter()
        .filter(|case| filters.is_empty() || filters.iter().any(|f| case.name.contains(f)))
        .flat_map(|case| {
            CLOCKS
                .iter()
                .map(move |&(clock, forced)| (case, clock, forced))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    let passed = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..parallelism() {
            scope.spawn(|| {
                while let Some(&(case, clock, forced)) = runs.get(next.fetch_add(1, Relaxed)) {
                    let started = Instant::now();
                    let result = run_one(&exe, case, forced);
                    let took = started.elapsed();
                    let name = format!("{} [{clock}]", case.name);
                    // One report at a time, whole, as each case ends.
                    let mut failed = failed.lock().unwrap_or_else(|e| e.into_inner());
                    match result {
                        Ok(out) => {
                            passed.fetch_add(1, Relaxed);
                            println!("test {name} ... ok ({took:.1?})");
                            for line in out.lines().filter(|l| l.starts_with("measured:")) {
                                println!("    {line}");
                            }
                        }
                        Err(why) => {
                            println!("test {name} ... FAILED ({took:.1?})\n{why}");
                            failed.push(name);
                        }
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        passed.into_inner(),
        failed.len()
    );
    if failed.is_empty() {
        0
    } else {
        println!("failures: {failed:?}");
        1
    }
}

/// How many cases run at once: `RUST_TEST_THREADS` as libtest reads it,
/// else the CPUs this process may use.
fn parallelism() -> usize {
    std::env::var("RUST_TEST_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1)
}

/// Runs one case on `clock` (forced through the environment variable,
/// which its grandchildren inherit too).
fn run_one(exe: &std::path::Path, case: &Case, clock: &str) -> Result<String, String> {
    let mut command = Command::new(exe);
    command.env_remove(btprof_sampler::FORCE_SAMPLER_THREAD_ENV);
    command.env(btprof_sampler::CLOCK_ENV, clock);
    let mut child = command
        .args(["--case", case.name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the case: {e}"))?;
    // Drain both pipes on threads, so a chatty child never blocks on them.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + case.limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for the case: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    let output = format!("--- stdout:\n{out}--- stderr:\n{err}");
    match status {
        None => Err(format!(
            "WATCHDOG: did not finish within {:?}: killed (the profiler hung the process)\n{output}",
            case.limit
        )),
        Some(s) if s.success() => Ok(out),
        Some(s) => Err(match s.signal() {
            Some(sig) => format!("the case's process was killed by signal {sig}\n{output}"),
            None => format!("the case failed with {s}\n{output}"),
        }),
    }
}
