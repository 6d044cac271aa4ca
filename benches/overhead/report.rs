//! Medians and the printed tables.

#[derive(Clone, Copy)]
pub(crate) struct Summary {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

pub(crate) fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Summary {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Summary {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

pub(crate) fn row(label: &str, values: &[f64], decimals: usize) -> Summary {
    let s = summarize(values);
    println!(
        "  {label:<44} {:>12.*} {:>12.*} {:>12.*}",
        decimals, s.median, decimals, s.min, decimals, s.max
    );
    s
}

pub(crate) fn header(title: &str) {
    println!();
    println!("{title}");
    println!(
        "  {:<44} {:>12} {:>12} {:>12}",
        "metric", "median", "min", "max"
    );
    println!("  {}", "-".repeat(44 + 3 * 13));
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "OVER TARGET"
    }
}

pub(crate) fn machine_context(runs: usize) {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    println!("btprof overhead benchmark");
    println!(
        "  machine: nproc={nproc}, kernel={kernel}, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    println!(
        "  runs per measurement: {runs} (BTPROF_BENCH_RUNS), baseline and profiled interleaved, order alternating"
    );
}
