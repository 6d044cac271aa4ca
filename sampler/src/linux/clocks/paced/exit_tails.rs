//! The CPU time a thread used after its last sample, on the paced clock. An
//! exited thread's clock cannot be read, but the process's keeps its time
//! ([`UnreadCpu`]), shared among the threads gone ([`share_out`]). Each
//! sample goes on one of a thread's last stacks: the last is often teardown.

use std::collections::HashMap;

use super::super::split_mix::SplitMix64;

/// The process's CPU time that no reading of a thread's clock covers.
#[derive(Debug, Default)]
pub(crate) struct UnreadCpu {
    /// The unread time (ns, may be negative) at the last listing.
    at_last_listing: Option<i128>,
}

impl UnreadCpu {
    /// At a listing, all live threads just read (`read_ns` in all): the CPU
    /// time unread since the last. What ran between the threads' reading and
    /// the process's is counted alike each time, so cancels.
    pub(crate) fn at_listing(&mut self, process_ns: u64, own_ns: u64, read_ns: u64) -> u64 {
        let unread = i128::from(process_ns) - i128::from(own_ns) - i128::from(read_ns);
        let grew = self.at_last_listing.map_or(0, |last| unread - last);
        self.at_last_listing = Some(unread);
        u64::try_from(grew.max(0)).unwrap_or(u64::MAX)
    }
}

/// What the sampler read from threads' clocks, against the process's.
#[derive(Debug)]
pub(crate) struct ExitTails {
    unread: UnreadCpu,
    /// CPU time read from followed threads and from btprof's own excluded
    /// ones, which the process's clock counts too.
    read_ns: u64,
    /// Excluded threads' clocks at the last listing, and at this one.
    excluded: HashMap<i32, u64>,
    excluded_now: HashMap<i32, u64>,
    rng: SplitMix64,
}

impl ExitTails {
    pub(crate) fn new(seed: u64) -> Self {
        ExitTails {
            unread: UnreadCpu::default(),
            read_ns: 0,
            excluded: HashMap::new(),
            excluded_now: HashMap::new(),
            rng: SplitMix64::new(seed),
        }
    }

    /// A thread's clock read `cpu_ns` after `last` (`None`: the first, which
    /// only sets where it counts from). Returns the CPU time newly read.
    pub(crate) fn saw(&mut self, last: &mut Option<u64>, cpu_ns: u64) -> u64 {
        let new = last.map_or(0, |before| cpu_ns.saturating_sub(before));
        self.read_ns += new;
        *last = Some(cpu_ns.max(last.unwrap_or(0)));
        new
    }

    /// At a listing: excluded thread `tid` read `cpu_ns` (`born`: from zero).
    pub(crate) fn saw_excluded(&mut self, tid: i32, cpu_ns: u64, born: bool) {
        let mut last = self.excluded.get(&tid).copied().or(born.then_some(0));
        self.saw(&mut last, cpu_ns);
        self.excluded_now.insert(tid, cpu_ns);
    }

    pub(crate) fn at_listing(&mut self, process_ns: u64, own_ns: u64) -> u64 {
        std::mem::swap(&mut self.excluded, &mut self.excluded_now);
        self.excluded_now.clear();
        self.unread.at_listing(process_ns, own_ns, self.read_ns)
    }

    /// One of `n` stacks, at random (`n` > 0).
    pub(crate) fn pick(&mut self, n: usize) -> usize {
        (self.rng.next() % n.max(1) as u64) as usize
    }

    pub(crate) fn samples_for(&mut self, ns: u64, period_ns: u64) -> u64 {
        samples_for(ns, period_ns, &mut self.rng)
    }
}

/// One exited thread's last reckoning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExitTail {
    /// CPU time owed at its last reading, not yet stood for by a sample.
    pub owed_ns: u64,
    /// Most it can have used since its last reading: wall time till found gone.
    pub cap_ns: u64,
    /// Its share of the unread CPU time ([`share_out`]).
    pub unread_ns: u64,
}

impl AsMut<ExitTail> for ExitTail {
    fn as_mut(&mut self) -> &mut ExitTail {
        self
    }
}

/// Shares `unread_ns` among `tails` in proportion to their caps, each at
/// most its cap; returns the rest, which stays unsampled.
pub(crate) fn share_out<T: AsMut<ExitTail>>(unread_ns: u64, tails: &mut [T]) -> u64 {
    let caps: u128 = tails
        .iter_mut()
        .map(|t| u128::from(t.as_mut().cap_ns))
        .sum();
    if caps == 0 {
        return unread_ns;
    }
    let mut left = unread_ns;
    for tail in tails.iter_mut().map(AsMut::as_mut) {
        let share = u128::from(unread_ns) * u128::from(tail.cap_ns) / caps;
        tail.unread_ns = (share as u64).min(tail.cap_ns).min(left);
        left -= tail.unread_ns;
    }
    left
}

/// How many samples `ns` stands for: its whole periods, and one more by
/// chance as the fraction left.
pub(crate) fn samples_for(ns: u64, period_ns: u64, rng: &mut SplitMix64) -> u64 {
    let period = period_ns.max(1);
    ns / period + u64::from(rng.chance(ns % period, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn unread_time_is_what_the_process_used_beyond_the_readings() {
        let mut unread = UnreadCpu::default();
        // The first listing sets the baseline.
        assert_eq!(unread.at_listing(50 * MS, 2 * MS, 30 * MS), 0);
        // 10 ms more: 0.5 the sampler's, 8 read from threads, 1.5 unread.
        assert_eq!(
            unread.at_listing(60 * MS, 2 * MS + MS / 2, 38 * MS),
            3 * MS / 2
        );
        // Readings ahead of the process clock are made up for next time.
        assert_eq!(
            unread.at_listing(61 * MS, 2 * MS + MS / 2, 39 * MS + 100),
            0
        );
        assert_eq!(unread.at_listing(62 * MS, 2 * MS + MS / 2, 40 * MS), 100);
    }

    #[test]
    fn readings_count_from_where_a_thread_started_to_be_followed() {
        let mut tails = ExitTails::new(1);
        let (mut listed, mut born) = (None, Some(0));
        tails.saw(&mut listed, 40 * MS);
        tails.saw(&mut born, 2 * MS);
        tails.saw_excluded(7, 9 * MS, false);
        assert_eq!(tails.at_listing(100 * MS, MS), 0);
        tails.saw(&mut listed, 41 * MS);
        // An older reading, taken before a newer one was counted: nothing.
        tails.saw(&mut listed, 40 * MS + 1);
        tails.saw_excluded(7, 10 * MS, false);
        // 4 ms: 1 the listed thread's, 1 the excluded one's, 2 unread.
        assert_eq!(tails.at_listing(104 * MS, MS), 2 * MS);
        assert_eq!((listed, born), (Some(41 * MS), Some(2 * MS)));
    }

    #[test]
    fn unread_time_is_shared_by_cap_and_never_beyond_it() {
        let mut tails = [
            ExitTail {
                cap_ns: MS,
                ..ExitTail::default()
            },
            ExitTail {
                cap_ns: 3 * MS,
                ..ExitTail::default()
            },
        ];
        assert_eq!(share_out(2 * MS, &mut tails), 0);
        assert_eq!(
            (tails[0].unread_ns, tails[1].unread_ns),
            (MS / 2, 3 * MS / 2)
        );
        // More than the caps allow: the rest is left, unsampled.
        assert_eq!(share_out(10 * MS, &mut tails), 6 * MS);
        assert_eq!((tails[0].unread_ns, tails[1].unread_ns), (MS, 3 * MS));
        assert_eq!(share_out::<ExitTail>(MS, &mut []), MS);
    }

    #[test]
    fn a_fraction_of_a_period_counts_for_its_fraction_on_average() {
        let mut rng = SplitMix64::new(3);
        assert_eq!(samples_for(3 * MS, MS, &mut rng), 3);
        let total: u64 = (0..10_000)
            .map(|_| samples_for(MS + MS / 4, MS, &mut rng))
            .sum();
        assert!((12_250..12_750).contains(&total), "{total}");
    }
}
