//! Reading back what each profiled process wrote and merging it into one
//! profile, each process under a root frame of its own: `name (pid)`, or
//! `name` with `--merge-processes`.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use btprof::formats::process_record::ProcessRecord;
use btprof::profile::Builder;
use btprof::{Profile, RunInfo};

/// One process's profile (one program image of it: an `exec` starts
/// another).
#[derive(Debug)]
pub struct Part {
    pub record: ProcessRecord,
    pub folded: PathBuf,
}

/// A process that started profiling and wrote nothing.
#[derive(Debug)]
pub struct Missing {
    pub pid: u32,
    pub name: String,
}

/// What the processes left in `dir`.
#[derive(Debug, Default)]
pub struct Gathered {
    pub parts: Vec<Part>,
    pub missing: Vec<Missing>,
    /// Files that could not be read, with why.
    pub unreadable: Vec<String>,
}

/// Reads `dir`: every `*.json` process record with its folded file, and
/// every `*.started` marker no profile followed.
pub fn gather(dir: &Path) -> Gathered {
    let mut out = Gathered::default();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    let mut stems: Vec<(PathBuf, bool)> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => stems.push((path.with_extension(""), true)),
            Some("started") => stems.push((path.with_extension(""), false)),
            _ => {}
        }
    }
    let written: HashSet<PathBuf> = stems
        .iter()
        .filter(|(_, json)| *json)
        .map(|(s, _)| s.clone())
        .collect();
    for (stem, json) in stems {
        if json {
            match ProcessRecord::read(&stem.with_extension("json")) {
                Ok(record) => out.parts.push(Part {
                    record,
                    folded: stem.with_extension("folded"),
                }),
                Err(e) => out.unreadable.push(e.to_string()),
            }
        } else if !written.contains(&stem) {
            let name = fs::read_to_string(stem.with_extension("started")).unwrap_or_default();
            let pid = stem
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            out.missing.push(Missing { pid, name });
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

/// The run metadata of all parts together: sums of what adds up, the
/// rate over all of them, the first part's settings and program.
pub fn combined_run_info(parts: &[Part]) -> Option<RunInfo> {
    let first = parts.first()?;
    let mut info = first.record.run.clone();
    let runs = parts.iter().map(|p| &p.record.run);
    let end = runs
        .clone()
        .map(|r| r.start_unix_secs + r.duration_secs)
        .fold(f64::MIN, f64::max);
    info.duration_secs = end - info.start_unix_secs;
    info.samples = runs.clone().map(|r| r.samples).sum();
    info.sampled_cpu_secs = runs.clone().map(|r| r.sampled_cpu_secs).sum();
    info.missed_ticks = runs.clone().map(|r| r.missed_ticks).sum();
    info.truncated_walks = runs.clone().map(|r| r.truncated_walks).sum();
    info.failed_samples = runs.clone().map(|r| r.failed_samples).sum();
    info.overflow_samples = runs.clone().map(|r| r.overflow_samples).sum();
    info.threads = runs.clone().map(|r| r.threads).sum();
    info.samples_per_cpu_second = if info.sampled_cpu_secs > 0.0 {
        (info.samples as f64 / info.sampled_cpu_secs * 10.0).round() / 10.0
    } else {
        0.0
    };
    let wall: f64 = runs.clone().map(|r| r.duration_secs).sum();
    info.achieved_hz = if info.mode == "cpu" {
        info.samples_per_cpu_second
    } else if wall > 0.0 {
        let weighted: f64 = runs.clone().map(|r| r.achieved_hz * r.duration_secs).sum();
        (weighted / wall * 10.0).round() / 10.0
    } else {
        0.0
    };
    if runs.clone().any(|r| r.clock != info.clock) {
        info.clock = "mixed".to_owned();
    }
    Some(info)
}
