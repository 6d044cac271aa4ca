//! What both sampler-thread modes share once a tick found a thread due:
//! the turn each active thread gets, and the send of one sample (its mask
//! checked first, a slot armed, a signal or a one-shot request sent).

use std::time::Instant;

use super::super::kernel::cpu_timers::PosixTimer;
use super::signal_blocked::blocks_signal_now;
use super::{BlockedSince, SamplerLoop, SlotUse};

/// How [`SamplerLoop::send_sample`] went.
#[derive(PartialEq, Eq)]
pub(super) enum Sent {
    /// A sample is in flight: the thread is `pending` until it lands.
    Yes,
    /// The thread was found blocking the signal at its first look.
    Blocks,
    /// Every slot is armed: later threads wait for the next tick.
    NoSlot,
    /// Nothing sent: the thread was not due, was counted another way, or
    /// exited or the send failed (counted in the stats).
    No,
}

impl SamplerLoop {
    /// Calls `look` on each active thread once, starting where the last
    /// tick ran out of slots so that every thread gets a turn; `look` says
    /// whether it ran out.
    pub(super) fn each_active(&mut self, mut look: impl FnMut(&mut Self, i32) -> Sent) {
        let count = self.active.len();
        let start = if count == 0 { 0 } else { self.rotation % count };
        let mut ran_out_at = None;
        for n in 0..count {
            let i = (start + n) % count;
            if look(self, self.active[i]) == Sent::NoSlot {
                ran_out_at.get_or_insert(i);
            }
        }
        self.rotation = ran_out_at.unwrap_or(0);
    }

    /// Sends `tid` a sample standing for `weight` periods: a signal, or with
    /// `by_request` a one-shot CPU timer that fires while it runs. A thread
    /// is never signalled before its mask was looked at once: one blocking
    /// the signal from the start (daemons, `sigwait` loops) would keep it
    /// queued or take it as its own. `read_at` (monotonic ns, CPU ns) lets
    /// the handler tell a sample that waited for a CPU.
    pub(super) fn send_sample(
        &mut self,
        tid: i32,
        cpu_ns: u64,
        weight: u64,
        read_at: (u64, u64),
        by_request: bool,
    ) -> Sent {
        let (signal, listing, tick) = (self.sender.signal(), self.listing, self.tick);
        let Some(state) = self.threads.get_mut(&tid) else {
            return Sent::No;
        };
        if !state.mask_checked {
            state.mask_checked = true;
            if blocks_signal_now(tid, signal) {
                // Its due periods stay owed on the provisional verdict.
                state.blocked = Some(BlockedSince::provisional(cpu_ns, listing));
                return Sent::Blocks;
            }
        }
        let Some(armed) = self.slots.arm(self.config.max_depth) else {
            self.stats.slots_full += 1;
            return Sent::NoSlot;
        };
        self.slots.mark_sent(armed.slot, read_at.0, read_at.1);
        let sent = if by_request {
            // No lateness check: the timer fires while the thread runs.
            PosixTimer::open_request(tid, signal, armed.signal_value())
                .map(|timer| state.paced.request = Some(timer))
        } else {
            self.sender.send(tid, armed.signal_value())
        };
        match sent {
            Ok(()) => {
                state.pending = true;
                state.paced.counted_tick = tick;
                state.paced.running_ticks += u64::from(by_request);
                self.slot_uses[armed.slot] = Some(SlotUse {
                    tid,
                    key: state.key,
                    weight,
                    armed_at: Instant::now(),
                    by_request,
                });
                Sent::Yes
            }
            Err(e) => {
                self.slots.cancel(armed.slot);
                if e.raw_os_error() == Some(libc::ESRCH) {
                    self.stats.exited_threads += 1;
                } else {
                    self.stats.failed_samples += 1;
                }
                Sent::No
            }
        }
    }
}
