//! The settings `btprof record` passes through the environment
//! (`btprof::formats::process_record::env`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use btprof::formats::process_record::env;
use btprof::{FoldOptions, Mode, ProfilerBuilder};

/// How this process is to be profiled.
#[derive(Debug)]
pub struct Config {
    /// Where its files go.
    pub dir: PathBuf,
    hz: Option<u32>,
    mode: Mode,
    signal: Option<i32>,
    max_depth: Option<usize>,
    max_stacks: Option<usize>,
    /// How the folded file is written.
    pub fold: FoldOptions,
    /// When sampling stops, if it does before the process ends.
    pub deadline: Option<SystemTime>,
}

impl Config {
    /// The settings, `Ok(None)` when this process is not to be profiled
    /// (no output directory, or `--no-follow` and not the command's own
    /// process), an error for a setting that does not parse.
    pub fn from_env() -> Result<Option<Config>, String> {
        let Some(dir) = std::env::var_os(env::DIR).filter(|d| !d.is_empty()) else {
            return Ok(None);
        };
        if let Some(parent) = number::<u32>(env::PARENT)? {
            // SAFETY: getppid has no preconditions and cannot fail.
            let ppid = unsafe { libc::getppid() };
            if u32::try_from(ppid).ok() != Some(parent) {
                return Ok(None);
            }
        }
        let mode = match std::env::var(env::MODE).ok().as_deref() {
            None | Some("") | Some("cpu") => Mode::Cpu,
            Some("wall") => Mode::Wall,
            Some(other) => return Err(format!("{}={other}: not cpu or wall", env::MODE)),
        };
        Ok(Some(Config {
            dir: PathBuf::from(dir),
            hz: number(env::HZ)?,
            mode,
            signal: number(env::SIGNAL)?,
            max_depth: number(env::MAX_DEPTH)?,
            max_stacks: number(env::MAX_STACKS)?,
            fold: FoldOptions {
                merge_threads: false,
                hide_inlined: std::env::var_os(env::NO_INLINE).is_some_and(|v| v == "1"),
                // Labels are set through the program's own btprof, which
                // is not this library's: its samples carry none.
                label_frames: false,
            },
            deadline: number::<u64>(env::DEADLINE_MS)?
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        }))
    }

    /// The profiling signal the sampler takes (Linux).
    #[cfg(target_os = "linux")]
    pub fn signal(&self) -> i32 {
        self.signal.unwrap_or_else(btprof::default_signal)
    }

    /// The profiler these settings describe.
    pub fn builder(&self) -> ProfilerBuilder {
        let mut b = btprof::Profiler::builder().mode(self.mode);
        if let Some(hz) = self.hz {
            b = b.hz(hz);
        }
        if let Some(signal) = self.signal {
            b = b.signal(signal);
        }
        if let Some(depth) = self.max_depth {
            b = b.max_depth(depth);
        }
        if let Some(stacks) = self.max_stacks {
            b = b.max_stacks(stacks);
        }
        b
    }
}

/// The number in environment variable `name`, if set.
fn number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => parse(&v)
            .map(Some)
            .ok_or_else(|| format!("{name}={}: not a number", v.to_string_lossy())),
    }
}

fn parse<T: std::str::FromStr>(v: &OsString) -> Option<T> {
    v.to_str()?.parse().ok()
}
