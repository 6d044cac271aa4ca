//! Measurement 2: CPU cost per sample, default clock against the
//! sampler-thread clock forced, in the same rounds.

use btprof_sampler::{Mode, Sampler, SamplerConfig};

use crate::job::{run_job, worker_depth};
use crate::report::{header, row, say, summarize};
use crate::{CHAIN_DEPTH, HZ, TARGET_SAMPLE_US, WORKERS};

pub(crate) struct CpuResult {
    pub(crate) per_sample_us: f64,
    pub(crate) sampler_only_us: f64,
    pub(crate) depth: Option<f64>,
    pub(crate) noise_us: f64,
    /// The same, for the sampler-thread path (forced) in the same rounds.
    pub(crate) fallback_per_sample_us: f64,
    pub(crate) fallback_sampler_only_us: f64,
    /// Wall-time overhead (%) of the job against the same round's
    /// baseline: per-thread timers, sampler thread.
    pub(crate) wall_pct: [f64; 2],
}

/// One profiled run of job 2.
pub(crate) struct Profiled {
    pub(crate) worker_cpu: f64,
    pub(crate) sampler_cpu: f64,
    pub(crate) samples: u64,
    pub(crate) worker_samples: u64,
    pub(crate) depth: Option<usize>,
    pub(crate) wall: f64,
    pub(crate) clock: btprof_sampler::SampleClock,
}

pub(crate) fn measure_cpu(runs: usize, iters: u64) -> CpuResult {
    let config = |force: bool| SamplerConfig {
        hz: HZ,
        mode: Mode::Cpu,
        clock: force.then_some(btprof_sampler::SampleClock::SamplerThread),
        ..SamplerConfig::default()
    };
    let mut base_cpu = Vec::new();
    let mut base_wall = Vec::new();
    // Per path: [per-thread timers, sampler thread].
    let mut prof: [Vec<Profiled>; 2] = Default::default();

    let profiled = |force: bool| {
        let sampler = Sampler::start(config(force)).expect("start sampler");
        let job = run_job(iters, Some(CHAIN_DEPTH));
        let raw = sampler.stop().expect("stop sampler");
        let (depth, worker_samples) = worker_depth(&raw, &job);
        Profiled {
            worker_cpu: job.worker_cpu().as_secs_f64(),
            sampler_cpu: raw.stats.sampler_cpu.as_secs_f64(),
            samples: raw.stats.samples,
            worker_samples,
            depth,
            wall: job.wall.as_secs_f64(),
            clock: raw.stats.clock,
        }
    };

    for round in 0..runs {
        // Rotate the three runs' order so drift hits each alike.
        let mut b = None;
        for k in 0..3 {
            match (round + k) % 3 {
                0 => b = Some(run_job(iters, Some(CHAIN_DEPTH))),
                1 => prof[0].push(profiled(false)),
                _ => prof[1].push(profiled(true)),
            }
        }
        let b = b.expect("the baseline ran");
        let bc = b.worker_cpu().as_secs_f64();
        base_cpu.push(bc);
        base_wall.push(b.wall.as_secs_f64());
        for (name, p) in ["timers", "sampler thread"].iter().zip(&prof) {
            let p = p.last().expect("this round's run");
            eprintln!(
                "  [cpu] round {}/{runs} {name} ({}): baseline worker cpu {bc:.3} s, profiled {:.3} s, sampler {:.1} ms, {} samples, depth {:?}",
                round + 1,
                p.clock,
                p.worker_cpu,
                p.sampler_cpu * 1e3,
                p.samples,
                p.depth
            );
        }
    }

    let base = summarize(&base_cpu);
    let median_samples =
        summarize(&prof[0].iter().map(|p| p.samples as f64).collect::<Vec<_>>()).median;
    header(&format!(
        "[2] per-sample CPU cost: {WORKERS} threads, loop under a {CHAIN_DEPTH}-call recursive chain, btprof_sampler::Sampler at {HZ} Hz cpu mode, \
         per-thread CPU timers and the sampler-thread path in the same rounds"
    ));
    say!(
        "  worker CPU = CLOCK_THREAD_CPUTIME_ID inside each worker, summed (includes handler + kernel signal delivery)"
    );
    say!(
        "  per-sample = (profiled worker CPU - median baseline worker CPU + sampler_cpu) / stats.samples"
    );
    row("baseline worker CPU, sum of 2 (s)", &base_cpu, 4);
    let mut results = Vec::new();
    for (i, name) in ["per-thread timers", "sampler thread"].iter().enumerate() {
        let p = &prof[i];
        let col = |f: &dyn Fn(&Profiled) -> f64| p.iter().map(f).collect::<Vec<f64>>();
        say!(
            "  -- {name} ({}):",
            p.first().map_or("?".into(), |p| p.clock.to_string())
        );
        let d = row(
            "  sampled stack depth, worker threads (frames)",
            &col(&|p| p.depth.map_or(f64::NAN, |d| d as f64)),
            0,
        );
        row(
            "  profiled worker CPU, sum of 2 (s)",
            &col(&|p| p.worker_cpu),
            4,
        );
        row(
            "  sampler thread CPU, stats.sampler_cpu (ms)",
            &col(&|p| p.sampler_cpu * 1e3),
            1,
        );
        row("  samples (all threads)", &col(&|p| p.samples as f64), 0);
        row(
            "  achieved samples/s per worker (wall)",
            &col(&|p| p.worker_samples as f64 / WORKERS as f64 / p.wall),
            0,
        );
        row(
            "  samples per worker CPU-second",
            &col(&|p| p.worker_samples as f64 / p.worker_cpu),
            0,
        );
        let total = row(
            "  per-sample CPU cost, total (us)",
            &col(&|p| (p.worker_cpu - base.median + p.sampler_cpu) / p.samples as f64 * 1e6),
            2,
        );
        row(
            "    of which worker side (us)",
            &col(&|p| (p.worker_cpu - base.median) / p.samples as f64 * 1e6),
            2,
        );
        let sampler = row(
            "    of which sampler thread only (us)",
            &col(&|p| p.sampler_cpu / p.samples as f64 * 1e6),
            2,
        );
        let wall: Vec<f64> = p
            .iter()
            .zip(&base_wall)
            .map(|(p, b)| (p.wall / b - 1.0) * 100.0)
            .collect();
        let w = row("  job wall overhead vs the round's baseline (%)", &wall, 2);
        results.push((total.median, sampler.median, d.median, w.median));
    }
    // What the baseline's own run-to-run spread would look like as a cost
    // per sample: the resolution of this measurement.
    let noise_us = (base.max - base.min) / median_samples * 1e6;
    say!(
        "  noise floor: baseline worker CPU spread {:.1} ms = {noise_us:.2} us/sample",
        (base.max - base.min) * 1e3
    );
    if noise_us > TARGET_SAMPLE_US / 2.0 {
        say!(
            "  NOTE: the baseline's spread is large next to the {TARGET_SAMPLE_US} us target; the machine is noisy, treat the worker-side figure with care"
        );
    }
    CpuResult {
        per_sample_us: results[0].0,
        sampler_only_us: results[0].1,
        depth: if results[0].2.is_finite() {
            Some(results[0].2)
        } else {
            None
        },
        noise_us,
        fallback_per_sample_us: results[1].0,
        fallback_sampler_only_us: results[1].1,
        wall_pct: [results[0].3, results[1].3],
    }
}
