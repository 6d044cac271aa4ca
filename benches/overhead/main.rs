//! Overhead of profiling a CPU-bound job, measured against a no-profiler
//! baseline in the same run.
//!
//! Five measurements, each repeated `BTPROF_BENCH_RUNS` times (default 5)
//! with baseline and profiled runs interleaved (the order alternates every
//! round, so slow drift of a shared machine hits both sides alike):
//!
//! 1. Wall-time overhead: two threads each run a fixed, calibrated (~2 s
//!    alone) arithmetic loop; the job's wall time from spawn to join is
//!    compared with and without a 1000 Hz `cpu`-mode [`btprof::Profiler`].
//!    Stopping and symbolising happen after the job and are reported apart.
//! 2. Per-sample CPU cost: the same loop at the bottom of a deep chain of
//!    recursive calls, sampled with [`btprof_sampler::Sampler`] directly (no
//!    symbolisation), on each path in the same rounds: per-thread CPU
//!    timers (the default on Linux) and the sampler-thread path (forced,
//!    as where perf events are refused), with the job's wall overhead
//!    against the round's baseline. The workers' own CPU clocks
//!    (`CLOCK_THREAD_CPUTIME_ID`, which include the signal handler and the
//!    kernel's signal delivery) plus the sampler thread's CPU time, less the
//!    baseline workers' CPU for the same work, divided by the samples taken.
//!
//! 3. Against the floor: the same job as 2 with the kernel interrupting
//!    each worker 1000 times per CPU-second and nothing else, then with an
//!    empty signal handler on each interrupt ([`floor`]), then with btprof.
//!    btprof's cost is reported as a ratio to the floor measured in the
//!    same rounds, because in a VM the floor alone can exceed the absolute
//!    targets.
//!
//! 4. CFI against frame pointers only: measurement 2's job sampled with
//!    the default walk (the handler copies the stack top, the sampler
//!    thread unwinds it with `.eh_frame`) and with
//!    `SamplerConfig::frame_pointers_only`, in the same rounds; then the
//!    same for a job whose leaf is glibc's `memcpy` (frameless code, where
//!    CFI does real work). The target: CFI at most 1.5x the frame-pointer
//!    walk's per-sample cost on the 25-frame stack, so that unwinding
//!    frameless code never makes sampling much dearer than walking.
//!
//! 5. Clocks: measurement 2's job, each run in a child process (this
//!    executable again), at 100 Hz and 1000 Hz under `perf record -e
//!    cpu-clock --call-graph fp`, btprof's default clock (perf),
//!    and the sampler-thread clock forced, and btprof's default with
//!    `perf_event_open` refused by a seccomp filter, interleaved with a
//!    baseline child ([`clocks`]). Per row: wall overhead, the workers' CPU
//!    per sample (weighted and distinct), the sampler thread's (perf's)
//!    CPU per sample and share of a core, against the targets; and how
//!    often the sampler thread woke, against what a bare timed wakeup
//!    costs on this machine in the same rounds ([`wakeups`]).
//!
//! `cargo bench --bench overhead` writes `docs/results/overhead.md`;
//! `BTPROF_BENCH_ONLY` names the
//! measurements to run, comma-separated (`wall`, `cpu`, `floor`, `cfi`,
//! `clocks`; e.g. `BTPROF_BENCH_ONLY=clocks`). Always exits 0: it
//! reports, it does not gate.

#[cfg(target_os = "linux")]
#[path = "../support/floor.rs"]
mod floor;

#[path = "../support/results.rs"]
mod results;

mod against_floor;
mod cfi;
mod child;
mod clocks;
mod cpu;
mod job;
mod report;
mod wakeups;
mod wall;

use std::time::Duration;

use against_floor::{measure_floor, FloorResult};
use cfi::{calibrate_copy, measure_cfi, CfiResult};
use clocks::measure_clocks;
use cpu::{measure_cpu, CpuResult};
use job::{calibrate, run_job};
use report::{machine_context, say, verdict};
use wall::{measure_wall, WallResult};

/// Samples per second per thread.
const HZ: u32 = 1000;
/// Busy worker threads per job.
const WORKERS: usize = 2;
/// How long one worker's loop should take alone (measurement 1).
const WALL_JOB: Duration = Duration::from_secs(2);
/// How long one worker's loop should take alone (measurement 2).
const CPU_JOB: Duration = Duration::from_millis(1500);
/// Recursive calls between the worker's entry and the arithmetic loop.
/// `descend(19)` puts 20 `descend` frames on the stack; with `spin`, the
/// worker closure and the thread-start frames a sampled stack is 25 frames
/// deep on x86_64 Linux, which the benchmark checks from the samples.
const CHAIN_DEPTH: u32 = 19;
/// Added to a `chain` depth: the job's leaf is [`copy_leaf`] (glibc's
/// `memcpy`) instead of [`spin`].
const COPY_LEAF: u32 = 1 << 16;
/// The sampled stack depth measurement 2 must see.
const DEPTH_RANGE: std::ops::RangeInclusive<usize> = 20..=30;
/// A round counts as undisturbed when the job had at least this share of
/// the workers' CPUs.
const CLEAN_SHARE_PCT: f64 = 95.0;
/// Target: wall-time overhead at most this many percent.
const TARGET_OVERHEAD_PCT: f64 = 1.0;
/// Target: CPU per sample at most this many microseconds.
const TARGET_SAMPLE_US: f64 = 5.0;

fn main() {
    if child::run_if_child() {
        return;
    }
    let mut results = results::Results::new(
        "overhead",
        "Overhead per sample, against the floor and against perf",
        "cargo bench --bench overhead",
    );
    let runs = btprof_testkit::measure::runs(5);
    machine_context(runs);

    let iters_per_sec = calibrate(Duration::from_secs(1));
    let wall_iters = (iters_per_sec as f64 * WALL_JOB.as_secs_f64()) as u64;
    let cpu_iters = (iters_per_sec as f64 * CPU_JOB.as_secs_f64()) as u64;
    println!(
        "  calibration: {iters_per_sec} iterations/s on one thread alone; job 1 = {wall_iters} (~{:.1} s), job 2 = {cpu_iters} (~{:.1} s) per thread",
        WALL_JOB.as_secs_f64(),
        CPU_JOB.as_secs_f64()
    );

    // Warm up: fault in the sampler, the signal path and the symbol tables
    // once, so the first measured round pays no one-time costs.
    {
        let profiler = btprof::Profiler::builder()
            .hz(HZ)
            .mode(btprof::Mode::Cpu)
            .start()
            .expect("start profiler");
        run_job(iters_per_sec / 10, Some(CHAIN_DEPTH));
        drop(profiler.stop());
    }

    let only = Only::from_env();
    let copy_iters = only
        .has("cfi")
        .then(|| calibrate_copy(Duration::from_millis(1000)));
    let wall = only.has("wall").then(|| measure_wall(runs, wall_iters));
    let cpu = only.has("cpu").then(|| measure_cpu(runs, cpu_iters));
    let floor = only.has("floor").then(|| measure_floor(runs, cpu_iters));
    let cfi = copy_iters.map(|copy_iters| measure_cfi(runs, iters_per_sec, copy_iters));
    let clocks = only
        .has("clocks")
        .then(|| measure_clocks(runs, child::iters_for(iters_per_sec, clocks::CLOCK_JOB)));

    println!();
    println!("SUMMARY (targets are reported, not enforced; exit status is always 0)");
    report::section("Summary (targets are reported, not enforced)", &[]);
    if let Some(wall) = &wall {
        print_wall_summary(wall);
    }
    if let Some(cpu) = &cpu {
        print_cpu_summary(cpu);
    }
    if let Some(floor) = &floor {
        print_floor_summary(floor);
    }
    if let Some(cfi) = &cfi {
        print_cfi_summary(cfi);
    }
    if let Some(clocks) = &clocks {
        clocks.print_summary();
    }
    results.paragraph(&format!(
        "Each measurement: {runs} rounds, baseline and profiled interleaved, the order \
         alternating; medians with the rounds' range. What each measurement does is in the \
         bench's own documentation (`benches/overhead/main.rs`)."
    ));
    report::write_sections(&mut results);
    results.write();
}

/// `BTPROF_BENCH_ONLY`: the measurements to run, by name, comma-separated
/// (`wall`, `cpu`, `floor`, `cfi`, `clocks`); unset or empty runs them all.
struct Only(Option<Vec<String>>);

impl Only {
    const NAMES: [&'static str; 5] = ["wall", "cpu", "floor", "cfi", "clocks"];

    fn from_env() -> Only {
        let list = std::env::var("BTPROF_BENCH_ONLY").unwrap_or_default();
        let names: Vec<String> = list
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        for name in &names {
            if !Self::NAMES.contains(&name.as_str()) {
                println!(
                    "  BTPROF_BENCH_ONLY: unknown measurement {name:?} (known: {})",
                    Self::NAMES.join(", ")
                );
            }
        }
        Only((!names.is_empty()).then_some(names))
    }

    fn has(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }
}

/// Measurement 1's summary lines.
fn print_wall_summary(wall: &WallResult) {
    say!(
        "  wall-time overhead, 2 threads @ {HZ} Hz: {:+.2}% median, {:+.2}% min/min (target <= {TARGET_OVERHEAD_PCT}%) {}",
        wall.overhead_pct,
        wall.best_pct,
        if wall.noisy {
            "INCONCLUSIVE (noisy machine)"
        } else {
            verdict(wall.overhead_pct <= TARGET_OVERHEAD_PCT)
        }
    );
    say!(
        "  CPU-time overhead, same job (no target, insensitive to other load): {:+.2}%",
        wall.cpu_overhead_pct
    );
}

/// Measurement 2's summary lines.
fn print_cpu_summary(cpu: &CpuResult) {
    // A cost verdict is only uncertain when the target lies within the
    // measurement's noise floor of the value.
    let cost_verdict = |value: f64, noise: f64| {
        if (value - TARGET_SAMPLE_US).abs() <= noise {
            "INCONCLUSIVE (within noise of target)"
        } else {
            verdict(value <= TARGET_SAMPLE_US)
        }
    };
    say!(
        "  per-sample CPU cost, {} frames: {:.2} us (target <= {TARGET_SAMPLE_US} us, noise floor {:.2} us) {}",
        cpu.depth.map_or("?".into(), |d| format!("{d:.0}")),
        cpu.per_sample_us,
        cpu.noise_us,
        cost_verdict(cpu.per_sample_us, cpu.noise_us)
    );
    say!(
        "  sampler thread only: {:.2} us/sample (target <= {TARGET_SAMPLE_US} us) {}",
        cpu.sampler_only_us,
        cost_verdict(cpu.sampler_only_us, 0.0)
    );
    let ratio = cpu.per_sample_us / cpu.fallback_per_sample_us;
    say!(
        "  per-thread timers vs the sampler-thread path, same rounds: {:.2} us vs {:.2} us per sample = {ratio:.2}x \
         (target <= 1.10x) {}; sampler thread alone {:.2} vs {:.2} us; job wall {:+.2}% vs {:+.2}%",
        cpu.per_sample_us,
        cpu.fallback_per_sample_us,
        if (cpu.per_sample_us - cpu.fallback_per_sample_us * 1.10).abs() <= cpu.noise_us {
            "INCONCLUSIVE (within noise)"
        } else {
            verdict(ratio <= 1.10)
        },
        cpu.sampler_only_us,
        cpu.fallback_sampler_only_us,
        cpu.wall_pct[0],
        cpu.wall_pct[1],
    );
    let depth_ok = cpu
        .depth
        .is_some_and(|d| DEPTH_RANGE.contains(&(d as usize)));
    say!(
        "  sampled stack depth: median {} frames (want {}..={}) {}",
        cpu.depth.map_or("none".into(), |d| format!("{d:.0}")),
        DEPTH_RANGE.start(),
        DEPTH_RANGE.end(),
        if depth_ok { "PASS" } else { "OUT OF RANGE" }
    );
}

/// Measurement 3's summary lines.
fn print_floor_summary(floor: &Result<FloorResult, String>) {
    match floor {
        Ok(f) => {
            say!(
                "  floor on this machine: a bare {HZ} Hz interrupt costs {:.2} us and {:+.2}% wall; with an empty signal handler {:.2} us and {:+.2}%",
                f.cost_us[0], f.wall_pct[0], f.cost_us[1], f.wall_pct[1]
            );
            say!(
                "  btprof vs the empty-handler floor, same rounds: {:.2} us = {:.2}x per sample, {:+.2}% wall = {:.2}x",
                f.cost_us[2],
                f.cost_us[2] / f.cost_us[1],
                f.wall_pct[2],
                f.wall_pct[2] / f.wall_pct[1]
            );
        }
        Err(why) => say!("  floor: not measured: {why}"),
    }
}

/// Measurement 4's summary lines.
fn print_cfi_summary(cfi: &CfiResult) {
    say!(
        "  CFI vs frame pointers only, {:.0}-frame stack: {:.2} us vs {:.2} us per sample = {:.2}x median of per-round ratios (target <= {TARGET_CFI_RATIO}x) {}",
        cfi.depth[0],
        cfi.cost_us[1],
        cfi.cost_us[0],
        cfi.ratio_spin,
        verdict(cfi.ratio_spin <= TARGET_CFI_RATIO)
    );
    say!(
        "  glibc memcpy leaf ({:.0} frames with CFI): {:.2} us per sample with CFI, {:.2} us frame pointers only; {:.0}% of its callers came from CFI",
        cfi.depth[1], cfi.cost_us[3], cfi.cost_us[2], cfi.cfi_share_pct
    );
}

/// Target: CFI walking at most this many times the frame-pointer walk's
/// per-sample cost.
const TARGET_CFI_RATIO: f64 = 1.5;
