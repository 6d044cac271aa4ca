//! Warming the resolver while a profiler runs, so that stopping does not
//! pay for loading symbols and DWARF.
//!
//! A profiler's first symbolisation loads every sampled module's symbol
//! table and, with inline frames, its DWARF (with Debian's `libc6-dbg`,
//! inflating most of libc's zlib-compressed `.debug_info`, because every
//! thread starts in `__clone3`). Done at stop, that is most of the stop
//! time. So a thread of btprof's own (`btprof-warm`, excluded from
//! sampling like the dump thread, every signal blocked, at the lowest CPU
//! priority on Linux) looks at the stacks sampled so far, soon after the
//! start and then every [`INTERVAL`] (backing off to [`MAX_INTERVAL`]
//! while nothing new turns up), and resolves the addresses the resolver
//! has not cached yet, with the resolver the stop (and each dump and
//! snapshot) then uses: [`SharedResolver`]. Stop resolves only what was
//! first sampled since the last pass.
//!
//! The results are the same: the resolver caches per address, and every
//! user of the shared resolver refreshes its module list first (which
//! drops the address caches if a library was loaded or unloaded), as the
//! dump thread always did with its own.
//!
//! Stop never waits long for the warm thread. It tells it to stop; a pass
//! in progress gives the resolver back after the address it is on (the
//! thread checks between stacks), and stop waits for that at most
//! [`PATIENCE`]: longer only if the thread, at its low priority, is
//! starved by busy cores, and then stop resolves with a fresh resolver
//! (what it did before there was a warm-up) and leaves the thread to
//! finish its address and exit on its own.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btprof_sampler::Sampler;
use btprof_symbols::Resolver;

use super::symbolize::{outermost_symbol, resolve_stack, Symbolize};
use crate::Error;

/// The first pass, soon after the start: most of what stop would load
/// (the program's and libc's DWARF, for the threads' entry frames) is
/// needed by the first stacks.
pub(crate) const FIRST_PASS: Duration = Duration::from_millis(100);
/// Between passes that found new addresses.
pub(crate) const INTERVAL: Duration = Duration::from_millis(250);
/// The longest wait between passes: each pass without new addresses
/// doubles the wait up to this.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(2);
/// How long stop, a dump or a snapshot waits for a warm pass to give the
/// resolver back before using a fresh one.
pub(crate) const PATIENCE: Duration = Duration::from_millis(25);

/// What the warm-up did so far ([`crate::Profiler::warm_up_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmUpStats {
    /// Looks at the stacks sampled so far (each copies the sampler's
    /// table; one that finds no new stack resolves nothing).
    pub passes: u64,
    /// Addresses resolved (and cached) by the passes: those the stop no
    /// longer resolves.
    pub addresses: u64,
    /// DWARF loads the passes did ([`Resolver::dwarf_loads`]): module
    /// DWARF read, `addr2line` contexts built.
    pub dwarf_loads: u64,
    /// CPU time the warm thread used (its own CPU clock), the passes'
    /// copies of the stack table included. What the warm-up costs.
    pub cpu_time: Duration,
}

/// The resolver a profiler's warm thread, dump thread, snapshots and stop
/// share: lent to one user at a time, given back when done.
#[derive(Default)]
pub(crate) struct SharedResolver {
    slot: Mutex<Slot>,
    returned: Condvar,
    /// Users other than the warm thread waiting for the resolver: a warm
    /// pass gives it back after the address it is on.
    wanted: AtomicUsize,
    /// DWARF loads done by users other than the warm thread.
    other_loads: AtomicU64,
}

#[derive(Default)]
struct Slot {
    /// The resolver, while nobody has it.
    resolver: Option<Resolver>,
    /// How many users have a resolver (this one, or a fresh one made
    /// because this one was lent for too long).
    lent: usize,
}

/// A resolver lent from a [`SharedResolver`]; given back when dropped.
pub(crate) struct Lease<'a> {
    shared: &'a SharedResolver,
    resolver: Option<Resolver>,
    loads_at_start: u64,
    warm: bool,
}

impl std::ops::Deref for Lease<'_> {
    type Target = Resolver;

    fn deref(&self) -> &Resolver {
        self.resolver
            .as_ref()
            .expect("a lease holds its resolver until dropped")
    }
}

impl std::ops::DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut Resolver {
        self.resolver
            .as_mut()
            .expect("a lease holds its resolver until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(resolver) = self.resolver.take() {
            if !self.warm {
                let loads = resolver.dwarf_loads() - self.loads_at_start;
                self.shared.other_loads.fetch_add(loads, Ordering::Relaxed);
            }
            self.shared.give_back(resolver);
        }
    }
}

impl SharedResolver {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while resolving leaves a consistent slot behind (the
        // lease gives the resolver back on unwind).
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resolver for stop, a dump or a snapshot: refreshed (libraries
    /// loaded or unloaded since its last use), or a new one for this
    /// process if there is none yet or a warm pass keeps it longer than
    /// `patience`.
    pub(crate) fn take(&self, patience: Duration) -> Result<Lease<'_>, Error> {
        self.wanted.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + patience;
        let mut slot = self.lock();
        while slot.resolver.is_none() && slot.lent > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            slot = self
                .returned
                .wait_timeout(slot, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        self.wanted.fetch_sub(1, Ordering::SeqCst);
        let kept = slot.resolver.take();
        slot.lent += 1;
        drop(slot);
        self.lease(kept, false)
    }

    /// The resolver for a warm pass, unless someone else has it.
    fn try_take_for_warm_up(&self) -> Option<Result<Lease<'_>, Error>> {
        let mut slot = self.lock();
        if slot.resolver.is_none() && slot.lent > 0 {
            return None;
        }
        let kept = slot.resolver.take();
        slot.lent += 1;
        drop(slot);
        Some(self.lease(kept, true))
    }

    /// Wraps `kept` (refreshed) or a new resolver in a lease; a user is
    /// already counted in `lent`.
    fn lease(&self, kept: Option<Resolver>, warm: bool) -> Result<Lease<'_>, Error> {
        let resolver = match kept {
            Some(mut resolver) => {
                resolver.refresh();
                resolver
            }
            None => match Resolver::for_current_process() {
                Ok(resolver) => resolver,
                Err(e) => {
                    let mut slot = self.lock();
                    slot.lent -= 1;
                    drop(slot);
                    self.returned.notify_all();
                    return Err(Error::Symbols(e));
                }
            },
        };
        Ok(Lease {
            shared: self,
            loads_at_start: resolver.dwarf_loads(),
            resolver: Some(resolver),
            warm,
        })
    }

    fn give_back(&self, resolver: Resolver) {
        let mut slot = self.lock();
        slot.lent -= 1;
        // Two users at once (one gave up waiting): the first back is kept.
        let extra = match slot.resolver {
            None => {
                slot.resolver = Some(resolver);
                None
            }
            Some(_) => Some(resolver),
        };
        drop(slot);
        self.returned.notify_all();
        drop(extra);
    }

    /// Whether a user other than the warm thread waits for the resolver.
    fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::SeqCst) > 0
    }

    /// DWARF loads done so far by stop, dumps and snapshots (not by warm
    /// passes).
    pub(crate) fn other_loads(&self) -> u64 {
        self.other_loads.load(Ordering::Relaxed)
    }
}

/// The running warm thread.
pub(crate) struct WarmUp {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread (a forked child has none).
    pid: u32,
}

struct Shared {
    resolver: Arc<SharedResolver>,
    symbolize: Symbolize,
    stop: AtomicBool,
    /// The thread holds the sampler (to copy its table): the profiler
    /// waits for that to end before stopping the sampler.
    collecting: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    passes: AtomicU64,
    addresses: AtomicU64,
    dwarf_loads: AtomicU64,
    cpu_ns: AtomicU64,
}

impl WarmUp {
    /// Starts the warm thread for `sampler`, warming `resolver` as
    /// `symbolize` says (inline frames or names only).
    pub(crate) fn start(
        sampler: &Arc<Sampler>,
        resolver: Arc<SharedResolver>,
        symbolize: Symbolize,
    ) -> Result<WarmUp, Error> {
        let shared = Arc::new(Shared {
            resolver,
            symbolize,
            stop: AtomicBool::new(false),
            collecting: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            passes: AtomicU64::new(0),
            addresses: AtomicU64::new(0),
            dwarf_loads: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
        });
        let thread_shared = shared.clone();
        // Only a weak reference: the profiler must be able to take the
        // sampler back to stop it.
        let sampler = Arc::downgrade(sampler);
        let thread = btprof_sampler::spawn_with_signals_blocked("btprof-warm", move || {
            run(&thread_shared, &sampler)
        })
        .map_err(Error::Io)?;
        Ok(WarmUp {
            shared,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    pub(crate) fn stats(&self) -> WarmUpStats {
        let s = &self.shared;
        WarmUpStats {
            passes: s.passes.load(Ordering::Relaxed),
            addresses: s.addresses.load(Ordering::Relaxed),
            dwarf_loads: s.dwarf_loads.load(Ordering::Relaxed),
            cpu_time: Duration::from_nanos(s.cpu_ns.load(Ordering::Relaxed)),
        }
    }

    /// Tells the thread to stop and waits until it no longer holds the
    /// sampler (a table copy in progress: the sampler answers within a
    /// tick). It is joined if it has already exited; otherwise it finishes
    /// the address it is on and exits on its own, without the profiler.
    pub(crate) fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if std::process::id() != self.pid {
            // A forked child's copy: the thread runs in the parent only.
            std::mem::forget(thread);
            return;
        }
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        {
            // Under the sleep lock, so the wake-up cannot fall between its
            // check of `stop` and its wait.
            let _sleep = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        // Set before the thread looks at `stop` (both SeqCst), so either it
        // saw `stop` and takes nothing, or this sees it collecting.
        while s.collecting.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
}

impl Drop for WarmUp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The warm thread: a pass soon after the start, then every interval.
fn run(shared: &Shared, sampler: &Weak<Sampler>) {
    // Like the dump thread: never sampled. If no exclusion is free it
    // would be, so it does nothing instead.
    let Some(_excluded) = btprof_sampler::exclude_current_thread() else {
        return;
    };
    lower_priority();
    let cpu_start = thread_cpu_ns();
    let mut wait = FIRST_PASS;
    let mut seen = Seen::default();
    loop {
        if !sleep(shared, wait) {
            return;
        }
        let found = pass(shared, sampler, &mut seen);
        shared
            .cpu_ns
            .store(thread_cpu_ns().saturating_sub(cpu_start), Ordering::Relaxed);
        match found {
            None => return,
            Some(0) => wait = (wait * 2).clamp(INTERVAL, MAX_INTERVAL),
            Some(_) => wait = INTERVAL,
        }
    }
}

/// Sleeps `wait` unless told to stop first; `false` when told to stop.
fn sleep(shared: &Shared, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        guard = shared
            .wake
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The table the previous pass went through: the same window with as many
/// stacks has nothing new (stacks are only ever added to a window).
#[derive(Default)]
struct Seen {
    window: Option<std::time::SystemTime>,
    stacks: usize,
}

/// One pass: copies the stacks so far and resolves them. The number of
/// addresses newly resolved, or `None` when the thread should exit.
fn pass(shared: &Shared, sampler: &Weak<Sampler>, seen: &mut Seen) -> Option<u64> {
    shared.collecting.store(true, Ordering::SeqCst);
    let raw = if shared.stop.load(Ordering::SeqCst) {
        None
    } else {
        // Held only for the copy.
        sampler.upgrade().map(|sampler| sampler.collect(false))
    };
    shared.collecting.store(false, Ordering::SeqCst);
    let raw = match raw? {
        Ok(raw) => raw,
        // A timeout on a loaded machine: try again next time.
        Err(btprof_sampler::Error::Timeout) => return Some(0),
        Err(_) => return None,
    };
    shared.passes.fetch_add(1, Ordering::Relaxed);
    let window = Some(raw.stats.start_time);
    if raw.table.is_empty() || (seen.window == window && seen.stacks == raw.table.len()) {
        return Some(0);
    }
    let Some(lease) = shared.resolver.try_take_for_warm_up() else {
        // Stop, a dump or a snapshot has it: it resolves these itself.
        return Some(0);
    };
    let Ok(mut resolver) = lease else {
        return None;
    };
    let (cached, loads) = (resolver.cached_addresses(), resolver.dwarf_loads());
    let mut frames = Vec::new();
    let mut complete = true;
    for (key, _) in raw.table.iter() {
        if shared.stop.load(Ordering::Relaxed) || shared.resolver.is_wanted() {
            complete = false;
            break;
        }
        // What `Profile::from_raw_with` looks up for this stack.
        resolve_stack(raw.arch, &key, &mut resolver, shared.symbolize, &mut frames);
        let _ = outermost_symbol(&key, &mut resolver);
    }
    // A refresh that found changed modules starts the cache from empty.
    let found = resolver.cached_addresses().saturating_sub(cached) as u64;
    shared
        .dwarf_loads
        .fetch_add(resolver.dwarf_loads() - loads, Ordering::Relaxed);
    drop(resolver);
    shared.addresses.fetch_add(found, Ordering::Relaxed);
    if complete {
        seen.window = window;
        seen.stacks = raw.table.len();
    }
    Some(found)
}

/// Lowers the calling thread's CPU priority to the lowest (`nice` 19),
/// so the warm-up runs on what the program leaves idle. Linux only: a
/// thread's nice value is its own there. (Not `SCHED_IDLE`: a thread
/// there gets so little of a busy core that a stop waiting for the
/// address it is on would wait far longer than resolving it itself.) On
/// macOS the only per-thread knob without extra bindings,
/// `PRIO_DARWIN_BG`, also throttles the thread's disk reads, which are
/// most of a DWARF load, so the thread keeps the default priority there.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let tid = btprof_sampler::current_thread_id() as libc::id_t;
        // SAFETY: setpriority only reads its arguments; on Linux
        // PRIO_PROCESS with a thread id sets that one thread's nice value.
        // Failing leaves the default priority, which is harmless.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        }
    }
}

/// The calling thread's CPU time in nanoseconds (0 where unknown).
fn thread_cpu_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return (ts.tv_sec as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(ts.tv_nsec as u64);
        }
    }
    0
}
