//! Driving the shared sampling loop over the fake: the loop as the tests
//! configure it, ticking it, and reading back what it did. The loop tests
//! and the hazard tests drive it the same way, so they build it here.

use std::sync::Arc;

use btprof_sampler::control::SamplingLoop;
use btprof_sampler::walker::{Arch, WalkEnd};
use btprof_sampler::{Mode, Progress, RawProfile, SamplerConfig};

use super::{check_protocol, Call, FakeControl, FakeThread, Port};

/// The sampler thread's own port in every fake driven here.
pub const OWN: Port = 1;

/// The loop over `fake` at 1000 Hz in `mode`, walking 64 frames deep.
pub fn sampling(fake: FakeControl, mode: Mode) -> SamplingLoop<FakeControl> {
    let config = SamplerConfig {
        hz: 1000,
        mode,
        max_depth: 64,
        ..SamplerConfig::default()
    };
    SamplingLoop::new(fake, &config, Arch::X86_64, Arc::new(Progress::default()))
}

/// `n` ticks, each of which must succeed.
pub fn ticks(lp: &mut SamplingLoop<FakeControl>, n: usize) {
    for _ in 0..n {
        lp.tick().expect("tick");
    }
}

/// Checks the call log and the fake's state, with the log's tail on failure.
pub fn assert_followed_the_rules(lp: &SamplingLoop<FakeControl>) {
    let calls = lp.control().calls();
    if let Err(e) = check_protocol(calls, OWN) {
        let tail = &calls[calls.len().saturating_sub(12)..];
        panic!("{e}\nlast calls: {tail:#?}");
    }
    lp.control().assert_clean();
}

/// The loop over `threads` in `mode` after `n` ticks, its call log and
/// the fake's state checked against the rules: how most tests start.
pub fn checked_run(threads: Vec<FakeThread>, mode: Mode, n: usize) -> SamplingLoop<FakeControl> {
    let mut lp = sampling(FakeControl::new(OWN, threads), mode);
    ticks(&mut lp, n);
    assert_followed_the_rules(&lp);
    lp
}

/// Asserts the loop's tallies so far: samples taken, samples that failed,
/// and threads found exited (each once per tick it was found so).
pub fn assert_tallies(lp: &SamplingLoop<FakeControl>, samples: u64, failed: u64, exited: u64) {
    let stats = lp.stats();
    assert_eq!(stats.samples, samples, "samples: {stats:?}");
    assert_eq!(stats.failed_samples, failed, "failed samples: {stats:?}");
    assert_eq!(stats.exited_threads, exited, "exited threads: {stats:?}");
}

/// The loop in wall mode over one thread, port 10, named `name`: a
/// thread whose name or listing a test changes between ticks.
pub fn one_thread(name: &str) -> SamplingLoop<FakeControl> {
    sampling(
        FakeControl::new(OWN, vec![FakeThread::new(10, name)]),
        Mode::Wall,
    )
}

/// [`one_thread`] named `name` for `before` ticks, then, renamed to
/// `renamed` (as a thread names itself), for `after` more.
pub fn renamed_between_ticks(
    name: &str,
    before: usize,
    renamed: &str,
    after: usize,
) -> SamplingLoop<FakeControl> {
    let mut lp = one_thread(name);
    ticks(&mut lp, before);
    lp.control_mut().rename(10, renamed);
    ticks(&mut lp, after);
    lp
}

/// How many times the loop tried to stop `port`, successfully or not.
pub fn stops_of(lp: &SamplingLoop<FakeControl>, port: Port) -> usize {
    lp.control()
        .count(|c| matches!(c, Call::Stop { port: p, .. } if *p == port))
}

/// How many times the loop made exactly the call `want`.
pub fn count_of(lp: &SamplingLoop<FakeControl>, want: Call) -> usize {
    lp.control().count(|c| *c == want)
}

/// Samples recorded on the thread named `name`, by stack, sorted.
pub fn stacks_of(raw: &RawProfile, name: &str) -> Vec<(Vec<u64>, WalkEnd, u64)> {
    let keys: Vec<u32> = (0..raw.threads.len() as u32)
        .filter(|&k| raw.threads[k as usize].name == name)
        .collect();
    let mut stacks: Vec<_> = raw
        .table
        .iter()
        .filter(|(k, _)| keys.contains(&k.thread))
        .map(|(k, c)| (k.frames.to_vec(), k.end, c))
        .collect();
    stacks.sort();
    stacks
}
