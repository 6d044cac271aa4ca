//! Medians and the printed tables, which are also collected for
//! `docs/results/overhead.md`.

use std::sync::Mutex;

/// One table of the results file: a title, its columns, its rows and the
/// lines printed after it.
struct Section {
    title: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    lines: Vec<String>,
}

/// The run's sections, in the order printed.
static SECTIONS: Mutex<Vec<Section>> = Mutex::new(Vec::new());

/// Starts a section of the results file.
pub(crate) fn section(title: &str, columns: &[&str]) {
    SECTIONS.lock().unwrap().push(Section {
        title: title.trim().to_owned(),
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        rows: Vec::new(),
        lines: Vec::new(),
    });
}

/// A row of the current section's table.
pub(crate) fn record_row(cells: Vec<String>) {
    if let Some(section) = SECTIONS.lock().unwrap().last_mut() {
        section.rows.push(cells);
    }
}

/// A line printed under the current section.
pub(crate) fn record_line(line: &str) {
    if let Some(section) = SECTIONS.lock().unwrap().last_mut() {
        section.lines.push(line.trim().to_owned());
    }
}

/// Prints a line and keeps it for the results file.
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!($($arg)*);
        println!("{line}");
        $crate::report::record_line(&line);
    }};
}
pub(crate) use say;

/// Every section collected, into `results`.
pub(crate) fn write_sections(results: &mut crate::results::Results) {
    for section in SECTIONS.lock().unwrap().iter() {
        results.heading(&section.title);
        if !section.rows.is_empty() {
            let columns: Vec<&str> = section.columns.iter().map(String::as_str).collect();
            results.table(&columns, &section.rows);
        }
        if !section.lines.is_empty() {
            let bullets: Vec<String> = section.lines.iter().map(|l| format!("- {l}")).collect();
            results.paragraph(&bullets.join("\n"));
        }
    }
}

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
    record_row(vec![
        label.trim().to_owned(),
        format!("{:.*}", decimals, s.median),
        format!("{:.*}", decimals, s.min),
        format!("{:.*}", decimals, s.max),
    ]);
    println!(
        "  {label:<44} {:>12.*} {:>12.*} {:>12.*}",
        decimals, s.median, decimals, s.min, decimals, s.max
    );
    s
}

pub(crate) fn header(title: &str) {
    section(title, &["metric", "median", "min", "max"]);
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
