//! The shared sampling loop (the one the Mach sampler runs), driven by the
//! recording fake, on the paths that can hang a Mac host: error codes that
//! may or may not mean a thread exited, and Rosetta 2's translator threads
//! that must never be stopped.

mod fake_control;

use std::sync::Arc;

use btprof_sampler::control::SamplingLoop;
use btprof_sampler::walker::Arch;
use btprof_sampler::{Mode, Progress, SamplerConfig};

use fake_control::{check_protocol, Call, FakeControl, FakeThread, Port};

/// The sampler thread's own port in every fake.
const OWN: Port = 1;
/// Ticks a thread counts as young at 1000 Hz (its first 100 ms).
const YOUNG_TICKS: usize = 100;

fn sampling(fake: FakeControl, mode: Mode) -> SamplingLoop<FakeControl> {
    let config = SamplerConfig {
        hz: 1000,
        mode,
        max_depth: 64,
        ..SamplerConfig::default()
    };
    SamplingLoop::new(fake, &config, Arch::X86_64, Arc::new(Progress::default()))
}

fn ticks(lp: &mut SamplingLoop<FakeControl>, n: usize) {
    for _ in 0..n {
        lp.tick().expect("tick");
    }
}

fn assert_followed_the_rules(lp: &SamplingLoop<FakeControl>) {
    let calls = lp.control().calls();
    if let Err(e) = check_protocol(calls, OWN) {
        let tail = &calls[calls.len().saturating_sub(12)..];
        panic!("{e}\nlast calls: {tail:#?}");
    }
    lp.control().assert_clean();
}

fn stops_of(lp: &SamplingLoop<FakeControl>, port: Port) -> usize {
    lp.control()
        .count(|c| matches!(c, Call::Stop { port: p, .. } if *p == port))
}

/// Under Rosetta (the loop sparing young threads), a translator thread
/// that names itself a few ticks after it appears is never stopped, in
/// wall mode too, where the loop otherwise stops a thread on its first
/// look; an ordinary thread is sampled once it is no longer young.
#[test]
fn under_rosetta_a_new_thread_is_not_stopped_before_it_could_name_itself() {
    for mode in [Mode::Wall, Mode::Cpu] {
        let threads = vec![
            FakeThread::new(10, "starting"),
            FakeThread::new(11, "worker"),
        ];
        let mut lp = sampling(FakeControl::new(OWN, threads), mode).sparing_young_threads(true);
        ticks(&mut lp, 3);
        lp.control_mut()
            .rename(10, "com.apple.rosetta.exceptionserver");
        ticks(&mut lp, YOUNG_TICKS + 20);
        assert_followed_the_rules(&lp);
        assert_eq!(
            stops_of(&lp, 10),
            0,
            "{mode:?}: the translator's thread was stopped"
        );
        // Stopped on every tick after its young ones, and only then.
        assert_eq!(stops_of(&lp, 11), 3 + 20, "{mode:?}");
    }
    // Without sparing, wall mode stops the unnamed thread on the first look:
    // what the option exists to prevent.
    let threads = vec![FakeThread::new(10, "starting")];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    ticks(&mut lp, 3);
    lp.control_mut()
        .rename(10, "com.apple.rosetta.exceptionserver");
    ticks(&mut lp, 5);
    assert_eq!(stops_of(&lp, 10), 3);
}
