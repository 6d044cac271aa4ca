//! The fixed-rate tick schedule, free of any clock source.
//!
//! Deadlines are absolute (`start + k * period`), so sleeping late never
//! shifts later ticks (no drift), and after a late wake-up the schedule
//! jumps to the next deadline still in the future instead of firing the
//! missed ones back to back (no burst catch-up). Missed deadlines are
//! counted so the achieved rate can be reported honestly. The platform
//! supplies the clock and the absolute sleep.

/// Absolute deadlines on a fixed period, in nanoseconds of some monotonic
/// clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TickSchedule {
    period: u64,
    next: u64,
    ticks: u64,
    missed: u64,
}

impl TickSchedule {
    /// A schedule whose first deadline is one period after `start`.
    ///
    /// # Panics
    /// If `period_ns` is zero.
    pub fn new(start_ns: u64, period_ns: u64) -> Self {
        assert!(period_ns > 0, "tick period must be positive");
        TickSchedule {
            period: period_ns,
            next: start_ns + period_ns,
            ticks: 0,
            missed: 0,
        }
    }

    /// The period for a rate in Hz (at least 1 ns).
    pub fn period_for_hz(hz: u32) -> u64 {
        (1_000_000_000 / u64::from(hz.max(1))).max(1)
    }

    /// The deadline to sleep until.
    pub fn deadline(&self) -> u64 {
        self.next
    }

    /// Records that the tick for the current deadline ran and that it is now
    /// `now_ns`; moves the deadline to the first one after `now_ns` and
    /// returns how many deadlines were skipped on the way.
    pub fn complete_tick(&mut self, now_ns: u64) -> u64 {
        self.ticks += 1;
        let mut next = self.next + self.period;
        let mut skipped = 0;
        if now_ns >= next {
            skipped = (now_ns - next) / self.period + 1;
            next += skipped * self.period;
        }
        self.next = next;
        self.missed += skipped;
        skipped
    }

    /// Ticks that ran.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Deadlines skipped because the sampler woke or worked too late.
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// The period in nanoseconds.
    pub fn period(&self) -> u64 {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_time_ticks_never_drift() {
        let mut s = TickSchedule::new(1_000, 100);
        assert_eq!(s.deadline(), 1_100);
        // Waking a little late each time does not push the deadlines.
        for k in 1..=1000u64 {
            let d = s.deadline();
            assert_eq!(d, 1_000 + 100 * k);
            assert_eq!(s.complete_tick(d + 37), 0);
        }
        assert_eq!((s.ticks(), s.missed()), (1000, 0));
    }

    #[test]
    fn late_wake_skips_without_burst_and_counts() {
        let mut s = TickSchedule::new(0, 100);
        // Deadline 100 ran at 450: deadlines 200, 300, 400 were missed.
        assert_eq!(s.complete_tick(450), 3);
        assert_eq!(s.deadline(), 500);
        assert_eq!(s.missed(), 3);
        // Exactly at the next deadline counts it as missed too: it is due now
        // and would otherwise fire immediately, back to back.
        assert_eq!(s.complete_tick(600), 1);
        assert_eq!(s.deadline(), 700);
        assert_eq!((s.ticks(), s.missed()), (2, 4));
    }

    #[test]
    fn achieved_plus_missed_covers_the_run() {
        let mut s = TickSchedule::new(0, 1_000_000);
        let mut now = 0;
        for i in 0..5_000u64 {
            now = s.deadline() + if i % 97 == 0 { 3_500_000 } else { 20_000 };
            s.complete_tick(now);
        }
        // Every deadline up to the last one is either a tick or a miss.
        assert_eq!(s.ticks() + s.missed(), s.deadline() / 1_000_000 - 1);
        assert!(now < s.deadline());
    }

    #[test]
    fn period_for_hz() {
        assert_eq!(TickSchedule::period_for_hz(1000), 1_000_000);
        assert_eq!(TickSchedule::period_for_hz(0), 1_000_000_000);
    }
}
