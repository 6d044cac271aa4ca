//! Reading back what each profiled process wrote and merging it into one
//! profile, each process under a root frame of its own: `name (pid)`, or
//! `name` with `--merge-processes`.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use btprof::formats::process_record::{ProcessRecord, PushSummary};
use btprof::profile::Builder;
use btprof::{Profile, RunInfo, SampleClock};

/// One process's profile (one program image of it: an `exec` starts
/// another).
#[derive(Debug)]
pub struct Part {
    pub record: ProcessRecord,
    pub folded: PathBuf,
}

/// A process that started profiling and wrote nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct Missing {
    pub pid: u32,
    pub name: String,
    /// It exited while the library was still starting the profiler in it
    /// (it left an `.early` file).
    pub exited_in_start_up: bool,
    /// A later program image of the same pid started profiling: this one
    /// called `exec` without writing its profile.
    pub execed: bool,
}

/// What the processes left in `dir`.
#[derive(Debug, Default)]
pub struct Gathered {
    pub parts: Vec<Part>,
    pub missing: Vec<Missing>,
    /// Files that could not be read, with why.
    pub unreadable: Vec<String>,
}

/// What one `PID-NANOS-SEQ` stem left: its files' extensions.
#[derive(Default)]
struct Left {
    json: bool,
    started: bool,
    early: bool,
}

/// The pid and start time (nanoseconds since the epoch) a stem names.
fn pid_and_nanos(stem: &Path) -> (u32, u128) {
    let mut parts = stem
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .split('-');
    let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let nanos = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (pid, nanos)
}

/// Reads `dir`: every `*.json` process record with its folded file, and
/// every `*.started` marker (or `*.early` note) no profile followed.
pub fn gather(dir: &Path) -> Gathered {
    let mut out = Gathered::default();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    let mut stems: BTreeMap<PathBuf, Left> = BTreeMap::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let kind = path.extension().and_then(|e| e.to_str());
        let (json, started, early) = match kind {
            Some("json") => (true, false, false),
            Some("started") => (false, true, false),
            Some("early") => (false, false, true),
            _ => continue,
        };
        let left = stems.entry(path.with_extension("")).or_default();
        left.json |= json;
        left.started |= started;
        left.early |= early;
    }
    // Every program image that started, by pid, for telling an `exec`.
    let images: Vec<(u32, u128)> = stems.keys().map(|s| pid_and_nanos(s)).collect();
    for (stem, left) in &stems {
        if left.json {
            match ProcessRecord::read(&stem.with_extension("json")) {
                Ok(record) => out.parts.push(Part {
                    record,
                    folded: stem.with_extension("folded"),
                }),
                Err(e) => out.unreadable.push(e.to_string()),
            }
        } else if left.started || left.early {
            let file = if left.started { "started" } else { "early" };
            let name = fs::read_to_string(stem.with_extension(file)).unwrap_or_default();
            let (pid, nanos) = pid_and_nanos(stem);
            out.missing.push(Missing {
                pid,
                name,
                exited_in_start_up: left.early,
                execed: images.iter().any(|&(p, n)| p == pid && n > nanos),
            });
        }
    }
    out.parts.sort_by(|a, b| {
        a.record
            .run
            .start_unix_secs
            .total_cmp(&b.record.run.start_unix_secs)
    });
    out.missing.sort_by_key(|m| m.pid);
    out
}

/// Frames the preloaded library adds below `main` (its wrapper, and its
/// `__libc_start_main` in front of the C library's): left out, so stacks
/// look as they would without it.
fn is_preload_frame(previous: Option<&str>, frame: &str) -> bool {
    frame == "btprof_preload_main"
        || frame.starts_with("btprof_preload::")
        || (frame == "__libc_start_main" && previous == Some("__libc_start_main"))
}

/// A frame of the embedded profiler stopping (at exit, before `exec`) on
/// the program's own thread: btprof's work, not the program's, so its
/// few samples are left out.
fn is_btprof_at_exit(frame: &str) -> bool {
    frame.starts_with("btprof::record::")
}

/// The parts merged into one profile.
pub fn merge(
    parts: &[Part],
    merge_processes: bool,
    merge_threads: bool,
) -> Result<Profile, String> {
    let mut builder = Builder::new();
    let overflow = |_| "the merged profile is too large".to_owned();
    for part in parts {
        if part.record.run.samples == 0 {
            continue;
        }
        let profile = Profile::read_folded(&part.folded).map_err(|e| e.to_string())?;
        let root = match merge_processes {
            true => part.record.name.clone(),
            false => format!("{} ({})", part.record.name, part.record.pid),
        };
        let mut frames: Vec<&str> = Vec::new();
        for stack in profile.stacks() {
            if stack.frames().any(is_btprof_at_exit) {
                continue;
            }
            frames.clear();
            frames.push(&root);
            // A folded line's first frame is its thread's name.
            let skip = usize::from(merge_threads);
            for frame in stack.frames().skip(skip) {
                if !is_preload_frame(frames.last().copied(), frame) {
                    frames.push(frame);
                }
            }
            builder
                .add_stack(None, frames.iter().copied(), false, stack.count())
                .map_err(overflow)?;
        }
    }
    Ok(builder.finish_combined("btprof record"))
}

/// The run metadata of all parts together: sums of what adds up (samples,
/// CPU time, losses, threads per clock), the rates over all of them, the
/// largest of what is a most, the first part's settings and program.
pub fn combined_run_info(parts: &[Part]) -> Option<RunInfo> {
    let first = parts.first()?;
    let mut info = first.record.run.clone();
    let runs = || parts.iter().map(|p| &p.record.run);
    let sum = |field: fn(&RunInfo) -> u64| runs().map(field).sum::<u64>();
    let end = runs()
        .map(|r| r.start_unix_secs + r.duration_secs)
        .fold(f64::MIN, f64::max);
    info.duration_secs = end - info.start_unix_secs;
    info.samples = sum(|r| r.samples);
    info.distinct_samples = sum(|r| r.distinct_samples);
    info.sampled_cpu_secs = runs().map(|r| r.sampled_cpu_secs).sum();
    info.missed_ticks = sum(|r| r.missed_ticks);
    info.truncated_walks = sum(|r| r.truncated_walks);
    info.failed_samples = sum(|r| r.failed_samples);
    info.signal_blocked_samples = sum(|r| r.signal_blocked_samples);
    info.lost_samples = sum(|r| r.lost_samples);
    info.stackless_samples = sum(|r| r.stackless_samples);
    info.lost_cpu_secs = runs().map(|r| r.lost_cpu_secs).sum();
    info.process_cpu_secs = runs().map(|r| r.process_cpu_secs).sum();
    info.unsampled_cpu_secs = runs().map(|r| r.unsampled_cpu_secs).sum();
    info.ring_threads = sum(|r| r.ring_threads);
    info.timer_threads = sum(|r| r.timer_threads);
    info.wake_timers = sum(|r| r.wake_timers);
    info.wakes = sum(|r| r.wakes);
    // The most one listing found: each process lists its own threads.
    info.idle_without_wake_timer = runs().map(|r| r.idle_without_wake_timer).max().unwrap_or(0);
    info.threads_found_between_listings = sum(|r| r.threads_found_between_listings);
    info.overflow_samples = sum(|r| r.overflow_samples);
    info.threads = sum(|r| r.threads);
    let per_cpu_second = |samples: u64| {
        if info.sampled_cpu_secs > 0.0 {
            (samples as f64 / info.sampled_cpu_secs * 10.0).round() / 10.0
        } else {
            0.0
        }
    };
    info.samples_per_cpu_second = per_cpu_second(info.samples);
    info.distinct_samples_per_cpu_second = per_cpu_second(info.distinct_samples);
    // Per wall-second figures: each process's, weighted by how long it ran.
    let wall: f64 = runs().map(|r| r.duration_secs).sum();
    let over_wall = |field: fn(&RunInfo) -> f64| {
        if wall > 0.0 {
            let weighted: f64 = runs().map(|r| field(r) * r.duration_secs).sum();
            (weighted / wall * 10.0).round() / 10.0
        } else {
            0.0
        }
    };
    info.ticks_per_second = over_wall(|r| r.ticks_per_second);
    info.achieved_hz = if info.mode == "cpu" {
        info.samples_per_cpu_second
    } else {
        over_wall(|r| r.achieved_hz)
    };
    if runs().any(|r| r.clock != info.clock) {
        info.clock = "mixed".to_owned();
    }
    Some(info)
}

/// The processes' names for the status line, `name (pid)` in the order
/// they wrote their profiles, each once, the first `shown` of them and
/// then `and N more`.
pub fn process_names(parts: &[Part], shown: usize) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names: Vec<String> = Vec::new();
    for part in parts {
        let name = format!("{} ({})", part.record.name, part.record.pid);
        if seen.insert(name.clone()) {
            names.push(name);
        }
    }
    at_most(names, shown)
}

/// The first `shown` of `names`, then `and N more` for the rest.
fn at_most(mut names: Vec<String>, shown: usize) -> Vec<String> {
    if names.len() > shown {
        let more = names.len() - shown;
        names.truncate(shown);
        names.push(format!("and {more} more"));
    }
    names
}

/// Which cpu-mode processes the sampler thread paced, for the line that
/// says perf events were refused: `the samples` (one process), `the
/// samples of all N processes`, or `the samples of K of N processes:
/// name (pid), ...` (the first `shown` named); `None` when it paced none.
///
/// Where the kernel or a seccomp profile refuses `perf_event_open` it
/// refuses it in every process, so a line per process said the same thing
/// again for each (a program started through a shell script or a version
/// manager's shim runs dozens). Processes that a program's own sandbox
/// refused it in, while the others had it, are named. A process is its
/// pid, as in the status line: the images it `exec`ed through ran in the
/// same environment.
pub fn paced_without_perf(parts: &[Part], shown: usize) -> Option<String> {
    let (mut all, mut paced, mut names) = (HashSet::new(), HashSet::new(), Vec::new());
    for part in parts.iter().filter(|p| p.record.run.mode == "cpu") {
        let pid = part.record.pid;
        all.insert(pid);
        if part.record.run.clock == SampleClock::SamplerThread.as_str() && paced.insert(pid) {
            names.push(format!("{} ({pid})", part.record.name));
        }
    }
    Some(match (paced.len(), all.len()) {
        (0, _) => return None,
        (1, 1) => "the samples".to_owned(),
        (k, n) if k == n => format!("the samples of all {n} processes"),
        (k, n) => {
            let names = at_most(names, shown).join(", ");
            format!("the samples of {k} of {n} processes: {names}")
        }
    })
}

/// The processes' pushing added up, and how many processes pushed;
/// `None` when none did.
pub fn pushed(parts: &[Part]) -> Option<(PushSummary, usize)> {
    let pushing: Vec<PushSummary> = parts.iter().filter_map(|p| p.record.push).collect();
    let total = pushing
        .iter()
        .fold(PushSummary::default(), |all, &one| all + one);
    (!pushing.is_empty()).then_some((total, pushing.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(pid: u32, run: RunInfo) -> Part {
        Part {
            record: ProcessRecord {
                pid,
                name: "p".into(),
                command_line: Vec::new(),
                ended_by: "exit".into(),
                run,
                push: None,
            },
            folded: PathBuf::new(),
        }
    }

    /// A marker no profile followed is missing; one with an `.early` note
    /// (or the note alone) exited during start-up; one whose pid has a
    /// later image called `exec`.
    #[test]
    fn missing_processes_say_whether_they_exited_early_or_execed() {
        let dir = std::env::temp_dir().join(format!("btprof-gather-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let files = [
            ("10-100-0.started", "old"),
            ("10-200-0.started", "new"),
            ("11-100-0.started", "quick"),
            ("11-100-0.early", "quick"),
            ("12-100-0.early", "quicker"),
            ("13-100-0.started", "killed"),
        ];
        for (file, name) in files {
            fs::write(dir.join(file), name).unwrap();
        }
        let gathered = gather(&dir);
        fs::remove_dir_all(&dir).unwrap();
        let missing = |pid, name: &str, early, execed| Missing {
            pid,
            name: name.into(),
            exited_in_start_up: early,
            execed,
        };
        assert_eq!(
            gathered.missing,
            [
                missing(10, "old", false, true),
                missing(10, "new", false, false),
                missing(11, "quick", true, false),
                missing(12, "quicker", true, false),
                missing(13, "killed", false, false),
            ]
        );
    }

    /// Each name once, and past the first few a count of the rest.
    #[test]
    fn the_status_line_names_the_first_processes_and_counts_the_rest() {
        let stats = btprof::Stats::new(&Default::default());
        let run = RunInfo::of_this_process(&stats, 0);
        let parts: Vec<Part> = (1..=12).map(|pid| part(pid, run.clone())).collect();
        let names = process_names(&parts, 8);
        assert_eq!(names.len(), 9, "{names:?}");
        assert_eq!((names[0].as_str(), names[7].as_str()), ("p (1)", "p (8)"));
        assert_eq!(names[8], "and 4 more");
        // A process that wrote twice is named once.
        let twice = [part(1, run.clone()), part(1, run.clone()), part(2, run)];
        assert_eq!(process_names(&twice, 8), ["p (1)", "p (2)"]);
    }

    /// Perf refused in every process is said for all of them; in some,
    /// they are named; a pid that `exec`ed counts once; wall mode and the
    /// kernel-paced clocks are not about perf being refused.
    #[test]
    fn the_processes_paced_without_perf_are_counted_by_pid() {
        let stats = btprof::Stats::new(&Default::default());
        let base = RunInfo::of_this_process(&stats, 0);
        let run = |mode: &str, clock: SampleClock| RunInfo {
            mode: mode.into(),
            clock: clock.as_str().into(),
            ..base.clone()
        };
        let thread = || run("cpu", SampleClock::SamplerThread);
        let rings = || run("cpu", SampleClock::Perf);
        let paced = |parts: &[Part]| paced_without_perf(parts, 2);
        assert_eq!(paced(&[part(1, thread())]).as_deref(), Some("the samples"));
        assert_eq!(
            paced(&[part(1, thread()), part(1, thread()), part(2, thread())]).as_deref(),
            Some("the samples of all 2 processes")
        );
        assert_eq!(
            paced(&[part(1, rings()), part(2, thread()), part(3, rings())]).as_deref(),
            Some("the samples of 1 of 3 processes: p (2)")
        );
        let mixed: Vec<Part> = (1..=5)
            .map(|pid| part(pid, if pid == 1 { rings() } else { thread() }))
            .collect();
        assert_eq!(
            paced(&mixed).as_deref(),
            Some("the samples of 4 of 5 processes: p (2), p (3), and 2 more")
        );
        // A sidecar of the retired POSIX clock, or of the perf clock under
        // its old name: kernel-paced, not the sampler thread.
        let named = |clock: &str| RunInfo {
            clock: clock.into(),
            ..rings()
        };
        assert_eq!(
            paced(&[
                part(1, named("thread-timers")),
                part(2, named("posix-timers"))
            ]),
            None
        );
        assert_eq!(
            paced(&[part(1, run("wall", SampleClock::SamplerThread))]),
            None
        );
        assert_eq!(paced(&[]), None);
    }

    /// Every count adds up over the processes, not only the first one's:
    /// a family whose second process lost samples to a full ring, or to a
    /// blocked signal, says so in the merged sidecar.
    #[test]
    fn the_combined_metadata_adds_up_every_count() {
        let stats = btprof::Stats::new(&Default::default());
        let base = RunInfo::of_this_process(&stats, 0);
        let a = RunInfo {
            mode: "cpu".into(),
            clock: "posix-timers".into(),
            start_unix_secs: 100.0,
            duration_secs: 2.0,
            sampled_cpu_secs: 1.0,
            samples: 1000,
            distinct_samples: 250,
            ticks_per_second: 50.0,
            timer_threads: 3,
            idle_without_wake_timer: 40,
            ..base.clone()
        };
        let b = RunInfo {
            mode: "cpu".into(),
            clock: "posix-timers".into(),
            start_unix_secs: 101.0,
            duration_secs: 2.0,
            sampled_cpu_secs: 1.0,
            samples: 600,
            distinct_samples: 150,
            ticks_per_second: 10.0,
            timer_threads: 2,
            signal_blocked_samples: 400,
            lost_samples: 7,
            lost_cpu_secs: 0.007,
            process_cpu_secs: 1.5,
            unsampled_cpu_secs: 0.5,
            idle_without_wake_timer: 25,
            ..base
        };
        let info = combined_run_info(&[part(1, a), part(2, b)]).unwrap();
        assert_eq!(info.duration_secs, 3.0);
        assert_eq!((info.samples, info.distinct_samples), (1600, 400));
        assert_eq!(info.samples_per_cpu_second, 800.0);
        assert_eq!(info.distinct_samples_per_cpu_second, 200.0);
        assert_eq!(info.achieved_hz, 800.0);
        assert_eq!(info.ticks_per_second, 30.0);
        assert_eq!(info.timer_threads, 5);
        assert_eq!(info.idle_without_wake_timer, 40);
        assert_eq!(info.signal_blocked_samples, 400);
        assert_eq!((info.lost_samples, info.lost_cpu_secs), (7, 0.007));
        assert_eq!((info.process_cpu_secs, info.unsampled_cpu_secs), (1.5, 0.5));
        assert_eq!(info.clock, "posix-timers");
    }
}
