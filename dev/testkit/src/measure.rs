//! Small helpers for benchmarks that measure each variant in a child
//! process of its own.

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
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

/// The `key=number` fields of a child's result line.
pub fn fields(line: &str) -> impl Iterator<Item = (&str, f64)> + '_ {
    line.split_whitespace().map(|field| {
        let (key, value) = field.split_once('=').expect("key=value");
        (key, value.parse().expect("a number"))
    })
}
