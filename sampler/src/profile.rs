//! The sampler's result, shared by platforms; the counters that come with
//! a result are in [`crate::stats`], and how it was asked for in
//! [`crate::config`].

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::config::SampleClock;
use crate::labels::LabelSets;
use crate::stack_table::StackTable;
use crate::stats::SamplerStats;
use crate::walker::Arch;

/// A thread as it appeared in samples. A thread that renamed itself
/// appears once per name; with [`SamplerConfig::share_stacks_by_name`](crate::SamplerConfig::share_stacks_by_name),
/// one entry stands for every thread of its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadInfo {
    /// The OS thread id.
    pub tid: u64,
    /// The thread's name when sampled.
    pub name: String,
}

/// Live counters of a running sampler, updated every tick.
#[derive(Debug, Default)]
pub struct Progress {
    /// Ticks so far.
    pub ticks: AtomicU64,
    /// Stacks recorded so far.
    pub samples: AtomicU64,
    /// Threads known on the last tick.
    pub threads: AtomicU64,
    /// Listings of the threads so far: after the first, every thread
    /// that existed at start is being sampled (Linux).
    pub listings: AtomicU64,
    /// CPU time the sampled threads used so far, in nanoseconds (read every
    /// few milliseconds): samples / this is the rate per CPU-second.
    pub sampled_cpu_ns: AtomicU64,
    /// Stacks recorded so far, each counted once (`samples` counts the
    /// periods they stand for).
    pub recorded: AtomicU64,
    /// Which clock paces the samples ([`Progress::clock`]); set before the
    /// first sample.
    pub clock: AtomicU8,
}

impl Progress {
    /// The clock that paces the samples.
    pub fn clock(&self) -> SampleClock {
        // 0: not set yet (the Mach sampler never sets it).
        let i = usize::from(self.clock.load(Ordering::Relaxed));
        i.checked_sub(1)
            .and_then(|i| SampleClock::ALL.get(i).copied())
            .unwrap_or(SampleClock::SamplerThread)
    }

    /// Records the clock that paces the samples.
    pub fn set_clock(&self, clock: SampleClock) {
        let i = SampleClock::ALL
            .iter()
            .position(|&c| c == clock)
            .unwrap_or(2);
        self.clock.store(i as u8 + 1, Ordering::Relaxed);
    }
}

/// A stopped sampler's result: stacks of raw addresses.
#[derive(Clone, Debug)]
pub struct RawProfile {
    /// Distinct stacks and their counts.
    pub table: StackTable,
    /// Threads referenced by `StackKey::thread`.
    pub threads: Vec<ThreadInfo>,
    /// How the profile was taken.
    pub stats: SamplerStats,
    /// The architecture of the addresses (for the aarch64 link-register
    /// rule).
    pub arch: Arch,
    /// The label sets `StackKey::labels` refers to ([`crate::labels`]).
    pub labels: LabelSets,
}

impl RawProfile {
    /// Adds `later`, the next window of the same run: its stacks (under
    /// this table's limit) and counters. Thread indices stay valid because
    /// a sampler's thread list only grows; the later, longer list is kept.
    pub fn absorb(&mut self, later: &RawProfile) {
        self.table.merge(&later.table);
        self.stats.absorb(&later.stats);
        if later.threads.len() > self.threads.len() {
            self.threads.clone_from(&later.threads);
        }
        // Sets are only ever added: the later table holds the earlier.
        if later.labels.len() > self.labels.len() {
            self.labels = later.labels.clone();
        }
    }
}

/// The calling process's CPU clock (`CLOCK_PROCESS_CPUTIME_ID`): the CPU
/// time of all its threads, those that exited included. What the samplers
/// record as [`SamplerStats::process_cpu`], from their start.
#[cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]
pub(crate) fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
