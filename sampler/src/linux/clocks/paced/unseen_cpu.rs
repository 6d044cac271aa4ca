//! When to list early on the paced clock: a new thread's CPU time shows at
//! once in the process's CPU clock, beyond the threads looked at and the
//! sampler's own. Early listings come in bursts when threads churn, so they
//! spend a banked credit ([`MAX_CREDIT`]) rather than being spaced.

use std::time::Duration;

/// Checks and early listings take at most 1/this of the sampler's time.
pub(crate) const SHARE: u64 = 20;
const MIN_INTERVAL: Duration = Duration::from_micros(250);
/// The most sampler CPU time listings may bank for a burst.
const MAX_CREDIT: Duration = Duration::from_millis(2);

/// The process's CPU time against what the sampler saw since the last listing.
#[derive(Debug)]
pub(crate) struct UnseenCpu {
    /// Unseen CPU time that makes a check suspect an unknown thread.
    threshold_ns: u64,
    /// No early listing sooner than this after the last listing.
    listing_gap_ns: u64,
    /// The least time between checks, set by the last check's cost.
    interval_ns: u64,
    checked_at_ns: u64,
    listed_at_ns: u64,
    /// Sampler CPU time listings may spend as of `credit_at_ns` (< 0: owed).
    credit_ns: i64,
    credit_at_ns: u64,
    /// The process's and the sampler's own CPU clocks at the last reset.
    process_ns: u64,
    own_ns: u64,
    /// CPU time of the threads looked at since the last reset.
    seen_ns: u64,
}

impl UnseenCpu {
    pub(crate) fn new(period_ns: u64) -> Self {
        UnseenCpu {
            threshold_ns: (period_ns / 4).max(1),
            listing_gap_ns: period_ns / 4,
            interval_ns: MIN_INTERVAL.as_nanos() as u64,
            checked_at_ns: 0,
            listed_at_ns: 0,
            credit_ns: MAX_CREDIT.as_nanos() as i64,
            credit_at_ns: 0,
            process_ns: 0,
            own_ns: 0,
            seen_ns: 0,
        }
    }

    /// A thread the sampler looks at used `ns` more CPU time.
    pub(crate) fn saw(&mut self, ns: u64) {
        self.seen_ns += ns;
    }

    /// A listing that will read every thread starts at `now_ns`.
    pub(crate) fn reset(&mut self, now_ns: u64, process_ns: u64, own_ns: u64) {
        self.listed_at_ns = now_ns;
        self.process_ns = process_ns;
        self.own_ns = own_ns;
        self.seen_ns = 0;
    }

    /// The listing cost `cost_ns` of sampler CPU time, spent from the credit.
    pub(crate) fn listed(&mut self, now_ns: u64, cost_ns: u64) {
        self.credit_ns = self.credit(now_ns) - cost_ns as i64;
        self.credit_at_ns = now_ns;
    }

    /// Whether a check, and an early listing after it, may run at `now_ns`.
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.checked_at_ns + self.interval_ns
            && now_ns >= self.listed_at_ns + self.listing_gap_ns
            && self.credit(now_ns) > 0
    }

    /// A check with the clocks read at `now_ns`, the process's at a cost of
    /// `cost_ns`: whether enough CPU time went unseen to list early.
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

    /// The credit at `now_ns`, earned at 1/[`SHARE`], up to [`MAX_CREDIT`].
    fn credit(&self, now_ns: u64) -> i64 {
        let earned = now_ns.saturating_sub(self.credit_at_ns) / SHARE;
        let most = MAX_CREDIT.as_nanos() as i64;
        self.credit_ns
            .saturating_add(i64::try_from(earned).unwrap_or(i64::MAX))
            .min(most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn cpu_time_nobody_saw_is_suspected() {
        let mut u = UnseenCpu::new(MS);
        u.reset(0, 10 * MS, MS);
        // 2 ms: 1.9 seen, 0.05 the sampler's, 0.05 unseen (< P/4).
        u.saw(1_900_000);
        assert!(!u.check(5 * MS, 12 * MS, MS + 50_000, 1_000));
        // 0.5 ms more that nobody saw.
        assert!(u.check(7 * MS, 12 * MS + 500_000, MS + 50_000, 1_000));
        u.reset(8 * MS, 12 * MS + 500_000, MS + 50_000);
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

    #[test]
    fn early_listings_spend_a_credit_earned_over_time() {
        let mut u = UnseenCpu::new(MS);
        let cost = 400_000;
        let mut now = 100 * MS;
        let mut listings = 0;
        // One listing each period, each costing 0.4 ms: far over 1/20.
        for _ in 0..20 {
            now += MS;
            if u.due(now) {
                u.reset(now, 0, 0);
                u.listed(now, cost);
                listings += 1;
                // Not again within a quarter period.
                assert!(!u.due(now + MS / 8));
            }
        }
        // 2 ms banked + 1 ms earned, at 0.4 ms each, + the one that overdrew.
        assert_eq!(listings, 8);
        assert!(!u.due(now + MS));
        // The overdraft is earned back at 1/SHARE of the time.
        let debt = -u.credit(now);
        assert!(!u.due(now + debt as u64 * SHARE));
        assert!(u.due(now + debt as u64 * SHARE + SHARE));
    }
}
