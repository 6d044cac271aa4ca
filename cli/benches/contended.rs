//! Accuracy on a contended machine: the built-in workload profiled while
//! two CPU-burning processes compete for the cores, in the same run, by
//! `perf record -e cpu-clock -F 1000 --call-graph fp`, by btprof on its
//! default clock (the ring clock where perf events are allowed), and by
//! btprof with `perf_event_open` refused by a real seccomp filter (as in
//! a container): its default there (the detection runs for real) and the
//! sampler-thread clock forced (`--clock thread`).
//!
//! For each profiler and round: samples per CPU-second of each worker
//! thread (against the CPU time the workers measured), weighted (each
//! sample counted by the periods it stands for) and distinct (each
//! counted once: fewer where one sampler-thread signal pays periods a
//! thread was owed), each workload function's leaf share against the share of
//! CPU time measured inside it (error in points), and the share of worker
//! samples whose leaf is `clock_gettime` (where a sampler that signals
//! threads waiting for a CPU piles its samples up). One quiet round (no
//! hogs) of btprof's default first gives the `clock_gettime` baseline.
//!
//! perf comes from Debian's `linux-perf`; without it (or when it cannot
//! record) its row is skipped with a message saying so.
//!
//! `cargo bench -p btprof-cli --bench contended`; rounds from
//! `BTPROF_BENCH_RUNS` (default 3). Always exits 0: it reports, it does
//! not gate.
//!
//! Writes its latest results to `docs/results/contended.md`.

#[path = "../../benches/support/results.rs"]
mod results;

use std::path::{Path, PathBuf};
use std::process::Command;

use btprof_testkit::hogs::Hogs;
use btprof_testkit::measure::{self, median};

const BTPROF: &str = env!("CARGO_BIN_EXE_btprof");
const FUNCTIONS: [&str; 5] = [
    "alpha",
    "beta",
    "chain_outer",
    "chain_middle",
    "chain_inner",
];
const DURATION: &str = "3s";

/// One profile's accuracy.
#[derive(Clone, Debug, Default)]
struct Accuracy {
    /// Samples per CPU-second of each worker, weighted.
    rates: Vec<f64>,
    /// Distinct samples over weighted ones (1 where each sample is one
    /// period).
    distinct_share: f64,
    /// Measured minus true share per function, points.
    errors: [f64; 5],
    /// Share of worker samples with `clock_gettime` as the leaf, percent.
    clock_gettime_pct: f64,
    /// Extra words (the clock, PASS/FAIL).
    note: String,
}

impl Accuracy {
    fn max_error(&self) -> f64 {
        self.errors.iter().fold(0.0f64, |m, e| m.max(e.abs()))
    }

    fn mean_rate(&self) -> f64 {
        self.rates.iter().sum::<f64>() / self.rates.len().max(1) as f64
    }

    fn mean_distinct_rate(&self) -> f64 {
        self.mean_rate() * self.distinct_share
    }
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("btprof-contended-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// `btprof --pid-self` with `extra` arguments, judged from its self-check
/// output and folded file; with `refuse_perf`, under a seccomp filter
/// that refuses `perf_event_open` (`EPERM`, as Docker's default profile).
fn btprof_row(dir: &Path, extra: &[&str], refuse_perf: bool) -> Result<Accuracy, String> {
    let folded = dir.join("run.folded");
    let mut cmd = Command::new(BTPROF);
    if refuse_perf {
        #[cfg(target_os = "linux")]
        btprof_testkit::seccomp::refuse_perf_event_open(&mut cmd, libc::EPERM);
        #[cfg(not(target_os = "linux"))]
        return Err("perf events and seccomp filters are Linux only".into());
    }
    let out = cmd
        .env_remove("BTPROF_CLOCK")
        .env_remove("BTPROF_FORCE_SAMPLER_THREAD")
        .args([
            "--pid-self",
            "--hz",
            "1000",
            "--duration",
            DURATION,
            "--quiet",
        ])
        .arg("--output")
        .arg(dir.join("run.svg"))
        .arg("--folded")
        .arg(&folded)
        .args(extra)
        .output()
        .map_err(|e| format!("cannot run {BTPROF}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut acc = Accuracy::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("rate: ") {
            let list = rest
                .split(" samples per CPU-second")
                .next()
                .unwrap_or_default();
            acc.rates = list
                .split("), ")
                .filter_map(|item| item.split_whitespace().next()?.parse().ok())
                .collect();
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [name, _, _, points, ..] = words[..] {
            if let Some(i) = FUNCTIONS.iter().position(|f| *f == name) {
                acc.errors[i] = points.parse().unwrap_or(f64::NAN);
            }
        }
        if line.starts_with("sampled ") {
            acc.note = line.split(['(', ')']).nth(1).unwrap_or_default().to_owned();
            acc.distinct_share = distinct_share(line).unwrap_or(f64::NAN);
        }
        if line.starts_with("self-check: ") {
            acc.note = format!("{}; {}", acc.note, line);
        }
    }
    if acc.rates.is_empty() {
        return Err(format!(
            "no self-check in btprof's output:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let folded = std::fs::read_to_string(&folded).map_err(|e| e.to_string())?;
    let (mut workers, mut clock) = (0u64, 0u64);
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        if !stack.starts_with("btprof-work-") {
            continue;
        }
        let count: u64 = count.parse().unwrap_or(0);
        workers += count;
        if stack
            .rsplit(';')
            .next()
            .is_some_and(|leaf| leaf.contains("clock_gettime"))
        {
            clock += count;
        }
    }
    acc.clock_gettime_pct = clock as f64 * 100.0 / workers.max(1) as f64;
    Ok(acc)
}

/// From the summary's `sampled ...: W samples per CPU-second of the
/// sampled threads (D distinct; ...` line: D / W.
fn distinct_share(line: &str) -> Option<f64> {
    let (_, after) = line.split_once("): ")?;
    let weighted: f64 = after.split_whitespace().next()?.parse().ok()?;
    let (_, after) = after.split_once('(')?;
    let distinct: f64 = after.split_whitespace().next()?.parse().ok()?;
    (weighted > 0.0).then(|| distinct / weighted)
}

/// `perf record -e cpu-clock -F 1000 --call-graph fp` of the unprofiled
/// workload, judged against the CPU split the workload printed.
fn perf_row(dir: &Path) -> Result<Accuracy, String> {
    let data = dir.join("perf.data");
    let record = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "1000",
            "--call-graph",
            "fp",
            "-o",
        ])
        .arg(&data)
        .args(["--", BTPROF, "--workload-only", "--duration", DURATION])
        .output()
        .map_err(|e| {
            format!("perf is not installed ({e}); install Debian's linux-perf to get this row")
        })?;
    if !record.status.success() {
        return Err(format!(
            "perf record failed ({}): {}",
            record.status,
            String::from_utf8_lossy(&record.stderr).trim()
        ));
    }
    let truth_text = String::from_utf8_lossy(&record.stdout);
    let mut thread_cpu = Vec::new();
    let mut truth = [0.0; 5];
    for line in truth_text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["thread", _, secs, "CPU-s"] => thread_cpu.push(secs.parse::<f64>().unwrap_or(0.0)),
            ["truth", name, pct] => {
                if let Some(i) = FUNCTIONS.iter().position(|f| *f == name) {
                    truth[i] = pct.trim_end_matches('%').parse().unwrap_or(f64::NAN);
                }
            }
            _ => {}
        }
    }
    let script = Command::new("perf")
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .output()
        .map_err(|e| format!("perf script: {e}"))?;
    let text = String::from_utf8_lossy(&script.stdout);
    // Samples are blank-line separated: a header with the thread name, then
    // one frame per line, leaf first.
    let mut per_thread = [0u64; 2];
    let mut leaves = [0u64; 5];
    let (mut workers, mut clock) = (0u64, 0u64);
    for sample in text.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else { continue };
        let comm = header.trim();
        let Some(index) = comm
            .strip_prefix("btprof-work-")
            .and_then(|i| i.trim().parse::<usize>().ok())
            .filter(|&i| i < 2)
        else {
            continue;
        };
        per_thread[index] += 1;
        workers += 1;
        let leaf = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_default();
        let symbol = leaf.split("+0x").next().unwrap_or_default();
        if symbol.contains("clock_gettime") {
            clock += 1;
        }
        if let Some(f) = FUNCTIONS
            .iter()
            .position(|f| symbol == format!("btprof_cli::workload::{f}"))
        {
            leaves[f] += 1;
        }
    }
    if workers == 0 {
        return Err("perf recorded no sample of the workload threads".into());
    }
    let mut acc = Accuracy {
        rates: per_thread
            .iter()
            .zip(&thread_cpu)
            .map(|(&n, &cpu)| n as f64 / cpu.max(1e-9))
            .collect(),
        distinct_share: 1.0,
        clock_gettime_pct: clock as f64 * 100.0 / workers as f64,
        note: "perf cpu-clock".into(),
        ..Accuracy::default()
    };
    for i in 0..5 {
        acc.errors[i] = leaves[i] as f64 * 100.0 / workers as f64 - truth[i];
    }
    Ok(acc)
}

fn print_row(name: &str, acc: &Accuracy) {
    let errors: Vec<String> = acc.errors.iter().map(|e| format!("{e:+.2}")).collect();
    let rates: Vec<String> = acc.rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "  {name:<28} rate/CPU-s [{}] distinct {:.0}  errors [{}] max {:.2}  clock_gettime {:.2}%  ({})",
        rates.join(", "),
        acc.mean_distinct_rate(),
        errors.join(" "),
        acc.max_error(),
        acc.clock_gettime_pct,
        acc.note
    );
}

fn main() {
    let mut report = results::Results::new(
        "contended",
        "Accuracy beside two CPU hogs",
        "cargo bench -p btprof-cli --bench contended",
    );
    let mut summary = Vec::new();
    let rounds = measure::runs(3);
    let dir = scratch();
    println!(
        "contended accuracy: btprof --pid-self --hz 1000 --duration {DURATION} and perf, {rounds} rounds beside 2 CPU hogs on {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  errors: measured minus true leaf share per function ({}), points",
        FUNCTIONS.join(", ")
    );
    println!(
        "  rate/CPU-s: weighted per worker; distinct: the workers' mean, each sample counted once"
    );

    let quiet = btprof_row(&dir, &[], false);
    match &quiet {
        Ok(acc) => print_row("quiet, btprof default", acc),
        Err(e) => println!("  quiet round failed: {e}"),
    }

    // (name, btprof's extra arguments, perf_event_open refused); the last
    // row is perf's own.
    let rows: [(&str, &[&str], bool); 3] = [
        ("btprof default (perf)", &[], false),
        ("perf refused: default", &[], true),
        ("perf refused: --clock thread", &["--clock", "thread"], true),
    ];
    const PERF: usize = 3;
    let name = |i: usize| {
        if i == PERF {
            "perf cpu-clock"
        } else {
            rows[i].0
        }
    };
    let mut results: [Vec<Accuracy>; PERF + 1] = Default::default();
    let mut perf_missing = None;
    {
        let _hogs = Hogs::start(2);
        for round in 0..rounds {
            println!("  round {}/{rounds}:", round + 1);
            for k in 0..=PERF {
                let which = (round + k) % (PERF + 1);
                let result = if which == PERF {
                    if perf_missing.is_some() {
                        continue;
                    }
                    perf_row(&dir)
                } else {
                    btprof_row(&dir, rows[which].1, rows[which].2)
                };
                match result {
                    Ok(acc) => {
                        print_row(name(which), &acc);
                        results[which].push(acc);
                    }
                    Err(e) if which == PERF => {
                        println!("  perf row skipped: {e}");
                        perf_missing = Some(e);
                    }
                    Err(e) => println!("  {} failed: {e}", name(which)),
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!();
    println!("SUMMARY (medians over rounds beside 2 hogs; reported, not enforced)");
    report.paragraph(&format!(
        "`btprof --pid-self --hz 1000 --duration {DURATION}` (its workload's functions {}, \
         whose true CPU shares the workload measures) and `perf record -e cpu-clock -F 1000 \
         --call-graph fp` of the same workload, {rounds} rounds beside 2 CPU hogs, rows \
         interleaved; *perf refused* rows run under a seccomp filter that refuses \
         `perf_event_open`. Medians over the rounds: samples per worker CPU-second (weighted: \
         each sample counted by the periods it stands for; distinct: each counted once), the \
         largest leaf-share error of the five functions in points (measured minus true), and \
         the share of worker samples whose leaf is `clock_gettime`.",
        FUNCTIONS.join(", ")
    ));
    let mut max_errors = [f64::NAN; PERF + 1];
    for (i, result) in results.iter().enumerate() {
        let name = name(i);
        if result.is_empty() {
            println!(
                "  {name:<28} not measured{}",
                if i == PERF {
                    perf_missing
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            );
            continue;
        }
        let rate = median(result.iter().map(Accuracy::mean_rate).collect());
        let distinct = median(result.iter().map(Accuracy::mean_distinct_rate).collect());
        let max_error = median(result.iter().map(Accuracy::max_error).collect());
        let clock = median(result.iter().map(|a| a.clock_gettime_pct).collect());
        max_errors[i] = max_error;
        println!(
            "  {name:<28} {rate:7.1} weighted, {distinct:7.1} distinct samples per worker CPU-second, largest leaf error {max_error:.2} points, clock_gettime {clock:.2}%  ({})",
            result[0].note.split(';').next().unwrap_or_default()
        );
        summary.push(vec![
            name.to_owned(),
            format!("{rate:.1}"),
            format!("{distinct:.1}"),
            format!("{max_error:.2}"),
            format!("{clock:.2}%"),
            result[0]
                .note
                .split(';')
                .next()
                .unwrap_or_default()
                .to_owned(),
        ]);
    }
    report.table(
        &[
            "profiler",
            "weighted per CPU-s",
            "distinct per CPU-s",
            "largest leaf error, points",
            "`clock_gettime` leaves",
            "note",
        ],
        &summary,
    );
    if let Some(e) = &perf_missing {
        report.paragraph(&format!("perf not measured: {e}."));
    }
    if let Ok(q) = &quiet {
        report.paragraph(&format!(
            "A quiet round (no hogs) of btprof's default: `clock_gettime` leaves {:.2}%.",
            q.clock_gettime_pct
        ));
        println!(
            "  quiet btprof default: clock_gettime {:.2}%",
            q.clock_gettime_pct
        );
    }
    if max_errors[PERF].is_finite() {
        for (i, margin) in [(0, 0.2), (1, 0.5), (2, 0.5), (3, 0.5)] {
            println!(
                "  {} largest error {:.2} vs perf {:.2} + {margin}: {}",
                name(i),
                max_errors[i],
                max_errors[PERF],
                if max_errors[i] <= max_errors[PERF] + margin {
                    "PASS"
                } else {
                    "FAIL"
                }
            );
        }
        let verdicts: Vec<String> = [(0, 0.2), (1, 0.5), (2, 0.5), (3, 0.5)]
            .iter()
            .map(|&(i, margin)| {
                format!(
                    "{}: {:.2} against perf's {:.2} + {margin} ({})",
                    name(i),
                    max_errors[i],
                    max_errors[PERF],
                    if max_errors[i] <= max_errors[PERF] + margin {
                        "met"
                    } else {
                        "missed"
                    }
                )
            })
            .collect();
        report.paragraph(&format!(
            "Largest leaf error against perf's plus a margin: {}.",
            verdicts.join("; ")
        ));
    }
    report.write();
}
