//! Wall mode, each tick: every looked-at thread is sampled once per tick.
//! One running user code is asked for its stack (a one-shot CPU timer
//! where the kernel allows, else a signal); one off CPU is counted without
//! interruption, on the stack it blocks on ([`SamplerLoop::count_blocked`])
//! or, while its clock stands still, its last one again.

use crate::Mode;

use super::super::kernel::threads::RunState;
use super::collect::OwnedWalk;
use super::signal_sends::Sent;
use super::SamplerLoop;

impl SamplerLoop {
    /// Wall mode: samples or counts every looked-at thread this tick.
    pub(super) fn signal_due_wall(&mut self) {
        self.each_active(|this, tid| {
            let Some((cpu, _)) = this.look_at_clock(tid) else {
                return Sent::No;
            };
            let Some(state) = this.threads.get_mut(&tid) else {
                return Sent::No;
            };
            let progressed = state.paced.last_cpu_ns.is_none_or(|last| cpu > last);
            state.paced.last_cpu_ns = Some(cpu);
            // Only a thread that ran can have changed its mask; most
            // blocked threads sleep.
            let look = progressed
                && state
                    .blocked
                    .as_ref()
                    .is_some_and(|b| super::monotonic_ns() >= b.look_at_ns);
            if look {
                let (signal, period) = (this.sender.signal(), this.period_ns);
                state.look_again(tid, signal, period, Mode::Wall, &mut this.stats);
            }
            let running = |this: &mut Self| {
                progressed
                    && this
                        .threads
                        .get_mut(&tid)
                        .and_then(|s| s.run_state(tid, &mut this.thread_keys))
                        == Some(RunState::Running)
            };
            if this.threads.get(&tid).is_some_and(|s| s.blocked.is_some()) {
                // Off CPU it needs no signal; only its CPU ticks are lost.
                if !running(this) {
                    if !this.count_unmoved(tid, cpu) {
                        this.count_blocked(tid, cpu);
                    }
                    return Sent::No;
                }
                let period = this.period_ns;
                let Some(blocked) = this.threads.get_mut(&tid).and_then(|s| s.blocked.as_mut())
                else {
                    return Sent::No;
                };
                // It blocks the signal: counted once a second look agrees.
                if blocked.confirmed {
                    this.stats.signal_blocked_samples += 1;
                    this.stats.add_signal_blocked(tid as u64, 1);
                } else {
                    blocked.owed_ns += period;
                }
                return Sent::No;
            }
            if this.count_unmoved(tid, cpu) {
                return Sent::No;
            }
            let pending = this.threads.get(&tid).is_some_and(|s| s.pending);
            if pending && this.wall_requests {
                // Its request waits for it to run; counted off CPU meanwhile.
                if running(this) {
                    let tick = this.tick;
                    if let Some(state) = this.threads.get_mut(&tid) {
                        state.paced.running_ticks += 1;
                        state.paced.counted_tick = tick;
                    }
                } else {
                    this.count_blocked(tid, cpu);
                }
                return Sent::No;
            }
            if pending {
                this.stats.skipped_samples += 1;
                return Sent::No;
            }
            let state = this
                .threads
                .get_mut(&tid)
                .and_then(|s| s.run_state(tid, &mut this.thread_keys));
            match state {
                // Its clock stood still: counted like a blocked thread.
                Some(RunState::Running) if !progressed => {
                    this.count_blocked(tid, cpu);
                    Sent::No
                }
                Some(RunState::Running) => {
                    let by_request = this.wall_requests;
                    this.send_sample(tid, cpu, 1, (0, 0), by_request)
                }
                Some(RunState::Blocked) => {
                    this.count_blocked(tid, cpu);
                    Sent::No
                }
                None => Sent::No,
            }
        });
    }

    /// Wall mode, at a listing: counts the ticks since an idle thread's
    /// last count on its last whole stack, off CPU, else on the stack it
    /// blocks on. Idle threads are not looked at until they run again.
    pub(super) fn count_idle(&mut self, tid: i32, cpu_ns: u64) {
        let tick = self.tick;
        let Some(state) = self.threads.get_mut(&tid) else {
            return;
        };
        if tick <= state.paced.counted_tick {
            return;
        }
        let whole = state.paced.last_walk_whole;
        match state
            .paced
            .last_walk
            .as_ref()
            .filter(|_| whole)
            .map(OwnedWalk::off_cpu)
        {
            Some(walk) => {
                let weight = tick - state.paced.counted_tick;
                state.paced.counted_tick = tick;
                let key = state.key;
                self.stats.reused_samples += weight;
                self.intern(key, &walk, weight);
            }
            None => self.count_blocked(tid, cpu_ns),
        }
    }
}
