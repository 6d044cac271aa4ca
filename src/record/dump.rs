//! Periodic dumps: a profiler that stays on writes each window to files.
//!
//! A dump thread of its own (excluded from sampling) wakes every interval,
//! takes the window's stacks from the sampler ([`Sampler::collect`] with a
//! reset, which costs the sampler one table swap), symbolises them and
//! writes `PREFIX-START-SEQ.folded` with its `.json` metadata sidecar and,
//! if asked, an `.svg`. Symbolising and writing never happen on the sampler
//! thread, so a slow disk delays the next dump, not the next sample. A
//! window that cannot be written is counted and reported in [`DumpStats`];
//! sampling goes on.
//!
//! Every window is also added to a running total (bounded by the same
//! stack limit), which is what [`crate::Profiler::stop`] returns, so the
//! windows' samples add up to the run's.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use btprof_sampler::{RawProfile, Sampler};

use super::dump_signal::DumpSignal;
use super::scope::safe_file_chars;
use super::symbolize::Symbolize;
use super::warm_up::{SharedResolver, PATIENCE};
use crate::formats::sidecar::sidecar_path;
use crate::profile::run_info::file_stamp;
use crate::{Error, Profile};

/// The shortest dump interval accepted: a window needs enough samples to
/// mean something, and each dump symbolises and writes files.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How often the dump thread looks for a dump requested by signal.
const SIGNAL_POLL: Duration = Duration::from_millis(50);
/// The longest the dump thread sleeps without looking at its state.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Where and how often to dump.
#[derive(Clone, Debug)]
pub struct DumpConfig {
    /// Time between dumps; `None` dumps only on request (signal).
    pub every: Option<Duration>,
    /// The directory for the files; created if missing.
    pub dir: PathBuf,
    /// Keep only the newest this many windows' files (those this profiler
    /// wrote; nothing else in the directory is touched). `None` keeps all.
    pub keep: Option<usize>,
    /// Also write an SVG flamegraph per window.
    pub svg: bool,
    /// Put label frames in the folded files and SVGs
    /// ([`crate::FoldOptions::label_frames`]).
    pub label_frames: bool,
    /// File name prefix: by default the program's executable name, so
    /// dumps of several programs in one directory tell themselves apart.
    pub prefix: String,
    /// How windows are symbolised (the profiler's setting).
    pub symbolize: Symbolize,
    /// Whether windows are written to files: not when they are cut only
    /// to be pushed.
    pub files: bool,
}

impl Default for DumpConfig {
    fn default() -> Self {
        DumpConfig {
            every: None,
            dir: PathBuf::from("btprof-dumps"),
            keep: None,
            svg: false,
            label_frames: false,
            prefix: default_prefix(),
            symbolize: Symbolize::default(),
            files: true,
        }
    }
}

/// The program's executable name as a file name prefix (`[A-Za-z0-9_.-]`
/// kept, anything else `_`), or `btprof` when it cannot be known.
fn default_prefix() -> String {
    let name = safe_file_chars(&crate::profile::run_info::program_name());
    match name.trim_start_matches('.') {
        "" | "unknown" => "btprof".to_owned(),
        name => name.to_owned(),
    }
}

/// What the dumps did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Windows cut from the sampler.
    pub windows: u64,
    /// Windows written to files.
    pub written: u64,
    /// Windows with no samples: nothing to write (an idle program).
    pub empty: u64,
    /// Windows that could not be written (or not collected); see
    /// `last_error`.
    pub failed: u64,
    /// Windows whose files were deleted to keep only the newest.
    pub removed: u64,
    /// The last failure, with the path involved.
    pub last_error: Option<String>,
    /// The folded file of the last window written.
    pub last_written: Option<PathBuf>,
    /// What pushing did (`None` without [`crate::ProfilerBuilder::push`]).
    #[cfg(feature = "push")]
    pub push: Option<crate::PushStats>,
}

/// The running dump thread and the state it shares with the profiler.
pub(crate) struct Dumper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: in a forked child it does not
    /// exist, and its lock may have been held at the fork.
    pid: u32,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Set by [`Dumper::request`]: dump now.
    requested: AtomicBool,
    /// A dump signal is installed: poll for it.
    poll_signal: bool,
}

/// Everything behind the lock: the running total, the resolver (shared
/// with the warm thread) and the files written.
pub(crate) struct State {
    config: DumpConfig,
    stop: bool,
    total: Option<RawProfile>,
    resolver: Arc<SharedResolver>,
    seq: u64,
    kept: VecDeque<Vec<PathBuf>>,
    stats: DumpStats,
    #[cfg(feature = "push")]
    pusher: Option<crate::push::Pusher>,
}

impl Dumper {
    /// Starts the dump thread for `sampler`; with `poll_signal`, it also
    /// dumps when the dump signal arrives.
    pub(crate) fn start(
        sampler: Arc<Sampler>,
        config: DumpConfig,
        poll_signal: bool,
        resolver: Arc<SharedResolver>,
        #[cfg(feature = "push")] pusher: Option<crate::push::Pusher>,
    ) -> Result<Dumper, Error> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                config,
                stop: false,
                total: None,
                resolver,
                seq: 0,
                kept: VecDeque::new(),
                stats: DumpStats::default(),
                #[cfg(feature = "push")]
                pusher,
            }),
            wake: Condvar::new(),
            requested: AtomicBool::new(false),
            poll_signal,
        });
        let thread_shared = shared.clone();
        // Signals blocked like the sampler's: a host handler must not run
        // on btprof's threads.
        let thread = btprof_sampler::spawn_with_signals_blocked("btprof-dump", move || {
            run(&thread_shared, &sampler)
        })
        .map_err(Error::Io)?;
        Ok(Dumper {
            shared,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    /// Asks for a dump now (the interval restarts from it).
    pub(crate) fn request(&self) {
        self.shared.requested.store(true, Ordering::Release);
        self.shared.wake.notify_all();
    }

    pub(crate) fn stats(&self) -> DumpStats {
        self.shared.lock().stats()
    }

    /// The state, for a snapshot or the final window.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Stops and joins the dump thread; the sampler is then the caller's
    /// alone.
    pub(crate) fn stop_thread(&mut self) {
        if std::process::id() != self.pid {
            // A forked child's copy: the thread runs in the parent only, so
            // there is nothing to join, and the lock may be held forever.
            std::mem::forget(self.thread.take());
            return;
        }
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread catches nothing that can panic on purpose; if it
            // did, the windows written so far are still on disk.
            let _ = thread.join();
        }
    }
}

impl Drop for Dumper {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while writing leaves consistent counters behind.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The dump thread: waits for the interval or a request, then dumps.
fn run(shared: &Shared, sampler: &Sampler) {
    // The dump thread symbolises and writes: not what the user profiles.
    let _excluded = btprof_sampler::exclude_current_thread();
    let mut state = shared.lock();
    let every = state.config.every;
    let mut next = every.map(|e| Instant::now() + e);
    loop {
        // Wait for the deadline, a request or stop.
        loop {
            if state.stop {
                return;
            }
            let signalled = shared.poll_signal && DumpSignal::take_request();
            if shared.requested.swap(false, Ordering::AcqRel) || signalled {
                next = every.map(|e| Instant::now() + e);
                break;
            }
            let now = Instant::now();
            if let (Some(at), Some(every)) = (next, every) {
                if now >= at {
                    // No catch-up burst after a stall: the next window
                    // is a full interval.
                    next = Some((at + every).max(now + every / 2));
                    break;
                }
            }
            let poll = if shared.poll_signal {
                SIGNAL_POLL
            } else {
                IDLE_POLL
            };
            let until_due = next.map_or(poll, |at| at - now);
            state = shared
                .wake
                .wait_timeout(state, until_due.min(poll))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        match sampler.collect(true) {
            Ok(window) => state.dump_window(window),
            Err(e) => state.record_failure(format!("collecting the window: {e}")),
        }
    }
}

impl State {
    /// Adds `window` to the total and writes its files.
    pub(crate) fn dump_window(&mut self, window: RawProfile) {
        self.stats.windows += 1;
        let how = self.config.symbolize;
        let profile = self
            .resolver
            .take(PATIENCE)
            .map(|mut resolver| Profile::from_raw_with(&window, &mut resolver, how));
        match &mut self.total {
            Some(total) => total.absorb(&window),
            None => self.total = Some(window),
        }
        let profile = match profile {
            Ok(profile) => profile,
            Err(e) => return self.record_failure(format!("symbolising the window: {e}")),
        };
        if profile.is_empty() {
            self.stats.empty += 1;
            return;
        }
        #[cfg(feature = "push")]
        if let Some(pusher) = &self.pusher {
            if let Some(window) = pusher.window(&profile) {
                pusher.add(window);
            }
        }
        if !self.config.files {
            return;
        }
        self.seq += 1;
        match self.write(&profile) {
            Ok(paths) => {
                self.stats.written += 1;
                self.stats.last_written = paths.first().cloned();
                self.kept.push_back(paths);
                self.prune();
            }
            Err(e) => self.record_failure(e),
        }
    }

    /// The total so far plus `current` (a copy of the open window).
    pub(crate) fn snapshot(&mut self, current: RawProfile) -> Result<Profile, Error> {
        let total = match &self.total {
            Some(total) => {
                let mut total = total.clone();
                total.absorb(&current);
                total
            }
            None => current,
        };
        let how = self.config.symbolize;
        let mut resolver = self.resolver.take(PATIENCE)?;
        Ok(Profile::from_raw_with(&total, &mut resolver, how))
    }

    /// The whole run, once the last window is in (`None`: no window was
    /// ever cut).
    pub(crate) fn take_total(&mut self) -> Result<Option<Profile>, Error> {
        let Some(total) = self.total.take() else {
            return Ok(None);
        };
        let how = self.config.symbolize;
        let mut resolver = self.resolver.take(PATIENCE)?;
        Ok(Some(Profile::from_raw_with(&total, &mut resolver, how)))
    }

    /// The counters, pushing's included.
    pub(crate) fn stats(&self) -> DumpStats {
        #[allow(unused_mut)]
        let mut stats = self.stats.clone();
        #[cfg(feature = "push")]
        if let Some(pusher) = &self.pusher {
            stats.push = Some(pusher.stats());
        }
        stats
    }

    /// Sends the windows still queued, within the push's flush timeout
    /// (nothing to do without pushing).
    pub(crate) fn finish_push(&mut self) {
        #[cfg(feature = "push")]
        if let Some(pusher) = &mut self.pusher {
            self.stats.push = Some(pusher.finish());
            self.pusher = None;
        }
    }

    fn record_failure(&mut self, error: String) {
        self.stats.failed += 1;
        self.stats.last_error = Some(error);
    }

    /// Writes the window's folded file, sidecar and SVG; returns their
    /// paths, folded first.
    fn write(&self, profile: &Profile) -> Result<Vec<PathBuf>, String> {
        let dir = &self.config.dir;
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // A recording always has stats; the clock is only a fallback.
        let start = profile
            .stats()
            .map_or_else(SystemTime::now, |s| s.start_time);
        let stamp = file_stamp(start);
        let folded = dir.join(format!(
            "{}-{stamp}-{:04}.folded",
            self.config.prefix, self.seq
        ));
        let mut paths = Vec::with_capacity(3);
        let fold = crate::FoldOptions {
            label_frames: self.config.label_frames,
            ..Default::default()
        };
        write_atomically(&folded, |w| profile.write_folded_with(fold, w))?;
        paths.push(folded.clone());
        let info = profile
            .run_info()
            .ok_or_else(|| format!("{}: the window has no run metadata", folded.display()))?;
        let sidecar = sidecar_path(&folded);
        write_atomically(&sidecar, |w| info.write_json(w).map_err(Error::Io))?;
        paths.push(sidecar);
        if self.config.svg {
            let svg = folded.with_extension("svg");
            let style = crate::FlamegraphOptions {
                label_frames: self.config.label_frames,
                ..Default::default()
            };
            write_atomically(&svg, |w| profile.write_flamegraph_with(&style, w))?;
            paths.push(svg);
        }
        Ok(paths)
    }

    /// Deletes the oldest windows' files beyond `keep`.
    fn prune(&mut self) {
        let Some(keep) = self.config.keep else {
            return;
        };
        while self.kept.len() > keep {
            let Some(old) = self.kept.pop_front() else {
                break;
            };
            for path in old {
                if let Err(e) = fs::remove_file(&path) {
                    if e.kind() != io::ErrorKind::NotFound {
                        self.record_failure(format!("removing {}: {e}", path.display()));
                    }
                }
            }
            self.stats.removed += 1;
        }
    }
}

/// Writes `path` all or nothing (see [`crate::formats::output_file`]), so a reader
/// polling the directory never sees half a file; errors name the path.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<fs::File>) -> Result<(), Error>,
) -> Result<(), String> {
    crate::formats::output_file::write_atomically(path, write)
        .map(drop)
        .map_err(|e| match e {
            // I/O errors from the helper already name the path.
            Error::Io(e) => e.to_string(),
            e => format!("{}: {e}", path.display()),
        })
}
