//! The profile of this process: started once per program image, written
//! once when it ends (or before it `exec`s, or at the deadline), only by
//! the process that started it.
//!
//! Starting is two steps, so that the exit hook is in place before
//! anything says the process is profiled: [`prepare`] reads the settings
//! and names the files, synchronously, before the program can exit; the
//! caller then registers the exit hook, and only then [`begin`] writes
//! the start marker and starts the profiler (on macOS from a thread that
//! runs beside `main`). A process that exits while [`begin`] is still
//! running waits for it a moment ([`finish_at_exit`]); if it is still
//! not done, the process leaves an `.early` file, and `btprof record`
//! reports it as having exited during btprof's start-up instead of
//! taking it for one killed without `exit`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use btprof::formats::output_file::write_atomically;
use btprof::formats::process_record::ProcessRecord;
use btprof::record::lost_samples;
use btprof::{Profiler, SampleClock};

use crate::config::Config;

/// The running profiler, if any.
static SESSION: Mutex<Option<Session>> = Mutex::new(None);
/// The settings, read once.
static CONFIG: OnceLock<Config> = OnceLock::new();
/// The process the profiler runs in: a forked child has another pid and
/// must not touch the parent's profiler (its threads are not there).
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// Profiles written by this program image (a failed `exec` starts
/// another).
static SEQ: AtomicU32 = AtomicU32::new(0);
/// Problems already reported, so each is said once per process.
static SAID: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
/// The files' stem [`prepare`] chose, until [`begin`] is done with it,
/// and whether a start is under way (from [`prepare`] to the end of
/// [`begin`]), with the condition [`finish_at_exit`] waits on.
static STARTING: Mutex<Starting> = Mutex::new(Starting {
    stem: None,
    under_way: false,
});
static START_DONE: Condvar = Condvar::new();

/// How long an exiting process waits for a start under way: longer than
/// any start takes (a few milliseconds), short enough that a start stuck
/// behind a lock the exit holds costs no more.
const START_PATIENCE: Duration = Duration::from_secs(1);

struct Starting {
    stem: Option<PathBuf>,
    under_way: bool,
}

struct Session {
    profiler: Profiler,
    /// The profiling signal's handler once the profiler started (the
    /// sampler's), to notice a program that replaces it.
    #[cfg(target_os = "linux")]
    handler: Option<libc::sighandler_t>,
    /// `DIR/PID-NANOS-SEQ`: the files are this with `.folded`, `.json`
    /// and, while the profile is not written yet, `.started`.
    stem: PathBuf,
}

/// Says `message` on stderr, as one line prefixed `btprof: NAME (PID):`,
/// the first time a problem of this `kind` comes up in this program
/// image. The command and the processes it starts share one stderr, so
/// the line names the process it is about.
pub fn say_once(kind: &'static str, message: impl std::fmt::Display) {
    let mut said = lock(&SAID);
    if !said.contains(&kind) {
        said.push(kind);
        // One write of the whole line, so that lines of processes writing
        // at the same moment do not interleave.
        let line = format!("btprof: {} ({}): {message}\n", process_name(), pid());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// Whether this process is the one the profiler was started in.
pub fn is_owner() -> bool {
    let owner = OWNER_PID.load(Ordering::Acquire);
    owner != 0 && owner == pid()
}

/// Reads the settings and names this process's files; `false` when it is
/// not to be profiled (or the settings do not parse, said on stderr).
/// Writes nothing: the caller registers the exit hook, then calls
/// [`begin`].
pub fn prepare() -> bool {
    let config = match Config::from_env() {
        Ok(Some(config)) => config,
        Ok(None) => return false,
        Err(e) => {
            say_once("config", format_args!("not profiling this process: {e}"));
            return false;
        }
    };
    if config.deadline.is_some_and(|d| SystemTime::now() >= d) {
        // Started after --duration ran out: nothing to sample.
        return false;
    }
    let stem = next_stem(&config.dir);
    if CONFIG.set(config).is_err() {
        return false;
    }
    OWNER_PID.store(pid(), Ordering::Release);
    *lock(&STARTING) = Starting {
        stem: Some(stem),
        under_way: true,
    };
    true
}

/// `DIR/PID-NANOS-SEQ`, new for each profile of this program image.
fn next_stem(dir: &Path) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{}-{nanos}-{seq}", pid()))
}

/// Ends the start under way, whatever its outcome, and wakes an exit
/// waiting for it.
fn start_done() {
    *lock(&STARTING) = Starting {
        stem: None,
        under_way: false,
    };
    START_DONE.notify_all();
}

/// The settings, once [`prepare`] read them.
pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// Starts a profiler for this program image (again after a failed
/// `exec`), in the files [`prepare`] named if they are not used yet.
pub fn begin() -> bool {
    let started = start_profiler();
    start_done();
    started
}

/// Says that the start [`prepare`] got ready will not happen (its thread
/// could not be started). macOS only: Linux starts on the main thread.
#[cfg(target_os = "macos")]
pub fn abandon_start(why: impl std::fmt::Display) {
    say_once("start", format_args!("not profiling this process: {why}"));
    start_done();
}

fn start_profiler() -> bool {
    let Some(config) = CONFIG.get() else {
        return false;
    };
    // Left in place for an exit that comes before this is done.
    let prepared = lock(&STARTING).stem.clone();
    let stem = prepared.unwrap_or_else(|| next_stem(&config.dir));
    // The marker tells `btprof record` that this process was profiled, so
    // a process that never writes its profile (`_exit`, SIGKILL) is
    // reported as missing; it also proves the directory writable before
    // any sampling.
    if let Err(e) = std::fs::write(stem.with_extension("started"), process_name()) {
        say_once(
            "dir",
            format_args!(
                "not profiling this process: cannot write to {}: {e}",
                config.dir.display()
            ),
        );
        return false;
    }
    match config.builder().start() {
        Ok(profiler) => {
            *lock(&SESSION) = Some(Session {
                profiler,
                stem,
                #[cfg(target_os = "linux")]
                handler: handler(config.signal()),
            });
            true
        }
        Err(e) => {
            let _ = std::fs::remove_file(stem.with_extension("started"));
            // The sampler's advice names its own option; here the choice
            // is `btprof record`'s.
            match e {
                // The sampler's message says to run the arm64 build: a
                // child here is whatever the command started.
                btprof::Error::Sampler(btprof_sampler::Error::Rosetta) => say_once(
                    "start",
                    format_args!(
                        "not profiling this process: it is an x86_64 program running under \
                         Rosetta 2, where suspending its threads can hang it (set {}=1 to \
                         profile it anyway at that risk); processes of the native architecture \
                         it starts are profiled",
                        btprof_sampler::ALLOW_ROSETTA_ENV
                    ),
                ),
                btprof::Error::Sampler(btprof_sampler::Error::SignalInUse(_)) => say_once(
                    "start",
                    format_args!(
                        "not profiling this process: {e} (btprof record --signal N picks another)"
                    ),
                ),
                _ => say_once("start", format_args!("not profiling this process: {e}")),
            }
            false
        }
    }
}

/// Stops the profiler and writes this process's profile, saying why it
/// ended (`exit`, `exec`, `signal SIGTERM`, `duration`). Does nothing in
/// a forked child or when nothing runs; `true` when it stopped one.
pub fn finish(ended_by: &str) -> bool {
    if !is_owner() {
        return false;
    }
    let Some(session) = lock(&SESSION).take() else {
        return false;
    };
    // Compared while the sampler still runs with its handler installed.
    #[cfg(target_os = "linux")]
    let replaced = CONFIG
        .get()
        .map(Config::signal)
        .filter(|&signal| session.handler.is_some() && handler(signal) != session.handler);
    #[cfg(not(target_os = "linux"))]
    let replaced: Option<i32> = None;
    let (profile, push) = match session.profiler.stop_with_dump_stats() {
        Ok((profile, stats)) => (profile, stats.push.map(|p| p.summary())),
        Err(e) => {
            say_once("stop", format_args!("this process's profile is lost: {e}"));
            return true;
        }
    };
    if let Some(stats) = profile.stats() {
        // Perf events refused is not said here: it is the same in every
        // process of a recording, so `btprof record` says it once, from
        // the clocks the process records name.
        say_signal_blocked(&profile, stats);
        // On the rings alone no signal was sent: the program's handler
        // took none of btprof's, and no sample was lost to it.
        let signalled = stats.clock != SampleClock::Perf || stats.timer_threads > 0;
        if let (Some(signal), true) = (replaced, signalled) {
            // Nothing else would ever tell: the samples stop, and the
            // program's handler gets btprof's signals.
            say_once(
                "signal-replaced",
                format_args!(
                    "the program installed its own handler for signal {signal}, the profiling \
                     signal, while it was profiled: its samples from then on are lost and its \
                     handler received btprof's signals (btprof record --signal N picks another)"
                ),
            );
        }
    }
    let Some(config) = CONFIG.get() else {
        return true;
    };
    let record = profile.run_info().map(|run| ProcessRecord {
        pid: pid().unsigned_abs(),
        name: process_name(),
        command_line: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        ended_by: ended_by.to_owned(),
        run: run.clone(),
        push,
    });
    let written = write_atomically(session.stem.with_extension("folded"), |w| {
        profile.write_folded_with(config.fold, w)
    })
    .map_err(|e| e.to_string())
    .and_then(|_| match &record {
        Some(record) => write_atomically(session.stem.with_extension("json"), |w| {
            record.write_json(w)
        })
        .map_err(|e| e.to_string()),
        None => Err("the recording has no run metadata".to_owned()),
    });
    match written {
        Ok(_) => {
            let _ = std::fs::remove_file(session.stem.with_extension("started"));
        }
        Err(e) => say_once(
            "write",
            format_args!("cannot write this process's profile: {e}"),
        ),
    }
    true
}

/// The exit hook's work: writes the profile, after waiting at most
/// [`START_PATIENCE`] for a start still under way (on macOS it runs
/// beside `main`, which may return first). A process whose start is
/// still not done leaves `STEM.early`, its name in it, so that `btprof
/// record` can say it exited during start-up.
pub fn finish_at_exit() {
    if !is_owner() {
        return;
    }
    let give_up = std::time::Instant::now() + START_PATIENCE;
    let mut starting = lock(&STARTING);
    while starting.under_way {
        let left = give_up.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        starting = START_DONE
            .wait_timeout(starting, left)
            .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
    }
    // The files of a start still under way (a session it stores from
    // now on is written by `finish`, below).
    let pending = if starting.under_way {
        starting.stem.clone()
    } else {
        None
    };
    drop(starting);
    if finish("exit") {
        return;
    }
    if let Some(stem) = pending {
        let _ = std::fs::write(stem.with_extension("early"), process_name());
    }
}

/// Says, in one line, which threads lost most of their samples because
/// they block the profiling signal (a `signalfd` program blocks it in
/// every thread): on a clock that signals threads, their CPU time has no
/// stack, and the profile alone would show them idle.
fn say_signal_blocked(profile: &btprof::Profile, stats: &btprof::Stats) {
    let names: Vec<(u64, &str)> = profile
        .threads()
        .filter_map(|t| Some((t.tid?, t.name)))
        .collect();
    let (mut threads, mut lost, mut cpu) = (Vec::new(), 0, 0.0);
    for t in lost_samples::signal_blocked_threads(stats) {
        threads.push(lost_samples::thread_label(&names, t.tid));
        lost += t.signal_blocked;
        cpu += t.cpu.as_secs_f64();
    }
    if threads.is_empty() {
        return;
    }
    say_once(
        "signal-blocked",
        format_args!(
            "{} thread{} block{} the profiling signal, which the clock that ran here ({}) \
             sends, so it could not sample {} ({}): {lost} samples lost ({:.0} ms of CPU). \
             Where perf events are allowed btprof samples threads without a signal; a program \
             that blocks only this signal can be given another (btprof record --signal N)",
            threads.len(),
            if threads.len() == 1 { "" } else { "s" },
            if threads.len() == 1 { "s" } else { "" },
            stats.clock.describe(),
            if threads.len() == 1 { "it" } else { "them" },
            threads.join(", "),
            cpu * 1e3,
        ),
    );
}

/// The handler of `signal` now, if it can be read.
#[cfg(target_os = "linux")]
fn handler(signal: i32) -> Option<libc::sighandler_t> {
    // SAFETY: a null new action only reads the current one into `old`,
    // a zeroed (valid) sigaction.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(signal, std::ptr::null(), &mut old) == 0).then_some(old.sa_sigaction)
    }
}

/// The name this process goes by: its `argv[0]`'s file name (what `ps`
/// shows: `sh` for a shell started as `sh`), else its executable's.
fn process_name() -> String {
    let from_argv = std::env::args_os()
        .next()
        .and_then(|a| Path::new(&a).file_name().map(OsStr::to_os_string));
    let from_exe = || {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(OsStr::to_os_string))
    };
    from_argv
        .or_else(from_exe)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}
