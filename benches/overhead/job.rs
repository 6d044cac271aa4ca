//! The job the overhead measurements profile: busy worker threads running
//! a calibrated arithmetic loop (or glibc `memcpy`), optionally at the
//! bottom of a deep call chain, timed from spawn to join.

use std::hint::black_box;
use std::time::{Duration, Instant};

use btprof_sampler::RawProfile;
use btprof_testkit::thread_cpu;

#[cfg(target_os = "linux")]
use crate::floor;
use crate::{COPY_LEAF, WORKERS};

/// A pure arithmetic loop the optimiser cannot fold away or vectorise: a
/// serial chain of multiply-xorshift steps.
#[inline(never)]
pub(crate) fn spin(iters: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    for i in 0..iters {
        x = x.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(i | 1);
        x ^= x >> 29;
    }
    x
}

/// `depth` nested calls, then [`spin`]. The result is used after the call
/// returns, so the recursion is neither a loop nor a tail call.
#[inline(never)]
pub(crate) fn descend(depth: u32, iters: u64, seed: u64) -> u64 {
    if black_box(depth) == 0 {
        return spin(iters, seed);
    }
    let r = descend(black_box(depth - 1), iters, seed);
    black_box(r).wrapping_add(u64::from(depth))
}

/// A leaf in glibc: `iters` copies of a 64 KiB buffer with `memcpy`
/// (no frame pointer, so only CFI finds its caller).
#[inline(never)]
pub(crate) fn copy_leaf(iters: u64, seed: u64) -> u64 {
    let src = vec![seed as u8; 64 << 10];
    let mut dst = vec![0u8; 64 << 10];
    for _ in 0..iters {
        // SAFETY: two distinct buffers of the same length.
        unsafe { libc::memcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), src.len()) };
        black_box(&mut dst);
    }
    u64::from(dst[7])
}

/// `depth` nested calls, then [`copy_leaf`].
#[inline(never)]
pub(crate) fn descend_to_copy(depth: u32, iters: u64, seed: u64) -> u64 {
    if black_box(depth) == 0 {
        return black_box(copy_leaf(iters, seed));
    }
    let r = descend_to_copy(black_box(depth - 1), iters, seed);
    black_box(r).wrapping_add(u64::from(depth))
}

/// The calling thread's id as the sampler reports it in `ThreadInfo::tid`.
#[cfg(target_os = "linux")]
pub(crate) fn thread_id() -> u64 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// The calling thread's id as the sampler reports it in `ThreadInfo::tid`.
#[cfg(target_vendor = "apple")]
pub(crate) fn thread_id() -> u64 {
    let mut id = 0u64;
    // SAFETY: a null thread means the calling thread; `id` is writable.
    unsafe { libc::pthread_threadid_np(0 as libc::pthread_t, &mut id) };
    id
}

/// The calling thread's id (unknown on this platform).
#[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
pub(crate) fn thread_id() -> u64 {
    0
}

pub(crate) struct WorkerOut {
    pub(crate) tid: u64,
    pub(crate) cpu: Duration,
    pub(crate) expiries: u64,
}

/// What interrupts a job's workers besides a profiler: nothing, or one of
/// the [`floor`] timers each worker starts on itself.
#[derive(Clone, Copy)]
pub(crate) enum Interrupts {
    None,
    #[cfg(target_os = "linux")]
    Floor(floor::Floor),
}

pub(crate) struct JobOut {
    pub(crate) wall: Duration,
    pub(crate) workers: Vec<WorkerOut>,
    /// Floor timer expiries, summed over the workers (0 without a floor;
    /// the floor is measured on Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) expiries: u64,
}

impl JobOut {
    pub(crate) fn worker_cpu(&self) -> Duration {
        self.workers.iter().map(|w| w.cpu).sum()
    }

    pub(crate) fn is_worker(&self, tid: u64) -> bool {
        self.workers.iter().any(|w| w.tid == tid)
    }
}

/// Runs [`WORKERS`] threads of `iters` iterations each, optionally at the
/// bottom of a `chain`-deep call chain, and times spawn to join.
pub(crate) fn run_job(iters: u64, chain: Option<u32>) -> JobOut {
    run_job_with(iters, chain, Interrupts::None)
}

/// [`run_job`], with each worker interrupted as `interrupts` says.
pub(crate) fn run_job_with(iters: u64, chain: Option<u32>, interrupts: Interrupts) -> JobOut {
    let start = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("ovh-worker-{i}"))
                .spawn(move || {
                    let tid = thread_id();
                    #[cfg(target_os = "linux")]
                    let timer = match interrupts {
                        Interrupts::Floor(f) => Some(floor::Timer::start(f).expect("floor timer")),
                        Interrupts::None => None,
                    };
                    let cpu0 = thread_cpu();
                    let seed = black_box(0x9e37_79b9 + i as u64);
                    let v = match chain {
                        Some(depth) if depth >= COPY_LEAF => {
                            descend_to_copy(depth - COPY_LEAF, iters, seed)
                        }
                        Some(depth) => descend(depth, iters, seed),
                        None => spin(iters, seed),
                    };
                    black_box(v);
                    let cpu = thread_cpu() - cpu0;
                    #[cfg(target_os = "linux")]
                    let expiries = timer.map_or(0, |t| t.expiries());
                    #[cfg(not(target_os = "linux"))]
                    let expiries = {
                        let _ = interrupts;
                        0
                    };
                    WorkerOut { tid, cpu, expiries }
                })
                .expect("spawn worker")
        })
        .collect();
    let workers: Vec<WorkerOut> = handles
        .into_iter()
        .map(|h| h.join().expect("worker panicked"))
        .collect();
    JobOut {
        wall: start.elapsed(),
        expiries: workers.iter().map(|w| w.expiries).sum(),
        workers,
    }
}

/// Iterations of [`spin`] that take about `target` on one thread alone.
pub(crate) fn calibrate(target: Duration) -> u64 {
    iterations_taking(target, spin, 5_000_000, 50_000_000)
}

/// Iterations of `work(iterations, seed)` that take about `target` on one
/// thread alone: after a warm-up of `warm_up` iterations, the fastest of
/// three timed runs of `probe`, a chunk big enough to be well above timer
/// noise (the fastest, to ignore a preempted attempt).
pub(crate) fn iterations_taking(
    target: Duration,
    work: fn(u64, u64) -> u64,
    warm_up: u64,
    probe: u64,
) -> u64 {
    black_box(work(black_box(warm_up), 1));
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        black_box(work(black_box(probe), 7));
        best = best.min(t.elapsed());
    }
    let per_iter = best.as_secs_f64() / probe as f64;
    (target.as_secs_f64() / per_iter) as u64
}

/// Median number of frames per sample on the worker threads, weighted by
/// sample count, and the number of those samples.
pub(crate) fn worker_depth(raw: &RawProfile, job: &JobOut) -> (Option<usize>, u64) {
    let mut depths: Vec<(usize, u64)> = raw
        .table
        .iter()
        .filter(|(key, _)| {
            raw.threads
                .get(key.thread as usize)
                .is_some_and(|t| job.is_worker(t.tid))
        })
        .map(|(key, count)| (key.frames.len(), count))
        .collect();
    let total: u64 = depths.iter().map(|&(_, c)| c).sum();
    if total == 0 {
        return (None, 0);
    }
    depths.sort_unstable();
    let half = total.div_ceil(2);
    let mut seen = 0;
    for &(depth, count) in &depths {
        seen += count;
        if seen >= half {
            return (Some(depth), total);
        }
    }
    (None, total)
}
