//! When the sampler thread wakes on the paced clock. Samples are taken only at
//! random ticks, exponentially distributed, so a tick finds a running thread at
//! an unbiased point, not a fixed distance past where it resumed
//! (`docs/decisions/random-ticks.md`). A thread is signalled at the first tick
//! that finds it due and running: its clock moved since the last look at the
//! clocks, at most [`CpuWakeups::look_gap_ns`] before.

use super::super::split_mix::SplitMix64;

/// Random ticks come this many periods apart on average.
pub const RANDOM_TICK_MEAN_PERIODS: u64 = 1;
/// No two wakeups are further apart than this many periods, so a thread
/// born since the last one (see `unseen_cpu`) is found while it runs.
pub const MAX_GAP_PERIODS: u64 = 1;
/// A random tick comes at most this long (ns) after a look at the clocks,
/// so the readings it judges "running" by are about a time slice old.
pub const MAX_LOOK_GAP_NS: u64 = 2_000_000;

/// The sampler thread's wakeup times in cpu mode on the fallback.
#[derive(Clone, Debug)]
pub struct CpuWakeups {
    period_ns: u64,
    rng: SplitMix64,
    /// The deadline slept to was a random tick, not a look.
    random: bool,
    /// The random tick that a look is to come before.
    tick_at_ns: Option<u64>,
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
            tick_at_ns: None,
            ticks: 0,
            missed: 0,
        }
    }

    /// The deadline to sleep until from `now_ns`: the next random tick if within
    /// the look gap, else a look before it, at most [`MAX_GAP_PERIODS`] away.
    /// With `young_threads` it looks every gap, so none exits unread for longer.
    pub fn next(&mut self, now_ns: u64, young_threads: bool) -> u64 {
        let mean = RANDOM_TICK_MEAN_PERIODS * self.period_ns;
        let tick_at = match self.tick_at_ns.take() {
            Some(at) if at > now_ns => at,
            // Overslept past it at a look: no memory, so a fresh wait.
            _ => now_ns.saturating_add(self.exponential(mean)),
        };
        let (gap, most) = (self.look_gap_ns(), MAX_GAP_PERIODS * self.period_ns);
        if tick_at - now_ns <= gap {
            // This wakeup looked, at most a gap before.
            self.random = true;
            return tick_at;
        }
        self.random = false;
        self.tick_at_ns = Some(tick_at);
        if gap >= most || young_threads {
            // A look every gap; the tick waits on (no memory).
            return now_ns + gap;
        }
        let look_at = tick_at - self.exponential_within(mean, gap).max(1);
        if look_at <= now_ns + most {
            return look_at;
        }
        // Too far for one wait: a look on the way, more than a gap before
        // the tick, so the last look before it is still drawn as above.
        (now_ns + most).min(tick_at - gap - 1).max(now_ns + 1)
    }

    /// The longest time from a look to its tick: [`MAX_LOOK_GAP_NS`] or a period.
    pub fn look_gap_ns(&self) -> u64 {
        self.period_ns.min(MAX_LOOK_GAP_NS)
    }

    /// Woke at `now_ns` for `deadline_ns`: counts it, and periods overslept.
    pub fn woke(&mut self, deadline_ns: u64, now_ns: u64) {
        self.ticks += 1;
        self.missed += now_ns.saturating_sub(deadline_ns) / self.period_ns;
    }

    /// Whether this wakeup is a random tick, the only kind that samples.
    pub fn random_tick(&self) -> bool {
        self.random
    }

    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Whole periods the sampler overslept its deadlines by.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// An exponential wait of the given mean.
    fn exponential(&mut self, mean_ns: u64) -> u64 {
        let wait = -self.rng.unit().ln() * mean_ns as f64;
        (wait as u64).min(20 * mean_ns)
    }

    /// An exponential wait of the given mean, given it is at most `most_ns`.
    fn exponential_within(&mut self, mean_ns: u64, most_ns: u64) -> u64 {
        let u = self.rng.unit();
        let below = 1.0 - (-(most_ns as f64) / mean_ns as f64).exp();
        let wait = -(1.0 - u * below).ln() * mean_ns as f64;
        (wait as u64).min(most_ns)
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
        // No memory: the part of a wait beyond one mean has the same mean.
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
        // 1 - e^-0.05 of the waits fall in the first 5% of a mean.
        let short = waits.iter().filter(|&&t| (t as f64) < want * 0.05).count() as f64 / n as f64;
        assert!(
            (short - 0.0488).abs() < 0.005,
            "{short} of waits were short"
        );
    }

    /// The gaps between on-time wakeups over `seconds`, and which were random.
    fn follow(period: u64, seconds: u64, young: bool) -> Vec<(u64, bool)> {
        let mut w = CpuWakeups::new(period, 1);
        let (mut now, end) = (0, seconds * 1_000_000_000);
        let mut wakeups = Vec::new();
        while now < end {
            let deadline = w.next(now, young);
            wakeups.push((deadline - now, w.random_tick()));
            now = deadline;
        }
        wakeups
    }

    #[test]
    fn random_ticks_keep_their_rate_with_a_look_shortly_before_each() {
        // At 1000 Hz the look gap is a period; at 100 Hz, 2 ms.
        for (period, gap, most_per_tick) in [(P, P, 1.65), (10 * P, MAX_LOOK_GAP_NS, 2.6)] {
            let wakeups = follow(period, 200, false);
            for &(wait, random) in &wakeups {
                assert!(!random || wait <= gap, "random tick {wait} ns after a look");
                assert!(wait <= MAX_GAP_PERIODS * period, "a wait of {wait} ns");
            }
            let ticks = wakeups.iter().filter(|w| w.1).count() as f64;
            let secs = 200.0;
            let rate = ticks / secs;
            let want = 1e9 / (RANDOM_TICK_MEAN_PERIODS * period) as f64;
            assert!(
                (rate / want - 1.0).abs() < 0.03,
                "{rate} random ticks a second, not {want}"
            );
            // Looks only where a tick needs one, or a period went by.
            let per_tick = wakeups.len() as f64 / ticks;
            println!("period {period}: {per_tick:.2} wakeups per random tick");
            assert!(
                per_tick <= most_per_tick,
                "{per_tick} wakeups per random tick"
            );
            // After its look, a tick waits an exponential cut at the gap.
            let after_look: Vec<f64> = wakeups
                .windows(2)
                .filter(|w| !w[0].1 && w[1].1)
                .map(|w| w[1].0 as f64)
                .collect();
            let mean = after_look.iter().sum::<f64>() / after_look.len() as f64;
            let (m, g) = ((RANDOM_TICK_MEAN_PERIODS * period) as f64, gap as f64);
            let want = m - g * (-g / m).exp() / (1.0 - (-g / m).exp());
            assert!(
                (mean / want - 1.0).abs() < 0.03,
                "ticks {mean} ns after a look, not {want}"
            );
        }
    }

    #[test]
    fn while_young_threads_run_it_looks_every_gap() {
        let wakeups = follow(10 * P, 200, true);
        assert!(wakeups.iter().all(|&(wait, _)| wait <= MAX_LOOK_GAP_NS));
        let ticks = wakeups.iter().filter(|w| w.1).count() as f64;
        assert!(
            (ticks / 200.0 / 100.0 - 1.0).abs() < 0.03,
            "{ticks} random ticks"
        );
        let per_tick = wakeups.len() as f64 / ticks;
        assert!(per_tick >= 5.0, "{per_tick} wakeups per random tick");
    }

    #[test]
    fn oversleeping_counts_whole_periods_missed() {
        let mut w = CpuWakeups::new(P, 9);
        w.woke(100, 100 + P / 2);
        w.woke(100, 100 + 3 * P + 1);
        assert_eq!((w.ticks(), w.missed()), (2, 3));
    }
}
