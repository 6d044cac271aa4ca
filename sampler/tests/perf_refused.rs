//! Where `perf_event_open` is refused (a container under the default
//! seccomp profile, a kernel with `perf_event_paranoid` at 3), the sampler
//! finds out by itself and samples from its own thread. Nothing is forced:
//! the test runs itself again as a child under a real seccomp filter
//! ([`btprof_testkit::seccomp`]), and the child starts a sampler with the default
//! configuration.
#![cfg(target_os = "linux")]

mod support;

use std::process::Command;
use std::time::Duration;

use btprof_sampler::bench_support::TaskClock;
use btprof_sampler::{SampleClock, Sampler, SamplerConfig, FORCE_SAMPLER_THREAD_ENV};

use btprof_testkit::stats::{self, Attempt};
use btprof_testkit::{seccomp, thread_cpu};

/// Set in the child: the test then plays the child's part.
const CHILD_ENV: &str = "BTPROF_TEST_PERF_REFUSED_CHILD";
/// This test's name, for the child's command line.
const TEST_NAME: &str = "clock_detection_falls_back_where_seccomp_refuses_perf";
/// CPU time the child's worker spins under the sampler.
const CHILD_WORK: Duration = Duration::from_millis(300);

/// What a child saw.
#[derive(Debug, PartialEq)]
struct ChildReport {
    /// The errno of opening a task clock on itself (the sampler's own
    /// detection), or 0 if it opened.
    perf_errno: i32,
    /// The clock the sampler chose, as `{:?}`.
    clock: String,
    /// Samples taken of the worker.
    samples: u64,
    /// Periods the run's stats report no sample stands for (skipped,
    /// lost, stackless): where a starved run's shortfall shows.
    uncovered: u64,
}

/// The worker's CPU time in periods, less what whole periods and the
/// random rounding of its exit tail may leave out. Not a random count:
/// every period of the worker's CPU is stood for by a weighted sample or
/// counted on its last stacks at exit (298-301 of 300 measured, in 24
/// runs beside four busy processes). 95% catches a sample that stands for
/// the wrong number of periods: paying each twice gave 166 and 177, which
/// the earlier bar of half let through.
const MIN_SAMPLES: u64 = 285;

/// The child's part: probes perf, runs a sampler with the default
/// configuration over a busy worker, and prints what it saw.
fn child() {
    let perf_errno = match TaskClock::open(0, 1_000_000) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    };
    let sampler = Sampler::start(SamplerConfig::default()).unwrap();
    let worker = std::thread::Builder::new()
        .name("refused-worker".into())
        .spawn(|| {
            let start = thread_cpu();
            let mut x = 1u64;
            while thread_cpu() - start < CHILD_WORK {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(0x2545_f491_4f6c_dd1d) + 1);
                }
            }
        })
        .unwrap();
    worker.join().unwrap();
    let raw = sampler.stop().unwrap();
    let samples = support::samples_named(&raw, "refused-worker");
    let stats = &raw.stats;
    let uncovered = stats.skipped_samples + stats.lost_samples + stats.stackless_samples;
    println!(
        "CHILD perf_errno={perf_errno} clock={:?} samples={samples} uncovered={uncovered}",
        stats.clock
    );
}

/// [`run_child`], run again (at most twice) when the worker got fewer
/// than [`MIN_SAMPLES`] and the stats say why: periods a starved sampler
/// skipped or lost. A shortfall they do not report is judged, and fails.
fn judged_child(refuse: Option<i32>) -> ChildReport {
    stats::judge(&format!("perf refused ({refuse:?})"), |_| {
        let report = run_child(refuse);
        if report.samples < MIN_SAMPLES && report.samples + report.uncovered >= MIN_SAMPLES {
            Attempt::Starved(format!("{report:?}: the stats report the shortfall"))
        } else {
            Attempt::Judge(report)
        }
    })
}

/// Runs this test as a child, with `perf_event_open` refused with
/// `refuse` if given, and returns its report.
fn run_child(refuse: Option<i32>) -> ChildReport {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env_remove(FORCE_SAMPLER_THREAD_ENV);
    if let Some(errno) = refuse {
        seccomp::refuse_perf_event_open(&mut cmd, errno);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child ({refuse:?}) failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints the test's name on the same line, before it.
    let line = stdout
        .lines()
        .find_map(|l| Some(&l[l.find("CHILD ")? + "CHILD ".len()..]))
        .unwrap_or_else(|| panic!("no report from the child ({refuse:?}):\n{stdout}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_owned()
    };
    ChildReport {
        perf_errno: field("perf_errno").parse().unwrap(),
        clock: field("clock"),
        samples: field("samples").parse().unwrap(),
        uncovered: field("uncovered").parse().unwrap(),
    }
}

#[test]
fn clock_detection_falls_back_where_seccomp_refuses_perf() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child();
        return;
    }
    // The control: the same child without the filter sees perf as this
    // process does, and takes the per-thread timers where it is allowed.
    let allowed_here = TaskClock::open(0, 1_000_000).is_ok();
    let free = judged_child(None);
    assert_eq!(free.perf_errno == 0, allowed_here, "{free:?}");
    let expected = if allowed_here {
        SampleClock::Perf
    } else {
        SampleClock::SamplerThread
    };
    assert_eq!(free.clock, format!("{expected:?}"), "{free:?}");
    assert!(free.samples >= MIN_SAMPLES, "{free:?}");

    // EACCES as a paranoid kernel refuses; EPERM as Docker's default
    // profile refuses a system call it does not allow.
    for errno in [libc::EACCES, libc::EPERM] {
        let refused = judged_child(Some(errno));
        assert_eq!(
            refused.perf_errno, errno,
            "the filter refused perf: {refused:?}"
        );
        assert_eq!(
            refused.clock,
            format!("{:?}", SampleClock::SamplerThread),
            "{refused:?}"
        );
        // 300 ms of CPU at 1000 Hz: the fallback samples all of it.
        assert!(refused.samples >= MIN_SAMPLES, "{refused:?}");
        println!("perf refused with errno {errno}: {refused:?}; allowed: {free:?}");
    }
}
