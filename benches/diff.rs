//! How long `btprof diff` takes on big folded files, and how much memory.
//!
//! Generates two pairs of seeded folded files (base and new) from the same
//! set of distinct stacks: a small pair (`BTPROF_BENCH_SMALL_MB`, default
//! 30 MB per file) and a large pair (`BTPROF_BENCH_MB`, default 100 MB per
//! file). Every file holds all `BTPROF_BENCH_STACKS` (default 20,000)
//! distinct stacks, 20 to 40 frames deep (about 1.2 KB a line, so 24 MB
//! for one line each), repeated on many lines with random counts, as
//! concatenated periodic dumps are. The large files only repeat the same
//! stacks more often.
//!
//! Each pair is diffed `BTPROF_BENCH_RUNS` times (default 3), each time in
//! a fresh child process so its peak resident memory (`ru_maxrss`) is that
//! run's alone: read both files, compare, render the text report; then
//! separately the differential flamegraph. Medians are reported. Memory
//! that follows the number of distinct stacks shows as the same peak for
//! the small and the large pair; memory that followed the file size would
//! be four times larger for the large pair.
//!
//! `cargo bench --bench diff`. Files go to the target directory and are
//! reused while their size matches. Always exits 0 unless a step fails: it
//! reports, it does not gate.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use btprof::diff::{compare, DiffOptions};
use btprof::formats::flamegraph::write_differential;
use btprof::report::{self, Format};
use btprof::{FlamegraphOptions, Profile};
use btprof_testkit::measure::{self, median};
use btprof_testkit::synthetic::SplitMix64;

/// Set in a child process: the base and new files to measure, and whether
/// to draw the flamegraph too.
const CHILD_ENV: &str = "BTPROF_DIFF_BENCH_CHILD";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident set of this process, in MiB.
fn peak_rss_mib() -> f64 {
    measure::peak_rss_kib() as f64 / 1024.0
}

// ---------------------------------------------------------------------------
// Generating the files.

/// A vocabulary of function names that look like real demangled Rust.
fn vocabulary(rng: &mut SplitMix64, n: usize) -> Vec<String> {
    const CRATES: [&str; 8] = [
        "tokio",
        "hyper",
        "serde_json",
        "app_core",
        "app_storage",
        "regex",
        "std",
        "alloc",
    ];
    const VERBS: [&str; 10] = [
        "poll", "read", "write", "parse", "encode", "decode", "flush", "visit", "dispatch", "run",
    ];
    (0..n)
        .map(|i| {
            let krate = CRATES[rng.below(CRATES.len() as u64) as usize];
            let verb = VERBS[rng.below(VERBS.len() as u64) as usize];
            format!(
                "{krate}::module_{}::Type{i}::{verb}_{}",
                i % 97,
                rng.below(50)
            )
        })
        .collect()
}

/// `count` distinct stacks, 20 to 40 frames each, rooted at a thread name.
/// Callers near the root come from a small set (like `main` and a
/// runtime), deeper frames from the whole vocabulary.
fn distinct_stacks(rng: &mut SplitMix64, names: &[String], count: usize) -> Vec<String> {
    let mut stacks = Vec::with_capacity(count);
    while stacks.len() < count {
        let depth = 20 + rng.below(21) as usize;
        let mut frames = vec![format!("worker-{}", rng.below(8))];
        for d in 0..depth {
            let pool = (names.len() as u64).min(8 << d);
            frames.push(names[rng.below(pool) as usize].clone());
        }
        stacks.push(frames.join(";"));
    }
    stacks
}

/// Writes lines of `stacks` with random counts until the file has
/// `target_bytes`. Stack popularity is skewed (a few stacks are hot);
/// `shift` moves some weight so the new file differs from the base.
fn write_file(path: &Path, stacks: &[String], target_bytes: u64, seed: u64, shift: bool) {
    let mut rng = SplitMix64::new(seed);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).expect("create bench file"));
    let mut written = 0u64;
    let mut line = 0u64;
    while written < target_bytes {
        // Cycle through every stack once, then draw skewed: the square of
        // a uniform favours low indexes.
        let i = if (line as usize) < stacks.len() {
            line as usize
        } else {
            let u = rng.next_f64();
            ((u * u) * stacks.len() as f64) as usize
        };
        let mut count = 1 + rng.below(1000);
        if shift && i % 50 == 0 {
            count *= 2;
        }
        let text = format!("{} {count}\n", stacks[i]);
        out.write_all(text.as_bytes()).expect("write bench file");
        written += text.len() as u64;
        line += 1;
    }
    out.flush().expect("flush bench file");
}

/// The pair of files of `mb` MB each, generated unless already there.
fn files(dir: &Path, stacks: &[String], mb: u64) -> (PathBuf, PathBuf) {
    let target = mb << 20;
    let base = dir.join(format!("base-{mb}mb.folded"));
    let new = dir.join(format!("new-{mb}mb.folded"));
    for (path, seed, shift) in [(&base, 1, false), (&new, 2, true)] {
        let fresh = fs::metadata(path).is_ok_and(|m| m.len() >= target && m.len() < target + 8192);
        if !fresh {
            let t = Instant::now();
            write_file(path, stacks, target, seed + mb, shift);
            eprintln!(
                "  generated {} in {:.1} s",
                path.display(),
                t.elapsed().as_secs_f64()
            );
        }
    }
    (base, new)
}

// ---------------------------------------------------------------------------
// Measuring, in a child process.

/// Diffs the two files and prints `key=value` results on one line.
fn child(base: &Path, new: &Path, flamegraph: bool) {
    let t = Instant::now();
    let b = Profile::read_folded(base).expect("read base");
    let n = Profile::read_folded(new).expect("read new");
    let read = t.elapsed();
    let t = Instant::now();
    let diff = compare(&b, &n, &DiffOptions::default());
    let text = report::diff_report(&diff, Format::Text, Some(25));
    let compared = t.elapsed();
    assert!(text.contains("result:"));
    let rss_diff = peak_rss_mib();
    let mut svg_time = Duration::ZERO;
    if flamegraph {
        let t = Instant::now();
        let mut svg = Vec::new();
        write_differential(&b, &n, &FlamegraphOptions::default(), false, &mut svg)
            .expect("differential flamegraph");
        svg_time = t.elapsed();
        assert!(!svg.is_empty());
    }
    println!(
        "read={} compare={} svg={} rss_diff={rss_diff:.1} rss_all={:.1} stacks={} frames={} \
         functions={} samples={}",
        read.as_secs_f64(),
        compared.as_secs_f64(),
        svg_time.as_secs_f64(),
        peak_rss_mib(),
        b.distinct_stacks() + n.distinct_stacks(),
        b.distinct_frames(),
        diff.tests,
        b.total_samples() + n.total_samples(),
    );
}

/// One child run's results.
#[derive(Default)]
struct Measured {
    read: f64,
    compare: f64,
    svg: f64,
    rss_diff: f64,
    rss_all: f64,
    line: String,
}

fn run_child(base: &Path, new: &Path, flamegraph: bool) -> Measured {
    let spec = format!("{}\n{}\n{}", base.display(), new.display(), flamegraph);
    let line = measure::run_self("child", |c| c.env(CHILD_ENV, spec))
        .trim()
        .to_owned();
    let mut m = Measured {
        line: line.clone(),
        ..Measured::default()
    };
    for (key, value) in measure::fields(&line) {
        match key {
            "read" => m.read = value,
            "compare" => m.compare = value,
            "svg" => m.svg = value,
            "rss_diff" => m.rss_diff = value,
            "rss_all" => m.rss_all = value,
            _ => {}
        }
    }
    m
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.lines();
        let (base, new, svg) = (parts.next(), parts.next(), parts.next());
        child(
            Path::new(base.expect("base path")),
            Path::new(new.expect("new path")),
            svg == Some("true"),
        );
        return;
    }
    let large_mb = env_u64("BTPROF_BENCH_MB", 100);
    let small_mb = env_u64("BTPROF_BENCH_SMALL_MB", 30).min(large_mb);
    let stack_count = env_u64("BTPROF_BENCH_STACKS", 20_000) as usize;
    let runs = env_u64("BTPROF_BENCH_RUNS", 3).max(1);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("btprof-diff-bench");
    fs::create_dir_all(&dir).expect("bench dir");

    let mut rng = SplitMix64::new(0xd1ff);
    let names = vocabulary(&mut rng, 4000);
    let stacks = distinct_stacks(&mut rng, &names, stack_count);
    println!(
        "btprof diff benchmark: {stack_count} distinct stacks of 20-40 frames, {runs} run(s) \
         per size, medians"
    );
    let mut sizes = vec![small_mb, large_mb];
    sizes.dedup();
    for mb in sizes {
        let (base, new) = files(&dir, &stacks, mb);
        let bytes =
            fs::metadata(&base).map_or(0, |m| m.len()) + fs::metadata(&new).map_or(0, |m| m.len());
        let mut all: Vec<Measured> = (0..runs).map(|_| run_child(&base, &new, false)).collect();
        let with_svg = run_child(&base, &new, true);
        let read = median(all.iter().map(|m| m.read).collect());
        let compare = median(all.iter().map(|m| m.compare).collect());
        let rss = median(all.iter().map(|m| m.rss_diff).collect());
        let last = all.pop().unwrap_or_default();
        println!(
            "\n{mb} MB per file ({:.1} MB both):\n  read both files  {read:7.2} s   ({:.0} MB/s)\n  \
             compare+report   {compare:7.3} s\n  peak RSS (diff)  {rss:7.1} MiB\n  \
             differential SVG {:7.2} s, peak RSS with it {:.1} MiB\n  child: {}",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / read,
            with_svg.svg,
            with_svg.rss_all,
            last.line,
        );
    }
}
