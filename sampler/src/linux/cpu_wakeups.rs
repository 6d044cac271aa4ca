//! When the sampler thread wakes in cpu mode on the Linux fallback: at the
//! moment each thread's next sample falls due, and at random moments.
//!
//! A sampler thread that wakes on a fixed wall-clock period samples a busy
//! machine wrongly. Its own wakeup preempts a thread on its CPU, and when
//! it sleeps again the scheduler often resumes a thread that was waiting,
//! right then: resumptions line up with the ticks. A thread preempted at a
//! system call's exit (reading a clock can end its time slice) resumes
//! there, at the start of whatever its code does next, and a fixed period
//! later it is sampled: the first stretch after each such point is never
//! sampled. With two CPU-burning processes beside the self-check this took
//! 4-15 points of share from the function after the clock reads.
//!
//! Perf's `cpu-clock` has no such blind spot: it interrupts a thread when
//! its CPU clock crosses the next multiple of the period, wherever the
//! thread was last resumed. This schedule does the same from outside:
//!
//! - **Due points.** At every wakeup the sampler reads each thread's CPU
//!   clock and asks its debt how much CPU time the thread needs before its
//!   next sample is due ([`CpuDebt::until_next_period`]);
//!   the thread will be due that much later if it runs from now, and the
//!   sampler wakes then ([`CpuWakeups::due_at`]). A thread waiting for a
//!   CPU is predicted the same way, because if it resumes it most likely
//!   resumes right after this wakeup.
//! - **Random ticks** ([`RANDOM_TICK_MEAN_PERIODS`] periods apart on
//!   average, exponentially distributed) find a thread that fell due
//!   without a prediction (it woke from a blocking call, or a prediction
//!   was missed). An exponential wait has no memory: wherever a thread
//!   resumed, the next random tick is as likely at any later moment, so
//!   the sample it takes is at an unbiased point.
//!
//! On a quiet machine each thread is then sampled every period of its CPU
//! time, as with a fixed period. The sampler wakes about twice as often as
//! it would on a fixed period with two busy threads (measured: 1,500-2,500
//! wakeups per second and 5-6% of a core at 1000 Hz, against about 1,000
//! and 5% on a fixed period).
//!
//! [`CpuDebt::until_next_period`]: super::cpu_debt::CpuDebt::until_next_period

use super::split_mix::SplitMix64;

/// Random ticks come this many periods apart on average.
pub const RANDOM_TICK_MEAN_PERIODS: u64 = 2;

/// No two wakeups are further apart than this many periods: each wakeup
/// compares the process's CPU clock with the threads the sampler knows
/// (`unseen_cpu`), and a thread born since is found while it still runs.
/// Random ticks alone leave gaps of several periods, in which a thread of
/// 2 ms came and went unseen.
pub const MAX_GAP_PERIODS: u64 = 1;

/// No wakeup comes sooner than this fraction of a period after the last:
/// it bounds the sampler's wakeups when many threads fall due at different
/// moments (at 1000 Hz, 50 µs: at most 20,000 wakeups per second).
pub const MIN_GAP_FRACTION: u64 = 20;

/// The sampler thread's wakeup times in cpu mode on the fallback.
#[derive(Clone, Debug)]
pub struct CpuWakeups {
    period_ns: u64,
    min_gap_ns: u64,
    rng: SplitMix64,
    /// The earliest due point predicted since the last wakeup.
    earliest_due: u64,
    /// The deadline slept to was a random tick, not a due point.
    random: bool,
    ticks: u64,
    missed: u64,
}

impl CpuWakeups {
    /// A schedule for `period_ns`, its random ticks drawn from `seed`.
    ///
    /// # Panics
    /// If `period_ns` is zero.
    pub fn new(period_ns: u64, seed: u64) -> Self {
        assert!(period_ns > 0, "period must be positive");
        CpuWakeups {
            period_ns,
            min_gap_ns: (period_ns / MIN_GAP_FRACTION).max(1),
            rng: SplitMix64::new(seed),
            earliest_due: u64::MAX,
            random: false,
            ticks: 0,
            missed: 0,
        }
    }

    /// A thread's next sample will be due at `at_ns` if it runs from now.
    pub fn due_at(&mut self, at_ns: u64) {
        self.earliest_due = self.earliest_due.min(at_ns);
    }

    /// The deadline to sleep until, decided at `now_ns` after a wakeup's
    /// work: the earliest due point predicted since the last wakeup (at
    /// least the minimum gap away) or a random tick, whichever is first,
    /// and no later than [`MAX_GAP_PERIODS`] from now.
    pub fn next(&mut self, now_ns: u64) -> u64 {
        let random_at =
            now_ns.saturating_add(self.exponential(RANDOM_TICK_MEAN_PERIODS * self.period_ns));
        let due_at = self
            .earliest_due
            .max(now_ns + self.min_gap_ns)
            .min(now_ns + MAX_GAP_PERIODS * self.period_ns);
        self.earliest_due = u64::MAX;
        self.random = random_at <= due_at;
        random_at.min(due_at)
    }

    /// The sampler woke at `now_ns` for `deadline_ns`: counts the wakeup,
    /// and the periods it overslept as missed.
    pub fn woke(&mut self, deadline_ns: u64, now_ns: u64) {
        self.ticks += 1;
        self.missed += now_ns.saturating_sub(deadline_ns) / self.period_ns;
    }

    /// Whether the current wakeup is a random tick: any thread found due
    /// then is sampled, not only those whose due point it is.
    pub fn random_tick(&self) -> bool {
        self.random
    }

    /// Wakeups so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Whole periods the sampler overslept its deadlines by.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// An exponentially distributed wait with the given mean, capped at 20
    /// means (reached once in 500 million draws).
    fn exponential(&mut self, mean_ns: u64) -> u64 {
        // 53 random bits, in (0, 1].
        let u = ((self.rng.next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let wait = -u.ln() * mean_ns as f64;
        (wait as u64).min(20 * mean_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;

    #[test]
    fn random_ticks_are_exponential_with_the_mean_asked_for() {
        let mut w = CpuWakeups::new(P, 42);
        let n = 50_000;
        let waits: Vec<u64> = (0..n)
            .map(|_| w.exponential(RANDOM_TICK_MEAN_PERIODS * P))
            .collect();
        let mean = waits.iter().sum::<u64>() as f64 / n as f64;
        let want = (RANDOM_TICK_MEAN_PERIODS * P) as f64;
        assert!((mean / want - 1.0).abs() < 0.03, "mean {mean} for {want}");
        // No memory: of the waits longer than one mean, the part beyond it
        // is again exponential with the same mean (a fixed or uniform wait
        // would leave much less).
        let beyond: Vec<f64> = waits
            .iter()
            .filter(|&&t| t as f64 > want)
            .map(|&t| t as f64 - want)
            .collect();
        let beyond_mean = beyond.iter().sum::<f64>() / beyond.len() as f64;
        assert!(
            (beyond_mean / want - 1.0).abs() < 0.06,
            "mean beyond one mean {beyond_mean} for {want}"
        );
        // Short waits are as likely as the distribution says: about 1 - e^-0.05
        // of them fall in the first 5% of a mean, where a sampler woken on a
        // fixed period never looks.
        let short = waits.iter().filter(|&&t| (t as f64) < want * 0.05).count() as f64 / n as f64;
        assert!(
            (short - 0.0488).abs() < 0.005,
            "{short} of waits were short"
        );
    }

    #[test]
    fn the_earliest_due_point_wins_and_is_forgotten_after_one_wakeup() {
        let mut w = CpuWakeups::new(P, 1);
        let now = 10 * P;
        w.due_at(now + P / 2);
        w.due_at(now + P / 3);
        w.due_at(now + 3 * P);
        let deadline = w.next(now);
        if w.random_tick() {
            assert!(deadline <= now + P / 3);
        } else {
            assert_eq!(deadline, now + P / 3);
        }
        // Nothing predicted now: a random tick, or a wakeup to look for
        // new threads at most `MAX_GAP_PERIODS` away. Random ticks come as
        // often as ever: a wait of more than that is cut short at it, and
        // with no memory, the next wait starts afresh.
        let mut random = 0;
        for _ in 0..10_000 {
            let deadline = w.next(now);
            assert!(deadline <= now + MAX_GAP_PERIODS * P, "{deadline}");
            random += u32::from(w.random_tick());
        }
        let expected = 1.0 - (-(MAX_GAP_PERIODS as f64) / RANDOM_TICK_MEAN_PERIODS as f64).exp();
        let share = f64::from(random) / 10_000.0;
        assert!(
            (share - expected).abs() < 0.03,
            "{share} random, not {expected}"
        );
    }

    #[test]
    fn due_points_never_come_sooner_than_the_minimum_gap() {
        let mut w = CpuWakeups::new(P, 3);
        let now = 5 * P;
        for _ in 0..1000 {
            w.due_at(now - 7);
            let deadline = w.next(now);
            let gap = P / MIN_GAP_FRACTION;
            assert!(deadline >= now + gap || w.random_tick(), "{deadline}");
            assert!(deadline <= now + gap);
        }
    }

    #[test]
    fn oversleeping_counts_whole_periods_missed() {
        let mut w = CpuWakeups::new(P, 9);
        w.woke(100, 100 + P / 2);
        w.woke(100, 100 + 3 * P + 1);
        assert_eq!((w.ticks(), w.missed()), (2, 3));
    }
}
