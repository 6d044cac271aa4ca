//! Starting and stopping a profiler of the current process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use btprof_sampler::{Limit, Progress, SampleClock, Sampler, SamplerConfig};

use super::dump::{DumpConfig, DumpStats, Dumper, MIN_INTERVAL};
use super::dump_signal::DumpSignal;
use super::symbolize::Symbolize;
use super::warm_up::{SharedResolver, WarmUp, WarmUpStats, PATIENCE};
use crate::{Error, Mode, Profile};

/// Configures a [`Profiler`]. Defaults: 1000 Hz, [`Mode::Cpu`], 256
/// frames, 32768 distinct stacks, threads of one name sharing their
/// stacks, no dumps, the resolver warmed up during the run.
#[derive(Clone, Debug)]
#[must_use]
pub struct ProfilerBuilder {
    config: SamplerConfig,
    dump: Option<DumpConfig>,
    dump_signal: Option<i32>,
    symbolize: Symbolize,
    per_thread_stacks: bool,
    warm_up: bool,
    #[cfg(feature = "push")]
    push: Option<crate::Push>,
}

impl Default for ProfilerBuilder {
    fn default() -> Self {
        ProfilerBuilder {
            config: SamplerConfig::default(),
            dump: None,
            dump_signal: None,
            symbolize: Symbolize::default(),
            per_thread_stacks: false,
            warm_up: true,
            #[cfg(feature = "push")]
            push: None,
        }
    }
}

impl ProfilerBuilder {
    /// The sampling rate (1..=20000): in [`Mode::Cpu`], samples per
    /// second of each thread's own CPU time (a thread that used 30% of a
    /// CPU gets 30% of this per wall-second); in [`Mode::Wall`], ticks per
    /// wall-clock second, each sampling every thread.
    pub fn hz(mut self, hz: u32) -> Self {
        self.config.hz = hz;
        self
    }

    /// Which threads to sample: [`Mode::Cpu`] (running) or [`Mode::Wall`] (all).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.config.mode = mode;
        self
    }

    /// Linux, cpu mode: the clock that paces samples, instead of the one
    /// btprof chooses (`None`, the default: perf timers where perf events
    /// are allowed, the sampler thread where they are refused). Forcing
    /// one is for tests and comparisons: [`SampleClock::SamplerThread`] to
    /// see the fallback. A forced perf clock the kernel refuses fails the
    /// start. The environment variable `BTPROF_CLOCK` (`perf`, `thread`)
    /// does the same. [`crate::Stats::clock`] says which
    /// one ran.
    pub fn clock(mut self, clock: Option<SampleClock>) -> Self {
        self.config.clock = clock;
        self
    }

    /// macOS: sample an x86_64 build running under Rosetta 2 instead of
    /// refusing with [`btprof_sampler::Error::Rosetta`]. Suspending
    /// translated threads can hang the process; the native arm64 build is
    /// the safe choice. The environment variable `BTPROF_ALLOW_ROSETTA=1`
    /// does the same. No effect elsewhere.
    pub fn allow_rosetta(mut self, allow: bool) -> Self {
        self.config.allow_rosetta = allow;
        self
    }

    /// The most frames kept per stack; deeper stacks are marked truncated.
    pub fn max_depth(mut self, frames: usize) -> Self {
        self.config.max_depth = frames;
        self
    }

    /// The profiling signal on Linux, if the default (`SIGURG`) is taken:
    /// `SIGWINCH` or a real-time signal. A real-time signal's default
    /// action is to terminate, so one still queued when a thread calls
    /// `exec` kills the new program; `SIGURG` and `SIGWINCH` are ignored
    /// there. macOS samples without a signal, and starting fails if one
    /// is set.
    pub fn signal(mut self, signal: i32) -> Self {
        self.config.signal = Some(signal);
        self
    }

    /// The most distinct stacks kept (per dump window, and in the total);
    /// samples of further stacks are counted under a
    /// `[btprof: stack table full]` frame. Bounds memory when a program
    /// produces endless distinct stacks.
    pub fn max_stacks(mut self, stacks: usize) -> Self {
        self.config.limit = Limit::stacks(stacks);
        self
    }

    /// Keeps the stacks of threads that share a name apart, one thread per
    /// thread id, instead of counting them under the first thread of that
    /// name (the default). Folded output and flamegraphs root stacks at
    /// thread names, so they are the same either way; what sharing saves
    /// is table space. A pool that replaces its threads (a new thread id
    /// for every task) would otherwise store its stacks once per thread id
    /// and fill the table (`[btprof: stack table full]`). Names the OS may
    /// have cut short (Linux keeps 15 bytes) are never shared. Per-thread
    /// CPU time in the stats is kept per thread either way.
    pub fn per_thread_stacks(mut self, apart: bool) -> Self {
        self.per_thread_stacks = apart;
        self
    }

    /// Writes a dump every `interval` (at least 100 ms): the window's
    /// folded stacks and a JSON metadata sidecar, in [`Self::dump_dir`].
    pub fn dump_every(mut self, interval: Duration) -> Self {
        self.dump_config().every = Some(interval);
        self
    }

    /// Where dumps go (default `btprof-dumps`); created if missing.
    pub fn dump_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dump_config().dir = dir.into();
        self
    }

    /// Keeps only the newest `windows` dumps (their files), deleting
    /// older ones this profiler wrote.
    pub fn keep(mut self, windows: usize) -> Self {
        self.dump_config().keep = Some(windows);
        self
    }

    /// Also writes an SVG flamegraph per dump.
    pub fn dump_svg(mut self, svg: bool) -> Self {
        self.dump_config().svg = svg;
        self
    }

    /// Splits each dump's stacks by label with a label frame under the
    /// thread ([`crate::FoldOptions::label_frames`]), in its folded file
    /// and SVG.
    pub fn dump_label_frames(mut self, label_frames: bool) -> Self {
        self.dump_config().label_frames = label_frames;
        self
    }

    /// The dump files' name prefix (default: the program's executable
    /// name, `btprof` if unknown).
    pub fn dump_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.dump_config().prefix = prefix.into();
        self
    }

    /// Writes a dump whenever this Unix signal arrives (e.g.
    /// `libc::SIGUSR2`), besides any interval. Off by default; refused if
    /// the application already handles that signal.
    pub fn dump_on_signal(mut self, signal: i32) -> Self {
        self.dump_config();
        self.dump_signal = Some(signal);
        self
    }

    fn dump_config(&mut self) -> &mut DumpConfig {
        let dump = self.dump.get_or_insert_with(DumpConfig::default);
        dump.files = true;
        dump
    }

    /// Sends each window to a profile server (Grafana Pyroscope): every
    /// [`crate::Push::interval`], the window's stacks as pprof, from a
    /// thread of btprof's own, with a bounded queue and retries while the
    /// server is away. [`Profiler::stop`] sends the last window, waiting
    /// at most [`crate::Push::flush_timeout`]. With dump files too, both
    /// are cut at one interval. Without this call, `BTPROF_PUSH_URL` (and
    /// the variables [`crate::Push::from_env`] lists) configure it.
    #[cfg(feature = "push")]
    pub fn push(mut self, push: crate::Push) -> Self {
        self.push = Some(push);
        self
    }

    /// How the profile, each dump and each snapshot are symbolised: by
    /// default with inline frames ([`Symbolize`]). Without them, the first
    /// stop or dump reads no DWARF, which in a large binary with full debug
    /// information takes a while (see `docs/symbols.md`).
    pub fn symbolize(mut self, how: Symbolize) -> Self {
        self.symbolize = how;
        self
    }

    /// Whether threads of the profiler's own load the
    /// symbols and DWARF of the stacks sampled so far while the run goes
    /// on, so that [`Profiler::stop`] (and each dump and snapshot) only
    /// resolves addresses first sampled in the last moments. On by
    /// default; `false` leaves all of it to the stop, as before.
    ///
    /// Two threads do it, never sampled, every signal blocked:
    /// `btprof-warm-tbl` copies the sampler's table 100 ms after the start,
    /// then every 250 ms while there are new stacks (backing off to every
    /// 2 s while there are none), and `btprof-warm`, at nice 10 on Linux,
    /// resolves each copy's addresses not cached yet. The results are
    /// exactly those the stop would give; the stop waits at most 25 ms for
    /// a pass to hand the resolver back, else resolves with a fresh one.
    ///
    /// What it costs is the loading the stop would otherwise do, earlier
    /// and at low priority: about 30 ms of CPU (25-41 ms measured) over a
    /// 5 s, 1000 Hz run of a small program with Debian's `libc6-dbg`
    /// installed, most of it once (inflating libc's compressed DWARF), plus
    /// a clone of the sampler's table per copy. With it that stop took
    /// 0.25-0.5x the time of a names-only stop instead of 4-12x
    /// ([`Profiler::warm_up_stats`] reports the cost of a run;
    /// `docs/symbols.md` has the measurements).
    pub fn warm_up(mut self, on: bool) -> Self {
        self.warm_up = on;
        self
    }

    /// Starts sampling every other thread of this process (the profiler's
    /// own threads excepted).
    pub fn start(mut self) -> Result<Profiler, Error> {
        // The caller's full name for its stacks' root (see
        // `register_current_thread`).
        super::thread_names::register_current_thread();
        #[cfg(feature = "push")]
        let pusher = self.start_push()?;
        if let Some(dump) = &mut self.dump {
            dump.symbolize = self.symbolize;
        }
        if let Some(dump) = &self.dump {
            validate_dump(dump, self.dump_signal)?;
        }
        let signal = self.dump_signal.map(DumpSignal::install).transpose()?;
        self.config.share_stacks_by_name = !self.per_thread_stacks;
        let sampler = Arc::new(Sampler::start(self.config)?);
        let resolver = Arc::new(SharedResolver::default());
        let dumper = match self.dump {
            Some(config) => Some(Dumper::start(
                sampler.clone(),
                config,
                signal.is_some(),
                resolver.clone(),
                #[cfg(feature = "push")]
                pusher,
            )?),
            None => None,
        };
        let warm_up = match self.warm_up {
            true => Some(WarmUp::start(&sampler, resolver.clone(), self.symbolize)?),
            false => None,
        };
        Ok(Profiler {
            warm_up,
            sampler,
            dumper,
            resolver,
            symbolize: self.symbolize,
            _signal: signal,
        })
    }
}

#[cfg(feature = "push")]
impl ProfilerBuilder {
    /// Checks the push settings (or reads them from the environment) and
    /// starts the push thread; the windows are then cut at its interval.
    fn start_push(&mut self) -> Result<Option<crate::push::Pusher>, Error> {
        let invalid = |msg: String| Error::Sampler(btprof_sampler::Error::InvalidConfig(msg));
        let push = match self.push.take() {
            Some(push) => push,
            None => match crate::Push::from_env().map_err(invalid)? {
                Some(push) => push,
                None => return Ok(None),
            },
        };
        let mut push = push;
        push.hz = self.config.hz;
        push.wall = self.config.mode == Mode::Wall;
        push.add_own_labels();
        push.validate().map_err(invalid)?;
        let files = self.dump.as_ref().is_some_and(|d| d.files);
        let dump = self.dump.get_or_insert_with(DumpConfig::default);
        dump.files = files;
        match dump.every {
            None => dump.every = Some(push.interval),
            Some(every) if every != push.interval => {
                return Err(invalid(format!(
                    "the dump interval ({every:?}) and the push interval ({:?}) differ: \
                     windows are cut once for both; give them the same interval",
                    push.interval
                )))
            }
            Some(_) => {}
        }
        crate::push::Pusher::start(push)
            .map(Some)
            .map_err(Error::Io)
    }
}

fn validate_dump(dump: &DumpConfig, signal: Option<i32>) -> Result<(), Error> {
    let invalid = |msg: String| Err(Error::Sampler(btprof_sampler::Error::InvalidConfig(msg)));
    if !dump.files {
        // Windows cut only to be pushed: no file setting applies.
        return Ok(());
    }
    if dump.every.is_none() && signal.is_none() {
        // dump_dir, keep, dump_svg, dump_prefix or dump_label_frames
        // alone: nothing would ever write a dump, which the caller surely
        // did not mean.
        return invalid(
            "dump settings (dump_dir, keep, dump_svg, dump_prefix, dump_label_frames) were \
             given but nothing triggers a dump: add dump_every or dump_on_signal"
                .into(),
        );
    }
    if dump.every.is_some_and(|e| e < MIN_INTERVAL) {
        return invalid(format!(
            "a dump interval of {:?} is too short; use at least {MIN_INTERVAL:?}",
            dump.every.unwrap_or_default()
        ));
    }
    if dump.keep == Some(0) {
        return invalid("keeping 0 dumps would delete every dump; keep at least 1".into());
    }
    if dump.prefix.is_empty() || dump.prefix.contains(std::path::is_separator) {
        return invalid(format!(
            "dump prefix {:?} must be a non-empty file name",
            dump.prefix
        ));
    }
    Ok(())
}

/// DWARF loads the last [`Profiler::stop`] of this process did itself
/// (see [`crate::test_hooks`]).
static STOP_DWARF_LOADS: AtomicU64 = AtomicU64::new(0);

/// A running profiler of the current process. Dropping it stops sampling
/// and discards the profile; call [`Profiler::stop`] to keep it.
pub struct Profiler {
    /// First, so that it is told to stop (and lets go of the sampler)
    /// before the sampler is dropped.
    warm_up: Option<WarmUp>,
    sampler: Arc<Sampler>,
    dumper: Option<Dumper>,
    /// The resolver the warm thread, the dump thread, snapshots and stop
    /// share.
    resolver: Arc<SharedResolver>,
    symbolize: Symbolize,
    /// Restores the dump signal's previous disposition on drop, after the
    /// dump thread is gone.
    _signal: Option<DumpSignal>,
}

impl Profiler {
    /// A builder with the defaults.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// Live counters (ticks, samples, threads) for progress displays.
    pub fn progress(&self) -> &Progress {
        self.sampler.progress()
    }

    /// The profile so far, symbolised, while sampling goes on.
    pub fn snapshot(&self) -> Result<Profile, Error> {
        match &self.dumper {
            Some(dumper) => {
                let mut state = dumper.lock();
                // Under the lock, so no window is cut between the two.
                let current = self.sampler.collect(false)?;
                state.snapshot(current)
            }
            None => {
                let raw = self.sampler.collect(false)?;
                let mut resolver = self.resolver.take(PATIENCE)?;
                Ok(Profile::from_raw_with(&raw, &mut resolver, self.symbolize))
            }
        }
    }

    /// What the resolver's warm-up ([`ProfilerBuilder::warm_up`]) did so
    /// far: passes, addresses resolved ahead of the stop, DWARF loads and
    /// the CPU time it used. All zero with the warm-up off.
    pub fn warm_up_stats(&self) -> WarmUpStats {
        self.warm_up.as_ref().map(WarmUp::stats).unwrap_or_default()
    }

    /// Asks for a dump now, besides the interval or signal. Does nothing
    /// without dumps configured (`dump_every` or `dump_on_signal`).
    pub fn request_dump(&self) {
        if let Some(dumper) = &self.dumper {
            dumper.request();
        }
    }

    /// What the dumps did so far (all zero without dumps).
    pub fn dump_stats(&self) -> DumpStats {
        self.dumper.as_ref().map(Dumper::stats).unwrap_or_default()
    }

    /// Stops sampling and symbolises what was collected: the whole run.
    /// With dumps, the last window is written first.
    pub fn stop(self) -> Result<Profile, Error> {
        self.stop_with_dump_stats().map(|(profile, _)| profile)
    }

    /// [`Profiler::stop`], and what the dumps did, the last one included.
    pub fn stop_with_dump_stats(mut self) -> Result<(Profile, DumpStats), Error> {
        if !self.sampler.started_in_this_process() {
            // A forked child's copy: the sampler runs in the parent.
            return Err(Error::Sampler(btprof_sampler::Error::ForkedChild));
        }
        // Told to stop first: a pass in progress gives the resolver back
        // after the address it is on, and the thread lets go of the
        // sampler.
        if let Some(warm_up) = &mut self.warm_up {
            warm_up.stop();
        }
        let mut dumper = self.dumper.take();
        if let Some(dumper) = &mut dumper {
            dumper.stop_thread();
        }
        // The dump thread, the only other owner, is joined, and the warm
        // thread holds a weak reference only: this cannot fail, but an
        // error beats a panic in a library.
        let sampler = Arc::try_unwrap(self.sampler)
            .map_err(|_| Error::Sampler(btprof_sampler::Error::AlreadyRunning))?;
        let last = sampler.stop()?;
        let loads = self.resolver.other_loads();
        let result = match dumper {
            Some(dumper) => {
                let mut state = dumper.lock();
                state.dump_window(last);
                state.finish_push();
                let stats = state.stats();
                let profile = state.take_total()?.ok_or(Error::EmptyProfile)?;
                Ok((profile, stats))
            }
            None => {
                let mut resolver = self.resolver.take(PATIENCE)?;
                Ok((
                    Profile::from_raw_with(&last, &mut resolver, self.symbolize),
                    DumpStats::default(),
                ))
            }
        };
        STOP_DWARF_LOADS.store(self.resolver.other_loads() - loads, Ordering::Relaxed);
        result
    }
}

/// DWARF loads the last [`Profiler::stop`] in this process did itself
/// (for [`crate::test_hooks`]).
pub(crate) fn stop_dwarf_loads() -> u64 {
    STOP_DWARF_LOADS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dump settings without a trigger are refused before anything starts
    /// (validation runs before the sampler, so no sampler is involved).
    #[test]
    fn dump_settings_without_a_trigger_are_an_error() {
        for builder in [
            Profiler::builder().dump_dir("somewhere"),
            Profiler::builder().keep(3),
            Profiler::builder().dump_svg(true),
        ] {
            let err = builder.start().err().expect("refused");
            let text = err.to_string();
            assert!(
                text.contains("dump_every") && text.contains("dump_on_signal"),
                "{text}"
            );
        }
    }

    #[test]
    fn dumps_are_named_after_the_program() {
        // The test binary's name, e.g. `btprof-0123abcd`.
        let prefix = DumpConfig::default().prefix;
        let exe = std::env::current_exe().unwrap();
        let exe = exe.file_name().unwrap().to_string_lossy();
        assert_eq!(prefix, exe);
        assert_ne!(prefix, "btprof");
    }
}
