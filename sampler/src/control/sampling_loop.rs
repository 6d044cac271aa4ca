//! The tick: which threads to stop, the stopped window, interning and
//! releasing, and the fixed-rate loop around it.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use hashbrown::HashMap;

use super::stopped::{install_abort_on_panic_hook, Stopped};
use super::{never_stop, Resumed, StackRange, ThreadControl, ThreadError, ThreadUsage, MAX_DEPTH};
use crate::clock::{Clock, TickSchedule};
use crate::labels;
use crate::stack_table::{StackKey, StackTable};
use crate::stack_window::{CopyMemory, StackWindow};
use crate::thread_keys::ThreadKeys;
use crate::walker::{self, Arch, Registers, StackBounds, StackMemory, Walk};
use crate::window::{Request, Window};
use crate::{exclusions, profile, Error, Mode, Progress, RawProfile, SamplerConfig, SamplerStats};

/// How long a thread counts as young, in seconds: threads usually name
/// themselves right after they start, so a young thread's name is read
/// again before every sample; later, names are read only when the thread
/// list changes.
const YOUNG_SECS: f64 = 0.1;

/// A thread name this long (in bytes) may have been cut: macOS keeps 63
/// bytes of it (`MAXTHREADNAMESIZE` less its NUL).
const NAME_CUT_LEN: usize = 63;

/// Most periods of CPU time credited on the run state alone and not yet
/// seen on the thread's clock. `TH_STATE_RUNNING` also covers a runnable
/// thread waiting for a CPU, so on a busy machine not every credit is
/// paid back by the clock; the cap bounds the over-count to this many
/// samples per thread, while covering the stretch (a scheduler quantum or
/// so) a spinning thread's clock may stand still.
const MAX_CREDIT_PERIODS: u64 = 20;

/// What the loop knows about one thread between ticks, by 64-bit id.
struct ThreadState {
    /// Index into [`RawProfile::threads`] for the thread's current name.
    key: u32,
    /// Read once before the thread is first stopped (and again at name
    /// checks while unknown): reading it may take the pthread list lock.
    stack: Option<StackRange>,
    /// CPU time seen on the previous tick.
    last_cpu_ns: Option<u64>,
    /// [`Mode::Cpu`]: CPU time used since the last sample that no sample
    /// stands for yet (the carried remainder).
    owed_ns: u64,
    /// Time credited because the thread was running while its clock stood
    /// still, not yet seen on its clock: clock movement pays it back first.
    credited_ns: u64,
    /// The last tick the thread was listed on, to forget exited threads.
    seen_tick: u64,
    /// The tick the thread was first seen on.
    first_tick: u64,
    /// The tick its name was last read on.
    name_tick: u64,
    /// Its name marks it as a thread never to stop ([`never_stop`]).
    protected: bool,
}

/// The sampling loop over a [`ThreadControl`]: one [`tick`](Self::tick)
/// samples every thread once, [`run`](Self::run) ticks at the configured
/// rate until told to stop, and [`finish`](Self::finish) hands back the
/// profile.
pub struct SamplingLoop<C: ThreadControl> {
    control: C,
    mode: Mode,
    hz: u32,
    arch: Arch,
    /// The walk buffer, allocated once: the stopped window writes here.
    frames: Box<[u64]>,
    /// The buffer a stopped thread's stack is copied into, allocated once.
    stack_window: StackWindow,
    threads: HashMap<u64, ThreadState>,
    thread_keys: ThreadKeys,
    table: StackTable,
    stats: SamplerStats,
    /// Where the current window started, and the requests for windows
    /// (snapshots, periodic dumps) answered between ticks.
    window: Window,
    requests: Option<mpsc::Receiver<Request>>,
    progress: Arc<Progress>,
    /// The process's CPU clock when `run` started.
    process_cpu_at_start: Duration,
    tick: u64,
    /// One period of CPU time (1/hz), in nanoseconds.
    period_ns: u64,
    /// Ticks a thread counts as young (see [`YOUNG_SECS`]).
    young_ticks: u64,
    /// Thread ids by handle, from the previous listing: reused while the
    /// listing holds the same handles.
    ids: HashMap<C::Thread, u64>,
    /// Whether the current listing differs from the previous one.
    list_changed: bool,
    /// Never stop a young thread (see [`SamplingLoop::sparing_young_threads`]).
    spare_young: bool,
    /// x86_64: code of frameless system-call stubs (see
    /// [`SamplingLoop::with_frameless_stubs`]).
    frameless: Vec<Range<u64>>,
    /// Which label set a thread has ([`crate::labels`]): a stopped
    /// thread's labels now are those of its sample.
    labels: labels::Resolver,
    /// Threads log their label changes' times while this is held.
    _labels_recording: labels::log::Recording,
}

impl<C: ThreadControl> SamplingLoop<C> {
    /// A loop sampling through `control` with `config` (already
    /// validated), recording addresses of architecture `arch`. Installs the
    /// abort-on-panic hook (once per process).
    pub fn new(control: C, config: &SamplerConfig, arch: Arch, progress: Arc<Progress>) -> Self {
        install_abort_on_panic_hook();
        let stats = SamplerStats::new(config);
        SamplingLoop {
            control,
            mode: config.mode,
            hz: config.hz,
            arch,
            frames: vec![0; config.max_depth.clamp(1, MAX_DEPTH)].into_boxed_slice(),
            stack_window: StackWindow::new(StackWindow::DEFAULT_WINDOW_BYTES),
            threads: HashMap::new(),
            thread_keys: ThreadKeys::new(config.share_stacks_by_name, NAME_CUT_LEN),
            table: StackTable::with_limit(config.limit),
            window: Window::new(&stats),
            stats,
            requests: None,
            progress,
            process_cpu_at_start: Duration::ZERO,
            tick: 0,
            period_ns: TickSchedule::period_for_hz(config.hz),
            young_ticks: (f64::from(config.hz) * YOUNG_SECS).ceil().max(1.0) as u64,
            ids: HashMap::new(),
            list_changed: true,
            spare_young: false,
            frameless: Vec::new(),
            labels: labels::Resolver::default(),
            _labels_recording: labels::log::recording(),
        }
    }

    /// x86_64: `ranges` hold frameless system-call stubs
    /// (`libsystem_kernel`'s `mach_msg_trap`, `__psynch_cvwait`, ...). A
    /// thread stopped in one, just after its `syscall` instruction (where a
    /// thread blocked in the kernel is), has not pushed a frame: `rbp`
    /// still belongs to the stub's caller, whose own frame record names
    /// the caller's caller, so a plain frame-pointer walk skips the
    /// immediate caller. There the return address sits at `[sp]`, and it
    /// is taken as frame 1 before `rbp` is followed (as arm64 does with
    /// its link register). Ignored on other architectures.
    pub fn with_frameless_stubs(mut self, ranges: Vec<Range<u64>>) -> Self {
        self.frameless = ranges;
        self
    }

    /// With `spare` set, a thread is not stopped while it is young (its
    /// first 100 ms in view, in either mode), only looked at: its name is
    /// read every tick until then. For a process under Rosetta 2, whose
    /// translator threads must never be stopped but are known only by a
    /// name they set after they start: without this, wall mode would stop
    /// a new thread on the loop's first look at it, before it had named
    /// itself.
    pub fn sparing_young_threads(mut self, spare: bool) -> Self {
        self.spare_young = spare;
        self
    }

    /// Answers window requests from `requests` between ticks (see
    /// `Sampler::collect`). Only the Mach sampler runs this loop for real;
    /// on Linux it is built for the fake-backed tests.
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    pub(crate) fn with_requests(mut self, requests: mpsc::Receiver<Request>) -> Self {
        self.requests = Some(requests);
        self
    }

    /// Uses a stack-copy window of `bytes` instead of the default (a test
    /// making walks cross windows).
    pub fn with_stack_copy_window(mut self, bytes: usize) -> Self {
        self.stack_window = StackWindow::new(bytes);
        self
    }

    /// The platform control, e.g. for a test to inspect its fake.
    pub fn control(&self) -> &C {
        &self.control
    }

    /// The platform control, mutably (a test changing its fake's threads).
    pub fn control_mut(&mut self) -> &mut C {
        &mut self.control
    }

    /// The counters so far.
    pub fn stats(&self) -> &SamplerStats {
        &self.stats
    }

    /// Ticks at the configured rate on `clock`'s absolute deadlines until
    /// `stop` is set, then records the measured duration. Fails only if the
    /// threads cannot be listed.
    pub fn run(&mut self, clock: &impl Clock, stop: &AtomicBool) -> Result<(), Error> {
        self.stats.start_time = SystemTime::now();
        self.process_cpu_at_start = profile::process_cpu_time();
        self.window = Window::new(&self.stats);
        let started = clock.now_ns();
        let mut schedule = TickSchedule::new(started, TickSchedule::period_for_hz(self.hz));
        let result = loop {
            clock.sleep_until(schedule.deadline());
            if stop.load(Ordering::Acquire) {
                break Ok(());
            }
            if let Err(e) = self.tick() {
                break Err(e);
            }
            schedule.complete_tick(clock.now_ns());
            self.stats.missed_ticks = schedule.missed();
            self.stats.duration = Duration::from_nanos(clock.now_ns().saturating_sub(started));
            self.serve_requests();
        };
        self.stats.duration = Duration::from_nanos(clock.now_ns().saturating_sub(started));
        result
    }

    /// Answers every pending window request with the stacks so far.
    fn serve_requests(&mut self) {
        while let Some(Ok(request)) = self.requests.as_ref().map(|r| r.try_recv()) {
            let stats = self.live_stats();
            self.window.serve(
                request,
                &mut self.table,
                self.thread_keys.infos(),
                &stats,
                self.arch,
            );
        }
    }

    /// Samples every thread but the sampler's own once, then releases the
    /// listing. Fails only if the threads cannot be listed; a failure about
    /// one thread is counted and the others are still sampled.
    pub fn tick(&mut self) -> Result<(), Error> {
        self.tick += 1;
        self.stats.ticks += 1;
        let list = self.control.list_threads().map_err(|e| {
            Error::Io(io::Error::other(format!(
                "could not list the threads of this process: {e:?}"
            )))
        })?;
        let current = self.control.current_thread();
        // Handles are only reused for another thread after the one they
        // named is gone, which changes the listing (Mach port names also
        // carry a generation), so the same listing means the same threads.
        let threads = list.as_ref();
        self.list_changed = threads.len() != self.ids.len() + 1
            || threads
                .iter()
                .any(|t| *t != current && !self.ids.contains_key(t));
        if self.list_changed {
            self.ids.clear();
        }
        for &thread in list.as_ref() {
            if thread != current {
                self.sample(thread);
            }
        }
        // Every thread runs again by now: release each handle, then the
        // list that held them.
        for &thread in list.as_ref() {
            self.control.release_thread(thread);
        }
        self.control.release_list(list);

        let tick = self.tick;
        self.threads.retain(|_, s| s.seen_tick == tick);
        self.progress
            .ticks
            .store(self.stats.ticks, Ordering::Relaxed);
        self.progress.sampled_cpu_ns.store(
            self.stats.sampled_cpu().as_nanos() as u64,
            Ordering::Relaxed,
        );
        self.progress
            .samples
            .store(self.stats.samples, Ordering::Relaxed);
        self.progress
            .recorded
            .store(self.stats.recorded, Ordering::Relaxed);
        self.progress
            .threads
            .store(self.threads.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The run's counters up to now, with the ones kept elsewhere: the
    /// sampler thread's CPU time, the process's since the start and the
    /// threads seen. What a window and the final profile carry.
    fn live_stats(&mut self) -> SamplerStats {
        let mut live = self.stats.clone();
        let current = self.control.current_thread();
        live.sampler_cpu =
            Duration::from_nanos(self.control.usage(current).map_or(0, |u| u.cpu_ns));
        live.process_cpu = profile::process_cpu_time().saturating_sub(self.process_cpu_at_start);
        live.threads_seen = self.thread_keys.threads_seen();
        live
    }

    /// The profile since the start or the last window handed out with a
    /// reset, with the sampler thread's own CPU time.
    pub fn finish(mut self) -> RawProfile {
        let stats = self.live_stats();
        self.window.cut(
            true,
            &mut self.table,
            self.thread_keys.infos(),
            &stats,
            self.arch,
        )
    }

    /// Samples one thread: reads what it needs first, stops it only for the
    /// registers and the walk, and interns the stack once it runs again.
    fn sample(&mut self, thread: C::Thread) {
        let id = match self.ids.get(&thread) {
            Some(&id) => id,
            None => match self.control.thread_id(thread) {
                Ok(id) => id,
                Err(e) => return count_failure(&mut self.stats, e),
            },
        };
        // The profiler's own threads (a dump thread) are never stopped.
        if exclusions::is_excluded(id) {
            self.ids.insert(thread, id);
            return;
        }
        if !self.know_thread(thread, id) {
            return;
        }
        self.ids.insert(thread, id);
        let usage = match self.control.usage(thread) {
            Ok(usage) => usage,
            Err(e) => return count_failure(&mut self.stats, e),
        };
        let Some(state) = self.threads.get_mut(&id) else {
            return;
        };
        state.seen_tick = self.tick;
        // Rosetta's runtime, other samplers, crash handlers: never stopped.
        if state.protected {
            return;
        }
        let used = match state.last_cpu_ns.replace(usage.cpu_ns) {
            Some(last) => usage.cpu_ns.saturating_sub(last),
            // First seen: nothing to compare with yet.
            None => {
                if self.mode == Mode::Cpu {
                    return;
                }
                0
            }
        };
        self.stats.add_thread_cpu(id, Duration::from_nanos(used));
        if self.spare_young && self.tick.saturating_sub(state.first_tick) < self.young_ticks {
            return;
        }
        let mut weight = 1;
        if self.mode == Mode::Cpu {
            state.owed_ns += owed_for(state, usage, used, self.period_ns);
            if state.owed_ns < self.period_ns {
                return;
            }
            weight = state.owed_ns / self.period_ns;
        }
        let (key, stack) = (state.key, state.stack);

        let walked = stopped_walk(
            &mut self.control,
            thread,
            Target {
                arch: self.arch,
                stack,
                frameless: &self.frameless,
            },
            &mut self.frames,
            &mut self.stack_window,
        );

        match walked {
            Ok(Sampled {
                walk,
                exited,
                taken_ns,
            }) => {
                self.stats.exited_threads += u64::from(exited);
                if self.mode == Mode::Cpu {
                    if let Some(state) = self.threads.get_mut(&id) {
                        state.owed_ns -= weight * self.period_ns;
                    }
                }
                self.table.add(
                    StackKey {
                        thread: key,
                        frames: &self.frames[..walk.depth],
                        lr: walk.lr,
                        end: walk.end,
                        labels: self.labels.at(id, taken_ns),
                    },
                    weight,
                );
                self.stats.count_sample(walk.end, weight);
            }
            Err(e) => count_failure(&mut self.stats, e),
        }
    }

    /// Registers a thread seen for the first time, and reads its name again
    /// when the listing changed or the thread is young. Returns false
    /// (having counted why) if the thread could not be described, e.g. it
    /// exited a moment ago.
    fn know_thread(&mut self, thread: C::Thread, id: u64) -> bool {
        let tick = self.tick;
        if let Some(s) = self.threads.get(&id) {
            let young = tick.saturating_sub(s.first_tick) < self.young_ticks;
            if s.name_tick == tick || !(young || self.list_changed) {
                return true;
            }
        }
        let name = match self.control.name(thread) {
            Ok(name) => name,
            Err(e) => {
                count_failure(&mut self.stats, e);
                return false;
            }
        };
        let protected = never_stop::is_protected(&name);
        let previous = self.threads.get(&id).map(|s| s.key);
        let key = self.thread_keys.key(id, name, previous);
        let control = &mut self.control;
        let state = self.threads.entry(id).or_insert_with(|| ThreadState {
            key,
            stack: None,
            last_cpu_ns: None,
            owed_ns: 0,
            credited_ns: 0,
            seen_tick: tick,
            first_tick: tick,
            name_tick: tick,
            protected,
        });
        state.key = key;
        state.name_tick = tick;
        state.protected = protected;
        if state.stack.is_none() {
            state.stack = control.stack_range(thread);
        }
        true
    }
}

/// The CPU time a tick adds to what `state` is owed, given its `usage` and
/// the `used` nanoseconds its clock moved since the previous tick.
///
/// Clock movement first pays back time credited earlier on the run state
/// alone. A thread reported running whose (remaining) movement is less
/// than a period is credited up to a full period: on macOS its clock may
/// not move while it spins in user mode. At most [`MAX_CREDIT_PERIODS`]
/// stay outstanding.
fn owed_for(state: &mut ThreadState, usage: ThreadUsage, used: u64, period_ns: u64) -> u64 {
    let repaid = used.min(state.credited_ns);
    state.credited_ns -= repaid;
    let fresh = used - repaid;
    if usage.running && fresh < period_ns {
        let credit = (period_ns - fresh)
            .min((MAX_CREDIT_PERIODS * period_ns).saturating_sub(state.credited_ns));
        state.credited_ns += credit;
        return fresh + credit;
    }
    fresh
}

/// The stopped window: stop, read registers, walk a copy of the stack into
/// `frames`, resume.
///
/// Nothing here allocates, locks or panics (the rules of the stopped
/// window); the guard resumes the thread on every path, a panic's too. A
/// thread that could not be stopped is not resumed. A thread that turns
/// out to be gone when it is resumed (it exited while stopped) is counted
/// as exited; a walk taken before that is kept.
pub(super) fn stopped_walk<C: ThreadControl>(
    control: &mut C,
    thread: C::Thread,
    target: Target<'_>,
    frames: &mut [u64],
    stack_window: &mut StackWindow,
) -> Result<Sampled, ThreadError> {
    let mut stopped = Stopped::stop(control, thread)?;
    // Read while stopped, without a lock: its labels are looked up at this
    // time once it runs again, since it may hold its label log's lock.
    let taken_ns = labels::monotonic_ns();
    let walked = stopped.registers().map(|regs| {
        let bounds = target.stack.and_then(|s| s.live_from(regs.sp));
        let in_stub = target.arch == Arch::X86_64
            && bounds.is_some()
            && target.frameless.iter().any(|r| r.contains(&regs.pc))
            && after_syscall(&mut stopped, regs.pc);
        // Without bounds the walker reads nothing; an empty range stands in.
        let readable = bounds.unwrap_or(StackBounds { low: 0, high: 0 });
        let mut memory = stack_window.reader(&mut stopped, readable);
        let caller = match (in_stub, frames.len() >= 2, regs.sp % 8 == 0) {
            (true, true, true) => memory.read_record(regs.sp).map(|[ret, _]| ret),
            _ => None,
        };
        match caller {
            Some(ret) if ret != 0 => {
                // The stub's caller is frame 1; the rbp chain goes on from
                // its frame.
                frames[0] = regs.pc;
                let from_caller = Registers { pc: ret, ..regs };
                let walk = walker::walk(
                    target.arch,
                    &from_caller,
                    bounds,
                    &mut memory,
                    &mut frames[1..],
                );
                Walk {
                    depth: walk.depth + 1,
                    ..walk
                }
            }
            _ => walker::walk(target.arch, &regs, bounds, &mut memory, frames),
        }
    });
    let exited = stopped.resume() == Resumed::Gone;
    match walked {
        Ok(walk) => Ok(Sampled {
            walk,
            exited,
            taken_ns,
        }),
        // Whatever the registers said, a thread gone by its resume exited.
        Err(_) if exited => Err(ThreadError::Exited),
        Err(e) => Err(e),
    }
}

/// What a walk needs to know about the thread and the code around it.
pub(super) struct Target<'a> {
    pub(super) arch: Arch,
    /// The thread's stack, read before it was stopped.
    pub(super) stack: Option<StackRange>,
    /// Code of frameless system-call stubs (x86_64).
    pub(super) frameless: &'a [Range<u64>],
}

/// Whether the two bytes before `pc` are x86_64's `syscall` (`0f 05`): the
/// stub has returned from the kernel or is blocked in it, and has pushed
/// nothing since it was called. Read by copy, so unreadable code is a
/// `false`, never a fault.
fn after_syscall(memory: &mut impl CopyMemory, pc: u64) -> bool {
    let Some(first) = pc.checked_sub(2) else {
        return false;
    };
    let aligned = first & !7;
    let mut words = [0u64; 2];
    if !memory.copy_words(aligned, &mut words) {
        return false;
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_le_bytes());
    bytes[8..].copy_from_slice(&words[1].to_le_bytes());
    let at = (first - aligned) as usize;
    bytes[at..at + 2] == [0x0f, 0x05]
}

/// A walk taken in a stopped window.
pub(super) struct Sampled {
    pub(super) walk: Walk,
    /// The thread was found gone when it was resumed: it exited while
    /// stopped, after its stack was walked.
    pub(super) exited: bool,
    /// When it was stopped (`CLOCK_MONOTONIC` ns).
    pub(super) taken_ns: u64,
}

/// Counts a failed call about one thread: an exit is not a failure.
fn count_failure(stats: &mut SamplerStats, e: ThreadError) {
    match e {
        ThreadError::Exited => stats.exited_threads += 1,
        ThreadError::Failed(_) => stats.failed_samples += 1,
    }
}
