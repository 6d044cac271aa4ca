//! How much CPU time each sample stands for on the paced clock. A sample's
//! weight comes from the debt left after the *previous* sample, paid off
//! over [`SPREAD`] samples, never from the wait just before it: the first
//! sample after a long wait lands near where the thread was preempted, and
//! weighting it by that wait would move CPU time there. A sample given up
//! at a biased place does not make the thread due sooner, which would
//! sample that place again: its periods ride on the next samples.

/// A debt is paid off over about this many samples: enough that no weight
/// hangs on one wait, few enough that weights soon follow the load.
pub const SPREAD: u64 = 8;
/// The most periods a thread may be owed; more are dropped and counted as
/// skipped, lest a long unsampleable stretch land on a handful of stacks.
pub const MAX_OWED_PERIODS: u64 = 20 * SPREAD;

/// One thread's CPU time not yet stood for by a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuDebt {
    /// CPU time used and not yet paid by a sample, in nanoseconds.
    owed_ns: u64,
    /// What was owed after the last payment, which the next weight comes from.
    settled_ns: u64,
    /// Periods of samples given up, riding on the next samples' weights.
    lost_periods: u64,
}

impl CpuDebt {
    /// Adds `used_ns` of CPU time; returns the periods dropped above the cap.
    pub fn accrue(&mut self, used_ns: u64, period_ns: u64) -> u64 {
        self.owed_ns = self.owed_ns.saturating_add(used_ns);
        let most = MAX_OWED_PERIODS * period_ns;
        if self.owed_ns <= most {
            return 0;
        }
        let dropped = (self.owed_ns - most) / period_ns;
        self.owed_ns -= dropped * period_ns;
        self.settled_ns = self.settled_ns.min(self.owed_ns);
        dropped
    }

    /// The weight the next sample would have; `None` while no period is owed.
    pub fn due(&self, period_ns: u64) -> Option<u64> {
        if self.owed_ns < period_ns {
            return None;
        }
        let settled = self.settled_ns / period_ns;
        let weight = settled.div_ceil(SPREAD).max(1);
        Some(weight.min(self.owed_ns / period_ns) + self.lost_share())
    }

    /// A sample of `weight` periods (as [`Self::due`] gave it) was taken.
    pub fn pay(&mut self, weight: u64, period_ns: u64) {
        let lost = self.lost_share().min(weight);
        self.lost_periods -= lost;
        self.owed_ns = self.owed_ns.saturating_sub((weight - lost) * period_ns);
        self.settled_ns = self.owed_ns;
    }

    /// A sample paid for was given up; returns the periods dropped above the cap.
    pub fn refund(&mut self, weight: u64) -> u64 {
        self.lost_periods += weight;
        let dropped = self.lost_periods.saturating_sub(MAX_OWED_PERIODS);
        self.lost_periods -= dropped;
        dropped
    }

    /// The thread exited: empties the debt, returning all it was owed (ns).
    pub fn take_all(&mut self, period_ns: u64) -> u64 {
        let ns = self
            .owed_ns
            .saturating_add(self.lost_periods.saturating_mul(period_ns));
        *self = CpuDebt::default();
        ns
    }

    /// The lost periods the next sample carries.
    fn lost_share(&self) -> u64 {
        self.lost_periods.div_ceil(SPREAD)
    }

    #[cfg(test)]
    pub fn owed_ns(&self) -> u64 {
        self.owed_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;

    /// A small deterministic generator, so the simulations need no crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    #[test]
    fn on_a_quiet_machine_samples_stand_for_one_period() {
        let mut debt = CpuDebt::default();
        let (mut heavy, mut paid) = (0, 0);
        for _ in 0..3000 {
            // A little over one period per tick: the sampler's ticks drift.
            debt.accrue(P + 3_000, P);
            let weight = debt.due(P).expect("a period is owed every tick");
            heavy += u64::from(weight > 1);
            paid += weight;
            debt.pay(weight, P);
        }
        assert!(
            heavy <= 3,
            "{heavy} of 3000 samples stood for more than one period"
        );
        assert_eq!(paid + debt.owed_ns() / P, (3000 * (P + 3_000)) / P);
    }

    #[test]
    fn nothing_is_due_before_a_whole_period_is_owed() {
        let mut debt = CpuDebt::default();
        debt.accrue(P - 1, P);
        assert_eq!(debt.due(P), None);
        debt.accrue(1, P);
        assert_eq!(debt.due(P), Some(1));
    }

    /// Every period is paid but what is still being spread at the end.
    #[test]
    fn weights_follow_the_average_wait_and_pay_every_period() {
        for gap in [2, 3, 5, 9] {
            let mut debt = CpuDebt::default();
            let (mut paid, mut used) = (0, 0);
            for _ in 0..2000 {
                debt.accrue(gap * P, P);
                used += gap;
                let weight = debt.due(P).unwrap();
                debt.pay(weight, P);
                paid += weight;
            }
            assert_eq!(paid + debt.owed_ns() / P, used, "gap {gap}");
            assert!(
                debt.owed_ns() / P <= SPREAD * (gap + 1),
                "gap {gap}: {} periods still owed",
                debt.owed_ns() / P
            );
        }
    }

    #[test]
    fn a_refund_adds_weight_not_an_earlier_sample() {
        let mut debt = CpuDebt::default();
        debt.accrue(P + P / 4, P);
        let weight = debt.due(P).unwrap();
        debt.pay(weight, P);
        assert_eq!(debt.refund(weight), 0);
        assert_eq!(debt.due(P), None, "due sooner after a refund");
        debt.accrue(P / 2, P);
        assert_eq!(debt.due(P), None, "due sooner after a refund");
        debt.accrue(P / 4, P);
        assert_eq!(
            debt.due(P),
            Some(2),
            "the lost period rides on the next sample"
        );
        debt.pay(2, P);
        assert_eq!((debt.owed_ns(), debt.lost_periods), (0, 0));
    }

    #[test]
    fn lost_periods_are_spread_and_capped() {
        let mut debt = CpuDebt::default();
        assert_eq!(debt.refund(MAX_OWED_PERIODS + 3), 3);
        let (mut paid, mut samples) = (0, 0);
        while debt.lost_periods > 0 {
            debt.accrue(P, P);
            let weight = debt.due(P).unwrap();
            assert!(weight <= 1 + MAX_OWED_PERIODS.div_ceil(SPREAD));
            debt.pay(weight, P);
            paid += weight;
            samples += 1;
        }
        assert_eq!(paid, samples + MAX_OWED_PERIODS);
        assert!(samples > SPREAD, "paid in {samples} samples");
    }

    #[test]
    fn a_debt_above_the_cap_is_dropped_and_counted() {
        let mut debt = CpuDebt::default();
        let dropped = debt.accrue((MAX_OWED_PERIODS + 7) * P + 5, P);
        assert_eq!(dropped, 7);
        assert_eq!(debt.owed_ns(), MAX_OWED_PERIODS * P + 5);
    }

    /// Truth is one half: as many samples after a wait of 6 periods as of 1,
    /// each at an unbiased point. Weighting by own wait would give 6/7.
    #[test]
    fn a_sample_weight_does_not_follow_its_own_wait() {
        let mut rng = Lcg(7);
        let mut debt = CpuDebt::default();
        let mut naive_owed = 0;
        let (mut after_wait, mut total) = (0u64, 0u64);
        let (mut naive_after_wait, mut naive_total) = (0u64, 0u64);
        for _ in 0..20_000 {
            let long_wait = rng.next() % 2 == 0;
            let gap = if long_wait { 6 } else { 1 };
            debt.accrue(gap * P, P);
            let weight = debt.due(P).unwrap();
            debt.pay(weight, P);
            total += weight;
            naive_owed += gap;
            let naive = naive_owed;
            naive_owed = 0;
            naive_total += naive;
            if long_wait {
                after_wait += weight;
                naive_after_wait += naive;
            }
        }
        let share = after_wait as f64 / total as f64;
        let naive_share = naive_after_wait as f64 / naive_total as f64;
        assert!(naive_share > 0.8, "the naive rule's bias: {naive_share}");
        assert!((share - 0.5).abs() < 0.03, "spread debt gave {share}");
    }
}
