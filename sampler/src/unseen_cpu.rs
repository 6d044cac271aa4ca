//! CPU time of threads the sampler does not know yet.
//!
//! The sampler-thread path learns of a new thread only from a listing of
//! the threads, every 10 ms or so (longer when listings are costly), and
//! it has no other way to hear of one where perf events are refused. A
//! thread that lives 2 ms was therefore mostly gone before it was seen.
//! But its CPU time shows at once in the process's CPU clock: against the
//! CPU time of the threads the sampler looked at (and its own), what is
//! left ran on threads it does not know, or on known ones that were idle
//! at the last listing. When that comes to a quarter of a period, the
//! sampler lists the threads early.
//!
//! Reading the process's CPU clock sums every thread's in the kernel, so
//! with thousands of threads it costs; checks are spaced so that they take
//! at most 1/[`SHARE`] of the time between them, and never closer than
//! [`MIN_INTERVAL`].

use std::time::Duration;

/// Checks take at most 1/this of the time between two.
const SHARE: u64 = 20;
/// The least time between two checks.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The process's CPU time against what the sampler saw, since the last
/// listing. Platform-independent: readings are passed in.
#[derive(Debug)]
pub(crate) struct UnseenCpu {
    threshold_ns: u64,
    interval_ns: u64,
    checked_at_ns: u64,
    /// The process's and the sampler's own CPU clocks at the last reset.
    process_ns: u64,
    own_ns: u64,
    /// CPU time of the threads looked at since the last reset.
    seen_ns: u64,
}

impl UnseenCpu {
    /// Suspects a thread it does not know once a quarter of `period_ns`
    /// went unseen.
    pub(crate) fn new(period_ns: u64) -> Self {
        UnseenCpu {
            threshold_ns: (period_ns / 4).max(1),
            interval_ns: MIN_INTERVAL.as_nanos() as u64,
            checked_at_ns: 0,
            process_ns: 0,
            own_ns: 0,
            seen_ns: 0,
        }
    }

    /// A thread the sampler looks at used `ns` more CPU time.
    pub(crate) fn saw(&mut self, ns: u64) {
        self.seen_ns += ns;
    }

    /// A listing just read every thread: counting starts again from the
    /// process's and the sampler's clocks now.
    pub(crate) fn reset(&mut self, process_ns: u64, own_ns: u64) {
        self.process_ns = process_ns;
        self.own_ns = own_ns;
        self.seen_ns = 0;
    }

    /// Whether a check is due at `now_ns` (monotonic).
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.checked_at_ns + self.interval_ns
    }

    /// A check at `now_ns` with the clocks read then, and what reading the
    /// process's clock cost (`cost_ns` of the sampler's CPU time): whether
    /// enough CPU time went to threads the sampler did not look at.
    pub(crate) fn check(
        &mut self,
        now_ns: u64,
        process_ns: u64,
        own_ns: u64,
        cost_ns: u64,
    ) -> bool {
        self.checked_at_ns = now_ns;
        self.interval_ns = (MIN_INTERVAL.as_nanos() as u64).max(cost_ns * SHARE);
        let used = process_ns.saturating_sub(self.process_ns);
        let own = own_ns.saturating_sub(self.own_ns);
        used.saturating_sub(own).saturating_sub(self.seen_ns) >= self.threshold_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn cpu_time_nobody_saw_is_suspected() {
        let mut u = UnseenCpu::new(MS);
        u.reset(10 * MS, MS);
        // 2 ms of process CPU: 1.9 seen on known threads, 0.05 the
        // sampler's own: 0.05 unseen, under a quarter period.
        u.saw(1_900_000);
        assert!(!u.check(5 * MS, 12 * MS, MS + 50_000, 1_000));
        // 0.5 ms more that nobody saw.
        assert!(u.check(7 * MS, 12 * MS + 500_000, MS + 50_000, 1_000));
        u.reset(12 * MS + 500_000, MS + 50_000);
        assert!(!u.check(9 * MS, 12 * MS + 500_000, MS + 50_000, 1_000));
    }

    #[test]
    fn costly_checks_are_spaced() {
        let mut u = UnseenCpu::new(MS);
        assert!(u.due(10 * MS));
        // A check that cost 0.2 ms: the next one 20 times that later.
        u.check(10 * MS, 0, 0, 200_000);
        assert!(!u.due(13 * MS));
        assert!(u.due(14 * MS));
    }
}
