//! Per-thread signal timers, for the threads the rings cannot take and
//! on the POSIX clock: a [`CpuTimer`] per thread (a perf task-clock event
//! that signals its thread, or a POSIX CPU timer), opened busiest thread
//! first, and the samples their handlers left in free slots interned.

use std::time::Instant;

use super::super::cpu_timer::CpuTimer;
use super::super::threads;
use super::collect::OwnedWalk;
use super::signal_blocked::blocks_signal_now;
use super::{monotonic_ns, BlockedSince, SamplerLoop, SlotUse, ThreadState};

/// Sampler CPU time one listing may spend opening timers for threads that
/// did not run since it read their clocks (see `open_timers`).
const IDLE_TIMER_BUDGET_NS: u64 = 1_000_000;

/// The same for the run's first listing, which `start` waits for: the
/// threads found at start are often a pool about to burst (a server's
/// workers), which would run before later listings reached them. 20 ms
/// opens the timers of a thousand threads or more.
const FIRST_TIMER_BUDGET_NS: u64 = 20_000_000;

/// One thread's signal timer on the kernel-paced clocks (perf or POSIX),
/// and what its samples say about it; left at its default on the
/// sampler-thread clock.
#[derive(Default)]
pub(super) struct TimerThread {
    /// The thread's timer, once opened.
    pub(super) open: Option<CpuTimer>,
    /// Opening the timer failed once (counted once, retried each listing).
    pub(super) failed: bool,
    /// Counted in [`SamplerStats::timer_threads`](crate::SamplerStats::timer_threads).
    pub(super) counted: bool,
    /// Timer samples interned since the last listing, and the timer's
    /// count then: a thread whose timer ran many periods without a single
    /// sample has the signal blocked.
    pub(super) samples: u64,
    pub(super) checked_ns: u64,
    /// The timer count at the start of a silent spell in which the thread
    /// was seen with the signal blocked. It is taken for one that blocks
    /// the signal only if the next look, a listing later, finds it silent
    /// and blocked again ([`blocks_signal_now`]).
    pub(super) suspect_since_ns: Option<u64>,
    /// POSIX clock, cpu mode: the periods its timer's samples stood for
    /// since the timer opened, and the last of them (its key and walk), on
    /// which the periods its timer ran out but never signalled are counted
    /// when it exits ([`SamplerLoop::count_posix_tails`]).
    pub(super) periods: u64,
    pub(super) last: Option<(u32, OwnedWalk)>,
}

/// A thread on the POSIX clock that exited: its last timer sample (key and
/// walk), the periods its samples stood for, and its CPU time since its
/// timer opened at its last reading.
pub(super) struct PosixExit {
    pub(super) last: (u32, OwnedWalk),
    pub(super) periods: u64,
    pub(super) cpu_ns: u64,
}

impl PosixExit {
    /// What thread `state` leaves to count as it exits or sampling stops:
    /// its last POSIX timer sample, if it had one.
    pub(super) fn of(state: &mut ThreadState) -> Option<PosixExit> {
        Some(PosixExit {
            last: state.timer.last.take()?,
            periods: state.timer.periods,
            cpu_ns: state.accounted_ns.unwrap_or(0),
        })
    }
}

impl SamplerLoop {
    /// Opens a timer for threads that have none yet: every one that ran
    /// since this listing read its clock, busiest first, then idle ones
    /// for at most [`IDLE_TIMER_BUDGET_NS`] of the sampler's CPU time
    /// ([`FIRST_TIMER_BUDGET_NS`] at the first listing). The rest wait for
    /// later listings, so that a process with thousands of idle threads
    /// has its busy ones sampled at once instead of after seconds of
    /// opening timers no one needs yet (when the sampler thread drains no
    /// slots either).
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
            // CPU time since `account_cpu` read the clock in this listing.
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
                // A thread that blocks the signal gets no timer: its
                // overflows would queue up (real-time signals) or be taken
                // by its `sigwait`. Counted by `watch_blocked_threads`.
                state.mask_checked = true;
                if blocks_signal_now(tid, signal) {
                    if state.ring.born || state.ring.opened_on {
                        // A deep born thread that blocks the signal keeps
                        // its ring samples (cut at the kernel's depth).
                        state.ring.deep = false;
                        state.mask_checked = false;
                        continue;
                    }
                    let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                    state.blocked = Some(BlockedSince::provisional(cpu, self.listing));
                    continue;
                }
            }
            match CpuTimer::open(self.clock, tid, period, signal) {
                Ok(timer) => {
                    // The timer counts from zero: CPU time is accounted from
                    // here, where samples can start. A (deep) born thread's
                    // ring samples stop here.
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
                    state.timer.periods = 0;
                    state.timer.last = None;
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

    /// POSIX clock, cpu mode: samples each thread in `held_back`, whose
    /// timer ran the given number of periods of its CPU time without a
    /// signal though the thread takes it (the kernel held the expiry back;
    /// see [`super::super::posix_timers`]), with a signal of the sampler
    /// thread's own standing for those periods, and restarts its timer
    /// so that they are not counted again when the held-back signal comes.
    /// The sample lands where the thread is when the signal arrives, at a
    /// listing: a moment unrelated to its code.
    pub(super) fn sample_silent_timers(&mut self, held_back: &[(i32, u64)]) {
        for &(tid, periods) in held_back {
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            let Some(armed) = self.slots.arm(self.config.max_depth) else {
                self.stats.slots_full += 1;
                self.stats.skipped_samples += periods;
                continue;
            };
            // No lateness check: a sample that waits for its thread to get
            // a CPU again still lands in the thread's own code.
            self.slots.mark_sent(armed.slot, 0, 0);
            match self.sender.send(tid, armed.signal_value()) {
                Ok(()) => {
                    state.pending = true;
                    self.slot_uses[armed.slot] = Some(SlotUse {
                        tid,
                        key: state.key,
                        weight: periods,
                        armed_at: Instant::now(),
                        by_request: false,
                    });
                    if let Some(CpuTimer::Posix(timer)) = &state.timer.open {
                        // Failing, the held-back signal may stand for these
                        // periods again: at worst as if it came on time.
                        let _ = timer.restart(self.period_ns);
                    }
                }
                Err(e) => {
                    // Nobody was signalled, so nobody can claim the slot.
                    self.slots.cancel(armed.slot);
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        self.stats.exited_threads += 1;
                    } else {
                        self.stats.failed_samples += periods;
                    }
                }
            }
        }
    }

    /// Interns every sample a timer handler left; returns how many slots
    /// handlers are still writing.
    pub(super) fn collect_timer_samples(&mut self) -> usize {
        let mut walks = std::mem::take(&mut self.timer_walks);
        walks.clear();
        let (cfi, stats, spare) = (&mut self.cfi, &mut self.stats, &mut self.spare_frames);
        let max_depth = self.config.max_depth;
        let writing = self.slots.collect_claimed(|tid, weight, walk| {
            let frames = spare.take();
            let walk = OwnedWalk::of_reusing(frames, &walk, cfi.as_mut(), max_depth, stats);
            walks.push((tid, weight, walk));
        });
        let keep_last = self.tick_paced_timers();
        for (tid, weight, walk) in walks.drain(..) {
            if let Some(state) = self.threads.get_mut(&tid) {
                state.timer.samples += 1;
                state.sampled_since_read += weight;
            }
            match self.key_for_sample(tid, None) {
                Some(key) => {
                    self.intern(key, &walk.as_collected(), weight);
                    match self.threads.get_mut(&tid).filter(|_| keep_last) {
                        Some(state) => {
                            state.timer.periods += weight;
                            if let Some((_, replaced)) = state.timer.last.replace((key, walk)) {
                                self.spare_frames.give(replaced);
                            }
                        }
                        None => self.spare_frames.give(walk),
                    }
                }
                // A thread this sampler never listed (it exited before):
                // its sample cannot be named.
                None => {
                    self.stats.exited_threads += 1;
                    self.spare_frames.give(walk);
                }
            }
        }
        self.timer_walks = walks;
        writing
    }

    /// POSIX clock, cpu mode: counts, for each thread that exited, the
    /// periods of CPU time its timer ran out that no signal stood for, on
    /// its last sample's stack ([`PosixExit`]).
    ///
    /// The kernel checks a CPU timer only on a scheduler tick that finds
    /// its thread running, so a thread that runs a few milliseconds in all
    /// may exit with periods its timer counted but never signalled: in a
    /// pool of 512 threads of 4 ms each, most of its time. Those periods
    /// are counted as the overrun of a signal is: on a stack the thread
    /// was seen on. Added to the weighted count only, never as a distinct
    /// sample; the CPU time after the thread's last clock reading is not
    /// counted (nor in its CPU time).
    pub(super) fn count_posix_tails(&mut self) {
        let period = self.period_ns.max(1);
        for exit in std::mem::take(&mut self.posix_exits) {
            let (key, walk) = &exit.last;
            let owed = (exit.cpu_ns / period).saturating_sub(exit.periods);
            // The part of a period after the last one, at random by its
            // fraction (none where the signals already stood for more).
            let part = owed > 0 || exit.cpu_ns / period == exit.periods;
            let extra = u64::from(part && self.tail_rng.chance(exit.cpu_ns % period, period));
            let weight = owed + extra;
            if weight > 0 {
                self.intern_weight(*key, &walk.as_collected(), weight);
                self.stats.exit_samples += weight;
            }
        }
    }
}
