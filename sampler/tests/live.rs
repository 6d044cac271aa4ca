//! The sampler against real busy threads of this test process: the rate,
//! the leaf and complete walks, windows, excluded threads.
//! Platform-neutral: on Linux it tests the signal backend, on macOS the
//! Mach one (built and linked by `scripts/check-macos`, run only on a Mac).
#![cfg(any(target_os = "linux", target_os = "macos"))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use btprof_sampler::walker::WalkEnd;
use btprof_sampler::{exclude_current_thread, Mode, RawProfile, Sampler, SamplerConfig};

/// One sampler per process: the tests here take turns.
static SAMPLER: Mutex<()> = Mutex::new(());

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
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
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

/// Samples taken on threads named `name`.
fn samples_named(raw: &RawProfile, name: &str) -> u64 {
    raw.table
        .iter()
        .filter(|(k, _)| raw.threads[k.thread as usize].name == name)
        .map(|(_, c)| c)
        .sum()
}

#[test]
fn windows_add_up_and_an_excluded_thread_is_never_sampled() {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let spawn = |name: &str, exclude: bool| {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _excluded = exclude.then(|| exclude_current_thread().expect("a free entry"));
                spin(&stop)
            })
            .unwrap()
    };
    let workers = [spawn("counted", false), spawn("excluded", true)];
    let sampler = Sampler::start(SamplerConfig::default()).unwrap();
    let mut windows = Vec::new();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(300));
        windows.push(sampler.collect(true).unwrap());
    }
    std::thread::sleep(Duration::from_millis(100));
    let snapshot = sampler.collect(false).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let ticks = sampler.progress().ticks.load(Ordering::Relaxed);
    let last = sampler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    windows.push(last);

    for (i, w) in windows.iter().enumerate() {
        assert_eq!(
            w.stats.samples,
            w.table.samples(),
            "window {i}: {:?}",
            w.stats
        );
        assert!(
            samples_named(w, "counted") > 50,
            "window {i}: {:?}",
            w.stats
        );
        assert_eq!(samples_named(w, "excluded"), 0, "window {i}");
        assert!(w.stats.duration >= Duration::from_millis(150), "window {i}");
    }
    // The snapshot copied the last window without ending it.
    let last = windows.last().unwrap();
    assert!(snapshot.table.samples() <= last.table.samples());
    assert!(samples_named(&snapshot, "counted") > 0);
    // No tick is lost or counted twice between windows.
    let window_ticks: u64 = windows.iter().map(|w| w.stats.ticks).sum();
    assert!(
        window_ticks >= ticks,
        "{window_ticks} ticks in windows, {ticks} seen while running"
    );
}
