//! Measurement 5's job in a child process: this bench's own executable
//! run again with [`CHILD_ENV`] set, so that `perf record` can record it
//! and a seccomp filter can refuse it perf events. Every row (baseline,
//! perf, each btprof clock) times the same job the same way, inside the
//! child, and prints one `key=value` line.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use btprof_sampler::{Mode, SampleClock, Sampler, SamplerConfig};
use btprof_testkit::measure;

use crate::job::run_job;
use crate::wakeups::WakeupProbe;
use crate::CHAIN_DEPTH;

/// Set (to a [`Spec`]) in a child that runs one job and reports it.
pub(crate) const CHILD_ENV: &str = "BTPROF_OVERHEAD_CHILD";

/// What one child runs: `iters` per worker, under a [`Sampler`] at `hz`
/// on `clock` (`None`: the sampler's own choice) or, with `hz` 0, with no
/// sampler (the baseline, or under perf); with `probe`, and no sampler,
/// a [`WakeupProbe`] beside the workers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) iters: u64,
    pub(crate) hz: u32,
    pub(crate) clock: Option<SampleClock>,
    pub(crate) probe: bool,
}

impl Spec {
    fn encode(self) -> String {
        format!(
            "{} {} {} {}",
            self.iters,
            self.hz,
            self.clock.map_or("auto", SampleClock::short_name),
            if self.probe { "probe" } else { "-" }
        )
    }

    fn decode(s: &str) -> Spec {
        let mut words = s.split_whitespace();
        let mut next = || words.next().expect("a complete child spec");
        Spec {
            iters: next().parse().expect("iterations"),
            hz: next().parse().expect("rate"),
            clock: SampleClock::from_name(next()),
            probe: next() == "probe",
        }
    }
}

/// One child's report.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChildOut {
    /// The job's wall time, spawn to join (s).
    pub(crate) wall: f64,
    /// The workers' `CLOCK_THREAD_CPUTIME_ID`, summed (s).
    pub(crate) worker_cpu: f64,
    /// Samples, weighted (each counted by the periods it stands for).
    pub(crate) samples: f64,
    /// Samples, each counted once.
    pub(crate) distinct: f64,
    /// The sampler thread's CPU time, or perf's (s).
    pub(crate) sampler_cpu: f64,
    /// How long the profiler ran (s).
    pub(crate) duration: f64,
    /// Index in [`SampleClock::ALL`] of the clock that ran (NaN: none).
    pub(crate) clock: f64,
    /// The child process's own CPU time, all threads (s).
    pub(crate) self_cpu: f64,
    /// The sampler thread's CPU while the job ran, start-up and stop left
    /// out (s), the samples taken meanwhile and how long it was (s): what
    /// a profiler that stays on pays. Zero for perf and the baseline.
    pub(crate) steady_cpu: f64,
    pub(crate) steady_samples: f64,
    pub(crate) steady_duration: f64,
    /// The sampler thread's wakeups meanwhile.
    pub(crate) steady_wakeups: f64,
    /// A probe's CPU time per timed wakeup beside the job (us; with
    /// `probe`).
    pub(crate) wakeup_us: f64,
}

impl ChildOut {
    pub(crate) fn clock(&self) -> Option<SampleClock> {
        SampleClock::ALL.get(self.clock as usize).copied()
    }

    fn parse(text: &str) -> Result<ChildOut, String> {
        let line = text
            .lines()
            .find(|l| l.starts_with("wall="))
            .ok_or_else(|| format!("no result line in the child's output: {text:?}"))?;
        let mut out = ChildOut {
            clock: f64::NAN,
            ..ChildOut::default()
        };
        for (key, value) in measure::fields(line) {
            match key {
                "wall" => out.wall = value,
                "worker_cpu" => out.worker_cpu = value,
                "samples" => out.samples = value,
                "distinct" => out.distinct = value,
                "sampler_cpu" => out.sampler_cpu = value,
                "duration" => out.duration = value,
                "clock" => out.clock = value,
                "self_cpu" => out.self_cpu = value,
                "steady_cpu" => out.steady_cpu = value,
                "steady_samples" => out.steady_samples = value,
                "steady_duration" => out.steady_duration = value,
                "steady_wakeups" => out.steady_wakeups = value,
                "wakeup_us" => out.wakeup_us = value,
                _ => {}
            }
        }
        Ok(out)
    }
}

/// This process's CPU time, all threads, user and system (s).
fn own_cpu() -> f64 {
    // SAFETY: `rusage` is plain data and getrusage only writes to it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    rusage_secs(&usage)
}

fn rusage_secs(u: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// In a child ([`CHILD_ENV`] set): runs the job it asks for, prints the
/// result line and returns true. In the parent: false.
pub(crate) fn run_if_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let spec = Spec::decode(&spec);
    let chain = Some(CHAIN_DEPTH);
    let line = if spec.hz == 0 {
        let probe = spec.probe.then(WakeupProbe::start);
        let job = run_job(spec.iters, chain);
        let wakeup_us = probe.map_or(0.0, WakeupProbe::finish);
        format!(
            "wall={} worker_cpu={} wakeup_us={wakeup_us}",
            job.wall.as_secs_f64(),
            job.worker_cpu().as_secs_f64()
        )
    } else {
        let config = SamplerConfig {
            hz: spec.hz,
            mode: Mode::Cpu,
            clock: spec.clock,
            ..SamplerConfig::default()
        };
        // Warm up: the unwinder's tables and the first sample's faults, so
        // the measured run pays what a running profiler pays per sample.
        let sampler = Sampler::start(config.clone()).expect("start sampler");
        run_job(spec.iters / 20, chain);
        drop(sampler.stop());
        let sampler = Sampler::start(config).expect("start sampler");
        // The counters once started and just before stop (the job's wall
        // time is taken inside it, so the wait for an answer is not in it).
        let before = sampler.collect(false).expect("collect at start").stats;
        let job = run_job(spec.iters, chain);
        let after = sampler.collect(false).expect("collect before stop").stats;
        let raw = sampler.stop().expect("stop sampler");
        let s = &raw.stats;
        format!(
            "wall={} worker_cpu={} samples={} distinct={} sampler_cpu={} duration={} clock={} \
             steady_cpu={} steady_samples={} steady_duration={} steady_wakeups={}",
            job.wall.as_secs_f64(),
            job.worker_cpu().as_secs_f64(),
            s.samples,
            s.recorded,
            s.sampler_cpu.as_secs_f64(),
            s.duration.as_secs_f64(),
            SampleClock::ALL
                .iter()
                .position(|&c| c == s.clock)
                .expect("a known clock"),
            after
                .sampler_cpu
                .saturating_sub(before.sampler_cpu)
                .as_secs_f64(),
            after.samples.saturating_sub(before.samples),
            after.duration.saturating_sub(before.duration).as_secs_f64(),
            after.ticks.saturating_sub(before.ticks),
        )
    };
    println!("{line} self_cpu={}", own_cpu());
    true
}

/// A command that runs this executable as a child for `spec`.
fn child_command(program: &str, spec: Spec) -> Command {
    let mut cmd = Command::new(program);
    cmd.env(CHILD_ENV, spec.encode())
        .env_remove(btprof_sampler::CLOCK_ENV)
        .env_remove(btprof_sampler::FORCE_SAMPLER_THREAD_ENV)
        .stdin(Stdio::null());
    cmd
}

fn own_exe() -> String {
    std::env::current_exe()
        .expect("own path")
        .to_string_lossy()
        .into_owned()
}

/// Runs one child for `spec`; with `refuse_perf`, under a seccomp filter
/// that refuses `perf_event_open` (as Docker's default profile does).
pub(crate) fn run(spec: Spec, refuse_perf: bool) -> Result<ChildOut, String> {
    let mut cmd = child_command(&own_exe(), spec);
    if refuse_perf {
        #[cfg(target_os = "linux")]
        btprof_testkit::seccomp::refuse_perf_event_open(&mut cmd, libc::EPERM);
        #[cfg(not(target_os = "linux"))]
        return Err("seccomp filters are Linux only".into());
    }
    let out = cmd.output().map_err(|e| format!("cannot run child: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    ChildOut::parse(&String::from_utf8_lossy(&out.stdout))
}

/// Where `perf record` writes: memory, as `-o /dev/null` would, but
/// readable afterwards to count the samples.
fn perf_data() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("btprof-overhead-{}.perf.data", std::process::id()))
}

/// Whether `perf record` runs here: `Err` says why not.
pub(crate) fn perf_probe() -> Result<(), String> {
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "100", "-o"])
        .arg(perf_data())
        .args(["--", "true"])
        .output()
        .map_err(|e| format!("perf is not installed ({e})"))?;
    let _ = std::fs::remove_file(perf_data());
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "perf record is refused or fails ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs one baseline child (`spec.hz` 0) under `perf record -e cpu-clock
/// -F hz --call-graph fp`, and reports it with perf's samples of the
/// workers and perf's own CPU time (its process's, less the child's).
pub(crate) fn run_under_perf(spec: Spec, hz: u32) -> Result<ChildOut, String> {
    let data = perf_data();
    let exe = own_exe();
    let mut cmd = child_command("perf", spec);
    cmd.args(["record", "-q", "-B", "-N", "-e", "cpu-clock", "-F"])
        .arg(hz.to_string())
        .args(["--call-graph", "fp", "-o"])
        .arg(&data)
        .args(["--", &exe])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = std::time::Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("cannot run perf: {e}"))?;
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)
        .map_err(|e| e.to_string())?;
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .map_err(|e| e.to_string())?;
    // wait4, not Child::wait: perf's rusage (its own and its waited-for
    // child's CPU time) is the point.
    let mut status = 0;
    // SAFETY: `rusage` is plain data, written by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our own unwaited child; the pointers are valid.
    let rc = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let perf_wall = start.elapsed();
    if rc < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let _ = std::fs::remove_file(&data);
        return Err(format!("perf record failed: {}", stderr.trim()));
    }
    let mut out = ChildOut::parse(&stdout)?;
    let script = Command::new("perf")
        .args(["script", "-F", "comm", "-i"])
        .arg(&data)
        .output()
        .map_err(|e| format!("perf script: {e}"));
    let _ = std::fs::remove_file(&data);
    let script = script?;
    let samples = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("ovh-worker-"))
        .count();
    out.samples = samples as f64;
    out.distinct = samples as f64;
    out.sampler_cpu = rusage_secs(&usage) - out.self_cpu;
    out.duration = perf_wall.as_secs_f64();
    Ok(out)
}

/// The job's length for a child, from the calibration.
pub(crate) fn iters_for(iters_per_sec: u64, job: Duration) -> u64 {
    (iters_per_sec as f64 * job.as_secs_f64()) as u64
}
