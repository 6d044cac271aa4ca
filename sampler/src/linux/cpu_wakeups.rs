//! When the sampler thread wakes in cpu mode on the Linux fallback: at
//! random moments, and at least once a period or every 2 ms.
//!
//! A sampler thread that samples at moments tied to when threads resumed
//! samples a busy machine wrongly. Its own wakeup preempts a thread on its
//! CPU, and when it sleeps again the scheduler often resumes a waiting
//! thread right then. A thread preempted at a system call's exit (reading
//! a clock can end its time slice) resumes there, at the start of whatever
//! its code does next, and a sample taken a fixed time later lands a fixed
//! distance into that code: the first stretch after each such point is
//! rarely sampled. A fixed wall-clock period did that (4-15 points of share
//! taken from the function after the workload's clock reads, beside two
//! CPU-burning processes), and so did waking at the moment each thread was
//! predicted to fall due, if it ran on from the last wakeup: a prediction
//! is a fixed distance from where the thread resumed. At 100 Hz, where a
//! period spans several time slices, that took 10 points from the same
//! function.
//!
//! So samples are taken only at **random ticks**, exponentially distributed
//! with a mean of [`RANDOM_TICK_MEAN_PERIODS`] periods. An exponential wait
//! has no memory: wherever a thread resumed, the next tick is as likely at
//! any later moment, so a thread running then is found at an unbiased
//! point of its code. A thread is signalled at the first random tick that
//! finds it due ([`CpuDebt`]) and running; the sample's weight stands for
//! the periods it owes, so samples per CPU-second stay at the rate.
//!
//! The sampler also wakes at most [`MAX_GAP_PERIODS`] or [`MAX_LOOK_GAP_NS`]
//! after its last wakeup, whichever is sooner, to find new threads and to
//! look at every thread's clock; such a wakeup samples nothing, as its
//! moment is a fixed time after the last one. A random tick signals a due
//! thread only if its clock moved since the last look, as a sign that it
//! runs now; a look older than a time slice says little about that, and
//! a thread that ran since but waits for a CPU now takes its signal where
//! it resumes, which is where it was preempted.
//!
//! On a quiet machine a thread is then sampled at the first random tick
//! after each period of its CPU time (measured at 1000 Hz with two busy
//! threads: about 850 distinct samples per CPU-second, the rest carried
//! as weight).
//!
//! [`CpuDebt`]: super::cpu_debt::CpuDebt

use super::split_mix::SplitMix64;

/// Random ticks come this many periods apart on average: a due thread
/// waits about that long for the tick that samples it, so the thread's
/// distinct samples stay close to one per period of its CPU time.
pub const RANDOM_TICK_MEAN_PERIODS: u64 = 1;

/// No two wakeups are further apart than this many periods: each wakeup
/// compares the process's CPU clock with the threads the sampler knows
/// (`unseen_cpu`), and a thread born since is found while it still runs.
/// Random ticks alone leave gaps of several periods, in which a thread of
/// 2 ms came and went unseen.
pub const MAX_GAP_PERIODS: u64 = 1;

/// No two wakeups are further apart than this either (2 ms), so that the
/// clock readings a random tick judges "running" by are no older than
/// about a time slice of a busy machine. At 100 Hz, with only a period
/// between looks, beside two CPU-burning processes, three functions of the
/// self-check leaned by 2-4 points on average over ten runs (they are then
/// within 1); the sampler thread's CPU grew from about 0.95% of a core to
/// 1.5%. At 500 Hz and above a period is the shorter gap.
pub const MAX_LOOK_GAP_NS: u64 = 2_000_000;

/// The sampler thread's wakeup times in cpu mode on the fallback.
#[derive(Clone, Debug)]
pub struct CpuWakeups {
    period_ns: u64,
    rng: SplitMix64,
    /// The deadline slept to was a random tick, not the longest gap.
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
            rng: SplitMix64::new(seed),
            random: false,
            ticks: 0,
            missed: 0,
        }
    }

    /// The deadline to sleep until, decided at `now_ns` after a wakeup's
    /// work: a random tick, or the longest gap from now if that is sooner.
    pub fn next(&mut self, now_ns: u64) -> u64 {
        let random_at =
            now_ns.saturating_add(self.exponential(RANDOM_TICK_MEAN_PERIODS * self.period_ns));
        let gap_at = now_ns + self.longest_gap_ns();
        self.random = random_at <= gap_at;
        random_at.min(gap_at)
    }

    /// The longest time between two wakeups: [`MAX_GAP_PERIODS`] or
    /// [`MAX_LOOK_GAP_NS`], whichever is shorter.
    pub fn longest_gap_ns(&self) -> u64 {
        (MAX_GAP_PERIODS * self.period_ns).min(MAX_LOOK_GAP_NS)
    }

    /// The sampler woke at `now_ns` for `deadline_ns`: counts the wakeup,
    /// and the periods it overslept as missed.
    pub fn woke(&mut self, deadline_ns: u64, now_ns: u64) {
        self.ticks += 1;
        self.missed += now_ns.saturating_sub(deadline_ns) / self.period_ns;
    }

    /// Whether the current wakeup is a random tick, the only kind at
    /// which threads are sampled.
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
    fn wakeups_are_random_ticks_or_the_longest_gap() {
        // At 1000 Hz the longest gap is a period; at 100 Hz, 2 ms.
        for (period, gap) in [(P, P), (10 * P, MAX_LOOK_GAP_NS)] {
            let mut w = CpuWakeups::new(period, 1);
            assert_eq!(w.longest_gap_ns(), gap);
            let now = 10 * period;
            // A random tick whenever it comes first; otherwise a wakeup
            // exactly the longest gap away, which samples nothing. Random
            // ticks come as often as ever: a wait of more than that is cut
            // short at it, and with no memory, the next wait starts afresh.
            let mut random = 0;
            for _ in 0..10_000 {
                let deadline = w.next(now);
                assert!(deadline <= now + gap, "{deadline}");
                if w.random_tick() {
                    random += 1;
                } else {
                    assert_eq!(deadline, now + gap);
                }
            }
            let mean = (RANDOM_TICK_MEAN_PERIODS * period) as f64;
            let expected = 1.0 - (-(gap as f64) / mean).exp();
            let share = f64::from(random) / 10_000.0;
            assert!(
                (share - expected).abs() < 0.03,
                "period {period}: {share} random, not {expected}"
            );
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
