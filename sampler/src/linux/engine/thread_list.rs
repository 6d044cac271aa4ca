//! The listings that keep the per-thread state current: new threads
//! registered and named, every thread's CPU time read into the stats,
//! exited threads forgotten. A listing reads every thread's clock, so it is
//! put off while nothing says a thread came or went.

use std::time::{Duration, Instant};

use crate::exclusions;

use super::super::kernel::threads;
use super::super::signal::stack_regions;
use super::pacing::{CpuPacing, IDLE_SLACK_NS};
use super::{monotonic_ns, SamplerLoop, ThreadState, LISTING_SHARE};
use super::{RELIST_INTERVAL, YOUNG};

/// With every thread on the rings, the longest a due listing is put off
/// while nothing says a thread came or went.
const RINGS_RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// The same where some thread has a timer, or on the sampler-thread clock:
/// a birth hidden by an exit (count unchanged) waits at most this long.
const COUNT_RELIST_INTERVAL: Duration = Duration::from_millis(100);

/// Sampler-thread clock: how often new threads are looked for between
/// listings more than twice [`RELIST_INTERVAL`] apart; a look is far
/// cheaper than a listing of thousands.
const NEW_THREADS_INTERVAL: Duration = Duration::from_millis(5);

impl SamplerLoop {
    /// On the kernel-paced clocks, whether a due listing can be put off:
    /// every known thread is sampled (on the rings, by a timer, or counted as
    /// blocking the signal), the last listing is recent, and since it began
    /// the thread count is the same and no ring birth or exit was read (on
    /// the rings alone, the count may have fallen by the exits read).
    ///
    /// Threads on the rings are sampled from birth without a listing; a timer
    /// needs one, but a birth changes the count. A thread awaiting its timer,
    /// its birth record or a verdict on its mask keeps the listings coming.
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
                // Seen blocking once is no verdict: the next listing looks again.
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
            // On the rings alone, exits come as records, so a pool winding
            // down is not relisted at each exit.
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
        // Read before the listing: changes during it show at the next check.
        self.listed_as = Some(now);
        false
    }

    /// Sampler-thread clock, cpu mode: whether a due listing can be put off:
    /// the last listing is recent ([`COUNT_RELIST_INTERVAL`]), the thread
    /// count is unchanged, few looked-at threads stopped running (a tenth,
    /// or one), no born thread is [`YOUNG`], and none blocks the signal.
    /// A hidden birth shows as unseen CPU, which forces a listing.
    fn paced_listing_can_wait(&mut self) -> bool {
        if self.cpu_pacing.is_none() {
            return false;
        }
        let Ok(count) = self.tasks.count() else {
            self.listed_as = None;
            return false;
        };
        let same = self.listed_as == Some((count, None));
        // Read before the listing: changes during it show at the next check.
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

    /// Registers threads seen for the first time and re-reads due names.
    /// Returns the CPU time spent registering, which listing spacing leaves
    /// out since it is paid once per thread.
    pub(super) fn discover_threads(&mut self) -> Duration {
        let listing = self.listing;
        let mut new = Vec::new();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                // A profiler thread may be listed once before it excludes
                // itself: forget it before its CPU or signals are counted.
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
                        // Not born under the events: on a timer, counted from now.
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
            self.steady_since = None;
        }
        let registering = threads::own_cpu_ns();
        self.register(&new, listing > 1 && !self.timers());
        Duration::from_nanos(threads::own_cpu_ns().saturating_sub(registering))
    }

    /// Starts keeping state for each new thread. `born_during_run`: all its
    /// CPU was used while sampling, so all of it is owed.
    fn register(&mut self, new: &[i32], born_during_run: bool) {
        let listing = self.listing;
        let now = Instant::now();
        for &tid in new {
            // Handlers read its stack checked until the snapshot is re-read.
            self.regions_stale = true;
            stack_regions::set_covers_listed(false);
            let mut state = ThreadState::new(now, listing);
            if let Some(born) = self.ring.events.as_mut() {
                state.ring.born = born.is_young(tid);
                if state.ring.born {
                    // Sampled by the inherited events from birth.
                    state.accounted_ns = Some(0);
                } else {
                    // Its birth may still be in a ring.
                    state.ring.birth_unread = true;
                }
            }
            if born_during_run {
                // Owed from zero, so a short-lived thread is sampled once
                // it used a period.
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
        // A thread whose name was never read (exited at once) is dropped.
        self.threads.retain(|_, s| s.key != u32::MAX);
    }

    /// Sampler-thread clock, between far-apart listings: registers threads
    /// created since the last look
    /// ([`NewThreads`](super::new_threads::NewThreads)) so they are not
    /// unseen until the next listing. At most every [`NEW_THREADS_INTERVAL`],
    /// spaced further by cost, since each registration reads a name.
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
