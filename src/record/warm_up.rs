//! Warming the resolver while a profiler runs, so that stopping does not
//! pay for loading symbols and DWARF.
//!
//! A profiler's first symbolisation loads every sampled module's symbol
//! table and, with inline frames, its DWARF (with Debian's `libc6-dbg`,
//! inflating most of libc's zlib-compressed `.debug_info`, because every
//! thread starts in `__clone3`). Done at stop, that is most of the stop
//! time. So threads of btprof's own ([`WarmUp`]; excluded from sampling
//! like the dump thread, every signal blocked) copy the stacks sampled so
//! far, soon after the start and then every [`INTERVAL`] (backing off to
//! [`MAX_INTERVAL`] while no new stack turns up, or while the passes find
//! no address the resolver has not cached: after each cut of a window the
//! table starts empty and fills with the stacks the resolver has seen
//! already, and copying it every interval was pushing's largest cost on
//! the warm-up's side), and resolve, at a low
//! CPU priority on Linux ([`NICE`]), the addresses the resolver has not
//! cached yet, with the resolver the stop (and each dump and snapshot)
//! then uses: [`SharedResolver`]. Stop resolves only what was first
//! sampled since the last copy.
//!
//! The results are the same: the resolver caches per address, and every
//! user of the shared resolver refreshes its module list first (which
//! drops the address caches if a library was loaded or unloaded), as the
//! dump thread always did with its own.
//!
//! Stop never waits long for the warm-up. It tells it to stop; a pass in
//! progress gives the resolver back after the address it is on (the
//! thread checks between stacks), and stop waits for that at most
//! [`PATIENCE`]: longer only if the thread, at its low priority, is
//! starved by busy cores in the middle of a load, and then stop resolves
//! with a fresh resolver (what it did before there was a warm-up) and
//! leaves the thread to finish its address and exit on its own.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btprof_sampler::{RawProfile, Sampler};
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmUpStats {
    /// Copies of the sampler's table taken (one without a new stack is
    /// not resolved).
    pub copies: u64,
    /// Passes of the resolving thread over a copy with new stacks.
    pub passes: u64,
    /// Every copy with new stacks has been resolved: the stop would only
    /// resolve stacks newer than the last copy.
    pub caught_up: bool,
    /// Addresses resolved (and cached) by the passes: those the stop no
    /// longer resolves.
    pub addresses: u64,
    /// DWARF loads the passes did ([`Resolver::dwarf_loads`]): module
    /// DWARF read, `addr2line` contexts built.
    pub dwarf_loads: u64,
    /// CPU time the warm-up's two threads used (their own CPU clocks, read
    /// after each copy and each pass). What the warm-up costs, besides the
    /// sampler thread's copying of its table (a clone of the table, a few
    /// microseconds for a few hundred stacks).
    pub cpu_time: Duration,
}

impl Default for WarmUpStats {
    fn default() -> Self {
        WarmUpStats {
            copies: 0,
            passes: 0,
            caught_up: true,
            addresses: 0,
            dwarf_loads: 0,
            cpu_time: Duration::ZERO,
        }
    }
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
        // Two users at once (one gave up waiting and made a fresh one):
        // keep the one that loaded more DWARF. First back is usually the
        // fresh one, of a dump that waited out a warm pass in the middle
        // of a load; keeping it would throw that load away when the pass
        // ends, and the next pass or dump would do it again.
        let extra = match slot.resolver.take() {
            None => {
                slot.resolver = Some(resolver);
                None
            }
            Some(kept) if kept.dwarf_loads() >= resolver.dwarf_loads() => {
                slot.resolver = Some(kept);
                Some(resolver)
            }
            Some(kept) => {
                slot.resolver = Some(resolver);
                Some(kept)
            }
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

/// The running warm-up: two threads of btprof's own. `btprof-warm-tbl`,
/// at the default priority, copies the sampler's table now and then (the
/// only one that touches the sampler, and only for the copy) and hands
/// the copy to `btprof-warm`, at [`NICE`], which resolves it. Split so
/// that the profiler never waits for a low-priority thread to let go of
/// the sampler: on a busy machine a thread at nice 10 that was woken (by
/// the sampler's answer) can wait hundreds of milliseconds for a CPU, and
/// a stop waited 470 ms for exactly that in one measured run.
pub(crate) struct WarmUp {
    shared: Arc<Shared>,
    copier: Option<JoinHandle<()>>,
    resolver: Option<JoinHandle<()>>,
    /// The process that started the threads (a forked child has none).
    pid: u32,
}

struct Shared {
    resolver: Arc<SharedResolver>,
    symbolize: Symbolize,
    stop: AtomicBool,
    /// The copier holds the sampler (to copy its table): the profiler
    /// waits for that to end before stopping the sampler.
    collecting: AtomicBool,
    /// Guards the copy waiting to be resolved (the newest wins).
    pending: Mutex<Option<RawProfile>>,
    /// Wakes either thread: a copy is pending, or stop.
    wake: Condvar,
    copies: AtomicU64,
    passes: AtomicU64,
    /// A copy is pending or being resolved (changed under `pending`'s lock).
    behind: AtomicBool,
    /// The last pass resolved an address the resolver had not cached: the
    /// program is reaching new code, so the copier keeps its short
    /// interval.
    found_new: AtomicBool,
    addresses: AtomicU64,
    dwarf_loads: AtomicU64,
    copier_cpu_ns: AtomicU64,
    resolver_cpu_ns: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Option<RawProfile>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WarmUp {
    /// Starts the warm-up for `sampler`, warming `resolver` as
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
            pending: Mutex::new(None),
            wake: Condvar::new(),
            copies: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            behind: AtomicBool::new(false),
            found_new: AtomicBool::new(true),
            addresses: AtomicU64::new(0),
            dwarf_loads: AtomicU64::new(0),
            copier_cpu_ns: AtomicU64::new(0),
            resolver_cpu_ns: AtomicU64::new(0),
        });
        let mut warm_up = WarmUp {
            shared: shared.clone(),
            copier: None,
            resolver: None,
            pid: std::process::id(),
        };
        let thread_shared = shared.clone();
        warm_up.resolver = Some(
            btprof_sampler::spawn_with_signals_blocked("btprof-warm", move || {
                resolve_copies(&thread_shared)
            })
            .map_err(Error::Io)?,
        );
        // Only a weak reference: the profiler must be able to take the
        // sampler back to stop it.
        let sampler = Arc::downgrade(sampler);
        // On failure, dropping `warm_up` stops the resolving thread.
        warm_up.copier = Some(
            btprof_sampler::spawn_with_signals_blocked("btprof-warm-tbl", move || {
                copy_tables(&shared, &sampler)
            })
            .map_err(Error::Io)?,
        );
        Ok(warm_up)
    }

    pub(crate) fn stats(&self) -> WarmUpStats {
        let s = &self.shared;
        let cpu =
            s.copier_cpu_ns.load(Ordering::Relaxed) + s.resolver_cpu_ns.load(Ordering::Relaxed);
        WarmUpStats {
            copies: s.copies.load(Ordering::Relaxed),
            passes: s.passes.load(Ordering::Relaxed),
            caught_up: !s.behind.load(Ordering::SeqCst),
            addresses: s.addresses.load(Ordering::Relaxed),
            dwarf_loads: s.dwarf_loads.load(Ordering::Relaxed),
            cpu_time: Duration::from_nanos(cpu),
        }
    }

    /// Tells both threads to stop and waits until the copier no longer
    /// holds the sampler (a copy in progress: the sampler answers within a
    /// tick, and the copier runs at the default priority), then joins it.
    /// The resolving thread is joined if it has already exited; otherwise
    /// it finishes the address it is on and exits on its own.
    pub(crate) fn stop(&mut self) {
        let (copier, resolver) = (self.copier.take(), self.resolver.take());
        if std::process::id() != self.pid {
            // A forked child's copy: the threads run in the parent only.
            std::mem::forget((copier, resolver));
            return;
        }
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        {
            // Under the lock, so the wake-up cannot fall between a
            // thread's check of `stop` and its wait.
            let _pending = s.lock();
            s.wake.notify_all();
        }
        // Set before the copier looks at `stop` (both SeqCst), so either it
        // saw `stop` and takes nothing, or this sees it collecting.
        while s.collecting.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Some(copier) = copier {
            let _ = copier.join();
        }
        if let Some(resolver) = resolver.filter(|r| r.is_finished()) {
            let _ = resolver.join();
        }
    }
}

impl Drop for WarmUp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The copier: a copy soon after the start, then every interval, each
/// handed to the resolving thread when it has new stacks.
fn copy_tables(shared: &Shared, sampler: &Weak<Sampler>) {
    // Excluded from sampling like the dump thread; with no exclusion free
    // it would be sampled, so it does nothing instead.
    let Some(_excluded) = btprof_sampler::exclude_current_thread() else {
        return;
    };
    let cpu_start = thread_cpu_ns();
    let mut wait = FIRST_PASS;
    let mut seen = Seen::default();
    loop {
        if !sleep(shared, wait) {
            return;
        }
        let new = copy(shared, sampler, &mut seen);
        shared
            .copier_cpu_ns
            .store(thread_cpu_ns().saturating_sub(cpu_start), Ordering::Relaxed);
        match new {
            None => return,
            // New stacks, and the last pass found new addresses.
            Some(true) if shared.found_new.load(Ordering::Relaxed) => wait = INTERVAL,
            Some(_) => wait = (wait * 2).clamp(INTERVAL, MAX_INTERVAL),
        }
    }
}

/// Sleeps `wait` unless told to stop first; `false` when told to stop.
fn sleep(shared: &Shared, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    let mut guard = shared.lock();
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

/// The table the previous copy held: the same window with as many stacks
/// has nothing new (stacks are only ever added to a window).
#[derive(Default)]
struct Seen {
    window: Option<std::time::SystemTime>,
    stacks: usize,
}

/// Copies the stacks so far and, if there are new ones, hands them over.
/// Whether there were, or `None` when the thread should exit.
fn copy(shared: &Shared, sampler: &Weak<Sampler>, seen: &mut Seen) -> Option<bool> {
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
        Err(btprof_sampler::Error::Timeout) => return Some(false),
        Err(_) => return None,
    };
    shared.copies.fetch_add(1, Ordering::Relaxed);
    let window = Some(raw.stats.start_time);
    if raw.table.is_empty() || (seen.window == window && seen.stacks == raw.table.len()) {
        return Some(false);
    }
    seen.window = window;
    seen.stacks = raw.table.len();
    let mut pending = shared.lock();
    *pending = Some(raw);
    shared.behind.store(true, Ordering::SeqCst);
    drop(pending);
    shared.wake.notify_all();
    Some(true)
}

/// The resolving thread: resolves each copy handed over, at [`NICE`].
fn resolve_copies(shared: &Shared) {
    // As the copier: excluded from sampling, or idle.
    let Some(_excluded) = btprof_sampler::exclude_current_thread() else {
        return;
    };
    lower_priority();
    let cpu_start = thread_cpu_ns();
    loop {
        let raw = {
            let mut pending = shared.lock();
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(raw) = pending.take() {
                    break raw;
                }
                pending = shared.wake.wait(pending).unwrap_or_else(|e| e.into_inner());
            }
        };
        let go_on = resolve(shared, &raw);
        shared.passes.fetch_add(1, Ordering::Relaxed);
        {
            let pending = shared.lock();
            if pending.is_none() {
                shared.behind.store(false, Ordering::SeqCst);
            }
        }
        shared
            .resolver_cpu_ns
            .store(thread_cpu_ns().saturating_sub(cpu_start), Ordering::Relaxed);
        if !go_on {
            return;
        }
    }
}

/// Resolves every address of `raw` the shared resolver has not cached;
/// `false` when the thread should exit.
fn resolve(shared: &Shared, raw: &RawProfile) -> bool {
    let Some(lease) = shared.resolver.try_take_for_warm_up() else {
        // Stop, a dump or a snapshot has it: it resolves these itself.
        return true;
    };
    let Ok(mut resolver) = lease else {
        return false;
    };
    let (cached, loads) = (resolver.cached_addresses(), resolver.dwarf_loads());
    let mut frames = Vec::new();
    for (key, _) in raw.table.iter() {
        if shared.stop.load(Ordering::Relaxed) || shared.resolver.is_wanted() {
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
    shared.addresses.fetch_add(found, Ordering::Relaxed);
    shared.found_new.store(found > 0, Ordering::Relaxed);
    true
}

/// The warm thread's nice value on Linux.
///
/// Low, so that the program's own threads come first, but not the lowest:
/// the warm thread must still get through its one-off loading (about
/// 30 ms of CPU) within a run on a saturated machine, or the stop finds
/// it in the middle of a load, waits [`PATIENCE`] and then loads
/// everything itself. Measured beside two CPU hogs on 2 cores, at nice 19
/// (weight 15 against 1024 for each busy nice-0 thread) the first pass had
/// not finished after 5 s in 3 of 5 runs; `SCHED_IDLE` gets even less.
/// Nice 10 (weight 110) gets about 2-5% of a core there.
// Only Linux sets it (see `lower_priority`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to [`NICE`], so the warm-up
/// mostly runs on what the program leaves idle. Linux only: a thread's
/// nice value is its own there. On macOS the only per-thread knob without
/// extra bindings, `PRIO_DARWIN_BG`, also throttles the thread's disk
/// reads, which are most of a DWARF load, so the thread keeps the default
/// priority there.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let tid = btprof_sampler::current_thread_id() as libc::id_t;
        // SAFETY: setpriority only reads its arguments; on Linux
        // PRIO_PROCESS with a thread id sets that one thread's nice value.
        // Failing leaves the default priority, which is harmless.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, tid, NICE);
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
