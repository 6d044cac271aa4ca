//! A born thread's CPU time at its exit, in its own CPU clock's terms.
//!
//! The kernel's final count of the task clock that paced its samples also
//! includes, on a virtual machine, time the host stole (the thread's CPU
//! clock leaves it out). So the CPU clock is read at the first drain with
//! samples and then now and then ([`ClockReading::due`]); the CPU time at
//! the exit is the last reading plus a period per later sample, the two
//! partial periods cancelling on average. A thread never read keeps the
//! kernel's count.

/// How often (ns) a born thread's CPU clock is read again while it runs,
/// to bound the time estimated from samples, which stolen time inflates.
const READ_AGAIN_NS: u64 = 100_000_000;
/// Samples since the last reading before it is read again, so that reads
/// stay a small fraction of the samples.
const READ_AGAIN_SAMPLES: u64 = 8;

/// A born thread's CPU clock as last read, and its samples taken since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClockReading {
    /// Its CPU clock and when it was read (`CLOCK_MONOTONIC` ns, as ring
    /// records are stamped); `None` before the first reading.
    read: Option<(u64, u64)>,
    /// Samples taken after that reading.
    samples_since: u64,
}

impl ClockReading {
    /// A ring sample of the thread, taken at `time_ns`.
    pub(crate) fn sampled(&mut self, time_ns: u64) {
        if self.read.is_some_and(|(_, at)| time_ns > at) {
            self.samples_since += 1;
        }
    }

    /// Whether its clock is to be read at `now_ns`, given it has samples.
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        match self.read {
            None => true,
            Some((_, at)) => {
                self.samples_since >= READ_AGAIN_SAMPLES
                    && now_ns.saturating_sub(at) >= READ_AGAIN_NS
            }
        }
    }

    /// Its clock read `cpu_ns` at `at_ns`, after every sample counted so far
    /// (a drain takes in only records older than its start).
    pub(crate) fn read(&mut self, cpu_ns: u64, at_ns: u64) {
        self.read = Some((cpu_ns, at_ns));
        self.samples_since = 0;
    }

    /// Its CPU time at its exit: the last reading plus a period a sample
    /// since, or the kernel's count (`counted_ns`) if never read.
    pub(crate) fn at_exit(&self, counted_ns: u64, period_ns: u64) -> u64 {
        match self.read {
            Some((cpu_ns, _)) => cpu_ns + self.samples_since * period_ns,
            None => counted_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;

    #[test]
    fn a_thread_never_read_keeps_the_kernels_count() {
        let mut c = ClockReading::default();
        c.sampled(5);
        assert!(c.due(0));
        assert_eq!(c.at_exit(7 * P, P), 7 * P);
    }

    #[test]
    fn samples_after_the_reading_add_a_period_each() {
        let mut c = ClockReading::default();
        c.read(40 * P + 300, 1_000);
        // Taken before the reading: already in the clock's value.
        c.sampled(999);
        for t in 1_001..1_011 {
            c.sampled(t);
        }
        // A stolen pause made the kernel count 20 ms more than ran.
        assert_eq!(c.at_exit(70 * P, P), 50 * P + 300);
    }

    #[test]
    fn it_is_read_again_after_enough_time_and_samples() {
        let mut c = ClockReading::default();
        c.read(0, 0);
        for t in 1..READ_AGAIN_SAMPLES {
            c.sampled(t);
        }
        assert!(!c.due(READ_AGAIN_NS), "too few samples since");
        c.sampled(READ_AGAIN_SAMPLES);
        assert!(!c.due(READ_AGAIN_NS - 1), "too soon");
        assert!(c.due(READ_AGAIN_NS));
        c.read(5 * P, READ_AGAIN_NS);
        assert!(!c.due(2 * READ_AGAIN_NS));
    }
}
