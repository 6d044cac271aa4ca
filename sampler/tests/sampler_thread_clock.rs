//! The sampler-thread clock, forced: what its own wakeups cost.
#![cfg(target_os = "linux")]

use std::sync::Mutex;

use btprof_sampler::{Mode, SampleClock, SamplerConfig};

mod support;

/// One sampler per process at a time.
static SAMPLER: Mutex<()> = Mutex::new(());

/// Busy threads the sampler looks at do not bring listings forward. It
/// lists the threads early when the process used CPU time beyond what the
/// threads it looks at used (a new thread, most likely); comparing the
/// process's clock with their readings from the wakeup before counted
/// their CPU time since as unseen, so two spinning threads brought a
/// listing at nearly every wakeup (122-128 in 200). Listings now come
/// every 10 ms, and a thread born meanwhile is still listed within a few
/// milliseconds by its CPU time (the test looks every 5 ms, about seven of
/// the sampler's wakeups at 1000 Hz, as it did before). Counted in the
/// sampler's own wakeups and the time they took, so a busy machine that
/// delays them changes nothing.
#[test]
fn busy_threads_it_looks_at_do_not_bring_listings_forward() {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let config = SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        clock: Some(SampleClock::SamplerThread),
        ..SamplerConfig::default()
    };
    let seen = support::count_listings(config, 200);
    assert_eq!(seen.raw.stats.clock, SampleClock::SamplerThread);
    seen.check(seen.window.as_millis() as u64 / 10 + 2, 12);
}
