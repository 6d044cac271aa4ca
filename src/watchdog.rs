//! The stall watchdog: notices a watched thread that stopped making
//! progress and samples its backtrace until it moves again.
//!
//! Threads opt in with [`Watchdog::watch_current_thread`] and call
//! [`Heartbeat::beat`] as they make progress; one relaxed atomic store
//! keeps the hot path free. A single watchdog thread, spawned with
//! signals blocked and left out of dumps and profiles, sleeps until the
//! earliest moment a thread could be overdue, so an idle program costs
//! nothing but one wake per threshold.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::formats::output_file::write_atomically;
use crate::profile::{sanitize_frame, Builder};
use crate::thread_dump::{capture, symbolize, symbolize_captured};
use crate::{Error, FlamegraphOptions, Thread};

type Callback = Arc<dyn Fn(&Stall) + Send + Sync + 'static>;

/// Milliseconds of a clock that does not advance while the system is
/// suspended, so a laptop lid closing is not a stall. On Linux the coarse
/// monotonic clock is read from the vDSO without a counter read, so
/// beating stays a few nanoseconds; on Apple platforms `CLOCK_MONOTONIC`
/// counts sleep, so the uptime clock is used instead.
fn now_ms() -> u64 {
    #[cfg(target_os = "linux")]
    let clock = libc::CLOCK_MONOTONIC_COARSE;
    #[cfg(target_vendor = "apple")]
    let clock = libc::CLOCK_UPTIME_RAW;
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    let clock = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Configures a [`Watchdog`]; see [`Watchdog::builder`].
pub struct WatchdogBuilder {
    threshold: Duration,
    sample_every: Duration,
    dir: Option<PathBuf>,
    on_stall: Option<Callback>,
}

impl WatchdogBuilder {
    /// How long a thread may go without beating before it counts as
    /// stalled (default 250 ms).
    pub fn threshold(mut self, threshold: Duration) -> Self {
        self.threshold = threshold;
        self
    }

    /// How often a stalled thread's backtrace is taken (default 10 ms).
    pub fn sample_every(mut self, every: Duration) -> Self {
        self.sample_every = every;
        self
    }

    /// Where each stall is written, as `stall-<thread>-<time>.folded`
    /// (the stacks, for any flamegraph tool), `.svg` (their flamegraph,
    /// to open at once; left out when no backtrace could be taken) and
    /// `.json` (thread, start, duration, backtraces), each file whole or
    /// not at all. The directory is created at [`start`](Self::start).
    /// Without it stalls only reach the callback.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Called on the watchdog thread with every stall once it ends (or
    /// when the watchdog stops while it goes on).
    pub fn on_stall(mut self, callback: impl Fn(&Stall) + Send + Sync + 'static) -> Self {
        self.on_stall = Some(Arc::new(callback));
        self
    }

    /// Spawns the watchdog thread.
    ///
    /// On macOS a process translated by Rosetta 2 gets the sampler's
    /// refusal ([`btprof_sampler::Error::Rosetta`]) here, unless
    /// `BTPROF_ALLOW_ROSETTA=1`: every backtrace of a stall suspends the
    /// thread, which can hang a translated process.
    pub fn start(self) -> Result<Watchdog, Error> {
        btprof_sampler::one_shot::captures_allowed()?;
        if let Some(dir) = &self.dir {
            std::fs::create_dir_all(dir).map_err(Error::Io)?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                entries: Vec::new(),
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let config = Config {
            threshold: self.threshold.as_millis().max(1) as u64,
            sample_every: self.sample_every.max(Duration::from_millis(1)),
            dir: self.dir,
            on_stall: self.on_stall,
        };
        let for_thread = Arc::clone(&shared);
        let handle = btprof_sampler::spawn_with_signals_blocked("btprof-watchdog", move || {
            run(&for_thread, &config)
        })
        .map_err(Error::Io)?;
        Ok(Watchdog {
            shared,
            handle: Some(handle),
        })
    }
}

struct Config {
    threshold: u64,
    sample_every: Duration,
    dir: Option<PathBuf>,
    on_stall: Option<Callback>,
}

struct Entry {
    name: String,
    thread: Thread,
    last: AtomicU64,
    alive: AtomicBool,
}

struct State {
    entries: Vec<Arc<Entry>>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// Watches threads for stalls; see the module documentation.
pub struct Watchdog {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

/// A watched thread's handle for reporting progress. Dropping it stops
/// watching the thread.
pub struct Heartbeat {
    entry: Arc<Entry>,
}

impl Heartbeat {
    /// Records that the thread made progress: one relaxed atomic store of
    /// a coarse monotonic time.
    #[inline]
    pub fn beat(&self) {
        self.entry.last.store(now_ms(), Ordering::Relaxed);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.entry.alive.store(false, Ordering::Relaxed);
    }
}

impl Watchdog {
    /// A builder with the defaults: threshold 250 ms, a backtrace every
    /// 10 ms, no directory, no callback.
    pub fn builder() -> WatchdogBuilder {
        WatchdogBuilder {
            threshold: Duration::from_millis(250),
            sample_every: Duration::from_millis(10),
            dir: None,
            on_stall: None,
        }
    }

    /// Starts watching the calling thread under `name`; it counts as
    /// having beaten now.
    pub fn watch_current_thread(&self, name: &str) -> Result<Heartbeat, Error> {
        let entry = Arc::new(Entry {
            name: name.to_owned(),
            thread: Thread::current(),
            last: AtomicU64::new(now_ms()),
            alive: AtomicBool::new(true),
        });
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        state.entries.push(Arc::clone(&entry));
        drop(state);
        self.shared.wake.notify_all();
        Ok(Heartbeat { entry })
    }

    /// Stops the watchdog thread; a stall still going is delivered with
    /// [`Stall::finished`] false.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.shared
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .stop = true;
            self.shared.wake.notify_all();
            let _ = handle.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One stall of one watched thread: when it began, how long it lasted
/// and where the thread was meanwhile.
pub struct Stall {
    thread_name: String,
    start: SystemTime,
    duration: Duration,
    backtraces: usize,
    finished: bool,
    stacks: HashMap<String, usize>,
}

impl Stall {
    /// The name the thread was watched under.
    pub fn thread_name(&self) -> &str {
        &self.thread_name
    }
    /// Wall-clock time of the thread's last beat before the stall.
    pub fn start(&self) -> SystemTime {
        self.start
    }
    /// From the last beat before the stall to the first after it (or to
    /// the watchdog stopping).
    pub fn duration(&self) -> Duration {
        self.duration
    }
    /// How many backtraces were taken during the stall.
    pub fn backtraces(&self) -> usize {
        self.backtraces
    }
    /// False when the watchdog stopped while the thread was still stalled.
    pub fn finished(&self) -> bool {
        self.finished
    }
    /// The aggregated stacks, outermost frame first, `;`-joined, with how
    /// many backtraces showed each. Frame names are made safe for the
    /// folded format ([`sanitize_frame`]), so splitting a stack at `;`
    /// gives back its frames.
    pub fn stacks(&self) -> &HashMap<String, usize> {
        &self.stacks
    }
    /// Writes the stacks in folded form (`a;b;c count`), which flamegraph
    /// tools read.
    pub fn write_folded(&self, mut w: impl Write) -> Result<(), Error> {
        let mut lines: Vec<_> = self.stacks.iter().collect();
        lines.sort();
        for (stack, count) in lines {
            writeln!(w, "{stack} {count}").map_err(Error::Io)?;
        }
        Ok(())
    }

    /// Draws the stacks as an SVG flamegraph with the writer profiles use
    /// ([`write_flamegraph_with`](crate::Profile::write_flamegraph_with)),
    /// so a stall looks like any other btprof flamegraph: the same colour
    /// per function, one sample per backtrace. A stall without a
    /// backtrace has nothing to draw ([`Error::EmptyProfile`]).
    fn write_svg(&self, w: impl Write) -> Result<(), Error> {
        let mut builder = Builder::new();
        for (stack, &count) in &self.stacks {
            builder
                .add_stack(None, stack.split(';'), false, count as u64)
                .map_err(|e| Error::Render(e.to_string()))?;
        }
        let profile = builder.finish_combined(format!("stall of {}", self.thread_name));
        let options = FlamegraphOptions {
            title: Some(format!(
                "btprof stall: {} made no progress for {} ms{}, {} backtraces",
                self.thread_name,
                self.duration.as_millis(),
                if self.finished {
                    ""
                } else {
                    " (still stalled when the watchdog stopped)"
                },
                self.backtraces,
            )),
            ..FlamegraphOptions::default()
        };
        profile.write_flamegraph_with(&options, w)
    }

    fn write_json(&self, mut w: impl Write) -> Result<(), Error> {
        let start = self
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let record = serde_json::json!({
            "thread": self.thread_name,
            "start_unix_ms": start.as_millis() as u64,
            "duration_ms": self.duration.as_millis() as u64,
            "backtraces": self.backtraces,
            "finished": self.finished,
        });
        writeln!(w, "{record}").map_err(Error::Io)
    }
}

/// What the watchdog thread keeps about a thread it currently sees
/// stalled.
struct Ongoing {
    last_beat: u64,
    stacks: HashMap<String, usize>,
    backtraces: usize,
}

/// A backtrace as one folded stack, outermost frame first. Names are made
/// safe for the folded format as a profile's are, so a `;` inside a name
/// (`[u8; 8]`) does not split it into two frames in the `.folded` file or
/// the flamegraph drawn from it.
fn fold(bt: &crate::ThreadBacktrace) -> String {
    let mut names: Vec<String> = bt
        .frames()
        .iter()
        .map(|f| match f.function() {
            Some(name) => sanitize_frame(name).into_owned(),
            None => format!("{:#x}", f.address()),
        })
        .collect();
    names.reverse();
    names.join(";")
}

/// Whether a debugger is attached: its breakpoints stop threads for as
/// long as the user looks, which is no stall of the program's own.
#[cfg(target_os = "linux")]
fn traced() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim() != "0"))
        })
        .unwrap_or(false)
}

/// Whether a debugger is attached, as Apple's technical Q&A 1361
/// ("Detecting the Debugger") asks it: `P_TRACED` in the `p_flag` the
/// kernel reports for this process. The kernel sets it for the whole
/// process, whichever thread the debugger stops. A failed query counts as
/// not traced, so a stall is reported rather than hidden.
#[cfg(all(target_vendor = "apple", target_pointer_width = "64"))]
fn traced() -> bool {
    /// `P_TRACED` of `<sys/proc.h>` ("debugged process being traced"),
    /// which the `libc` crate does not declare for Apple targets.
    const P_TRACED: libc::c_int = 0x0000_0800;

    /// `struct kinfo_proc` of `<sys/sysctl.h>` on 64-bit Apple platforms,
    /// which the `libc` crate does not declare for Apple targets. Only
    /// its start, up to `kp_proc.p_flag`, is spelled out; the rest of
    /// `kp_proc` and all of `kp_eproc` are padding to the struct's size,
    /// 648 bytes (golang.org/x/sys's `SizeofKinfoProc` for darwin says
    /// the same). The kernel's reply must be exactly that long, so a
    /// different layout is noticed instead of misread.
    #[repr(C)]
    struct KinfoProc {
        /// `kp_proc.p_un`: a union of two pointers (`p_forw`, `p_back`)
        /// and a `timeval` (`p_starttime`), 16 bytes.
        _p_un: [u64; 2],
        /// `kp_proc.p_vmspace`, a pointer.
        _p_vmspace: usize,
        /// `kp_proc.p_sigacts`, a pointer.
        _p_sigacts: usize,
        /// `kp_proc.p_flag`: the `P_*` flags.
        p_flag: libc::c_int,
        _rest: [u8; 648 - 36],
    }
    const _: () = assert!(std::mem::size_of::<KinfoProc>() == 648);
    const _: () = assert!(std::mem::offset_of!(KinfoProc, p_flag) == 32);

    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut mib = [libc::CTL_KERN, libc::KERN_PROC, libc::KERN_PROC_PID, pid];
    let mut info = KinfoProc {
        _p_un: [0; 2],
        _p_vmspace: 0,
        _p_sigacts: 0,
        p_flag: 0,
        _rest: [0; 648 - 36],
    };
    let mut size = std::mem::size_of::<KinfoProc>();
    // SAFETY: `mib` holds the 4 names given as its length; `info` is
    // writable for `size` bytes, which is its size, and the kernel writes
    // at most `size` bytes and stores how many in `size`; no new value is
    // set (null, 0).
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            mib.len() as libc::c_uint,
            (&mut info as *mut KinfoProc).cast(),
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0 && size == std::mem::size_of::<KinfoProc>() && info.p_flag & P_TRACED != 0
}

/// Not detected on other platforms: a debugger pause there can be
/// reported as a stall.
#[cfg(not(any(
    target_os = "linux",
    all(target_vendor = "apple", target_pointer_width = "64")
)))]
fn traced() -> bool {
    false
}

fn run(shared: &Shared, config: &Config) {
    // Load the symbol tables before watching, not in a stall's first
    // backtrace. A failure shows again, in that backtrace.
    let _ = symbolize(&[]);
    let mut ongoing: HashMap<usize, Ongoing> = HashMap::new();
    // Beats before this time are treated as taken at it: moved forward
    // when the whole process was paused or a debugger held it.
    let mut floor = now_ms();
    let mut last_trace_check = 0u64;
    let mut being_traced = false;
    // The end of the last wait, and the time spent since in deliveries
    // (the user's callback may take long) and backtraces (slow on a busy
    // machine, but each counted only up to a threshold: a backtrace that
    // takes longer had the process held under it, since the thread it
    // waits for runs within microseconds of getting a CPU). A pause of the
    // whole process is looked for over everything else since the wait, so
    // one that began in this thread's own work after a wait is caught too.
    // One that begins inside a delivery is not told from a slow callback.
    let mut last_woke = floor;
    let mut working = 0u64;
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = now_ms();
        state
            .entries
            .retain(|e| e.alive.load(Ordering::Relaxed) || ongoing.contains_key(&key(e)));
        // The earliest moment something can need attention.
        let mut wake_at = now + config.threshold;
        for e in &state.entries {
            let k = key(e);
            if ongoing.contains_key(&k) {
                wake_at = now;
            } else {
                let last = e.last.load(Ordering::Relaxed).max(floor);
                wake_at = wake_at.min(last + config.threshold);
            }
        }
        let sleep = if wake_at <= now && !ongoing.is_empty() {
            config.sample_every
        } else {
            Duration::from_millis(wake_at.saturating_sub(now).max(1))
        };
        let before = last_woke.saturating_add(working);
        let (guard, _) = shared
            .wake
            .wait_timeout(state, sleep)
            .unwrap_or_else(|e| e.into_inner());
        state = guard;
        let after = now_ms();
        last_woke = after;
        working = 0;
        let stopping = state.stop;
        // The sleep overran by more than a threshold: the whole process was
        // held (SIGSTOP, suspend), so no thread is to blame.
        let overran = after.saturating_sub(before) > sleep.as_millis() as u64 + config.threshold;
        if after.saturating_sub(last_trace_check) >= 1000 {
            being_traced = traced();
            last_trace_check = after;
        }
        let mut cut_by_pause = Vec::new();
        if overran || being_traced {
            floor = after;
            // A stall already under way when the process was held was
            // real: it is delivered as it stood, unfinished. Under a
            // debugger every pause is the debugger's: dropped.
            if overran && !being_traced {
                cut_by_pause.extend(ongoing.drain());
            }
            ongoing.clear();
        }
        let entries = state.entries.clone();
        drop(state);
        for (k, o) in cut_by_pause {
            if let Some(e) = entries.iter().find(|e| key(e) == k) {
                let started = now_ms();
                deliver(config, e, o, before, false);
                working += now_ms().saturating_sub(started);
            }
        }
        for e in &entries {
            let k = key(e);
            let last = e.last.load(Ordering::Relaxed);
            if let Some(o) = ongoing.get(&k) {
                let moved = last != o.last_beat || !e.alive.load(Ordering::Relaxed);
                if moved || stopping {
                    let o = ongoing.remove(&k).expect("present");
                    let end = if moved && last > o.last_beat {
                        last
                    } else {
                        after
                    };
                    let started = now_ms();
                    deliver(config, e, o, end, moved);
                    working += now_ms().saturating_sub(started);
                    continue;
                }
            } else if !stopping
                && e.alive.load(Ordering::Relaxed)
                && !overran
                && !being_traced
                && after.saturating_sub(last.max(floor)) >= config.threshold
            {
                ongoing.insert(
                    k,
                    Ongoing {
                        last_beat: last,
                        stacks: HashMap::new(),
                        backtraces: 0,
                    },
                );
            }
            if let Some(o) = ongoing.get_mut(&k) {
                // Only the capture holds the thread, so only it is counted
                // up to a threshold; symbolising is this thread's own work
                // (the first time, loading symbol tables), counted whole.
                let started = now_ms();
                let captured = capture(&e.thread);
                let symbolizing = now_ms();
                let taken = captured.and_then(|raw| symbolize_captured(&raw));
                working += symbolizing.saturating_sub(started).min(config.threshold)
                    + now_ms().saturating_sub(symbolizing);
                if let Ok(bt) = taken {
                    *o.stacks.entry(fold(&bt)).or_insert(0) += 1;
                    o.backtraces += 1;
                }
            }
        }
        if stopping {
            return;
        }
        state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    }
}

fn key(e: &Arc<Entry>) -> usize {
    Arc::as_ptr(e) as usize
}

fn deliver(config: &Config, e: &Entry, o: Ongoing, end: u64, finished: bool) {
    let duration = Duration::from_millis(end.saturating_sub(o.last_beat));
    let ago = Duration::from_millis(now_ms().saturating_sub(o.last_beat));
    let stall = Stall {
        thread_name: e.name.clone(),
        start: SystemTime::now() - ago,
        duration,
        backtraces: o.backtraces,
        finished,
        stacks: o.stacks,
    };
    if let Some(dir) = &config.dir {
        let when = stall
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let safe: String = stall
            .thread_name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = dir.join(format!("stall-{safe}-{when}"));
        // Each file appears whole or not at all; a failure is said, since
        // the watchdog thread has no caller to return it to. The JSON
        // comes last, so a reader that waits for it finds the others.
        let folded = write_atomically(base.with_extension("folded"), |w| stall.write_folded(w));
        let svg = if stall.stacks.is_empty() {
            Ok(PathBuf::new())
        } else {
            write_atomically(base.with_extension("svg"), |w| stall.write_svg(w))
        };
        let json = write_atomically(base.with_extension("json"), |w| stall.write_json(w));
        if let Err(e) = folded.and(svg).and(json) {
            eprintln!(
                "btprof: watchdog: could not write a stall of {}: {e}",
                stall.thread_name
            );
        }
    }
    if let Some(cb) = &config.on_stall {
        cb(&stall);
    }
}
