//! What `btprof record` costs against the embedded profiler on the same
//! work: a fixed amount of work (two threads, a fixed number of loop
//! iterations each) run by this bench binary itself, as a child process,
//! three ways per round:
//!
//! - `baseline`: no profiler;
//! - `embedded`: the work wrapped in `btprof::Profiler` start and stop,
//!   symbolised, the folded file written (what an application embedding
//!   btprof pays);
//! - `record`: `btprof record -- <this binary> work`, which preloads the
//!   sampler, writes the process's profile at exit, merges and writes the
//!   SVG, folded file and sidecar.
//!
//! Each is the wall time of the whole child, so `record`'s extra process,
//! library load and merge count against it. Reports the medians of the
//! rounds and each as a ratio to the baseline's median measured in the
//! same run. `cargo bench -p btprof-cli --bench record`; rounds from
//! `BTPROF_BENCH_RUNS` (default 5). Always exits 0: it reports, it does
//! not gate.
//!
//! Writes its latest results to `docs/results/record.md`.

#[path = "../../benches/support/results.rs"]
mod results;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use btprof_testkit::measure::median;

const BTPROF: &str = env!("CARGO_BIN_EXE_btprof");
/// Loop iterations per worker thread: about a second of CPU here (a
/// tenth of that let the fixed costs of writing the outputs decide).
const ITERATIONS: u64 = 4_000_000_000;

fn main() {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("work") => {
            work();
            return;
        }
        Some("embedded") => {
            let dir = args.next().expect("a directory");
            embedded(Path::new(&dir));
            return;
        }
        _ => {}
    }
    let mut results = results::Results::new(
        "record",
        "`btprof record` against the embedded profiler",
        "cargo bench -p btprof-cli --bench record",
    );
    let rounds: usize = std::env::var("BTPROF_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let exe = std::env::current_exe().expect("this bench's path");
    let dir = std::env::temp_dir().join(format!("btprof-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let (mut base, mut emb, mut rec) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        base.push(timed(Command::new(&exe).arg("work")));
        emb.push(timed(Command::new(&exe).arg("embedded").arg(&dir)));
        rec.push(timed(
            Command::new(BTPROF)
                .current_dir(&dir)
                .args(["record", "-q", "--"])
                .arg(&exe)
                .arg("work"),
        ));
        println!(
            "round {round}: baseline {:.3} s, embedded {:.3} s, record {:.3} s",
            base[round], emb[round], rec[round]
        );
    }
    // Ratios within each round too: the machine's load drifts between
    // rounds more than between the three runs of one.
    let per_round =
        |xs: &[f64], ys: &[f64]| -> Vec<f64> { xs.iter().zip(ys).map(|(x, y)| x / y).collect() };
    let (rec_emb, emb_base, rec_base) = (
        per_round(&rec, &emb),
        per_round(&emb, &base),
        per_round(&rec, &base),
    );
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}-{hi:.3}")
    };
    let (b, e, r) = (median(base), median(emb.clone()), median(rec.clone()));
    println!("medians of {rounds} rounds, wall time of the whole child process:");
    println!("  baseline (no profiler)       {b:.3} s  1.000x");
    println!(
        "  embedded Profiler            {e:.3} s  {:.3}x  (per round: median {:.3}x, {})",
        e / b,
        median(emb_base.clone()),
        range(&emb_base)
    );
    println!(
        "  btprof record -- (preloaded) {r:.3} s  {:.3}x  (per round: median {:.3}x, {})",
        r / b,
        median(rec_base.clone()),
        range(&rec_base)
    );
    println!(
        "  record / embedded            {:.3}x  (per round: median {:.3}x, {})",
        r / e,
        median(rec_emb.clone()),
        range(&rec_emb)
    );
    results.paragraph(&format!(
        "Wall time of the whole child process doing the same fixed work (two threads), \
         medians of {rounds} rounds; per-round ratios as median and range."
    ));
    results.table(
        &["run", "wall, s", "to baseline", "per round"],
        &[
            vec![
                "baseline (no profiler)".to_owned(),
                format!("{b:.3}"),
                "1.000x".to_owned(),
                String::new(),
            ],
            vec![
                "embedded `Profiler`".to_owned(),
                format!("{e:.3}"),
                format!("{:.3}x", e / b),
                format!("{:.3}x ({})", median(emb_base.clone()), range(&emb_base)),
            ],
            vec![
                "`btprof record --` (preloaded)".to_owned(),
                format!("{r:.3}"),
                format!("{:.3}x", r / b),
                format!("{:.3}x ({})", median(rec_base.clone()), range(&rec_base)),
            ],
            vec![
                "record / embedded".to_owned(),
                String::new(),
                format!("{:.3}x", r / e),
                format!("{:.3}x ({})", median(rec_emb.clone()), range(&rec_emb)),
            ],
        ],
    );
    results.write();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `command` to completion and returns its wall time in seconds.
fn timed(command: &mut Command) -> f64 {
    let start = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run a child");
    assert!(status.success(), "{command:?} failed: {status}");
    start.elapsed().as_secs_f64()
}

/// The fixed work: two threads, `ITERATIONS` each.
fn work() {
    let threads: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(|| spin(ITERATIONS)))
        .collect();
    for t in threads {
        std::hint::black_box(t.join().expect("a worker"));
    }
}

#[inline(never)]
fn spin(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    x
}

/// The work under the embedded profiler, its folded file written.
fn embedded(dir: &Path) {
    let profiler = btprof::Profiler::builder().start().expect("start");
    work();
    let profile = profiler.stop().expect("stop");
    let file = std::fs::File::create(dir.join("embedded.folded")).expect("create");
    profile
        .write_folded(std::io::BufWriter::new(file))
        .expect("write");
}
