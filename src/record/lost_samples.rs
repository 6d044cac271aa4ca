//! Saying where samples were lost for a reason the user can act on.

use crate::Stats;

/// One line per thread that lost most of its samples because it blocks
/// the profiling signal (its `SigBlk` mask): such a thread is not
/// signalled, so a busy one looks idle in the profile. A thread counts
/// when it lost at least 10 samples and more than it got (judged against
/// the samples its CPU time was worth at the requested rate).
/// `threads` names threads by id (`(tid, name)`), as
/// [`Profile::threads`](crate::Profile::threads) lists them.
pub fn signal_blocked_warnings(stats: &Stats, threads: &[(u64, &str)]) -> Vec<String> {
    let mut lines = Vec::new();
    for t in &stats.thread_cpu {
        if t.signal_blocked < 10 {
            continue;
        }
        let worth = t.cpu.as_secs_f64() * f64::from(stats.requested_hz);
        if (t.signal_blocked as f64) * 2.0 < worth {
            continue;
        }
        let name = threads
            .iter()
            .rev()
            .find(|(tid, _)| *tid == t.tid)
            .map_or("?", |(_, name)| *name);
        lines.push(format!(
            "thread {name} ({}) blocks the profiling signal: {} of its samples were lost \
             ({:.0} ms of CPU). Unblock the signal in it (pthread_sigmask), or choose another \
             with ProfilerBuilder::signal",
            t.tid,
            t.signal_blocked,
            t.cpu.as_secs_f64() * 1e3
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn warns_only_about_threads_that_lost_most_samples() {
        let mut stats = Stats::new(&Default::default());
        stats.add_thread_cpu(1, Duration::from_millis(500));
        stats.add_signal_blocked(1, 480);
        stats.add_thread_cpu(2, Duration::from_millis(500));
        stats.add_signal_blocked(2, 20);
        stats.add_thread_cpu(3, Duration::from_millis(1));
        stats.add_signal_blocked(3, 1);
        let threads = [(1, "daemon")];
        let lines = signal_blocked_warnings(&stats, &threads);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("daemon (1)") && lines[0].contains("480"));
    }
}
