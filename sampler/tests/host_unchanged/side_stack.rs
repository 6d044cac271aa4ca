//! A new thread on a stack of its own making, where the profiler's
//! snapshot of the mappings still shows one older mapping that also held
//! the thread's own stack block.
//!
//! Handlers read a thread's own stack directly, from its stack pointer up
//! to its thread pointer, when one mapping of the snapshot holds both
//! (`own_stack` in the sampler). Here, before the profiler starts, one
//! mapping covers a range. Once the profiler has read the maps, that
//! mapping goes and two take parts of its addresses, with a hole between:
//! at the top the stack of a new C thread (the C library puts the
//! thread's control block, where its thread pointer points, at the top of
//! a stack it is given), at the bottom a coroutine stack, on which the
//! thread runs with its frame pointer in the hole. A handler that trusted
//! the old mapping would read from the coroutine stack up across the hole
//! and fault. The process must survive and the thread be sampled.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use btprof_sampler::{Mode, Sampler, SamplerConfig};

const PAGE: u64 = 4096;
/// The mapping the snapshot keeps.
const OLD: usize = 8 << 20;
/// The new thread's stack, at the top of the old mapping's addresses.
const THREAD_STACK: usize = 1 << 20;
/// The coroutine stack, at the bottom.
const COROUTINE: usize = 64 << 10;

/// What the C thread does, passed through `pthread_create`'s argument.
struct Job {
    /// Where the loop's stack pointer and frame pointer go.
    sp: u64,
    fp: u64,
    cpu: Duration,
    tid: AtomicI32,
    done: AtomicU64,
}

extern "C" fn side_thread(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Job` the creator keeps alive until it joins us.
    let job = unsafe { &*(arg as *const Job) };
    // SAFETY: gettid has no preconditions.
    job.tid.store(unsafe { libc::gettid() }, Ordering::Release);
    let end = btprof_testkit::thread_cpu() + job.cpu;
    while btprof_testkit::thread_cpu() < end {
        // SAFETY: `sp` lies in the mapped coroutine stack; the loop touches
        // no memory and puts the stack and frame pointers back.
        unsafe { super::cases::run_on_stack_with_fp(job.sp, job.fp, 1_000_000) };
    }
    job.done.store(1, Ordering::Release);
    std::ptr::null_mut()
}

/// Maps `len` bytes at exactly `at`, where nothing is mapped.
///
/// # Safety
/// Nothing of ours may live at `[at, at + len)`.
unsafe fn map_at(at: u64, len: usize) {
    // SAFETY: the caller's promise; MAP_FIXED_NOREPLACE fails rather than
    // replace anything.
    let got = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(got as u64, at, "map at {at:#x}");
}

pub fn run() {
    // SAFETY: an anonymous private mapping anywhere.
    let old = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            OLD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(old, libc::MAP_FAILED);
    let base = old as u64;
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start");
    // Let the sampler list the threads and read the maps.
    thread::sleep(Duration::from_millis(50));
    let stack_low = base + (OLD - THREAD_STACK) as u64;
    // SAFETY: our own mapping goes; the two new ones take parts of its
    // addresses, where nothing else of ours lives.
    unsafe {
        assert_eq!(libc::munmap(old, OLD), 0);
        map_at(stack_low, THREAD_STACK);
        map_at(base, COROUTINE);
    }
    let job = Job {
        // Near the coroutine stack's top: a copy of the stack from here
        // runs into the hole within a few hundred bytes.
        sp: base + COROUTINE as u64 - 256,
        // In the hole: a record read there faults unless read checked.
        fp: base + COROUTINE as u64 + 16 * PAGE,
        cpu: Duration::from_millis(300),
        tid: AtomicI32::new(0),
        done: AtomicU64::new(0),
    };
    // SAFETY: a thread on our own stack mapping, joined before the job and
    // the mappings go away.
    unsafe {
        super::c_thread::run_on_stack(
            stack_low,
            THREAD_STACK,
            side_thread,
            &job as *const Job as *mut libc::c_void,
            |_| {},
        );
    }
    assert_eq!(job.done.load(Ordering::Acquire), 1);
    let raw = sampler.stop().expect("stop");
    super::cases::check_clock(&raw);
    let tid = job.tid.load(Ordering::Acquire) as u64;
    let keys: Vec<u32> = (0..raw.threads.len() as u32)
        .filter(|&i| raw.threads[i as usize].tid == tid)
        .collect();
    let sampled: u64 = raw
        .table
        .iter()
        .filter(|(k, _)| keys.contains(&k.thread))
        .map(|(_, c)| c)
        .sum();
    println!(
        "measured: {sampled} samples of a new thread on a coroutine stack beside its own, \
         under a snapshot older than both; none faulted"
    );
    // A survival check, not random: 300 ms of its CPU is ~300 whole periods;
    // the point is that none faulted under the stale snapshot.
    assert!(sampled > 10, "the thread was sampled {sampled} times");
    // SAFETY: our own mappings, no longer used.
    unsafe {
        libc::munmap(stack_low as *mut libc::c_void, THREAD_STACK);
        libc::munmap(old, COROUTINE);
    }
}
