//! Measurement 3: btprof against the machine's interrupt floor.

#[cfg(target_os = "linux")]
use btprof_sampler::{Mode, Sampler, SamplerConfig};

#[cfg(target_os = "linux")]
use crate::floor;
#[cfg(target_os = "linux")]
use crate::job::{run_job, run_job_with, Interrupts};
#[cfg(target_os = "linux")]
use crate::report::{header, row, say};
#[cfg(target_os = "linux")]
use crate::{CHAIN_DEPTH, HZ};

/// Medians of measurement 3, or why it did not run.
pub(crate) struct FloorResult {
    /// Wall-time overhead (%) of: the bare interrupt, interrupt + empty
    /// handler, btprof.
    pub(crate) wall_pct: [f64; 3],
    /// CPU per interrupt or sample (us), same order.
    pub(crate) cost_us: [f64; 3],
}

#[cfg(target_os = "linux")]
pub(crate) fn measure_floor(runs: usize, iters: u64) -> Result<FloorResult, String> {
    use floor::Floor;

    // Probe once on this thread: a refused perf_event_open skips the
    // measurement with the reason instead of failing inside a worker.
    floor::Timer::start(Floor::Interrupt).map_err(|e| {
        format!("perf_event_open refused ({e}); see /proc/sys/kernel/perf_event_paranoid")
    })?;
    let _handler = floor::Handler::install();
    let config = SamplerConfig {
        hz: HZ,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    };
    let chain = Some(CHAIN_DEPTH);
    // Per variant: (wall overhead %, CPU per event us) of each round.
    let mut wall: [Vec<f64>; 3] = Default::default();
    let mut cost: [Vec<f64>; 3] = Default::default();
    let mut events: [Vec<f64>; 3] = Default::default();

    for round in 0..runs {
        let base = run_job(iters, chain);
        // Rotate the variants' order so drift hits each alike.
        for k in 0..3 {
            let variant = (round + k) % 3;
            let (job, extra_cpu, n) = match variant {
                0 => {
                    let job = run_job_with(iters, chain, Interrupts::Floor(Floor::Interrupt));
                    let n = job.expiries;
                    (job, 0.0, n)
                }
                1 => {
                    let before = floor::Handler::count();
                    let job = run_job_with(iters, chain, Interrupts::Floor(Floor::Signal));
                    let n = floor::Handler::count() - before;
                    (job, 0.0, n)
                }
                _ => {
                    let sampler = Sampler::start(config.clone()).expect("start sampler");
                    let job = run_job(iters, chain);
                    let raw = sampler.stop().expect("stop sampler");
                    (job, raw.stats.sampler_cpu.as_secs_f64(), raw.stats.samples)
                }
            };
            let wall_pct = (job.wall.as_secs_f64() / base.wall.as_secs_f64() - 1.0) * 100.0;
            let extra =
                job.worker_cpu().as_secs_f64() - base.worker_cpu().as_secs_f64() + extra_cpu;
            wall[variant].push(wall_pct);
            cost[variant].push(extra / n.max(1) as f64 * 1e6);
            events[variant].push(n as f64);
        }
        eprintln!(
            "  [floor] round {}/{runs}: wall overhead interrupt {:+.2}%, +signal {:+.2}%, btprof {:+.2}%",
            round + 1,
            wall[0][round],
            wall[1][round],
            wall[2][round]
        );
    }

    header(&format!(
        "[3] against the floor: job 2 with each worker interrupted at {HZ} Hz of its CPU time (perf task-clock)"
    ));
    say!("  per-event cost = (worker CPU [+ sampler_cpu] - this round's baseline worker CPU) / events");
    let names = [
        "bare interrupt",
        "interrupt + empty handler",
        "btprof sampler",
    ];
    let mut result = FloorResult {
        wall_pct: [0.0; 3],
        cost_us: [0.0; 3],
    };
    for (i, name) in names.iter().enumerate() {
        row(&format!("{name}: events per run"), &events[i], 0);
        result.wall_pct[i] = row(&format!("{name}: wall overhead (%)"), &wall[i], 2).median;
        result.cost_us[i] = row(&format!("{name}: CPU per event (us)"), &cost[i], 2).median;
    }
    Ok(result)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn measure_floor(_: usize, _: u64) -> Result<FloorResult, String> {
    Err("the floor uses Linux perf events; not measured on this platform".into())
}
