//! Wake timers, on the sampler-thread clock in cpu mode: an idle thread
//! that runs again between listings is looked at within a scheduler tick,
//! not at the next listing, since listings of thousands of threads are
//! far apart and ticks look only at active threads.
//!
//! Each thread a listing finds idle gets a one-shot CPU timer
//! ([`PosixTimer::open_wake`]) that fires after a period of CPU and raises
//! the profiling signal; the handler only notes it ([`wake_notices`]).
//! How many may be open at once is
//! [`WakeTimers`](super::super::clocks::paced::wake_timers::WakeTimers)' to say.

use std::time::Duration;

use super::super::clocks::paced::wake_timers::WakeTimer;
use super::super::kernel::cpu_timers::PosixTimer;
use super::super::kernel::threads;
use super::super::signal::wake_notices;
use super::pacing::CpuPacing;
use super::SamplerLoop;

/// What one pass of [`SamplerLoop::arm_or_open`] left undone.
#[derive(Debug, Default)]
struct Unarmed {
    /// It ran out of notice indices.
    ran_out: bool,
    /// Idle threads it could give no timer.
    without: u64,
}

impl SamplerLoop {
    /// At a listing: arms the wake timer of each thread in `idle`, opening
    /// one where needed. Returns the CPU time spent, which listing spacing
    /// leaves out (once per thread, or per wake).
    pub(super) fn arm_wake_timers(&mut self, idle: &[i32]) -> Duration {
        if self.cpu_pacing.is_none() || idle.is_empty() {
            return Duration::ZERO;
        }
        let started = threads::own_cpu_ns();
        self.arm_each(idle);
        Duration::from_nanos(threads::own_cpu_ns().saturating_sub(started))
    }

    fn arm_each(&mut self, idle: &[i32]) {
        let mut left = self.arm_or_open(idle);
        if left.ran_out {
            // Out of indices: reclaim those of forgotten threads.
            self.reclaim_wake_indices();
            left = self.arm_or_open(idle);
        }
        let most = &mut self.stats.idle_without_wake_timer;
        *most = (*most).max(left.without);
    }

    /// Re-arms or opens the timers of threads in `idle`, while indices last.
    fn arm_or_open(&mut self, idle: &[i32]) -> Unarmed {
        let (signal, period) = (self.sender.signal(), self.period_ns);
        let mut left = Unarmed::default();
        let Some(CpuPacing { wakes, .. }) = self.cpu_pacing.as_mut() else {
            return left;
        };
        for &tid in idle {
            let Some(state) = self.threads.get_mut(&tid) else {
                continue;
            };
            if let Some(wake) = state.paced.wake.as_mut() {
                if !wake.armed {
                    wake.armed = wake.timer.arm_once(period).is_ok();
                }
                continue;
            }
            if wakes.refused || left.ran_out {
                left.without += 1;
                continue;
            }
            let Some(index) = wakes.allocate(tid) else {
                left.ran_out = true;
                left.without += 1;
                continue;
            };
            match PosixTimer::open_wake(tid, signal, index) {
                Ok(timer) => {
                    let armed = timer.arm_once(period).is_ok();
                    state.paced.wake = Some(WakeTimer {
                        timer,
                        index,
                        armed,
                    });
                    self.stats.wake_timers += 1;
                }
                Err(e) => {
                    wakes.release(index);
                    // Gone since the listing, or out of resources.
                    let gone = e.raw_os_error() == Some(libc::ESRCH);
                    wakes.refused |= !gone;
                    left.without += u64::from(!gone);
                }
            }
        }
        left
    }

    /// Frees the indices whose threads no longer hold them.
    fn reclaim_wake_indices(&mut self) {
        let Some(CpuPacing { wakes, .. }) = self.cpu_pacing.as_mut() else {
            return;
        };
        for i in 0..wakes.owners.len() {
            let tid = wakes.owners[i];
            let held = self
                .threads
                .get(&tid)
                .and_then(|s| s.paced.wake.as_ref())
                .is_some_and(|w| w.index == i);
            if tid != 0 && !held {
                wakes.release(i);
            }
        }
    }

    /// At each wakeup, cpu mode: threads whose wake timers fired are
    /// looked at from now on.
    pub(super) fn take_wake_notices(&mut self) {
        let Some(CpuPacing { wakes, .. }) = self.cpu_pacing.as_mut() else {
            return;
        };
        wakes.notices.clear();
        wake_notices::take(&mut wakes.notices);
        for &index in &wakes.notices {
            let Some(&tid) = wakes.owners.get(index).filter(|&&t| t != 0) else {
                continue;
            };
            let Some(wake) = self
                .threads
                .get_mut(&tid)
                .and_then(|s| s.paced.wake.as_mut())
                .filter(|w| w.index == index)
            else {
                continue;
            };
            wake.armed = false;
            self.stats.wakes += 1;
            if !self.active.contains(&tid) {
                self.active.push(tid);
            }
        }
    }
}
