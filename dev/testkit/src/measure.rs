//! Small helpers for benchmarks that measure each variant in a child
//! process of its own.

use std::process::Command;

/// Rounds per measurement: `BTPROF_BENCH_RUNS` if it is a positive
/// number, else `default`.
pub fn runs(default: usize) -> usize {
    std::env::var("BTPROF_BENCH_RUNS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The median of the finite `values` (the mean of the middle two for an
/// even count), NaN when there are none: a round that could not measure
/// (a missing tool, no samples) reports NaN and is left out.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|x| x.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Peak resident set of this process in KiB (`ru_maxrss` is KiB on
/// Linux), so each measured variant runs in a child process of its own.
pub fn peak_rss_kib() -> u64 {
    // SAFETY: `rusage` is plain data, zeroed is a valid value, and
    // getrusage with RUSAGE_SELF only writes to the pointer it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let rc = libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        assert_eq!(rc, 0, "getrusage failed");
        usage
    };
    usage.ru_maxrss as u64
}

/// Resident set of this process now, in KiB (`/proc/self/statm`'s
/// second field, in pages); `None` where there is no such file.
pub fn current_rss_kib() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()? / 1024)
}

/// The `key=number` fields of a child's result line.
pub fn fields(line: &str) -> impl Iterator<Item = (&str, f64)> + '_ {
    line.split_whitespace().map(|field| {
        let (key, value) = field.split_once('=').expect("key=value");
        (key, value.parse().expect("a number"))
    })
}

/// Runs this benchmark's own executable again, set up by `configure`
/// (arguments, environment) to measure one variant, and returns its
/// standard output. Panics with the child's standard error, naming
/// `what`, if it fails.
pub fn run_self(what: &str, configure: impl FnOnce(&mut Command) -> &mut Command) -> String {
    let exe = std::env::current_exe().expect("own path");
    let out = configure(&mut Command::new(exe))
        .output()
        .expect("run child");
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
