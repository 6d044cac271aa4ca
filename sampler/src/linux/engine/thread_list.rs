//! What the engine knows about each thread ([`ThreadState`], declared in
//! the engine's `mod.rs` beside the loop's other state, so that every part
//! of the engine reads its fields), and the listings that keep it
//! current: new threads registered and named (their names read again,
//! often while they are young, later at growing intervals), every
//! thread's CPU time read into the stats, exited threads forgotten, and,
//! on the sampler-thread clock, the CPU time an exited thread used after
//! its last sample counted on its last stacks ([`ExitTails`]).
//!
//! [`ExitTails`]: super::super::clocks::paced::exit_tails::ExitTails

use std::time::{Duration, Instant};

use crate::exclusions;

use super::super::kernel::threads;
use super::super::signal::stack_regions;
use super::pacing::{CpuPacing, IDLE_SLACK_NS};
use super::{monotonic_ns, SamplerLoop, ThreadState, LISTING_SHARE};
use super::{RELIST_INTERVAL, YOUNG};

/// With every thread on the rings, the longest a due listing is put off
/// while nothing says a thread came or went
/// ([`SamplerLoop::listing_can_wait`]).
const RINGS_RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// The same where some thread has a timer of its own, and where only the
/// thread count tells of a birth: a thread born while another exited, the
/// count unchanged, gets its timer at most this late. On the
/// sampler-thread clock, the longest a listing is put off while the
/// threads it looks at keep running.
const COUNT_RELIST_INTERVAL: Duration = Duration::from_millis(100);

/// Sampler-thread clock: how often, between listings spaced more than
/// twice [`RELIST_INTERVAL`] apart, the threads created since are looked
/// for ([`SamplerLoop::find_new_threads`]). A look reads one small file:
/// a few microseconds, against milliseconds for a listing of thousands.
const NEW_THREADS_INTERVAL: Duration = Duration::from_millis(5);

impl SamplerLoop {
    /// Whether a listing of the threads that fell due can be put off, on
    /// the clocks the kernel paces: every known thread is sampled (on the
    /// rings, or by a timer of its own, or counted as blocking the signal),
    /// the last listing is recent, and since it began the process's thread
    /// count is the same and, on the rings, no thread's birth or exit was
    /// read; with every thread on the rings, the count may have fallen by
    /// the exits read.
    ///
    /// A thread the inherited events cover writes its birth into the rings
    /// and is sampled from its first instruction whether a listing found it
    /// or not, so with every thread on the rings and nothing born or gone a
    /// listing finds nothing to do ([`RINGS_RELIST_INTERVAL`]). A timer
    /// needs a listing to find a new thread, but a birth changes the count,
    /// unless another thread exited since ([`COUNT_RELIST_INTERVAL`]). A
    /// thread still waiting for its timer (one a listing opens, or the
    /// second look at a mask seen blocking the signal once), or whose
    /// birth record is not read yet, keeps the listings coming; so does one
    /// whose timer fell silent, for the listing that finds out why
    /// ([`SamplerLoop::watch_blocked_threads`]).
    ///
    /// Reading `/proc/self/task` and the listed threads' clocks is most of
    /// the sampler thread's time with a steady set of threads, so it is
    /// skipped while nothing changed. The clocks of threads sampled since are
    /// read anyway ([`SamplerLoop::account_cpu`]), as after a listing.
    /// Looks that find nothing changed also tell how long the threads held
    /// still, which lengthens the wakeups ([`super::QUIET_AFTER`]).
    pub(super) fn listing_can_wait(&mut self) -> bool {
        let records = self.ring.events.as_ref().map(|b| b.task_records());
        let (put_off, rings_only) = if !self.timers() {
            return self.paced_listing_can_wait();
        } else {
            let (mut on_rings, mut sampled) = (true, true);
            for s in self.threads.values() {
                let rings =
                    (s.ring.born || s.ring.opened_on) && !s.ring.deep && !s.ring.birth_unread;
                on_rings &= rings;
                // Seen blocking once is no verdict: the next listing looks
                // again, and gives a thread that was starting its timer.
                let blocks = s.blocked.as_ref().is_some_and(|b| b.confirmed);
                sampled &= rings || s.timer.open.is_some() || blocks;
                sampled &= !s.timer_silent(self.period_ns);
            }
            let rings_only = on_rings && records.is_some();
            match (sampled, rings_only) {
                (false, _) => (Duration::ZERO, false),
                (true, true) => (RINGS_RELIST_INTERVAL, true),
                (true, false) => (COUNT_RELIST_INTERVAL, false),
            }
        };
        if put_off.is_zero() {
            // Compared again only after a listing that read them.
            self.listed_as = None;
            self.steady_since = None;
            return false;
        }
        let Ok(count) = self.tasks.count() else {
            self.listed_as = None;
            self.steady_since = None;
            return false;
        };
        let now = (count, records);
        let recent = self.listed_at.is_some_and(|at| at.elapsed() < put_off);
        let same = match (self.listed_as, records) {
            // On the rings alone, threads that exited since are the ones
            // whose exit records came: a pool that winds down is not
            // listed again at each exit. What a listing does for them
            // (their last CPU time, the rest of their last period) waits
            // for the next one, or the stop.
            (Some((listed, Some(then))), Some(now)) if rings_only => {
                now.births == then.births
                    && now.exits >= then.exits
                    && count + (now.exits - then.exits) == listed
            }
            (listed, _) => listed == Some(now),
        };
        if same {
            self.steady_since.get_or_insert_with(Instant::now);
        } else {
            self.steady_since = None;
        }
        if recent && same {
            return true;
        }
        // Read before the listing: a thread that comes or goes while it
        // runs shows at the next check.
        self.listed_as = Some(now);
        false
    }

    /// Sampler-thread clock, cpu mode: whether a listing that fell due can
    /// be put off. Only while the last listing is recent
    /// ([`COUNT_RELIST_INTERVAL`]) and the process's thread count is the
    /// same as when it began, and while few of the threads the ticks look
    /// at stopped running since then (at most a tenth of the threads known,
    /// or one): the ticks read one clock for each, against every thread's
    /// for a listing. Nor while a thread born while sampling is young
    /// ([`YOUNG`]): it may name itself, or end, within milliseconds, and
    /// the listings read its name and count what it ran.
    ///
    /// The listings every [`RELIST_INTERVAL`] were a fifth of this clock's
    /// cost at 100 Hz with a steady set of busy threads: reading
    /// `/proc/self/task`, every thread's clock and the last thread id
    /// given. A thread born meanwhile shows in the count, or, where
    /// another exited, its CPU time shows as spent out of sight
    /// ([`UnseenCpu`]), which brings a listing at once; so that one look
    /// costs one `fstat`, the last thread id given ([`NewThreads`]) is not
    /// read (it cost twice as much). An idle thread that runs again (its
    /// wake timer, [`super::wake_timers`]) is looked at as after a listing.
    /// A thread that blocks the signal keeps the listings coming: they
    /// look at its mask again.
    ///
    /// [`NewThreads`]: super::new_threads::NewThreads
    /// [`UnseenCpu`]: super::super::clocks::paced::unseen_cpu::UnseenCpu
    fn paced_listing_can_wait(&mut self) -> bool {
        if self.cpu_pacing.is_none() {
            return false;
        }
        let Ok(count) = self.tasks.count() else {
            self.listed_as = None;
            return false;
        };
        let same = self.listed_as == Some((count, None));
        // Read before the listing: a thread that comes or goes while it
        // runs shows at the next check.
        self.listed_as = Some((count, None));
        let recent = self
            .listed_at
            .is_some_and(|at| at.elapsed() < COUNT_RELIST_INTERVAL);
        let young = self
            .cpu_pacing
            .as_ref()
            .and_then(|p| p.last_birth)
            .is_some_and(|at| at.elapsed() < YOUNG);
        let period = self.period_ns;
        let mut stopped = 0;
        for tid in &self.active {
            let Some(s) = self.threads.get(tid) else {
                continue;
            };
            if s.blocked.is_some() {
                return false;
            }
            let moved = match (s.read_ns, s.paced.listing_cpu_ns) {
                (Some(now), Some(then)) => now >= then + IDLE_SLACK_NS,
                _ => false,
            };
            stopped += usize::from(!moved && !s.pending && s.paced.debt.due(period).is_none());
        }
        same && recent && !young && stopped <= (self.threads.len() / 10).max(1)
    }

    /// Registers threads seen for the first time and re-reads names that
    /// are due; a new thread may run on a stack not yet in the snapshot.
    ///
    /// Returns the sampler CPU time spent registering new threads (reading
    /// each one's name), which a listing's spacing leaves out
    /// ([`SamplerLoop::tick`]): it is paid once per thread, not at every
    /// listing.
    pub(super) fn discover_threads(&mut self) -> Duration {
        let listing = self.listing;
        let mut new = Vec::new();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                // A profiler thread (the dump thread) may be listed once
                // before it excludes itself: forget it now, before its CPU
                // time or its blocked signals are counted.
                self.threads.remove(&tid);
                // The process's clock counts btprof's threads too.
                if let (Some(CpuPacing { tails, .. }), true) =
                    (self.cpu_pacing.as_mut(), tid != self.own_tid)
                {
                    if let Some(cpu) = threads::thread_cpu_ns(tid) {
                        tails.saw_excluded(tid, cpu, self.listing > 1);
                    }
                }
                continue;
            }
            let Some(s) = self.threads.get_mut(&tid) else {
                new.push(tid);
                continue;
            };
            s.seen_listing = listing;
            if std::mem::take(&mut s.ring.birth_unread) {
                if let Some(born) = self.ring.events.as_mut() {
                    if born.is_young(tid) {
                        s.judge_born();
                    } else {
                        // Not born under the events: counted as listed
                        // from now, on a timer of its own.
                        let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                        born.hand_off(tid, monotonic_ns(), cpu);
                    }
                }
            }
            if s.name_check_listing > listing
                || (s.ring.named && s.on_rings())
                || (s.accounted_ns.is_some() && s.accounted_ns == s.name_read_cpu_ns)
            {
                continue;
            }
            s.name_read_now(tid, listing);
            self.read_name(tid);
        }
        if !new.is_empty() {
            // Threads come and go: not quiet, even where the count held.
            self.steady_since = None;
        }
        let registering = threads::own_cpu_ns();
        self.register(&new, listing > 1 && !self.timers());
        Duration::from_nanos(threads::own_cpu_ns().saturating_sub(registering))
    }

    /// Starts keeping the state of each thread in `new`, seen for the
    /// first time. `born_during_run`: all their CPU time was used while
    /// sampling (sampler-thread clock), so all of it is owed.
    fn register(&mut self, new: &[i32], born_during_run: bool) {
        let listing = self.listing;
        let now = Instant::now();
        for &tid in new {
            // Until the snapshot is read again, handlers read this thread's
            // stack checked (`own_stack`).
            self.regions_stale = true;
            stack_regions::set_covers_listed(false);
            let mut state = ThreadState::new(now, listing);
            if let Some(born) = self.ring.events.as_mut() {
                state.ring.born = born.is_young(tid);
                if state.ring.born {
                    // Its clock counts from its birth, all of it sampled by
                    // the inherited events.
                    state.accounted_ns = Some(0);
                } else {
                    // Not known to be born here yet: its start may still
                    // be in a ring.
                    state.ring.birth_unread = true;
                }
            }
            if born_during_run {
                // All its CPU time so far was used during the run, so it is
                // owed (and counted) from zero, and a short-lived thread is
                // sampled as soon as it used a period (at its first look,
                // if it used one already).
                state.paced.last_cpu_ns = Some(0);
                state.accounted_ns = Some(0);
                state.read_ns = Some(0);
                state.paced.born_during_run = true;
                if let Some(pacing) = self.cpu_pacing.as_mut() {
                    pacing.last_birth = Some(now);
                }
            }
            state.name_read_now(tid, listing);
            self.threads.insert(tid, state);
            self.read_name(tid);
        }
        // A thread whose name could not be read even once (it exited at
        // once) is dropped now rather than sampled under no name.
        self.threads.retain(|_, s| s.key != u32::MAX);
    }

    /// Sampler-thread clock, between listings spaced far apart (thousands
    /// of threads): registers the threads created since the last look
    /// ([`NewThreads`](super::new_threads::NewThreads)) and looks
    /// at them from the next tick on, so a thread born just after a
    /// listing is not left unseen until the next.
    /// At most every [`NEW_THREADS_INTERVAL`], and spaced like listings by
    /// what a look cost: registering a thread reads its name (tens of
    /// microseconds in a VM), and a process that starts thousands of
    /// short-lived threads a second would otherwise have the sampler
    /// register each one.
    pub(super) fn find_new_threads(&mut self) {
        if self.relist_every < 2 * RELIST_INTERVAL
            || self.new_threads_due.is_some_and(|due| Instant::now() < due)
        {
            return;
        }
        let Some(watch) = self
            .cpu_pacing
            .as_mut()
            .and_then(|p| p.new_threads.as_mut())
        else {
            return;
        };
        let cpu_before = threads::own_cpu_ns();
        let mut found = std::mem::take(&mut self.new_tids);
        watch.look(&mut found);
        found.retain(|&tid| {
            tid != self.own_tid
                && !exclusions::is_excluded(tid as u64)
                && !self.threads.contains_key(&tid)
        });
        if !found.is_empty() {
            self.register(&found, true);
            let before = self.active.len();
            let known = found.iter().filter(|&tid| self.threads.contains_key(tid));
            self.active.extend(known);
            self.stats.threads_found_between_listings += (self.active.len() - before) as u64;
        }
        self.new_tids = found;
        let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(cpu_before));
        self.new_threads_due =
            Some(Instant::now() + NEW_THREADS_INTERVAL.max(cost * LISTING_SHARE));
    }

    /// Reads thread `tid`'s name and points its state at that name's key.
    pub(super) fn read_name(&mut self, tid: i32) -> Option<u32> {
        let name = threads::thread_name(tid)?;
        let previous = self
            .threads
            .get(&tid)
            .map(|s| s.key)
            .filter(|&k| k != u32::MAX);
        let key = self.thread_keys.key(tid as u64, name, previous);
        if let Some(state) = self.threads.get_mut(&tid) {
            state.key = key;
        }
        Some(key)
    }
}
