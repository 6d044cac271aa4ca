//! The sampler-thread clock, where perf is refused or not used and always
//! in wall mode. In cpu mode a thread is due once it owes a period of CPU
//! ([`CpuDebt`]) and is signalled at random wakeups ([`CpuWakeups`]) only
//! while it runs user code. In wall mode a running thread is asked with a
//! one-shot CPU timer and one off CPU is counted without interruption.
//! Only threads active at the last listing, or woken since, are looked at.

use std::time::Duration;

use crate::{profile, Mode};

use super::super::clocks::paced::cpu_debt::CpuDebt;
use super::super::clocks::paced::cpu_wakeups::CpuWakeups;
use super::super::clocks::paced::exit_tails::ExitTails;
use super::super::clocks::paced::unseen_cpu::UnseenCpu;
use super::super::clocks::paced::wake_timers::{WakeTimer, WakeTimers};
use super::super::kernel::cpu_timers::PosixTimer;
use super::super::kernel::threads;
use super::collect::OwnedWalk;
use super::new_threads::NewThreads;
use super::signal_sends::Sent;
use super::{monotonic_ns, SamplerLoop};

/// Wall mode: CPU (ns) a thread may gain and still count as not having run.
pub(super) const IDLE_SLACK_NS: u64 = 50_000;

/// One thread's sampler-thread clock state; default on the other clocks.
#[derive(Default)]
pub(super) struct PacedThread {
    /// Cpu mode: the thread's CPU clock (ns) on the previous tick.
    pub(super) last_cpu_ns: Option<u64>,
    /// Cpu mode: the wakeup that last read its clock.
    pub(super) read_tick: u64,
    /// Cpu mode: CPU time used and not yet stood for by a sample.
    pub(super) debt: CpuDebt,
    /// Wall mode: the last stack, counted again while the clock stands still.
    pub(super) last_walk: Option<OwnedWalk>,
    pub(super) walk_cpu_ns: u64,
    /// Wall mode: `last_walk` is whole, not a stand-in to read again.
    pub(super) last_walk_whole: bool,
    /// Wall mode: the sample's one-shot timer; deleted with its signal once done.
    pub(super) request: Option<PosixTimer>,
    /// Wall mode: running ticks the next landed sample stands for.
    pub(super) running_ticks: u64,
    /// Wall mode: the tick up to which the thread's samples are counted.
    pub(super) counted_tick: u64,
    /// CPU clock at the last listing, to tell idle threads from active.
    pub(super) listing_cpu_ns: Option<u64>,
    /// CPU clock as this listing read it (`None`: exited), for `choose_active`.
    pub(super) listed_cpu_ns: Option<u64>,
    /// Cpu mode: a young born thread's last [`RECENT_WALKS`](super::RECENT_WALKS)
    /// stacks (else the last one), for its tail at exit ([`ExitTails`]) or stop.
    pub(super) recent_walks: Vec<OwnedWalk>,
    /// Started while sampling: owed its CPU time from zero.
    pub(super) born_during_run: bool,
    /// Cpu mode: fires when this idle thread runs again.
    pub(super) wake: Option<WakeTimer>,
}

/// The sampler-thread clock's state in cpu mode.
pub(super) struct CpuPacing {
    /// When to wake: random ticks, and a look at least every `min(period, 2 ms)`.
    pub(super) wakeups: CpuWakeups,
    /// CPU time of threads not looked at, to list early when one is new.
    pub(super) unseen: UnseenCpu,
    /// CPU threads used after their last sample, counted at exit or stop.
    pub(super) tails: ExitTails,
    pub(super) wakes: WakeTimers,
    /// Finds threads born between listings; `None` if the kernel hides ids.
    pub(super) new_threads: Option<NewThreads>,
    /// The last look found a young born thread ([`CpuWakeups::next`]).
    pub(super) young_threads: bool,
    /// When a born thread was last registered ([`SamplerLoop::listing_can_wait`]).
    pub(super) last_birth: Option<std::time::Instant>,
}

impl CpuPacing {
    /// Samples every `period_ns` of each thread's CPU time; ticks seeded by `seed`.
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
    /// Cpu mode: whether to list early because CPU went to threads not looked
    /// at ([`UnseenCpu`]). Looked-at clocks are read first, so their own CPU
    /// is not taken as unseen.
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

    /// Reads `tid`'s CPU clock once per wakeup and counts its use as seen
    /// ([`UnseenCpu`], [`ExitTails`]); the reading and its time, or `None`.
    ///
    /// [`UnseenCpu`]: super::super::clocks::paced::unseen_cpu::UnseenCpu
    pub(super) fn look_at_clock(&mut self, tid: i32) -> Option<(u64, u64)> {
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

    /// Cpu mode, each tick: signals every looked-at thread that owes a
    /// period of CPU ([`CpuDebt`]), at random ticks only (a young born
    /// thread at any, as it may soon be gone). A thread whose clock did not
    /// move, or that is not running user code, is never signalled: woken
    /// from a blocking call it is `R` while it waits for a CPU, and a signal
    /// then fails the call with `EINTR`. Its debt waits instead.
    pub(super) fn signal_due_cpu(&mut self) {
        let random_tick = self
            .cpu_pacing
            .as_ref()
            .is_some_and(|p| p.wakeups.random_tick());
        let mut young_threads = false;
        self.each_active(|this, tid| {
            let Some((cpu, read_at_ns)) = this.look_at_clock(tid) else {
                return Sent::No;
            };
            let period = this.period_ns;
            let Some(state) = this.threads.get_mut(&tid) else {
                return Sent::No;
            };
            let young = state.young_born();
            young_threads |= young;
            let progressed = state.paced.last_cpu_ns.is_none_or(|last| cpu > last);
            // The CPU used since the last look is owed; a period owed is due.
            if let Some(last) = state.paced.last_cpu_ns {
                let used = cpu.saturating_sub(last);
                this.stats.skipped_samples += state.paced.debt.accrue(used, period);
            }
            state.paced.last_cpu_ns = Some(cpu);
            let Some(mut weight) = state.paced.debt.due(period) else {
                return Sent::No;
            };
            // Only a random tick is unbiased ([`CpuWakeups`]).
            if !random_tick && !young {
                return Sent::No;
            }
            if state
                .blocked
                .as_ref()
                .is_some_and(|b| monotonic_ns() >= b.look_at_ns)
            {
                let signal = this.sender.signal();
                if !state.look_again(tid, signal, period, Mode::Cpu, &mut this.stats) {
                    // It takes the signal now: sampled for the held periods too.
                    weight = state.paced.debt.due(period).unwrap_or(weight);
                }
            }
            if let Some(blocked) = &mut state.blocked {
                // It blocks the signal: counted once a second look agrees.
                state.paced.debt.pay(weight, period);
                if blocked.confirmed {
                    this.stats.signal_blocked_samples += weight;
                    this.stats.add_signal_blocked(tid as u64, weight);
                } else {
                    blocked.owed_ns += weight * period;
                }
                return Sent::No;
            }
            if state.pending {
                this.stats.skipped_samples += 1;
                return Sent::No;
            }
            if !progressed
                || state.run_state(tid, &mut this.thread_keys) != Some(threads::RunState::Running)
            {
                return Sent::No;
            }
            // A young born thread keeps its first sample even if late.
            let first = state.paced.recent_walks.is_empty() && young;
            let read_at = if first { (0, 0) } else { (read_at_ns, cpu) };
            let sent = this.send_sample(tid, cpu, weight, read_at, false);
            if sent == Sent::Yes {
                if let Some(state) = this.threads.get_mut(&tid) {
                    state.paced.debt.pay(weight, period);
                }
            }
            sent
        });
        if let Some(pacing) = self.cpu_pacing.as_mut() {
            pacing.young_threads = young_threads;
        }
    }

    /// Sampler-thread path, at each listing: picks threads whose clock moved
    /// or with a sample in flight or owed. In wall mode idle ticks are counted
    /// here; in cpu mode idle threads get wake timers
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
            // A new thread counts as moving only once it used a period (a
            // quarter if born while sampling), or every idle one is looked at.
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
            } else if self.config.mode == Mode::Wall {
                self.count_idle(tid, now);
            }
        }
        self.active = active;
        self.arm_wake_timers(&idle)
    }
}
