//! Threads that block the profiling signal (daemons, `sigwait` and
//! `signalfd` loops): never signalled or given a timer while they block,
//! their due samples counted as `signal_blocked_samples`, let back once
//! they unblock. One look at `SigBlk` is no proof (a starting thread, or one
//! inside btprof's handler, shows the signal blocked too), so a verdict
//! waits for a second look.

use crate::{Mode, SamplerStats};

use super::super::clocks::timers::thread_timers::ThreadTimer;
use super::super::kernel::threads;
use super::super::signal::handler;
use super::{monotonic_ns, BlockedSince, SamplerLoop, ThreadState};

impl BlockedSince {
    /// Seen blocking once: looked at again at the next listing, or on the
    /// sampler-thread path at the next tick finding it due.
    pub(super) fn provisional(cpu_ns: u64, listing: u64) -> Self {
        BlockedSince {
            cpu_ns,
            owed_ns: 0,
            recheck_listing: listing + 1,
            look_at_ns: 0,
            confirmed: false,
        }
    }

    /// Seen blocking twice (or its signal went untaken): looked at again at
    /// `recheck_listing`, and on the sampler-thread path after
    /// [`BLOCKED_LOOK_INTERVAL_NS`].
    fn confirmed(cpu_ns: u64, recheck_listing: u64) -> Self {
        BlockedSince {
            cpu_ns,
            owed_ns: 0,
            recheck_listing,
            look_at_ns: monotonic_ns() + BLOCKED_LOOK_INTERVAL_NS,
            confirmed: true,
        }
    }
}

/// Timer periods a thread may run without one sample before its signal
/// mask is looked at.
const SILENT_PERIODS: u64 = 20;

/// Listings between two looks at a blocking thread's signal mask.
const BLOCKED_RECHECK_LISTINGS: u64 = 20;

/// CPU time (ns) a thread seen blocking must run before a second look can
/// confirm it. A new thread starts with every signal blocked and unblocks
/// them at once, so a thread that has not run since shows the same mask
/// and proves nothing; it owes no CPU meanwhile, so waiting holds nothing.
const RAN_TO_CONFIRM_NS: u64 = 100_000;

/// Sampler-thread path: the longest (ns) a running thread confirmed to block
/// the signal goes without a mask look; listings alone can be too far apart
/// with thousands of threads. Only threads found due are looked at.
const BLOCKED_LOOK_INTERVAL_NS: u64 = 100_000_000;

/// Whether thread `tid` blocks `signal` itself: `SigBlk` has it and the
/// thread is not inside btprof's handler, whose `sa_mask` blocks it too
/// ([`handler::in_handler`], checked before and after). A thread just entering
/// the handler still looks blocked, so callers wait for a second look.
pub(super) fn blocks_signal_now(tid: i32, signal: libc::c_int) -> bool {
    !handler::in_handler(tid)
        && threads::blocks_signal(tid, signal) == Some(true)
        && !handler::in_handler(tid)
}

impl ThreadState {
    /// Whether its timer ran [`SILENT_PERIODS`] periods, by its last count,
    /// with no sample since the last look: it blocks the signal, or the
    /// kernel holds the expiry back.
    pub(super) fn timer_silent(&self, period_ns: u64) -> bool {
        self.timer.open.is_some() && self.silent_at(self.accounted_ns.unwrap_or(0), period_ns)
    }

    /// Whether its timer, at `count`, ran [`SILENT_PERIODS`] periods
    /// without a sample since it was last looked at.
    fn silent_at(&self, count: u64, period_ns: u64) -> bool {
        self.timer.samples == 0
            && count.saturating_sub(self.timer.checked_ns) >= SILENT_PERIODS * period_ns
    }

    /// Sampler-thread path: looks again at the mask of a thread found
    /// blocking, at a listing or once [`BlockedSince::look_at_ns`] passed.
    /// A second look confirms (held periods counted as blocked) or drops
    /// the verdict (owed to its next samples); later looks let it back once
    /// it unblocked and nothing of ours is queued. Returns whether it still
    /// counts as blocking.
    pub(super) fn look_again(
        &mut self,
        tid: i32,
        signal: libc::c_int,
        period_ns: u64,
        mode: Mode,
        stats: &mut SamplerStats,
    ) -> bool {
        let Some(blocked) = &mut self.blocked else {
            return false;
        };
        if blocked.confirmed {
            let taken = threads::signal_status(tid, signal)
                .is_some_and(|status| !status.blocked && !status.pending);
            if taken {
                self.blocked = None;
                return false;
            }
        } else {
            let periods = blocked.owed_ns / period_ns;
            if !blocks_signal_now(tid, signal) {
                if mode == Mode::Cpu {
                    stats.skipped_samples += self.paced.debt.refund(periods);
                }
                self.blocked = None;
                return false;
            }
            // Not run since the first look: no verdict yet; its clock tells.
            let ran =
                threads::thread_cpu_ns(tid).map_or(0, |cpu| cpu.saturating_sub(blocked.cpu_ns));
            if ran < RAN_TO_CONFIRM_NS {
                return true;
            }
            blocked.confirmed = true;
            stats.signal_blocked_samples += periods;
            stats.add_signal_blocked(tid as u64, periods);
        }
        blocked.look_at_ns = monotonic_ns() + BLOCKED_LOOK_INTERVAL_NS;
        true
    }
}

impl SamplerLoop {
    /// Timer path: closes the timers of threads that block the signal (so
    /// signals do not queue on them), counts their periods as failed while
    /// they block, and gives them a timer again once they unblock.
    pub(super) fn watch_blocked_threads(&mut self) {
        let (period, signal, listing) = (self.period_ns, self.sender.signal(), self.listing);
        for (&tid, state) in self.threads.iter_mut() {
            if let Some(blocked) = &mut state.blocked {
                let Some(cpu) = threads::thread_cpu_ns(tid) else {
                    continue;
                };
                blocked.owed_ns += cpu.saturating_sub(blocked.cpu_ns);
                blocked.cpu_ns = cpu;
                if !blocked.confirmed && listing >= blocked.recheck_listing {
                    // The second look disagrees: it gets its timer now; the
                    // held time goes unsampled, as before any timer opens.
                    if !blocks_signal_now(tid, signal) {
                        state.blocked = None;
                        continue;
                    }
                    if blocked.owed_ns < RAN_TO_CONFIRM_NS {
                        blocked.recheck_listing = listing + 1;
                        continue;
                    }
                    blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
                    blocked.confirmed = true;
                }
                if !blocked.confirmed {
                    continue;
                }
                let lost = blocked.owed_ns / period;
                self.stats.signal_blocked_samples += lost;
                self.stats.add_signal_blocked(tid as u64, lost);
                blocked.owed_ns %= period;
                if listing >= blocked.recheck_listing {
                    blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
                    if threads::blocks_signal(tid, signal) == Some(false) {
                        state.blocked = None;
                    }
                }
                continue;
            }
            let Some(count) = state.timer.open.as_ref().and_then(ThreadTimer::cpu_ns) else {
                continue;
            };
            let silent = state.silent_at(count, period);
            // A silent spell looked at while the thread runs our handler
            // would close a working timer, so it takes two silent spells in a
            // row, blocked at both looks: a thread that takes signals leaves a
            // sample in between.
            let suspect = silent && blocks_signal_now(tid, signal);
            if !suspect {
                state.timer.suspect_since_ns = None;
            } else if state.timer.suspect_since_ns.is_none() {
                state.timer.suspect_since_ns = Some(state.timer.checked_ns);
            } else {
                let since = state
                    .timer
                    .suspect_since_ns
                    .take()
                    .unwrap_or(state.timer.checked_ns);
                let lost = count.saturating_sub(since) / period;
                self.stats.signal_blocked_samples += lost;
                self.stats.add_signal_blocked(tid as u64, lost);
                state.timer.open = None;
                // CPU accounted from its clock from now on.
                state.accounted_ns = threads::thread_cpu_ns(tid);
                state.blocked = Some(BlockedSince::confirmed(
                    threads::thread_cpu_ns(tid).unwrap_or(0),
                    listing + BLOCKED_RECHECK_LISTINGS,
                ));
                continue;
            }
            if silent || state.timer.samples > 0 {
                state.timer.checked_ns = count;
                state.timer.samples = 0;
            }
        }
    }

    /// Sampler-thread path: a signal sent to `tid` was not taken in time.
    /// If it blocks the signal (or the signal is still queued), marks it
    /// blocked so at most one signal is ever outstanding; returns whether.
    pub(super) fn cannot_take_signal(&mut self, tid: i32) -> bool {
        let signal = self.sender.signal();
        let Some(status) = threads::signal_status(tid, signal) else {
            return false;
        };
        // Still pending: another must not be queued. Blocked outside our
        // handler: it may block the signal.
        if !(status.pending || (status.blocked && !handler::in_handler(tid))) {
            return false;
        }
        let listing = self.listing;
        if let Some(state) = self.threads.get_mut(&tid) {
            // An untaken signal is evidence enough; looked at again at the
            // next listing in case it was only slow.
            state.blocked = Some(BlockedSince::confirmed(
                threads::thread_cpu_ns(tid).unwrap_or(0),
                listing + 1,
            ));
        }
        true
    }

    /// Sampler-thread path: lets blocking threads have samples again once
    /// they unblock and nothing of ours is queued on them.
    pub(super) fn recheck_blocked_threads(&mut self) {
        let (signal, listing) = (self.sender.signal(), self.listing);
        let (period, mode) = (self.period_ns, self.config.mode);
        for (&tid, state) in self.threads.iter_mut() {
            let Some(blocked) = &mut state.blocked else {
                continue;
            };
            if listing < blocked.recheck_listing {
                continue;
            }
            blocked.recheck_listing = listing + BLOCKED_RECHECK_LISTINGS;
            state.look_again(tid, signal, period, mode, &mut self.stats);
            if let Some(blocked) = state.blocked.as_mut().filter(|b| !b.confirmed) {
                blocked.recheck_listing = listing + 1;
            }
        }
    }
}
