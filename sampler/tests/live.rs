//! The Linux sampler against real threads of this test process.
#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use btprof_sampler::walker::WalkEnd;
use btprof_sampler::{Mode, Sampler, SamplerConfig};

#[inline(never)]
fn spin(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[test]
fn samples_a_busy_thread_at_the_requested_rate() {
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let worker = std::thread::Builder::new()
        .name("busy".into())
        .spawn(move || spin(&s2))
        .unwrap();
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let raw = sampler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let busy: Vec<_> = raw
        .threads
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name == "busy")
        .map(|(i, _)| i as u32)
        .collect();
    let busy_samples: u64 = raw
        .table
        .iter()
        .filter(|(k, _)| busy.contains(&k.thread))
        .map(|(_, c)| c)
        .sum();
    let spin_addr = spin as *const () as u64;
    eprintln!("{:?}", raw.stats);
    for (k, c) in raw
        .table
        .iter()
        .filter(|(k, _)| busy.contains(&k.thread))
        .take(5)
    {
        eprintln!("{c} {:?} {:x?}", k.end, k.frames);
    }
    eprintln!("spin at {spin_addr:x}, busy samples {busy_samples}");
    assert!(busy_samples > 900, "{busy_samples}");
    assert!(raw.stats.walk_ends[WalkEnd::Complete as usize] > 0);
}
