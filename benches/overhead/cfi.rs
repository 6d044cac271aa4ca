//! Measurement 4: CFI unwinding against frame pointers only.

use std::time::Duration;

use btprof_sampler::{Mode, Sampler, SamplerConfig};

use crate::job::{copy_leaf, iterations_taking, run_job, worker_depth};
use crate::report::{header, row, say, summarize};
use crate::{CHAIN_DEPTH, COPY_LEAF, HZ};

/// Medians of measurement 4.
pub(crate) struct CfiResult {
    /// Per-sample CPU cost (us): [spin leaf FP only, spin leaf CFI,
    /// memcpy leaf FP only, memcpy leaf CFI].
    pub(crate) cost_us: [f64; 4],
    /// CFI / FP cost ratio per round, spin leaf: median.
    pub(crate) ratio_spin: f64,
    /// Median sampled depth with CFI, spin and memcpy leaf.
    pub(crate) depth: [f64; 2],
    /// Share of callers recovered from CFI (%), memcpy leaf.
    pub(crate) cfi_share_pct: f64,
}

/// Iterations of [`copy_leaf`] that take about `target` alone.
pub(crate) fn calibrate_copy(target: Duration) -> u64 {
    iterations_taking(target, copy_leaf, 200, 20_000)
}

/// One profiled run of measurement 4: worker CPU (s), sampler CPU (s),
/// samples, median depth, callers from CFI, callers from frame pointers.
pub(crate) type CfiRound = (f64, f64, u64, f64, u64, u64);

pub(crate) fn measure_cfi(runs: usize, spin_iters: u64, copy_iters: u64) -> CfiResult {
    let jobs = [
        (Some(CHAIN_DEPTH), spin_iters),
        (Some(CHAIN_DEPTH + COPY_LEAF), copy_iters),
    ];
    // [job][config] -> per round
    let mut prof: [[Vec<CfiRound>; 2]; 2] = Default::default();
    let mut base: [Vec<f64>; 2] = Default::default();
    let mut ratios = Vec::new();
    for round in 0..runs {
        for (j, &(chain, iters)) in jobs.iter().enumerate() {
            // Rotate baseline, FP-only and CFI through the three positions.
            for step in 0..3 {
                match (round + step) % 3 {
                    0 => base[j].push(run_job(iters, chain).worker_cpu().as_secs_f64()),
                    which => {
                        let config = SamplerConfig {
                            hz: HZ,
                            mode: Mode::Cpu,
                            frame_pointers_only: which == 1,
                            ..SamplerConfig::default()
                        };
                        let sampler = Sampler::start(config).expect("start sampler");
                        let job = run_job(iters, chain);
                        let raw = sampler.stop().expect("stop sampler");
                        let (depth, _) = worker_depth(&raw, &job);
                        prof[j][which - 1].push((
                            job.worker_cpu().as_secs_f64(),
                            raw.stats.sampler_cpu.as_secs_f64(),
                            raw.stats.samples,
                            depth.map_or(f64::NAN, |d| d as f64),
                            raw.stats.cfi_frames,
                            raw.stats.frame_pointer_frames,
                        ));
                    }
                }
            }
        }
        let cost = |j: usize, c: usize| {
            let b = summarize(&base[j]).median;
            let &(wc, sc, n, ..) = prof[j][c].last().expect("a round ran");
            (wc - b + sc) / n as f64 * 1e6
        };
        ratios.push(cost(0, 1) / cost(0, 0));
        eprintln!(
            "  [cfi] round {}/{runs}: spin leaf FP {:.2} us, CFI {:.2} us; memcpy leaf FP {:.2} us, CFI {:.2} us",
            round + 1,
            cost(0, 0),
            cost(0, 1),
            cost(1, 0),
            cost(1, 1)
        );
    }
    header(&format!(
        "[4] CFI vs frame pointers only: measurement 2's job ({CHAIN_DEPTH}-call chain), leaf spin or glibc memcpy, same rounds"
    ));
    say!("  per-sample = (profiled worker CPU - median baseline worker CPU + sampler_cpu) / stats.samples");
    let mut cost_us = [0.0; 4];
    let names = ["spin leaf", "memcpy leaf"];
    for j in 0..2 {
        let b = summarize(&base[j]).median;
        for c in 0..2 {
            let costs: Vec<f64> = prof[j][c]
                .iter()
                .map(|&(wc, sc, n, ..)| (wc - b + sc) / n as f64 * 1e6)
                .collect();
            let sampler: Vec<f64> = prof[j][c]
                .iter()
                .map(|&(_, sc, n, ..)| sc / n as f64 * 1e6)
                .collect();
            let label = if c == 0 { "frame pointers only" } else { "CFI" };
            cost_us[2 * j + c] = row(
                &format!("{}, {label}: per-sample CPU cost (us)", names[j]),
                &costs,
                2,
            )
            .median;
            row("  of which sampler thread (us)", &sampler, 2);
            row(
                "  sampled depth (frames)",
                &prof[j][c].iter().map(|p| p.3).collect::<Vec<_>>(),
                0,
            );
        }
    }
    let ratio = row(
        "CFI / frame pointers cost, spin leaf (per round)",
        &ratios,
        2,
    );
    let depth_of = |j: usize| summarize(&prof[j][1].iter().map(|p| p.3).collect::<Vec<_>>()).median;
    let (cfi, fp): (u64, u64) = prof[1][1]
        .iter()
        .fold((0, 0), |(c, f), p| (c + p.4, f + p.5));
    CfiResult {
        cost_us,
        ratio_spin: ratio.median,
        depth: [depth_of(0), depth_of(1)],
        cfi_share_pct: 100.0 * cfi as f64 / (cfi + fp).max(1) as f64,
    }
}
