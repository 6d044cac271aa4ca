//! The sampler against a real busy thread of this test process: the rate,
//! the leaf and complete walks. Platform-neutral: on Linux it tests the
//! signal backend, on macOS the Mach one (built and linked by
//! `scripts/check-macos`, run only on a Mac).
#![cfg(any(target_os = "linux", target_os = "macos"))]

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
fn samples_a_busy_thread_with_the_spinning_function_as_leaf() {
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

    let busy: Vec<u32> = (0..raw.threads.len() as u32)
        .filter(|&i| raw.threads[i as usize].name == "busy")
        .collect();
    let stacks: Vec<_> = raw
        .table
        .iter()
        .filter(|(k, _)| busy.contains(&k.thread))
        .collect();
    let samples: u64 = stacks.iter().map(|(_, c)| c).sum();
    // Generous floor for a loaded machine; the CLI self-check gates the rate.
    assert!(samples > 300, "{samples} samples: {:?}", raw.stats);
    // The pc (frame 0) lies in `spin` in almost every sample, and those
    // walks reach the end of the chain.
    let spin_start = spin as *const () as u64;
    let in_spin: u64 = stacks
        .iter()
        .filter(|(k, _)| (spin_start..spin_start + 4096).contains(&k.frames[0]))
        .filter(|(k, _)| k.end == WalkEnd::Complete && k.frames.len() > 3)
        .map(|(_, c)| c)
        .sum();
    assert!(in_spin * 100 >= samples * 95, "{in_spin} of {samples}");
}
