//! Does `btprof diff` tell a small real regression from run-to-run noise,
//! on real runs? False alarms and detections of the several-run rule
//! (3 base runs against 3 new) and of the one-run rule (1 against 1),
//! quietly and beside two CPU hogs.
//!
//! Per load, a pool of runs of the built-in workload is recorded once
//! (`btprof --pid-self --no-inline`, `BTPROF_BENCH_HZ` Hz, default 10000,
//! for `BTPROF_BENCH_SECS` s, default 8): `BTPROF_BENCH_BASE` plain runs
//! (default 12) and `BTPROF_BENCH_SLOW` runs with `--slow beta=FACTOR`
//! (default 8; FACTOR `BTPROF_BENCH_FACTOR`, default 1.09, which moves
//! `beta`'s self share by about 1.5 points when the workers split the
//! CPU evenly), alternately so that a change
//! in the machine's load falls on both. Comparisons then draw runs from
//! the pools (seeded): a false-alarm comparison takes distinct plain runs
//! for both sides, a detection comparison plain runs against slowed ones,
//! and a comparison counts as detecting when `beta` is among the
//! regressions. Three rules judge: 3 runs against 3 at the defaults, the
//! same with `--per-thread`, and 1 run against 1. Runs are reused across comparisons (40 comparisons of 3
//! against 3 share 12 runs), so the counts are not independent trials;
//! the pool keeps the bench to minutes. With `--no-inline` each workload
//! function's self time is its own (with inlined frames it goes to the
//! `#[inline(always)]` helper they all share).
//!
//! Loaded: two `sh -c 'while :; do :; done'` processes run throughout the
//! loaded pool's recording, on a 2-core machine taking the workload's two
//! threads' cores half the time.
//!
//! Each load is measured twice: as the runs come, and with each run
//! pinned to one CPU. The workload's `beta` runs on both worker threads
//! but takes a different share of each (about 19% and 25%), so its share
//! of the run moves with how the scheduler split CPU time between the
//! threads, which on a shared machine changes from run to run; on one
//! core the scheduler splits it evenly. The workload measures each
//! function's share of CPU time itself; the pools' table sets that
//! truth's spread beside the profile's, which tells the workload's real
//! variation from the profiler's error. A single-threaded test, as in the
//! README's CI example, has no such split.
//!
//! `cargo bench -p btprof-cli --bench diff_runs` (Linux). Writes
//! `docs/results/diff.md`, and leaves the runs in
//! `target/tmp/diff_runs`. Always exits 0: it reports, it does not gate.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btprof_testkit::hogs::Hogs;
use btprof_testkit::synthetic::SplitMix64;
use serde_json::Value;

const BTPROF: &str = env!("CARGO_BIN_EXE_btprof");
const FALSE_ALARM_COMPARISONS: usize = 40;
const DETECTION_COMPARISONS: usize = 20;
const RUNS_PER_SIDE: usize = 3;
/// The several-run rule with shares weighted per thread.
const PER_THREAD: &[&str] = &["--per-thread"];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    hz: u32,
    secs: f64,
    base_runs: usize,
    slow_runs: usize,
    factor: f64,
}

/// One recorded run: its folded file and whether its self-check passed.
struct Run {
    folded: PathBuf,
    self_check: bool,
    samples: u64,
    /// `beta`'s share of worker CPU time as the workload measured it with
    /// the threads' CPU clocks (percent): the truth the profile estimates.
    beta_truth: Option<f64>,
}

fn record(dir: &Path, name: &str, settings: &Settings, slow: bool, pinned: bool) -> Run {
    let folded = dir.join(format!("{name}.folded"));
    let mut cmd = Command::new(BTPROF);
    if pinned {
        pin_to_first_cpu(&mut cmd);
    }
    cmd.args(["--pid-self", "--no-inline", "--quiet"])
        .arg("--hz")
        .arg(settings.hz.to_string())
        .arg("--duration")
        .arg(format!("{}ms", (settings.secs * 1000.0) as u64))
        .arg("--folded")
        .arg(&folded)
        .arg("--output")
        .arg(dir.join(format!("{name}.svg")));
    if slow {
        cmd.arg("--slow").arg(format!("beta={}", settings.factor));
    }
    let out = cmd.output().expect("run btprof");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let samples = stdout
        .lines()
        .find_map(|l| l.strip_prefix("function shares of "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // The self-check's row `  beta  MEASURED%  TRUTH%  ...`.
    let beta_truth = stdout.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("beta"))
            .then(|| words.nth(1)?.strip_suffix('%')?.parse().ok())
            .flatten()
    });
    assert!(
        folded.exists(),
        "btprof wrote no {}: {}",
        folded.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        folded,
        self_check: out.status.code() == Some(0),
        samples,
        beta_truth,
    }
}

/// Runs the command on CPU 0 only: its two worker threads then share one
/// core, which the scheduler splits evenly between them, instead of
/// getting whatever two cores the rest of the machine leaves. Linux only:
/// elsewhere the command runs unpinned.
#[cfg(not(target_os = "linux"))]
fn pin_to_first_cpu(_cmd: &mut Command) {}

#[cfg(target_os = "linux")]
fn pin_to_first_cpu(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and
    // only calls sched_setaffinity, which is async-signal-safe, on a
    // cpu_set_t built on its own stack.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `k` distinct indices below `n`.
fn draw(rng: &mut SplitMix64, n: usize, k: usize, exclude: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let i = rng.below(n as u64) as usize;
        if !out.contains(&i) && !exclude.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Runs `btprof diff` on these runs; whether it failed the gate, and
/// whether `beta` was among the regressions. Prints what regressed.
fn gate(base: &[&Run], new: &[&Run], extra: &[&str]) -> (bool, bool) {
    let mut cmd = Command::new(BTPROF);
    cmd.arg("diff").args(extra);
    if base.len() == 1 && new.len() == 1 {
        cmd.arg(&base[0].folded).arg(&new[0].folded);
    } else {
        cmd.arg("--base").args(base.iter().map(|r| &r.folded));
        cmd.arg("--new").args(new.iter().map(|r| &r.folded));
    }
    let out = cmd
        .args(["--format", "json"])
        .stderr(Stdio::null())
        .output()
        .expect("run btprof diff");
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "btprof diff exited {code:?}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let regressed: Vec<&str> = report["regressions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !regressed.is_empty() {
        println!(
            "  {} against {}: regressed {regressed:?}",
            base.len(),
            new.len()
        );
    }
    let beta = regressed.iter().any(|n| n.ends_with("::beta"));
    (code == Some(1), beta)
}

/// `beta`'s self share (percent) in a folded file, by its leaf frames,
/// and worker 0's share of the samples (percent), by root frames.
fn beta_share(folded: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(folded).expect("read a run");
    let (mut beta, mut worker0, mut all) = (0u64, 0u64, 0u64);
    for line in text.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let count: u64 = count.parse().unwrap_or(0);
        all += count;
        if stack
            .rsplit(';')
            .next()
            .is_some_and(|l| l.ends_with("::beta"))
        {
            beta += count;
        }
        if stack.starts_with("btprof-work-0;") {
            worker0 += count;
        }
    }
    let percent = |n: u64| n as f64 * 100.0 / all.max(1) as f64;
    (percent(beta), percent(worker0))
}

fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// One load's row: what the pools held and the counts per rule.
struct Row {
    load: &'static str,
    pinned: bool,
    beta_base: (f64, f64),
    beta_slow: (f64, f64),
    /// The workload's own measurement of `beta`'s share: mean and
    /// standard deviation over the plain runs, then the slowed ones.
    truth_base: (f64, f64),
    truth_slow: (f64, f64),
    /// Worker 0's share of the samples over all runs: lowest, highest.
    worker0: (f64, f64),
    samples: (f64, f64),
    self_checks: (usize, usize),
    spread_false: usize,
    spread_found: usize,
    thread_false: usize,
    thread_found: usize,
    one_false: usize,
    one_found: usize,
    /// The 1-minute load average as the pool's recording began and ended.
    load_average: (f64, f64),
}

fn measure(load: &'static str, pinned: bool, settings: &Settings, dir: &Path, seed: u64) -> Row {
    let dir = dir.join(format!("{load}{}", if pinned { "-pinned" } else { "" }));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let hogs = (load == "loaded").then(|| Hogs::start(2));
    let load_before = load_average();
    let (mut base, mut slow) = (Vec::new(), Vec::new());
    for i in 0..settings.base_runs.max(settings.slow_runs) {
        if i < settings.base_runs {
            base.push(record(&dir, &format!("base-{i}"), settings, false, pinned));
        }
        if i < settings.slow_runs {
            slow.push(record(&dir, &format!("slow-{i}"), settings, true, pinned));
        }
        println!(
            "{load} (pinned: {pinned}): recorded {} base, {} slow runs",
            base.len(),
            slow.len()
        );
    }
    let load_after = load_average();
    drop(hogs);

    let mut rng = SplitMix64::new(seed);
    let (mut spread_false, mut one_false, mut spread_found, mut one_found) = (0, 0, 0, 0);
    let (mut thread_false, mut thread_found) = (0, 0);
    for _ in 0..FALSE_ALARM_COMPARISONS {
        let b = draw(&mut rng, base.len(), RUNS_PER_SIDE, &[]);
        let n = draw(&mut rng, base.len(), RUNS_PER_SIDE, &b);
        let side = |ix: &[usize]| ix.iter().map(|&i| &base[i]).collect::<Vec<_>>();
        spread_false += usize::from(gate(&side(&b), &side(&n), &[]).0);
        thread_false += usize::from(gate(&side(&b), &side(&n), PER_THREAD).0);
        one_false += usize::from(gate(&side(&b[..1]), &side(&n[..1]), &[]).0);
    }
    for _ in 0..DETECTION_COMPARISONS {
        let b = draw(&mut rng, base.len(), RUNS_PER_SIDE, &[]);
        let n = draw(&mut rng, slow.len(), RUNS_PER_SIDE, &[]);
        let bs: Vec<&Run> = b.iter().map(|&i| &base[i]).collect();
        let ns: Vec<&Run> = n.iter().map(|&i| &slow[i]).collect();
        spread_found += usize::from(gate(&bs, &ns, &[]).1);
        thread_found += usize::from(gate(&bs, &ns, PER_THREAD).1);
        one_found += usize::from(gate(&bs[..1], &ns[..1], &[]).1);
    }
    let shares = |runs: &[Run]| {
        mean_sd(
            &runs
                .iter()
                .map(|r| beta_share(&r.folded).0)
                .collect::<Vec<_>>(),
        )
    };
    let truth =
        |runs: &[Run]| mean_sd(&runs.iter().filter_map(|r| r.beta_truth).collect::<Vec<_>>());
    let worker0: Vec<f64> = base
        .iter()
        .chain(&slow)
        .map(|r| beta_share(&r.folded).1)
        .collect();
    let samples =
        |runs: &[Run]| runs.iter().map(|r| r.samples as f64).sum::<f64>() / runs.len() as f64;
    let passed = |runs: &[Run]| runs.iter().filter(|r| r.self_check).count();
    Row {
        load,
        pinned,
        beta_base: shares(&base),
        beta_slow: shares(&slow),
        truth_base: truth(&base),
        truth_slow: truth(&slow),
        worker0: (
            worker0.iter().copied().fold(f64::INFINITY, f64::min),
            worker0.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
        samples: (samples(&base), samples(&slow)),
        self_checks: (passed(&base), passed(&slow)),
        spread_false,
        spread_found,
        thread_false,
        thread_found,
        one_false,
        one_found,
        load_average: (load_before, load_after),
    }
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The machine, in a line: CPU model and count, kernel.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} × {model}, Linux {}", kernel.trim())
}

fn main() {
    if !cfg!(target_os = "linux") {
        println!("diff_runs bench: Linux only (it reads /proc)");
        return;
    }
    let settings = Settings {
        hz: env_or("BTPROF_BENCH_HZ", 10_000),
        secs: env_or("BTPROF_BENCH_SECS", 8.0),
        base_runs: env_or("BTPROF_BENCH_BASE", 12),
        slow_runs: env_or("BTPROF_BENCH_SLOW", 8),
        factor: env_or("BTPROF_BENCH_FACTOR", 1.09),
    };
    assert!(
        settings.base_runs >= 2 * RUNS_PER_SIDE && settings.slow_runs >= RUNS_PER_SIDE,
        "the pools need {} plain and {RUNS_PER_SIDE} slowed runs",
        2 * RUNS_PER_SIDE
    );
    // Kept after the bench, for a look at the runs behind the counts.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diff_runs");
    let _ = std::fs::remove_dir_all(&dir);
    let rows: Vec<Row> = [
        ("quiet", false, 0x5eed_d1ff),
        ("loaded", false, 0x5eed_10ad),
        ("quiet", true, 0x5eed_d1f0),
        ("loaded", true, 0x5eed_10a0),
    ]
    .into_iter()
    .map(|(load, pinned, seed)| measure(load, pinned, &settings, &dir, seed))
    .collect();
    println!("the runs are in {}", dir.display());

    let mut table = String::from(
        "| load | rule | false alarms (of 40) | regression found (of 20) |\n|---|---|--:|--:|\n",
    );
    let mut pools = String::from(
        "| load | load average (start, end) | samples per run (plain, slowed) | worker 0's share of samples | `beta` self share, plain | slowed | change | `beta` measured by the workload, plain | slowed | self-checks passed (plain, slowed) |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in &rows {
        let load = if r.pinned {
            format!("{}, pinned to one CPU", r.load)
        } else {
            r.load.to_owned()
        };
        table.push_str(&format!(
            "| {} | {RUNS_PER_SIDE} runs against {RUNS_PER_SIDE}: Welch's t, threshold 1 point | {} | {} |\n\
             | {} | {RUNS_PER_SIDE} runs against {RUNS_PER_SIDE}, `--per-thread`: Welch's t on shares weighted per thread | {} | {} |\n\
             | {} | 1 run against 1: z-test, threshold 2 points | {} | {} |\n",
            load,
            r.spread_false,
            r.spread_found,
            load,
            r.thread_false,
            r.thread_found,
            load,
            r.one_false,
            r.one_found
        ));
        pools.push_str(&format!(
            "| {} | {:.1}, {:.1} | {:.0}, {:.0} | {:.1}–{:.1}% | {:.2}% ± {:.2} | {:.2}% ± {:.2} | {:+.2} points | {:.2}% ± {:.2} | {:.2}% ± {:.2} | {}/{}, {}/{} |\n",
            load,
            r.load_average.0,
            r.load_average.1,
            r.samples.0,
            r.samples.1,
            r.worker0.0,
            r.worker0.1,
            r.beta_base.0,
            r.beta_base.1,
            r.beta_slow.0,
            r.beta_slow.1,
            r.beta_slow.0 - r.beta_base.0,
            r.truth_base.0,
            r.truth_base.1,
            r.truth_slow.0,
            r.truth_slow.1,
            r.self_checks.0,
            settings.base_runs,
            r.self_checks.1,
            settings.slow_runs,
        ));
    }
    let report = format!(
        "<!-- generated by `cargo bench -p btprof-cli --bench diff_runs`; do not edit -->\n\
         # `btprof diff` on real runs: false alarms and detection\n\n\
         Machine: {}. Command: `cargo bench -p btprof-cli --bench diff_runs` at its defaults: \
         per load, {} plain runs and {} runs with `--slow beta={}` of `btprof --pid-self \
         --no-inline --hz {} --duration {}s`, recorded alternately; loaded means two \
         `sh -c 'while :; do :; done'` processes ran throughout that load's runs, quiet that \
         this bench added none (the machine is shared: the load averages below say how busy \
         it was); pinned means each run was pinned to CPU 0, so that its two worker threads \
         shared one core evenly (`beta`'s share moves with the threads' split otherwise). Comparisons \
         draw runs from these pools (seeded), so they share runs: false alarms compare plain \
         runs with other plain runs, detection plain runs with slowed ones and counts a \
         comparison that names `beta` among the regressions. The gate is `btprof diff` at its \
         defaults, and with `--per-thread` where the rule says so.\n\n{table}\n\
         The pools (mean ± standard deviation over runs; worker 0's share of samples is the \
         lowest and highest over all runs of the load; `beta` measured by the workload is its \
         share of the workers' CPU time by their own CPU clocks, the truth the profile \
         estimates):\n\n{pools}",
        machine(),
        settings.base_runs,
        settings.slow_runs,
        settings.factor,
        settings.hz,
        settings.secs,
    );
    print!("{report}");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results/diff.md");
    if let Some(parent) = Path::new(path).parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Err(e) = std::fs::write(path, report) {
        println!("could not write {path}: {e}");
    }
}
