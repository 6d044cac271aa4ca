//! The fixed-rate tick schedule, free of any clock source.
//!
//! Deadlines are absolute (`start + k * period`), so sleeping late never
//! shifts later ticks (no drift), and after a late wake-up the schedule
//! jumps to the next deadline still in the future instead of firing the
//! missed ones back to back (no burst catch-up). Missed deadlines are
//! counted so the achieved rate can be reported honestly. The platform
//! supplies the clock and the absolute sleep through [`Clock`]; a platform
//! whose clock counts in ticks of its own (Mach's `mach_absolute_time`)
//! converts them with a [`Timebase`].

/// `CLOCK_MONOTONIC` now, in nanoseconds: the one time base of samples,
/// label changes and the perf rings' records (`use_clockid`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    // Async-signal-safe, and takes no lock.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A monotonic clock with an absolute-deadline sleep, in nanoseconds.
///
/// The shared sampling loop ([`crate::control`]) runs its
/// [`TickSchedule`] on one of these, so tests can drive it with a fake
/// clock and each platform plugs in its own (`mach_absolute_time` and
/// `mach_wait_until` on macOS).
pub trait Clock {
    /// Nanoseconds since some fixed, unspecified start.
    fn now_ns(&self) -> u64;
    /// Sleeps until [`Clock::now_ns`] reaches `deadline_ns` (returns at once
    /// if it already has). Sleeping to an absolute time, rather than for a
    /// duration, is what keeps the schedule free of drift.
    fn sleep_until(&self, deadline_ns: u64);
}

/// The ratio between a tick-counting clock and nanoseconds:
/// `ns = ticks * numer / denom` (`mach_timebase_info`: 1/1 on Intel Macs,
/// 125/3 on Apple silicon, where a tick is 41.67 ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timebase {
    /// Multiplier from ticks to nanoseconds.
    pub numer: u32,
    /// Divisor from ticks to nanoseconds.
    pub denom: u32,
}

impl Timebase {
    /// Ticks to nanoseconds, rounded down. Computed in 128 bits, so no
    /// tick count a 64-bit clock can hold overflows on the way.
    pub fn ticks_to_ns(self, ticks: u64) -> u64 {
        let ns = u128::from(ticks) * u128::from(self.numer) / u128::from(self.denom.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Nanoseconds to ticks, rounded up: a sleep to the converted deadline
    /// never wakes before `ns`.
    pub fn ns_to_ticks_ceil(self, ns: u64) -> u64 {
        let numer = u128::from(self.numer.max(1));
        let ticks = (u128::from(ns) * u128::from(self.denom)).div_ceil(numer);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

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

    /// Changes the period from `now_ns` on: the next deadline is one new
    /// period after it, and nothing counts as missed.
    ///
    /// # Panics
    /// If `period_ns` is zero.
    pub fn set_period(&mut self, now_ns: u64, period_ns: u64) {
        assert!(period_ns > 0, "tick period must be positive");
        self.period = period_ns;
        self.next = now_ns + period_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_period_starts_now_and_misses_nothing() {
        let mut s = TickSchedule::new(0, 10);
        s.complete_tick(10);
        s.set_period(12, 50);
        assert_eq!(s.deadline(), 62);
        assert_eq!(s.complete_tick(70), 0);
        assert_eq!((s.deadline(), s.ticks(), s.missed()), (112, 2, 0));
    }

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
    fn timebase_converts_both_ways_without_waking_early() {
        let intel = Timebase { numer: 1, denom: 1 };
        assert_eq!(intel.ticks_to_ns(1_234), 1_234);
        assert_eq!(intel.ns_to_ticks_ceil(1_234), 1_234);

        // Apple silicon: 24 MHz, 125/3 ns per tick.
        let arm = Timebase {
            numer: 125,
            denom: 3,
        };
        assert_eq!(arm.ticks_to_ns(24_000_000), 1_000_000_000);
        assert_eq!(arm.ns_to_ticks_ceil(1_000_000_000), 24_000_000);
        // 1 ms is 24_000 ticks exactly; 1 ns more needs one more tick.
        assert_eq!(arm.ns_to_ticks_ceil(1_000_001), 24_001);
        for ns in [0, 1, 41, 42, 999_999, 1_000_000, 123_456_789_012] {
            let ticks = arm.ns_to_ticks_ceil(ns);
            assert!(arm.ticks_to_ns(ticks) >= ns, "{ns} ns woke early");
            assert!(
                ticks == 0 || arm.ticks_to_ns(ticks - 1) < ns,
                "{ns} ns overshot"
            );
        }
        // Years of uptime in ticks do not overflow the conversion.
        let year_ticks = 24_000_000 * 3600 * 24 * 365;
        assert_eq!(arm.ticks_to_ns(year_ticks), 31_536_000 * 1_000_000_000);
        assert_eq!(arm.ticks_to_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn period_for_hz() {
        assert_eq!(TickSchedule::period_for_hz(1000), 1_000_000);
        assert_eq!(TickSchedule::period_for_hz(0), 1_000_000_000);
    }
}
