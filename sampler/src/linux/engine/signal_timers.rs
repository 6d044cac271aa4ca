//! Per-thread signal timers for the threads the rings cannot take: a
//! [`ThreadTimer`] per thread, opened busiest first, and the samples their
//! handlers left interned.

use super::super::clocks::timers::thread_timers::ThreadTimer;
use super::super::kernel::threads;
use super::collect::OwnedWalk;
use super::signal_blocked::blocks_signal_now;
use super::{monotonic_ns, BlockedSince, SamplerLoop};

/// Sampler CPU time (ns) one listing may spend opening timers for threads
/// that did not run since it read their clocks.
const IDLE_TIMER_BUDGET_NS: u64 = 1_000_000;

/// The same for the first listing, which `start` waits for: threads found
/// at start are often a pool about to burst, so more is spent up front.
const FIRST_TIMER_BUDGET_NS: u64 = 20_000_000;

/// One thread's signal timer on the perf clock; default on the sampler-thread clock.
#[derive(Default)]
pub(super) struct TimerThread {
    pub(super) open: Option<ThreadTimer>,
    /// Opening failed once (counted once, retried each listing).
    pub(super) failed: bool,
    /// Counted in [`SamplerStats::timer_threads`](crate::SamplerStats::timer_threads).
    pub(super) counted: bool,
    /// Timer samples since the last listing, and the timer's count then:
    /// many periods without a sample mean the signal is blocked.
    pub(super) samples: u64,
    pub(super) checked_ns: u64,
    /// Timer count at the start of a silent spell seen blocked; confirmed
    /// only if the next listing finds it silent and blocked again
    /// ([`blocks_signal_now`]).
    pub(super) suspect_since_ns: Option<u64>,
}

impl SamplerLoop {
    /// Opens timers for threads without one: every one that ran since this
    /// listing read its clock, busiest first, then idle ones within
    /// [`IDLE_TIMER_BUDGET_NS`] ([`FIRST_TIMER_BUDGET_NS`] at the first
    /// listing), so busy threads are sampled at once among thousands of idle.
    pub(super) fn open_timers(&mut self) {
        let (period, signal) = (self.period_ns, self.sender.signal());
        let mut wanted = std::mem::take(&mut self.timer_queue);
        wanted.clear();
        for (&tid, state) in &self.threads {
            if state.timer.open.is_some()
                || state.ring.birth_unread
                || state.blocked.is_some()
                || state.seen_listing != self.listing
                || ((state.ring.born || state.ring.opened_on) && !state.ring.deep)
            {
                continue;
            }
            // CPU time since `account_cpu` read the clock this listing.
            let ran = match (threads::thread_cpu_ns(tid), state.accounted_ns) {
                (Some(now), Some(before)) => now.saturating_sub(before),
                _ => 0,
            };
            wanted.push((ran, tid));
        }
        wanted.sort_unstable_by(|a, b| b.cmp(a));
        let started = threads::own_cpu_ns();
        let budget = if self.listing <= 1 {
            FIRST_TIMER_BUDGET_NS
        } else {
            IDLE_TIMER_BUDGET_NS
        };
        for &(ran, tid) in &wanted {
            if ran == 0 && threads::own_cpu_ns().saturating_sub(started) > budget {
                break;
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if !state.mask_checked {
                // A thread blocking the signal gets no timer: its signals
                // would queue or be taken by its `sigwait`.
                state.mask_checked = true;
                if blocks_signal_now(tid, signal) {
                    if state.ring.born || state.ring.opened_on {
                        // A deep born thread blocking the signal keeps its ring samples.
                        state.ring.deep = false;
                        state.mask_checked = false;
                        continue;
                    }
                    let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                    state.blocked = Some(BlockedSince::provisional(cpu, self.listing));
                    continue;
                }
            }
            match ThreadTimer::open(tid, period, signal) {
                Ok(timer) => {
                    // The timer counts from zero: CPU is accounted from here,
                    // and a born thread's ring samples stop.
                    let born = std::mem::take(&mut state.ring.born);
                    if born | std::mem::take(&mut state.ring.opened_on) {
                        let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                        if let Some(born) = self.ring.events.as_mut() {
                            born.hand_off(tid, monotonic_ns(), cpu);
                        }
                    }
                    state.accounted_ns = Some(0);
                    state.timer.open = Some(timer);
                    self.stats.timer_threads += u64::from(!state.timer.counted);
                    state.timer.counted = true;
                    state.timer.samples = 0;
                    state.timer.checked_ns = 0;
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.stats.exited_threads += 1;
                }
                Err(_) if state.timer.failed => {}
                Err(_) => {
                    state.timer.failed = true;
                    self.stats.failed_samples += 1;
                }
            }
        }
        self.timer_queue = wanted;
    }

    /// Interns every sample a timer handler left; returns how many slots
    /// handlers are still writing.
    pub(super) fn collect_timer_samples(&mut self) -> usize {
        let mut walks = std::mem::take(&mut self.timer_walks);
        walks.clear();
        let (cfi, stats, spare) = (&mut self.cfi, &mut self.stats, &mut self.spare_frames);
        let max_depth = self.config.max_depth;
        let writing = self.slots.collect_claimed(|tid, walk| {
            let frames = spare.take();
            let walk = OwnedWalk::of_reusing(frames, &walk, cfi.as_mut(), max_depth, stats);
            walks.push((tid, walk));
        });
        for (tid, mut walk) in walks.drain(..) {
            self.label(tid, &mut walk);
            if let Some(state) = self.threads.get_mut(&tid) {
                state.timer.samples += 1;
                state.sampled_since_read += 1;
            }
            match self.key_for_sample(tid, None) {
                Some(key) => {
                    self.intern(key, &walk, 1);
                    self.spare_frames.give(walk);
                }
                // Never listed (exited before): its sample cannot be named.
                None => {
                    self.stats.exited_threads += 1;
                    self.spare_frames.give(walk);
                }
            }
        }
        self.timer_walks = walks;
        writing
    }
}
