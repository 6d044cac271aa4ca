//! Checks of the Mach sampler that only a Mac can run, each an ignored
//! test that `scripts/mac-first-run` runs by name (they are slow, and some
//! need what the script sets up: a dylib to churn, `MallocStackLogging`).
//! Each prints one line of numbers the script passes on.
//!
//! - port hygiene: the task's Mach port count does not grow over 1000
//!   sampler start/stop cycles (every thread port and listing released);
//! - allocation in the stopped window: 100 short runs beside a thread
//!   that mallocs in a loop, each ending in time (a stopped thread holding
//!   the allocator's lock must never wait on the sampler);
//! - wall mode over 200 idle threads samples every one of them;
//! - dlopen/dlclose churn of a dylib on 4 threads while sampling at
//!   1000 Hz for 10 s, with symbol refreshes, does not crash.
#![cfg(target_os = "macos")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use btprof_sampler::{Mode, Sampler, SamplerConfig};

extern "C" {
    /// This task's port (what `mach_task_self()` reads).
    static mach_task_self_: libc::mach_port_t;
    /// `vm_deallocate` (`<mach/vm_map.h>`).
    fn vm_deallocate(task: libc::mach_port_t, address: usize, size: usize) -> libc::c_int;
    /// `mach_port_names` (`<mach/mach_port.h>`): every port name of the
    /// task, in two arrays the caller deallocates.
    fn mach_port_names(
        task: libc::mach_port_t,
        names: *mut *mut libc::mach_port_t,
        names_count: *mut u32,
        types: *mut *mut u32,
        types_count: *mut u32,
    ) -> libc::c_int;
}

/// How many port names this task holds.
fn port_count() -> usize {
    let (mut names, mut types) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut n, mut t) = (0u32, 0u32);
    // SAFETY: valid out-pointers; on success the kernel hands over two
    // arrays of `n` and `t` entries, deallocated below.
    let kr = unsafe {
        let task = mach_task_self_;
        let kr = mach_port_names(task, &mut names, &mut n, &mut types, &mut t);
        if kr == 0 {
            vm_deallocate(task, names as usize, n as usize * 4);
            vm_deallocate(task, types as usize, t as usize * 4);
        }
        kr
    };
    assert_eq!(kr, 0, "mach_port_names failed");
    n as usize
}

fn config(hz: u32, mode: Mode) -> SamplerConfig {
    SamplerConfig {
        hz,
        mode,
        ..SamplerConfig::default()
    }
}

#[test]
#[ignore = "Mac first run: scripts/mac-first-run"]
fn port_count_does_not_grow_over_1000_start_stop_cycles() {
    // One cycle first, so lazily created ports (the sampler thread's
    // first use of the clock, the runtime's) are in both counts.
    Sampler::start(config(1000, Mode::Wall))
        .unwrap()
        .stop()
        .unwrap();
    let before = port_count();
    for _ in 0..1000 {
        let sampler = Sampler::start(config(1000, Mode::Wall)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        sampler.stop().unwrap();
    }
    let after = port_count();
    println!("ports before {before}, after 1000 cycles {after}");
    assert!(
        after <= before,
        "the port count grew from {before} to {after}"
    );
}

#[test]
#[ignore = "Mac first run: scripts/mac-first-run (with MallocStackLogging=1)"]
fn cycles_beside_a_malloc_loop_never_deadlock() {
    let stop = Arc::new(AtomicBool::new(false));
    let stress = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let v = std::hint::black_box(vec![n as u8; 64 + (n % 4096) as usize]);
                n = n.wrapping_add(u64::from(v[0]) + 1);
            }
            n
        })
    };
    let mut slowest = Duration::ZERO;
    for cycle in 0..100 {
        let started = Instant::now();
        let sampler = Sampler::start(config(1000, Mode::Wall)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let raw = sampler.stop().unwrap();
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(
            took < Duration::from_secs(10),
            "cycle {cycle} took {took:?}"
        );
        assert!(raw.stats.samples > 0, "cycle {cycle} took no sample");
    }
    stop.store(true, Ordering::Relaxed);
    stress.join().unwrap();
    println!("100 cycles beside a malloc loop, slowest {slowest:?}");
}

#[test]
#[ignore = "Mac first run: scripts/mac-first-run"]
fn wall_mode_samples_each_of_200_idle_threads() {
    const IDLE: usize = 200;
    let release = Arc::new(Barrier::new(IDLE + 1));
    let threads: Vec<_> = (0..IDLE)
        .map(|i| {
            let release = Arc::clone(&release);
            std::thread::Builder::new()
                .name(format!("idle-{i}"))
                .spawn(move || {
                    release.wait();
                })
                .unwrap()
        })
        .collect();
    // Past the sampler's young-thread window, and every thread named.
    std::thread::sleep(Duration::from_millis(200));
    let sampler = Sampler::start(config(100, Mode::Wall)).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let raw = sampler.stop().unwrap();
    release.wait();
    for t in threads {
        t.join().unwrap();
    }
    let mut missing = Vec::new();
    for i in 0..IDLE {
        let name = format!("idle-{i}");
        let keys: Vec<u32> = (0..raw.threads.len() as u32)
            .filter(|&k| raw.threads[k as usize].name == name)
            .collect();
        if !raw.table.iter().any(|(k, _)| keys.contains(&k.thread)) {
            missing.push(name);
        }
    }
    println!(
        "{} of {IDLE} idle threads sampled, {} samples",
        IDLE - missing.len(),
        raw.stats.samples
    );
    assert!(missing.is_empty(), "never sampled: {missing:?}");
}

#[test]
#[ignore = "Mac first run: scripts/mac-first-run (sets BTPROF_CHURN_DYLIB)"]
fn dlopen_churn_while_sampling_does_not_crash() {
    let path = std::env::var("BTPROF_CHURN_DYLIB")
        .expect("BTPROF_CHURN_DYLIB: the dylib to load and unload, built by the script");
    let path = std::ffi::CString::new(path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let churners: Vec<_> = (0..4)
        .map(|_| {
            let (stop, path) = (Arc::clone(&stop), path.clone());
            std::thread::spawn(move || {
                let mut cycles = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: a dylib the script built from one function
                    // and no initialisers; closed right after.
                    unsafe {
                        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                        assert!(!h.is_null(), "dlopen failed");
                        libc::dlclose(h);
                    }
                    cycles += 1;
                }
                cycles
            })
        })
        .collect();
    let profiler = btprof::Profiler::builder()
        .hz(1000)
        .mode(Mode::Wall)
        .start()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut windows = 0;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        // A window symbolised now reads the image list while images come
        // and go.
        let _ = profiler.snapshot();
        windows += 1;
    }
    let profile = profiler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    let cycles: u64 = churners.into_iter().map(|t| t.join().unwrap()).sum();
    println!(
        "{cycles} dlopen/dlclose cycles on 4 threads, {windows} windows symbolised, {} samples",
        profile.total_samples()
    );
    assert!(cycles > 0);
}
