//! The sampler-thread clock: where perf events are refused, when forced,
//! and always in wall mode, the sampler thread paces the samples itself.
//!
//! In cpu mode a thread is due when its CPU time since its last sample
//! reaches a period ([`CpuDebt`]); the sampler wakes at random moments
//! ([`CpuWakeups`]) and signals the due threads that run user code. In
//! wall mode every thread is due at each tick: a running one is asked for
//! its sample with a one-shot CPU timer, one off CPU is counted without
//! being interrupted, on the stack it is blocked on, read from outside
//! ([`SamplerLoop::read_blocked_stack`]). Only the threads active at the
//! last listing are looked at ([`SamplerLoop::choose_active`]), with the
//! idle ones whose wake timers fired since (cpu mode, [`super::wake_timers`]);
//! CPU time on threads not looked at brings the next listing forward
//! ([`UnseenCpu`]). What it keeps per thread is a [`PacedThread`].

use std::time::{Duration, Instant};

use crate::{profile, Mode};

use super::super::clocks::paced::cpu_debt::CpuDebt;
use super::super::clocks::paced::cpu_wakeups::CpuWakeups;
use super::super::clocks::paced::exit_tails::ExitTails;
use super::super::clocks::paced::unseen_cpu::UnseenCpu;
use super::super::kernel::cpu_timers::PosixTimer;
use super::super::kernel::threads;
use super::collect::OwnedWalk;
use super::new_threads::NewThreads;
use super::signal_blocked::blocks_signal_now;
use super::wake_timers::{WakeTimer, WakeTimers};
use super::{monotonic_ns, BlockedSince, SamplerLoop, SlotUse};

/// Wall mode: CPU time a thread may gain since its last sample and still
/// count as not having run: taking a sample costs the thread a few
/// microseconds of handler (up to ~10 in a VM, more under load).
pub(super) const IDLE_SLACK_NS: u64 = 50_000;

/// One thread's part of the sampler-thread clock's state; left at its
/// default on the kernel-paced clocks.
#[derive(Default)]
pub(super) struct PacedThread {
    /// Cpu mode: the thread's CPU clock on the previous tick.
    pub(super) last_cpu_ns: Option<u64>,
    /// Cpu mode: the wakeup whose look read its clock last
    /// ([`SamplerLoop::look_at_clock`]).
    pub(super) read_tick: u64,
    /// Cpu mode: CPU time used and not yet stood for by a sample.
    pub(super) debt: CpuDebt,
    /// Wall mode: the thread's last stack, counted again, off CPU, while
    /// its CPU clock does not move, and its CPU clock when that stack was
    /// taken.
    pub(super) last_walk: Option<OwnedWalk>,
    pub(super) walk_cpu_ns: u64,
    /// Wall mode: `last_walk` is a whole stack (a sample the thread took,
    /// or its blocked stack read and unwound with the modules known), not
    /// a stand-in (its system call's pc alone, or a read made before the
    /// module list was): a stand-in is read again at a later tick rather
    /// than counted for as long as the thread stays blocked.
    pub(super) last_walk_whole: bool,
    /// Wall mode: the one-shot timer asking for the sample in flight
    /// ([`SamplerLoop::wall_requests`]); deleted, and with it any signal it
    /// still had queued, once that sample is done.
    pub(super) request: Option<PosixTimer>,
    /// Wall mode: ticks that found the thread running and that no sample
    /// has stood for yet. Its request fires on a scheduler tick of its
    /// running, which a thread working in short bursts between blocking
    /// calls reaches only now and then; the sample that lands stands for
    /// all of them, so its CPU ticks are not counted as off CPU.
    pub(super) running_ticks: u64,
    /// Wall mode: the tick up to which the thread's samples are counted.
    pub(super) counted_tick: u64,
    /// Its CPU clock at the last listing, to tell idle threads from
    /// active ones.
    pub(super) listing_cpu_ns: Option<u64>,
    /// Its CPU clock as this listing's accounting read it
    /// ([`SamplerLoop::account_cpu`]); `None` where the read failed (it
    /// exited). Taken by [`SamplerLoop::choose_active`], which would
    /// otherwise read every thread's clock a second time in a row: with
    /// thousands of threads, a large part of a listing's cost.
    pub(super) listed_cpu_ns: Option<u64>,
    /// Cpu mode: the last [`RECENT_WALKS`](super::RECENT_WALKS) stacks of
    /// a young thread born while sampling (of any other, the last one), on
    /// which the CPU time it used after its last sample is counted when it
    /// exits ([`ExitTails`]) or the profiler stops.
    pub(super) recent_walks: Vec<OwnedWalk>,
    /// Started while sampling (seen at a later listing than the first):
    /// owed its CPU time from zero.
    pub(super) born_during_run: bool,
    /// Cpu mode: the timer that tells the sampler when this idle thread
    /// runs again; deleted with the thread's state.
    pub(super) wake: Option<WakeTimer>,
}

/// The sampler-thread clock's own state in cpu mode; `None` on the
/// kernel-paced clocks and in wall mode, which wakes on a fixed period.
pub(super) struct CpuPacing {
    /// When to wake: random ticks, and a look at the threads at least
    /// every `min(period, 2 ms)`.
    pub(super) wakeups: CpuWakeups,
    /// CPU time of threads it did not look at, to list the threads early
    /// when a new one runs.
    pub(super) unseen: UnseenCpu,
    /// The CPU time threads used after their last sample, counted when
    /// they exit or the profiler stops.
    pub(super) tails: ExitTails,
    /// Timers that tell when an idle thread runs again.
    pub(super) wakes: WakeTimers,
    /// Finds threads created between listings (`None` where the kernel
    /// does not show the last thread id it gave).
    pub(super) new_threads: Option<NewThreads>,
    /// The last look found a thread born while sampling still young
    /// ([`CpuWakeups::next`]).
    pub(super) young_threads: bool,
    /// When the last thread born while sampling was registered: while one
    /// is young, listings are not put off
    /// ([`SamplerLoop::listing_can_wait`]).
    pub(super) last_birth: Option<std::time::Instant>,
}

impl CpuPacing {
    /// The state for sampling every `period_ns` of each thread's CPU time,
    /// its random ticks seeded with `seed`.
    pub(super) fn new(period_ns: u64, seed: u64) -> CpuPacing {
        CpuPacing {
            wakeups: CpuWakeups::new(period_ns, seed),
            unseen: UnseenCpu::new(period_ns),
            tails: ExitTails::new(monotonic_ns()),
            wakes: WakeTimers::new(),
            new_threads: NewThreads::open(),
            young_threads: false,
            last_birth: None,
        }
    }
}

impl SamplerLoop {
    /// Sampler-thread path, cpu mode: whether to list the threads before
    /// the listing interval is up, because CPU time went to threads it did
    /// not look at ([`UnseenCpu`]): a new thread, most likely, which would
    /// otherwise run unsampled until the next listing, or to its end. As
    /// often as listings' cost allows, spread over time ([`UnseenCpu`]).
    ///
    /// The threads it looks at are read here first, with the process's
    /// clock right after: compared with their readings from the last
    /// wakeup, the CPU time they used since then looked unseen, and at a
    /// look every period or 2 ms two busy threads always passed the
    /// threshold. Nearly every wakeup then listed the threads, as far as
    /// the listings' share of the sampler's time allowed.
    ///
    /// [`UnseenCpu`]: super::super::clocks::paced::unseen_cpu::UnseenCpu
    pub(super) fn unseen_thread_runs(&mut self) -> bool {
        if !self
            .cpu_pacing
            .as_ref()
            .is_some_and(|p| p.unseen.due(monotonic_ns()))
        {
            return false;
        }
        let before = threads::own_cpu_ns();
        for i in 0..self.active.len() {
            self.look_at_clock(self.active[i]);
        }
        let process = profile::process_cpu_time().as_nanos() as u64;
        let own = threads::own_cpu_ns();
        let Some(CpuPacing { unseen, .. }) = self.cpu_pacing.as_mut() else {
            return false;
        };
        unseen.check(monotonic_ns(), process, own, own.saturating_sub(before))
    }

    /// Reads active thread `tid`'s CPU clock and counts what it used since
    /// its last reading as seen ([`UnseenCpu`], [`ExitTails`]); returns
    /// the reading and when it was taken (monotonic ns), or `None` once it
    /// exited (counted when the list is re-read, having run at most until
    /// now since its last reading) or if it is not known.
    ///
    /// In cpu mode a clock is read once per wakeup: the check for unseen
    /// CPU time and the signalling pass that follows it microseconds later
    /// share the reading.
    ///
    /// [`UnseenCpu`]: super::super::clocks::paced::unseen_cpu::UnseenCpu
    fn look_at_clock(&mut self, tid: i32) -> Option<(u64, u64)> {
        let tick = self.tick;
        let state = self.threads.get_mut(&tid)?;
        let pacing = self.cpu_pacing.as_mut();
        if pacing.is_some() && state.paced.read_tick == tick {
            if let Some(cpu) = state.read_ns {
                return Some((cpu, state.read_at_ns));
            }
        }
        let Some(cpu) = threads::thread_cpu_ns(tid) else {
            state.gone_at_ns.get_or_insert_with(monotonic_ns);
            return None;
        };
        let at = monotonic_ns();
        if let Some(CpuPacing { tails, unseen, .. }) = pacing {
            unseen.saw(tails.saw(&mut state.read_ns, cpu));
            state.read_at_ns = at;
            state.paced.read_tick = tick;
        }
        Some((cpu, at))
    }

    /// Sampler-thread path: signals every thread due this tick that is
    /// running user code, starting where the last tick ran out of slots.
    ///
    /// A thread that is not running user code is never interrupted: a
    /// signal would make its blocking call (`poll`, `nanosleep`, `select`,
    /// `epoll_wait`, a `read` with a timeout…) fail with `EINTR`. In cpu
    /// mode its owed CPU time waits until it runs again. In wall mode a
    /// thread whose CPU clock has not moved since its last sample has not
    /// run, so its last stack is counted again, off CPU; one that ran and
    /// is off CPU now is counted off CPU on the stack it is blocked on
    /// ([`Self::count_blocked`]). A running one is asked for a sample with
    /// a one-shot CPU timer where the kernel allows them
    /// ([`Self::wall_requests`]), else signalled.
    ///
    /// Only threads found active at the last listing, or woken since, are
    /// looked at ([`Self::choose_active`]): with thousands of idle threads,
    /// reading every thread's clock every tick would cost more than the
    /// period.
    pub(super) fn signal_due_threads(&mut self) {
        let random_tick = self
            .cpu_pacing
            .as_ref()
            .is_some_and(|p| p.wakeups.random_tick());
        let count = self.active.len();
        let start = if count == 0 { 0 } else { self.rotation % count };
        let mut ran_out_at = None;
        let mut young_threads = false;
        for n in 0..count {
            let i = (start + n) % count;
            let tid = self.active[i];
            let Some((cpu, read_at_ns)) = self.look_at_clock(tid) else {
                continue;
            };
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            young_threads |= state.young_born();
            let mut weight = 1;
            // The thread's CPU clock and when it was read: for the handler
            // to tell whether the thread waited for a CPU meanwhile.
            let mut read_at = (0, 0);
            // Whether its CPU clock moved since the last tick: see below.
            let progressed = state.paced.last_cpu_ns.is_none_or(|last| cpu > last);
            if self.config.mode == Mode::Wall {
                state.paced.last_cpu_ns = Some(cpu);
            }
            if self.config.mode == Mode::Cpu {
                read_at = (read_at_ns, cpu);
                // The CPU time used since the last look is owed to the next
                // sample; a sample is due once a full period is owed.
                if let Some(last) = state.paced.last_cpu_ns {
                    let used = cpu.saturating_sub(last);
                    self.stats.skipped_samples += state.paced.debt.accrue(used, self.period_ns);
                }
                state.paced.last_cpu_ns = Some(cpu);
                let Some(due) = state.paced.debt.due(self.period_ns) else {
                    continue;
                };
                // Only a random tick finds a due thread at an unbiased
                // point of its code (`CpuWakeups`). A young thread born
                // while sampling is sampled at any wakeup that finds it
                // due: it may live a period or two, and be gone before the
                // next random tick (with random ticks alone, 300 threads
                // of 2 ms had samples for 74% of their CPU time).
                if !random_tick && !state.young_born() {
                    continue;
                }
                weight = due;
            }
            // Only a thread that ran since (in cpu mode, one found due)
            // can have changed its mask: in wall mode every blocked thread
            // is visited at every tick, and most of them sleep.
            let look = (progressed || self.config.mode == Mode::Cpu)
                && state
                    .blocked
                    .as_ref()
                    .is_some_and(|b| monotonic_ns() >= b.look_at_ns);
            if look {
                let signal = self.sender.signal();
                let (period, mode) = (self.period_ns, self.config.mode);
                if !state.look_again(tid, signal, period, mode, &mut self.stats) {
                    // It takes the signal (after all, or again): sampled
                    // now, for the periods held meanwhile too.
                    weight = state.paced.debt.due(period).unwrap_or(weight);
                }
            }
            if self.config.mode == Mode::Wall && state.blocked.is_some() {
                // Off CPU it needs no signal: counted as any thread off
                // CPU is, on its last stack while its clock stands still,
                // else on the stack it waits on, read from outside. Only
                // its ticks on a CPU are lost to the signal it blocks.
                let running = progressed
                    && state.run_state(tid, &mut self.thread_keys)
                        == Some(threads::RunState::Running);
                if !running {
                    if !self.count_unmoved(tid, cpu) {
                        self.count_blocked(tid, cpu);
                    }
                    continue;
                }
            }
            if let Some(blocked) = &mut state.blocked {
                // It blocks the signal: not signalled, its samples counted
                // (held until a second look confirms it).
                if self.config.mode == Mode::Cpu {
                    state.paced.debt.pay(weight, self.period_ns);
                }
                if blocked.confirmed {
                    self.stats.signal_blocked_samples += weight;
                    self.stats.add_signal_blocked(tid as u64, weight);
                } else {
                    blocked.owed_ns += weight * self.period_ns;
                }
                continue;
            }
            if self.config.mode == Mode::Wall && self.count_unmoved(tid, cpu) {
                continue;
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if state.pending && self.wall_requests {
                // Its request waits for it to run. Off CPU meanwhile, it is
                // counted as such; running, its ticks are counted when the
                // sample lands.
                let running = progressed
                    && state.run_state(tid, &mut self.thread_keys)
                        == Some(threads::RunState::Running);
                if running {
                    state.paced.running_ticks += 1;
                    state.paced.counted_tick = self.tick;
                } else {
                    self.count_blocked(tid, cpu);
                }
                continue;
            }
            if state.pending {
                self.stats.skipped_samples += 1;
                continue;
            }
            // Cpu mode: `R` alone is not proof that a thread runs user
            // code: a thread woken from `poll` (or `select`, ...) is `R`
            // while it waits for a CPU, still inside the call, and a signal
            // then makes the call fail with `EINTR` instead of returning
            // its timeout (on a busy machine, up to 34 of 300 calls did).
            // Such a thread has not run since the last tick; one that runs
            // user code has (or was preempted there, when its sample would
            // come late anyway). Its owed CPU time waits for a tick that
            // finds it running, never signalled into its blocking call: such
            // a signal would be taken at the call's exit after a wait, so its
            // sample is given up as late (`slots::claim_armed`) and the debt
            // stays, a cascade of `EINTR` for nothing (62 of 300 calls under
            // load). A thread whose wake-ups fall exactly in step with the
            // ticks is never found running: its owed time past the debt's
            // cap is counted as skipped, not sampled.
            if self.config.mode == Mode::Cpu && !progressed {
                continue;
            }
            match self
                .threads
                .get_mut(&tid)
                .and_then(|s| s.run_state(tid, &mut self.thread_keys))
            {
                // Wall mode: `R` without progress since the last tick is a
                // thread woken inside a blocking call (or preempted), still
                // waiting for a CPU: counted like a blocked one, not
                // signalled (see the cpu-mode note above).
                Some(threads::RunState::Running)
                    if self.config.mode == Mode::Wall && !progressed =>
                {
                    self.count_blocked(tid, cpu);
                    continue;
                }
                Some(threads::RunState::Running) => {}
                Some(threads::RunState::Blocked) => {
                    if self.config.mode == Mode::Wall {
                        self.count_blocked(tid, cpu);
                    }
                    continue;
                }
                None => continue,
            }
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if !state.mask_checked {
                state.mask_checked = true;
                let signal = self.sender.signal();
                if blocks_signal_now(tid, signal) {
                    // Its due periods stay owed: the next tick holds them
                    // on the provisional verdict.
                    state.blocked = Some(BlockedSince::provisional(cpu, self.listing));
                    continue;
                }
            }
            let key = state.key;
            let Some(armed) = self.slots.arm(self.config.max_depth) else {
                self.stats.slots_full += 1;
                ran_out_at.get_or_insert(i);
                continue;
            };
            // A young thread born while sampling, with no stack yet, keeps
            // its first sample even if it comes late (see `slots`): given
            // up, the thread may be gone before the next, and every period
            // it used with it ([`ExitTails`] counts them on its last stack).
            let first = self.cpu_pacing.is_some()
                && state.paced.recent_walks.is_empty()
                && state.young_born();
            let read_at = if first { (0, 0) } else { read_at };
            self.slots.mark_sent(armed.slot, read_at.0, read_at.1);
            let by_request = self.wall_requests;
            let sent = if by_request {
                // No lateness check (`mark_sent` above had no reading in
                // wall mode): the timer fires on a tick of the thread's
                // own running, an unbiased moment, however late.
                PosixTimer::open_request(tid, self.sender.signal(), armed.signal_value())
                    .map(|timer| state.paced.request = Some(timer))
            } else {
                self.sender.send(tid, armed.signal_value())
            };
            match sent {
                Ok(()) => {
                    state.pending = true;
                    state.paced.counted_tick = self.tick;
                    if by_request {
                        state.paced.running_ticks += 1;
                    }
                    if self.config.mode == Mode::Cpu {
                        state.paced.debt.pay(weight, self.period_ns);
                    }
                    self.slot_uses[armed.slot] = Some(SlotUse {
                        tid,
                        key,
                        weight: if self.config.mode == Mode::Cpu {
                            weight
                        } else {
                            1
                        },
                        armed_at: Instant::now(),
                        by_request,
                    });
                }
                Err(e) => {
                    // Nobody was signalled, so nobody can claim the slot.
                    self.slots.cancel(armed.slot);
                    if e.raw_os_error() == Some(libc::ESRCH) {
                        self.stats.exited_threads += 1;
                    } else {
                        self.stats.failed_samples += 1;
                    }
                }
            }
        }
        self.rotation = ran_out_at.unwrap_or(0);
        if let Some(pacing) = self.cpu_pacing.as_mut() {
            pacing.young_threads = young_threads;
        }
    }

    /// Sampler-thread path, at each listing: picks the threads the ticks
    /// look at until the next listing: those whose CPU clock moved since
    /// the last listing, and those with a sample in flight or owed. An
    /// idle thread's CPU time is not lost (it is owed from its last reading
    /// when it runs again); in wall mode the ticks it sat idle are counted
    /// here, in one weighted sample of its last stack.
    ///
    /// In cpu mode the idle ones get a wake timer, so that one that runs
    /// again is looked at before the next listing
    /// ([`Self::arm_wake_timers`]); returns the time that took.
    pub(super) fn choose_active(&mut self) -> Duration {
        let mut active = std::mem::take(&mut self.active);
        active.clear();
        let mut idle = Vec::new();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            let Some(now) = state.paced.listed_cpu_ns.take() else {
                continue;
            };
            // A thread seen for the first time counts as moving only if it
            // used a period of CPU in its life: thousands of new idle
            // threads would otherwise all be looked at on every tick until
            // the next listing (which, with that many threads, is long in
            // coming): the sampler thread spent 28-38% of a core so. A
            // thread with less is owed no cpu-mode sample yet.
            // One born while sampling, found early ([`UnseenCpu`]), is
            // looked at once it used a quarter period: it may live 2 ms.
            let moved = match state.paced.listing_cpu_ns {
                Some(before) => now >= before + IDLE_SLACK_NS,
                None if state.paced.born_during_run => now >= self.period_ns / 4,
                None => now >= self.period_ns,
            };
            state.paced.listing_cpu_ns = Some(now);
            let busy = moved || state.pending || state.paced.debt.due(self.period_ns).is_some();
            if busy || state.blocked.is_some() {
                active.push(tid);
            } else if self.cpu_pacing.is_some() {
                idle.push(tid);
            } else if self.config.mode == Mode::Wall && self.tick > state.paced.counted_tick {
                let whole = state.paced.last_walk_whole;
                if let (true, Some(walk)) = (
                    whole,
                    state.paced.last_walk.as_ref().map(OwnedWalk::off_cpu),
                ) {
                    let weight = self.tick - state.paced.counted_tick;
                    state.paced.counted_tick = self.tick;
                    let key = state.key;
                    self.stats.reused_samples += weight;
                    self.intern(key, &walk.as_collected(), weight);
                } else {
                    self.count_blocked(tid, now);
                }
            }
        }
        self.active = active;
        self.arm_wake_timers(&idle)
    }
}
