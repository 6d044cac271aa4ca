//! Each labelled thread's changes of label set, with their times, so a
//! sample gets the set its thread had when the sample was taken.
//!
//! The perf clock reads its samples out of the kernel's rings tens of
//! milliseconds after they were taken, and a signal's sample is interned
//! after its thread went on: asking a thread for its labels then would give
//! the wrong ones. Every sample carries its time (`CLOCK_MONOTONIC`), and
//! [`Resolver::at`] looks that time up in the thread's log.
//!
//! Only the thread writes its log, and only while a sampler records
//! ([`recording`]); the sampler thread reads it. Neither happens in a
//! signal handler, so a plain mutex guards it, uncontended but for the
//! moment the sampler looks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::HashMap;

use super::sets::NO_LABELS;
pub use crate::clock::monotonic_ns;

/// How long a change is kept: far longer than the latest a sample is
/// interned (a slot's timeout, a ring's collection interval).
const KEEP_NS: u64 = 1_000_000_000;

/// The most changes a thread's log keeps, whatever their age, so a thread
/// changing labels in a tight loop costs bounded memory: 16 bytes each.
pub(crate) const MAX_CHANGES: usize = 16 * 1024;

/// Samplers running now: while none does, threads log no times.
static RECORDING: AtomicUsize = AtomicUsize::new(0);

/// Threads that ever entered a label scope; while 0, samples skip the lookup.
static LABELLED_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Bumped whenever a log is registered, so resolvers re-read the registry.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// One change: at `time_ns` the set went from `before` to `after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Change {
    time_ns: u64,
    before: u32,
    after: u32,
}

/// One thread's label state, shared with the sampler thread.
pub(crate) struct ThreadLog {
    tid: u64,
    /// The thread's set now.
    current: AtomicU32,
    /// When the thread exited (`CLOCK_MONOTONIC` ns), 0 while it runs.
    exited_ns: AtomicU64,
    /// Whether `changes` may hold any: spares a lock per change while no
    /// sampler runs. Only the thread writes it.
    logged: AtomicBool,
    changes: Mutex<VecDeque<Change>>,
}

impl ThreadLog {
    fn changes(&self) -> MutexGuard<'_, VecDeque<Change>> {
        // Each change is one push or pop: a panic cannot leave it torn.
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The thread moved from set `before` to `after`.
    pub(crate) fn changed(&self, before: u32, after: u32) {
        self.current.store(after, Ordering::Relaxed);
        if RECORDING.load(Ordering::Relaxed) == 0 {
            // Older changes describe no sample to come; the current set
            // answers for every later time until the next change.
            if self.logged.load(Ordering::Relaxed) {
                self.logged.store(false, Ordering::Relaxed);
                let mut changes = self.changes();
                changes.clear();
                changes.shrink_to(64);
            }
            return;
        }
        if !self.logged.load(Ordering::Relaxed) {
            self.logged.store(true, Ordering::Relaxed);
        }
        let time_ns = monotonic_ns();
        let mut changes = self.changes();
        while changes.len() >= MAX_CHANGES
            || changes
                .front()
                .is_some_and(|c| c.time_ns + KEEP_NS < time_ns)
        {
            changes.pop_front();
        }
        changes.push_back(Change {
            time_ns,
            before,
            after,
        });
    }

    /// The set the thread had at `time_ns`.
    fn at(&self, time_ns: u64) -> u32 {
        let changes = self.changes();
        let after = changes.partition_point(|c| c.time_ns <= time_ns);
        match after.checked_sub(1) {
            Some(last) => changes[last].after,
            // Before every change kept: the set the first one left.
            None => changes
                .front()
                .map_or_else(|| self.current.load(Ordering::Relaxed), |c| c.before),
        }
    }

    pub(crate) fn exited(&self) {
        self.exited_ns
            .store(monotonic_ns().max(1), Ordering::Relaxed);
    }
}

fn registry() -> MutexGuard<'static, Vec<Arc<ThreadLog>>> {
    static REGISTRY: Mutex<Vec<Arc<ThreadLog>>> = Mutex::new(Vec::new());
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new log for the calling thread, registered for samplers to find.
/// Logs of threads gone for longer than any sample waits are dropped here.
pub(crate) fn register(tid: u64) -> Arc<ThreadLog> {
    let log = Arc::new(ThreadLog {
        tid,
        current: AtomicU32::new(NO_LABELS),
        exited_ns: AtomicU64::new(0),
        logged: AtomicBool::new(false),
        changes: Mutex::new(VecDeque::new()),
    });
    let now = monotonic_ns();
    let mut logs = registry();
    logs.retain(|l| match l.exited_ns.load(Ordering::Relaxed) {
        0 => true,
        // A thread id the kernel reused belongs to the new thread.
        exited => exited + KEEP_NS >= now && l.tid != tid,
    });
    logs.push(log.clone());
    LABELLED_THREADS.fetch_add(1, Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::Release);
    log
}

/// Held by each running sampler: threads log their changes' times.
pub(crate) struct Recording(());

/// Starts logging changes' times for as long as the result is held.
pub(crate) fn recording() -> Recording {
    RECORDING.fetch_add(1, Ordering::Relaxed);
    Recording(())
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The sampler thread's view of the logs: which set a thread had when.
#[derive(Default)]
pub struct Resolver {
    logs: HashMap<u64, Arc<ThreadLog>>,
    generation: u64,
}

impl Resolver {
    /// The id of the label set thread `tid` had at `time_ns`
    /// (`CLOCK_MONOTONIC`); [`NO_LABELS`] for a thread that never
    /// entered a scope.
    pub fn at(&mut self, tid: u64, time_ns: u64) -> u32 {
        if LABELLED_THREADS.load(Ordering::Relaxed) == 0 {
            return NO_LABELS;
        }
        let generation = GENERATION.load(Ordering::Acquire);
        if generation != self.generation {
            self.generation = generation;
            self.logs.clear();
            // In registration order: a reused id maps to the newest thread.
            for log in registry().iter() {
                self.logs.insert(log.tid, log.clone());
            }
        }
        self.logs.get(&tid).map_or(NO_LABELS, |log| log.at(time_ns))
    }

    /// The set thread `tid` has now.
    pub fn now(&mut self, tid: u64) -> u32 {
        self.at(tid, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> Arc<ThreadLog> {
        register(u64::MAX - 7)
    }

    #[test]
    fn a_time_resolves_to_the_set_in_force_then() {
        let _rec = recording();
        let log = log();
        let t0 = monotonic_ns();
        log.changed(0, 5);
        let t1 = monotonic_ns();
        log.changed(5, 9);
        let t2 = monotonic_ns();
        log.changed(9, 5);
        assert_eq!(log.at(t0.saturating_sub(1)), 0, "before the first change");
        assert_eq!(log.at(t1), 5);
        assert_eq!(log.at(t2), 9);
        assert_eq!(log.at(u64::MAX), 5);
    }

    #[test]
    fn with_no_change_kept_the_current_set_answers() {
        let log = log();
        log.current.store(3, Ordering::Relaxed);
        assert_eq!(log.at(0), 3);
        assert_eq!(log.at(u64::MAX), 3);
    }

    #[test]
    fn a_log_keeps_at_most_its_cap() {
        let _rec = recording();
        let log = log();
        for i in 0..(MAX_CHANGES as u32 + 10) {
            log.changed(i, i + 1);
        }
        assert_eq!(log.changes().len(), MAX_CHANGES);
        assert_eq!(log.at(u64::MAX), MAX_CHANGES as u32 + 10);
    }
}
