//! Saying where samples were lost for a reason the user can act on.

use crate::{Stats, ThreadCpu};

/// The threads that lost most of their samples because they block the
/// profiling signal (their `SigBlk` mask): such a thread is not
/// signalled, so a busy one looks idle in the profile. A thread counts
/// when it lost at least 10 samples and more than it got (judged against
/// the samples its CPU time was worth at the requested rate).
pub fn signal_blocked_threads(stats: &Stats) -> impl Iterator<Item = &ThreadCpu> {
    stats.thread_cpu.iter().filter(|t| {
        let worth = t.cpu.as_secs_f64() * f64::from(stats.requested_hz);
        t.signal_blocked >= 10 && (t.signal_blocked as f64) * 2.0 >= worth
    })
}

/// One line per thread of [`signal_blocked_threads`], with what to do.
/// `threads` names threads by id (`(tid, name)`), as
/// [`Profile::threads`](crate::Profile::threads) lists them.
pub fn signal_blocked_warnings(stats: &Stats, threads: &[(u64, &str)]) -> Vec<String> {
    signal_blocked_threads(stats)
        .map(|t| {
            format!(
                "thread {} blocks the profiling signal: {} of its samples were lost \
                 ({:.0} ms of CPU). Unblock the signal in it (pthread_sigmask), or choose another \
                 with ProfilerBuilder::signal",
                thread_label(threads, t.tid),
                t.signal_blocked,
                t.cpu.as_secs_f64() * 1e3
            )
        })
        .collect()
}

/// Thread `tid` as a message names it: `NAME (TID)` with its latest name
/// in `threads`, or `TID` alone where the profile keeps no name under its
/// id (threads that share a name share one entry, under the first one's
/// id).
pub fn thread_label(threads: &[(u64, &str)], tid: u64) -> String {
    match threads.iter().rev().find(|(id, _)| *id == tid) {
        Some((_, name)) => format!("{name} ({tid})"),
        None => tid.to_string(),
    }
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
        // Sharing its name with thread 1, thread 4 has no entry of its own.
        stats.add_thread_cpu(4, Duration::from_millis(300));
        stats.add_signal_blocked(4, 300);
        let threads = [(1, "daemon")];
        let lines = signal_blocked_warnings(&stats, &threads);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("daemon (1)") && lines[0].contains("480"));
        assert!(lines[1].starts_with("thread 4 blocks"), "{}", lines[1]);
    }
}
