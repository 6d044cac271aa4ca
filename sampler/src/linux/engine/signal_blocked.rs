//! Threads that block the profiling signal (daemons, `sigwait` and
//! `signalfd` loops): found without queueing signals on them, never
//! signalled or given a timer while they block, their due samples counted
//! as `signal_blocked_samples`, and let back once they unblock. A single
//! look at a thread's `SigBlk` is no proof (a thread starting, or inside
//! btprof's own handler, shows the signal blocked too), so a verdict waits
//! for a second look. On the timer path a silent timer raises the
//! suspicion ([`SamplerLoop::watch_blocked_threads`]); on the
//! sampler-thread path a signal not taken in time
//! ([`SamplerLoop::cannot_take_signal`]) or the mask looked at before a
//! thread's first signal.

use crate::{Mode, SamplerStats};

use super::super::clocks::timers::thread_timers::ThreadTimer;
use super::super::kernel::threads;
use super::super::signal::slots;
use super::{monotonic_ns, BlockedSince, SamplerLoop, ThreadState};

impl BlockedSince {
    /// Seen blocking once: to be looked at again at the next listing, or
    /// on the sampler-thread path at the next tick that finds it due.
    pub(super) fn provisional(cpu_ns: u64, listing: u64) -> Self {
        BlockedSince {
            cpu_ns,
            owed_ns: 0,
            recheck_listing: listing + 1,
            look_at_ns: 0,
            confirmed: false,
        }
    }

    /// Seen blocking twice (or its signal went untaken): its mask is
    /// looked at again at listing `recheck_listing`, and on the
    /// sampler-thread path also once [`BLOCKED_LOOK_INTERVAL_NS`] passed.
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

/// The CPU time a thread seen blocking the signal must have run since
/// that look for a second look to confirm it. A thread starts with every
/// signal blocked (glibc's `pthread_create`) and unblocks them within
/// microseconds of its first instructions; one that has not run since
/// (waiting for its first CPU on a busy machine, or asleep) shows the same
/// mask again, which proves nothing: confirmed then, a new thread of a
/// pool was judged to block the signal and lost its samples until the
/// look 20 listings later (15% of a short-lived pool's samples beside two
/// busy processes). Until it ran this much the verdict waits, and holds
/// nothing, as the thread owes no CPU time.
const RAN_TO_CONFIRM_NS: u64 = 100_000;

/// Sampler-thread path: the longest a thread confirmed to block the signal
/// goes without a look at its mask while it runs. Listings alone are too
/// far apart for that in a process with thousands of threads (each
/// listing reads every thread's clock, so they are spaced by their cost):
/// a thread that unblocked stayed unsampled for seconds. A look reads
/// its `/proc` status file, about 10 µs, and only a thread found due (it
/// ran a period since its last sample) is looked at.
const BLOCKED_LOOK_INTERVAL_NS: u64 = 100_000_000;

/// Whether thread `tid` blocks `signal` itself: `SigBlk` has it, and the
/// thread is not inside (or just leaving) btprof's own handler, whose
/// `sa_mask` puts the signal in `SigBlk` while it runs
/// ([`slots::in_handler`], looked at before and after the mask is read).
/// A thread that just entered the handler and has not claimed its slot yet
/// still looks blocked here: callers take the verdict as final only when
/// a later look agrees, or undo it at the next listing.
pub(super) fn blocks_signal_now(tid: i32, signal: libc::c_int) -> bool {
    !slots::in_handler(tid)
        && threads::blocks_signal(tid, signal) == Some(true)
        && !slots::in_handler(tid)
}

impl ThreadState {
    /// Whether the thread's timer ran [`SILENT_PERIODS`] periods, by the
    /// last reading of its count, without a sample since it was last
    /// looked at: it blocks the signal, or the kernel holds the timer's
    /// expiry back.
    pub(super) fn timer_silent(&self, period_ns: u64) -> bool {
        self.timer.open.is_some() && self.silent_at(self.accounted_ns.unwrap_or(0), period_ns)
    }

    /// Whether its timer, at `count`, ran [`SILENT_PERIODS`] periods
    /// without a sample since it was last looked at.
    fn silent_at(&self, count: u64, period_ns: u64) -> bool {
        self.timer.samples == 0
            && count.saturating_sub(self.timer.checked_ns) >= SILENT_PERIODS * period_ns
    }

    /// Sampler-thread path: looks at the mask of a thread found blocking
    /// `signal`, at a listing or at a tick that finds it due, once
    /// [`BlockedSince::look_at_ns`] passed. The second look
    /// ([`BlockedSince::confirmed`]) confirms the verdict and counts the
    /// periods held meanwhile as blocked, or drops it and owes them to
    /// the thread's next samples; a later look lets the thread have
    /// samples again once it unblocked and nothing of ours is queued on
    /// it. Returns whether it still counts as blocking the signal.
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
            // Not run since the first look: no verdict yet, looked at
            // again at the next tick that finds it due (its owed periods
            // may be older than that look, so its clock tells).
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
    /// Finds threads that block the profiling signal (their timer ran
    /// many periods, yet no sample came) and closes their timers, so
    /// signals do not queue up on them; counts their CPU periods as failed
    /// samples while they block; and lets them have a timer again once
    /// they unblock.
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
                    // The second look: a thread that was starting, or in
                    // btprof's handler, gets its timer at this listing;
                    // the CPU time held meanwhile was never sampled, like
                    // any thread's before its timer opened.
                    if !blocks_signal_now(tid, signal) {
                        state.blocked = None;
                        continue;
                    }
                    if blocked.owed_ns < RAN_TO_CONFIRM_NS {
                        // It has not run since: no verdict yet.
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
            // `SigBlk` also holds the signal while the thread runs btprof's
            // own handler: a silent spell (kernel time, or the sampler
            // thread starved on a busy machine) looked at in that moment
            // would close a working thread's timer and count its samples as
            // lost. So the handler's own slots are looked at too, and it
            // takes two silent spells in a row, each of many periods of the
            // thread's CPU time without a single sample, with the signal
            // blocked at both looks: a thread that takes its signals
            // leaves a sample in between.
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
                // CPU time is accounted from its clock from now on.
                state.accounted_ns = threads::thread_cpu_ns(tid);
                // Two looks agreed already.
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
    /// If the thread blocks the signal (or it is still queued on it), it
    /// is marked blocked and not signalled again until it unblocks, so at
    /// most one signal is ever outstanding for it; returns whether it was.
    pub(super) fn cannot_take_signal(&mut self, tid: i32) -> bool {
        let signal = self.sender.signal();
        let Some(status) = threads::signal_status(tid, signal) else {
            return false;
        };
        // Still pending: it has not taken the signal, whatever its mask,
        // and another must not be queued on it. Blocked (not inside
        // btprof's handler, whose `sa_mask` blocks it too): it may be
        // one that blocks the signal.
        if !(status.pending || (status.blocked && !slots::in_handler(tid))) {
            return false;
        }
        let listing = self.listing;
        if let Some(state) = self.threads.get_mut(&tid) {
            // Its signal went untaken for SAMPLE_TIMEOUT: evidence enough.
            // Looked at again at the next listing, so a thread that was
            // only slow to take its signal is soon sampled again.
            state.blocked = Some(BlockedSince::confirmed(
                threads::thread_cpu_ns(tid).unwrap_or(0),
                listing + 1,
            ));
        }
        true
    }

    /// Sampler-thread path: lets threads that blocked the signal have
    /// samples again once they unblocked it and nothing of ours is queued
    /// on them any more.
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
                // Still no verdict: looked at again at the next listing.
                blocked.recheck_listing = listing + 1;
            }
        }
    }
}
