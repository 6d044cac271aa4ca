//! Run metadata: how, where and when a profile was taken.
//!
//! Folded lines have no place for it, so it travels beside the folded file
//! as a small JSON sidecar (`crate::formats::sidecar`): `btprof diff` reads
//! it to warn when two runs are not comparable (different rates or modes),
//! and a person reading an old profile can tell what produced it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::Stats;

/// What a profile's numbers mean: the sampling settings, what was
/// achieved, and where and when it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The btprof version that took the profile.
    pub btprof_version: String,
    /// The profiled program (its executable's file name).
    pub program: String,
    /// The host it ran on.
    pub host: String,
    /// When sampling (or this window) started, UTC, RFC 3339.
    pub start_time: String,
    /// The same instant in seconds since the Unix epoch.
    pub start_unix_secs: f64,
    /// Wall time sampled, seconds.
    pub duration_secs: f64,
    /// `cpu` or `wall`.
    pub mode: String,
    /// The rate asked for: in cpu mode samples per CPU-second of each
    /// thread, in wall mode ticks per wall-clock second.
    pub requested_hz: u32,
    /// The rate achieved, in the unit of `requested_hz`, from clocks (the
    /// sampled threads' CPU clocks in cpu mode, the monotonic clock in wall
    /// mode).
    pub achieved_hz: f64,
    /// What paced the samples: `perf` (the kernel, by each thread's own CPU
    /// time) or `sampler-thread` (the sampler thread's ticks). Older
    /// metadata may say `thread-timers` (the perf clock's former name) or
    /// `posix-timers` (a retired clock), and is empty where written before
    /// btprof recorded it.
    #[serde(default)]
    pub clock: String,
    /// Samples per CPU-second of the sampled threads, all together, each
    /// counted by the periods it stands for (weighted).
    #[serde(default)]
    pub samples_per_cpu_second: f64,
    /// Distinct samples per CPU-second: each stack recorded counted once.
    /// Below `samples_per_cpu_second` where one sample stood for several
    /// periods (POSIX timers on a kernel tick slower than the rate, a
    /// sampler thread that fell behind); what a share's noise depends on.
    /// Zero in metadata written before btprof recorded it.
    #[serde(default)]
    pub distinct_samples_per_cpu_second: f64,
    /// CPU time the sampled threads used while sampled, seconds.
    #[serde(default)]
    pub sampled_cpu_secs: f64,
    /// Sampler-thread ticks per wall-clock second (with `perf`,
    /// the rate at which the sampler thread collected; with
    /// `sampler-thread` in cpu mode, its wakeups when threads fell due and
    /// at random moments, not the sample rate).
    #[serde(default)]
    pub ticks_per_second: f64,
    /// Stacks recorded, each counted by the periods it stands for.
    pub samples: u64,
    /// Stacks recorded, each counted once (see
    /// `distinct_samples_per_cpu_second`).
    #[serde(default)]
    pub distinct_samples: u64,
    /// Deadlines the sampler skipped because it woke too late.
    pub missed_ticks: u64,
    /// Samples whose walk stopped short of the thread's entry (`main`, a
    /// thread start, or the frame chain's end in the C library); expected
    /// ends, such as the C start code below `main`, are not counted.
    pub truncated_walks: u64,
    /// Samples due but never taken.
    pub failed_samples: u64,
    /// Samples due on threads that block the profiling signal, so that a
    /// clock which signals threads (POSIX timers, the sampler thread)
    /// cannot take them: such a busy thread looks idle in the profile.
    /// Zero on the perf clock's rings, which need no signal, and in metadata
    /// written before btprof recorded it.
    #[serde(default)]
    pub signal_blocked_samples: u64,
    /// Samples the kernel dropped because a ring buffer was full (perf
    /// events only); their CPU time has no sample.
    #[serde(default)]
    pub lost_samples: u64,
    /// Periods of CPU time of threads that exited before their first
    /// sample (the sampler-thread clock: a thread that lives about a
    /// period can be gone before the sampler thread comes round), so no
    /// stack could stand for them. Zero in metadata written before btprof
    /// recorded it.
    #[serde(default)]
    pub stackless_samples: u64,
    /// The CPU time the lost and the stackless samples stood for (one
    /// period each), in seconds: sampled threads' time that no sample
    /// covers.
    #[serde(default)]
    pub lost_cpu_secs: f64,
    /// CPU time the whole process used while sampled, seconds (btprof's
    /// own threads included). Zero where it is unknown, and in metadata
    /// written before btprof recorded it.
    #[serde(default)]
    pub process_cpu_secs: f64,
    /// CPU time of the process that no sampled thread accounts for,
    /// seconds: threads that ran less than one sampling period in all
    /// (each thread's periods count its own CPU time, so such a thread
    /// never completed one), threads that lived and exited between two
    /// listings of the threads or ran before their first one (where the
    /// kernel could not sample them from birth), threads' last moments,
    /// btprof's own threads other than the sampler. No sample stands for
    /// it.
    #[serde(default)]
    pub unsampled_cpu_secs: f64,
    /// Threads the kernel sampled into ring buffers, with no signal (perf
    /// events only).
    #[serde(default)]
    pub ring_threads: u64,
    /// Threads sampled through a timer of their own that signals them.
    #[serde(default)]
    pub timer_threads: u64,
    /// Idle threads given a wake timer, which tells the sampler thread
    /// when they run again (its clock, cpu mode).
    #[serde(default)]
    pub wake_timers: u64,
    /// Times a wake timer told the sampler thread that its thread ran.
    #[serde(default)]
    pub wakes: u64,
    /// The most idle threads one listing found that could have no wake
    /// timer: they are looked at again only at the next listing.
    #[serde(default)]
    pub idle_without_wake_timer: u64,
    /// Threads the sampler thread found between two listings of the
    /// threads, by the thread ids the kernel gave since the last one.
    #[serde(default)]
    pub threads_found_between_listings: u64,
    /// Samples counted under `[btprof: stack table full]`.
    pub overflow_samples: u64,
    /// Threads seen (a renamed thread counts once per name).
    pub threads: u64,
}

impl RunInfo {
    /// The metadata of a profile of this process with `stats`.
    pub fn of_this_process(stats: &Stats, overflow_samples: u64) -> RunInfo {
        let start = stats
            .start_time
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        RunInfo {
            btprof_version: crate::VERSION.to_owned(),
            program: program_name(),
            host: host_name(),
            start_time: rfc3339(start),
            start_unix_secs: start.as_secs_f64(),
            duration_secs: stats.duration.as_secs_f64(),
            mode: stats.mode.to_string(),
            requested_hz: stats.requested_hz,
            achieved_hz: (stats.achieved_hz() * 10.0).round() / 10.0,
            clock: stats.clock.to_string(),
            samples_per_cpu_second: (stats.samples_per_cpu_second() * 10.0).round() / 10.0,
            distinct_samples_per_cpu_second: (stats.distinct_per_cpu_second() * 10.0).round()
                / 10.0,
            sampled_cpu_secs: (stats.sampled_cpu().as_secs_f64() * 1e6).round() / 1e6,
            ticks_per_second: (stats.ticks_per_second() * 10.0).round() / 10.0,
            samples: stats.samples,
            distinct_samples: stats.recorded,
            missed_ticks: stats.missed_ticks,
            truncated_walks: stats.truncated(),
            failed_samples: stats.failed_samples,
            signal_blocked_samples: stats.signal_blocked_samples,
            lost_samples: stats.lost_samples,
            stackless_samples: stats.stackless_samples,
            lost_cpu_secs: (stats.lost_cpu().as_secs_f64() * 1e6).round() / 1e6,
            process_cpu_secs: (stats.process_cpu.as_secs_f64() * 1e6).round() / 1e6,
            unsampled_cpu_secs: (stats.unsampled_cpu().as_secs_f64() * 1e6).round() / 1e6,
            ring_threads: stats.ring_threads,
            timer_threads: stats.timer_threads,
            wake_timers: stats.wake_timers,
            wakes: stats.wakes,
            idle_without_wake_timer: stats.idle_without_wake_timer,
            threads_found_between_listings: stats.threads_found_between_listings,
            overflow_samples,
            threads: stats.threads_seen,
        }
    }

    /// Reasons two runs may not compare like for like, one sentence each;
    /// empty when nothing known differs (or either run's metadata is
    /// unknown, as for folded files from other tools).
    pub fn differences(base: Option<&RunInfo>, new: Option<&RunInfo>) -> Vec<String> {
        let (Some(base), Some(new)) = (base, new) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if base.requested_hz != new.requested_hz {
            out.push(format!(
                "the profiles were sampled at different rates (base {} Hz, new {} Hz): \
                 shares still compare, but the run with fewer samples limits which \
                 changes can be told from noise",
                base.requested_hz, new.requested_hz
            ));
        }
        if base.mode != new.mode {
            out.push(format!(
                "the profiles were taken in different modes (base {}, new {}): \
                 a cpu profile counts running threads only and a wall profile blocked \
                 ones too, so their shares do not measure the same thing",
                base.mode, new.mode
            ));
        }
        out
    }

    /// One line for a flamegraph subtitle.
    pub fn summary(&self) -> String {
        format!(
            "{} on {}, {}, {} mode, {} missed ticks, {} truncated walks, {} failed samples{}, btprof {}",
            self.program,
            self.host,
            self.start_time,
            self.mode,
            self.missed_ticks,
            self.truncated_walks,
            self.failed_samples,
            if self.overflow_samples > 0 {
                format!(", {} samples over the stack table limit", self.overflow_samples)
            } else {
                String::new()
            },
            self.btprof_version
        )
    }
}

/// The executable's file name, or `unknown`.
///
/// Read once per process: every window's metadata names the program, and
/// reading the `/proc/self/exe` link each time was a visible part of a
/// dump's cost. The executable cannot change without an `exec`, which
/// starts the process afresh (a file replaced or deleted under a running
/// program is still the program it runs).
pub(crate) fn program_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown".into())
    })
    .clone()
}

/// The host name, or `unknown`.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname writes at most
    // that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// `since_epoch` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn rfc3339(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The current time as a compact UTC stamp for file names:
/// `YYYYMMDDTHHMMSS.mmmZ`.
pub(crate) fn file_stamp(at: SystemTime) -> String {
    let t = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    rfc3339(t).replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day) 12:34:56.789.
        assert_eq!(
            rfc3339(Duration::from_millis(951_827_696_789)),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            file_stamp(UNIX_EPOCH + Duration::from_millis(951_827_696_789)),
            "20000229T123456.789Z"
        );
    }

    #[test]
    fn flags_incomparable_runs() {
        let stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        let info = RunInfo::of_this_process(&stats, 3);
        // It says which clock paced the samples, and the rates both ways.
        let json = serde_json::to_string_pretty(&info).unwrap();
        for field in [
            "\"clock\": \"sampler-thread\"",
            "\"samples_per_cpu_second\"",
            "\"ticks_per_second\"",
            "\"sampled_cpu_secs\"",
        ] {
            assert!(json.contains(field), "{field} missing from {json}");
        }
        // Metadata written before those fields existed still reads.
        let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
        for field in [
            "clock",
            "samples_per_cpu_second",
            "ticks_per_second",
            "sampled_cpu_secs",
        ] {
            old.as_object_mut().unwrap().remove(field);
        }
        let old: RunInfo = serde_json::from_value(old).unwrap();
        assert_eq!(old.clock, "");
        assert!(RunInfo::differences(Some(&info), Some(&info)).is_empty());
        let other = RunInfo {
            mode: "wall".into(),
            requested_hz: 99,
            ..info.clone()
        };
        let why = RunInfo::differences(Some(&info), Some(&other));
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("base 1000 Hz, new 99 Hz"), "{why:?}");
        assert!(why[1].contains("base cpu, new wall"), "{why:?}");
        assert!(RunInfo::differences(Some(&info), None).is_empty());
    }

    /// Samples the kernel dropped from a full ring are reported as the CPU
    /// time they stood for, one period each: 250 lost at 1000 Hz is 0.25 s
    /// of the sampled threads' time that no sample covers.
    #[test]
    fn reports_lost_samples_as_uncovered_cpu() {
        let mut stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        stats.lost_samples = 250;
        stats.add_thread_cpu(7, Duration::from_secs(2));
        assert_eq!(stats.lost_cpu(), Duration::from_millis(250));
        let info = RunInfo::of_this_process(&stats, 0);
        assert_eq!(info.lost_samples, 250);
        assert_eq!(info.lost_cpu_secs, 0.25);
        let json = serde_json::to_string(&info).unwrap();
        assert!(json.contains("\"lost_cpu_secs\":0.25"), "{json}");
        // Threads that exited before their first sample: their periods
        // are not covered either.
        stats.stackless_samples = 50;
        let info = RunInfo::of_this_process(&stats, 0);
        assert_eq!((info.stackless_samples, info.lost_cpu_secs), (50, 0.3));
    }

    /// Samples lost to threads that block the profiling signal reach the
    /// sidecar: on a signal clock, a `signalfd` program's busy threads
    /// have no sample, and nothing else in its metadata would say why.
    #[test]
    fn reports_samples_lost_to_a_blocked_signal() {
        let mut stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        stats.signal_blocked_samples = 480;
        let json = serde_json::to_string(&RunInfo::of_this_process(&stats, 0)).unwrap();
        assert!(json.contains("\"signal_blocked_samples\":480"), "{json}");
    }

    /// The process's CPU time and the part no sampled thread accounts
    /// for reach the sidecar: a pool of short-lived threads that a clock
    /// finds too late says there how much of its time has no sample.
    #[test]
    fn reports_cpu_time_no_sample_covers() {
        let mut stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        stats.add_thread_cpu(7, Duration::from_secs(3));
        stats.process_cpu = Duration::from_secs(8);
        stats.sampler_cpu = Duration::from_millis(50);
        let info = RunInfo::of_this_process(&stats, 0);
        assert_eq!(info.process_cpu_secs, 8.0);
        assert_eq!(info.unsampled_cpu_secs, 4.95);
    }

    /// What the wake timers did, and the threads found between listings,
    /// reach the sidecar, so a profile of a large idle pool says how many
    /// threads were looked at only at listings.
    #[test]
    fn reports_wake_timers_and_threads_found_between_listings() {
        let mut stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        stats.wake_timers = 8192;
        stats.wakes = 40;
        stats.idle_without_wake_timer = 1808;
        stats.threads_found_between_listings = 3;
        let json = serde_json::to_string(&RunInfo::of_this_process(&stats, 0)).unwrap();
        for field in [
            "\"wake_timers\":8192",
            "\"wakes\":40",
            "\"idle_without_wake_timer\":1808",
            "\"threads_found_between_listings\":3",
        ] {
            assert!(json.contains(field), "{field} not in {json}");
        }
    }

    /// Weighted samples (periods) and distinct ones are reported apart:
    /// 100 sampler-thread signals standing for 400 periods (a thread owed
    /// periods) in 0.4 CPU-s are 1000 samples per CPU-second, but only 250
    /// distinct ones.
    #[test]
    fn reports_weighted_and_distinct_rates_apart() {
        let mut stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        stats.clock = btprof_sampler::SampleClock::SamplerThread;
        stats.samples = 400;
        stats.recorded = 100;
        stats.add_thread_cpu(7, Duration::from_millis(400));
        let info = RunInfo::of_this_process(&stats, 0);
        assert_eq!(info.clock, "sampler-thread");
        assert_eq!(info.samples, 400);
        assert_eq!(info.distinct_samples, 100);
        assert_eq!(info.samples_per_cpu_second, 1000.0);
        assert_eq!(info.distinct_samples_per_cpu_second, 250.0);
        let json = serde_json::to_string(&info).unwrap();
        assert!(
            json.contains("\"distinct_samples_per_cpu_second\":250.0"),
            "{json}"
        );
    }
}
