//! The threads' CPU time: each thread's clock read into the stats, exited
//! threads forgotten, and on the sampler-thread clock an exited thread's
//! CPU after its last sample counted on its last stacks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::super::clocks::paced::exit_tails::{share_out, ExitTail};
use super::collect::OwnedWalk;
use super::pacing::CpuPacing;
use super::{monotonic_ns, SamplerLoop, RECENT_WALKS};
use crate::linux::clocks::paced::cpu_debt::MAX_OWED_PERIODS;

/// The longest (ns) a thread on the rings with no ring sample goes without
/// its clock read.
const IDLE_RING_READ_NS: u64 = 250_000_000;

/// A thread that exited at the last listing, and its last stacks.
pub(super) struct Exit {
    pub(super) tid: i32,
    pub(super) key: u32,
    pub(super) walks: Vec<OwnedWalk>,
    pub(super) tail: ExitTail,
}

impl AsMut<ExitTail> for Exit {
    fn as_mut(&mut self) -> &mut ExitTail {
        &mut self.tail
    }
}

impl SamplerLoop {
    /// Adds each thread's CPU time since the last reading to the stats.
    /// Unless `every` (stop, dump), a listed thread on the rings with no ring
    /// sample since a reading under [`IDLE_RING_READ_NS`] old is skipped: it
    /// mostly did not run, and each read is a system call. A thread that left
    /// the listing is always read, since its tail is counted from it.
    pub(super) fn account_cpu(&mut self, every: bool) {
        let mut total = Duration::ZERO;
        let read_at = monotonic_ns();
        let born = self.ring.events.as_ref();
        let (listing, period) = (self.listing, self.period_ns);
        for (&tid, state) in self.threads.iter_mut() {
            if state.ring.birth_unread {
                // Judged at the next listing; at stop or dump, now if its
                // birth is in, so its time is counted.
                if !(every && born.is_some_and(|b| b.is_young(tid))) {
                    continue;
                }
                state.judge_born();
            }
            let on_rings = state.on_rings();
            if on_rings
                && !every
                && state.seen_listing == listing
                && !state.ring.sampled
                && state.accounted_ns.is_some()
                && read_at.saturating_sub(state.read_at_ns) < IDLE_RING_READ_NS
            {
                continue;
            }
            state.ring.sampled = false;
            let reading = match state.cpu_reading(tid) {
                Some(now) => {
                    state.sampled_since_read = 0;
                    if on_rings {
                        state.read_at_ns = read_at;
                    }
                    Some(now)
                }
                // The last reading stays the mark later-drained ring samples
                // are counted after.
                None => {
                    #[cfg(feature = "test-hooks")]
                    crate::linux::test_hooks::HOLD_DRAINS.store(false, Ordering::Relaxed);
                    state.counted_at_exit(tid, born, read_at, period)
                }
            };
            state.paced.listed_cpu_ns = reading;
            if let Some(now) = reading {
                if let Some(before) = state.accounted_ns {
                    let used = Duration::from_nanos(now.saturating_sub(before));
                    self.stats.add_thread_cpu(tid as u64, used);
                }
                state.name_read_cpu_ns.get_or_insert(now);
                state.accounted_ns = Some(now);
                if let Some(CpuPacing { tails, .. }) = self.cpu_pacing.as_mut() {
                    tails.saw(&mut state.read_ns, now);
                    state.read_at_ns = read_at;
                }
            } else if self.cpu_pacing.is_some() {
                state.gone_at_ns.get_or_insert(read_at);
            }
        }
        for t in &self.stats.thread_cpu {
            total += t.cpu;
        }
        self.progress
            .sampled_cpu_ns
            .store(total.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Forgets threads not in the latest listing (closing their timers),
    /// unless a signal to them is in flight or, on the rings, until the next
    /// listing, as their last samples may still be held back
    /// ([`BornThreads::drain`]).
    ///
    /// [`BornThreads::drain`]: super::super::clocks::ring::born_threads::BornThreads::drain
    pub(super) fn forget_exited(&mut self) {
        let listing = self.listing;
        self.departed.clear();
        let departed = &mut self.departed;
        let mut born = self.ring.events.as_mut();
        let born_accounted = &mut self.ring.accounted;
        let (reckon, period, now) = (self.cpu_pacing.is_some(), self.period_ns, monotonic_ns());
        let (exits, stats) = (&mut self.exits, &mut self.stats);
        let mut ring_exits = Vec::new();
        self.threads.retain(|&tid, s| {
            let keep = s.seen_listing == listing
                || s.pending
                || ((s.on_rings() || s.timer.open.is_some()) && s.seen_listing + 1 == listing);
            if !keep {
                departed.insert(tid, s.key);
                if reckon {
                    // CPU read since the last listing, then its tail.
                    if let Some(since) = s.take_read_since_accounted() {
                        stats.add_thread_cpu(tid as u64, since);
                    }
                    // A never-sampled thread's owed time is reported as
                    // stackless; it takes no share of the unread time (cap 0),
                    // which would only move CPU between "not covered" counts.
                    let walks = std::mem::take(&mut s.paced.recent_walks);
                    let cap_ns = if walks.is_empty() {
                        0
                    } else {
                        s.gone_at_ns.unwrap_or(now).saturating_sub(s.read_at_ns)
                    };
                    exits.push(Exit {
                        tid,
                        key: s.key,
                        walks,
                        tail: ExitTail {
                            owed_ns: s.paced.debt.take_all(period),
                            cap_ns,
                            unread_ns: 0,
                        },
                    });
                }
                if let Some(born) = born.as_mut() {
                    born.forget(tid);
                    if s.ring.born {
                        born_accounted.insert(tid, s.accounted_ns.unwrap_or(0));
                    }
                }
                if s.ring.opened_on {
                    ring_exits.push((tid, s.accounted_ns.unwrap_or(0)));
                }
            }
            keep
        });
        for (tid, cpu_ns) in ring_exits {
            self.count_parent_tail(tid, cpu_ns);
        }
    }

    /// Sampler-thread path, cpu mode: counts on each thread that exited at
    /// this listing, on its last stacks, what it owed at its last reading and
    /// its share of `unread_ns` ([`ExitTails`]).
    ///
    /// [`ExitTails`]: super::super::clocks::paced::exit_tails::ExitTails
    pub(super) fn settle_exits(&mut self, unread_ns: u64) {
        let Some(mut pacing) = self.cpu_pacing.take() else {
            return;
        };
        let tails = &mut pacing.tails;
        share_out(unread_ns, &mut self.exits);
        let mut exits = std::mem::take(&mut self.exits);
        for exit in exits.drain(..) {
            let tail = exit.tail;
            let unread = Duration::from_nanos(tail.unread_ns);
            self.stats.add_thread_cpu(exit.tid as u64, unread);
            let samples = tails
                .samples_for(tail.owed_ns + tail.unread_ns, self.period_ns)
                .min(MAX_OWED_PERIODS);
            if exit.walks.is_empty() {
                // Exited before its first sample: no stack, so reported.
                self.stats.stackless_samples += samples;
                continue;
            }
            // Each on one of its last stacks, picked at random.
            let mut counts = [0u64; RECENT_WALKS];
            for _ in 0..samples {
                counts[tails.pick(exit.walks.len())] += 1;
            }
            for (walk, &count) in exit.walks.iter().zip(&counts) {
                if count > 0 {
                    self.intern(exit.key, walk, count);
                }
            }
            self.stats.exit_samples += samples;
        }
        self.exits = exits;
        self.cpu_pacing = Some(pacing);
    }

    /// Sampler-thread path, cpu mode, at stop: counts what every thread still
    /// owes as [`Self::settle_exits`] does; random ticks leave every thread
    /// owing up to a period or more, which dropping would bias low.
    pub(super) fn settle_at_stop(&mut self) {
        if self.cpu_pacing.is_none() {
            return;
        }
        let period = self.period_ns;
        for (&tid, s) in self.threads.iter_mut() {
            // Exited since the last listing: its CPU read at the ticks since.
            if let Some(since) = s.take_read_since_accounted().filter(|d| !d.is_zero()) {
                self.stats.add_thread_cpu(tid as u64, since);
            }
            self.exits.push(Exit {
                tid,
                key: s.key,
                walks: std::mem::take(&mut s.paced.recent_walks),
                tail: ExitTail {
                    owed_ns: s.paced.debt.take_all(period),
                    cap_ns: 0,
                    unread_ns: 0,
                },
            });
        }
        self.settle_exits(0);
    }
}
