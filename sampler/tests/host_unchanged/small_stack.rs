//! How much stack taking a sample costs a thread
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

/// The most stack btprof's handler may use beyond what the kernel's
/// signal frame takes (measured: about 200-300 bytes, including the frame
/// record walk through `process_vm_readv`). `docs/reliability.md` states it.
const HANDLER_BUDGET: usize = 512;

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
}

/// What the C thread does, passed through `pthread_create`'s argument.
struct Job {
    /// Where the loop's stack pointer goes.
    sp: u64,
    /// Its frame pointer: a two-record chain above `sp`, so each sample
    /// walks (and copies) through memory.
    fp: u64,
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
    let end = btprof_testkit::thread_cpu() + job.cpu;
    while btprof_testkit::thread_cpu() < end {
        // SAFETY: `sp` lies inside this thread's own mapped stack; the loop
        // touches no memory and puts the stack and frame pointers back.
        unsafe { super::cases::run_on_stack_with_fp(job.sp, job.fp, 1_000_000) };
    }
    job.done.store(1, Ordering::Release);
    std::ptr::null_mut()
}

static NOOP_SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn noop_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    NOOP_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// What interrupts the C thread.
#[derive(Clone, Copy, PartialEq)]
enum Interrupt {
    /// btprof samples it.
    Sampled,
    /// A handler that does nothing, to measure the kernel's signal frame
    /// alone.
    Noop,
}

/// Runs a C thread on `stack` whose loop runs with `sp`, while sampled
/// (or interrupted by a no-op handler). Returns how many samples (or
/// signals) its thread got.
fn run_sampled(stack: &GuardedStack, sp: u64, interrupt: Interrupt) -> u64 {
    // Two frame records above sp: [next fp, return address].
    let fp = sp + 64;
    // SAFETY: inside our own mapping, above where the loop's sp sits.
    unsafe {
        let at = fp as *mut u64;
        *at = fp + 64;
        *at.add(1) = 0x1234;
        *at.add(8) = 0;
        *at.add(9) = 0x5678;
    }
    let job = Job {
        sp,
        fp,
        cpu: Duration::from_millis(200),
        done: AtomicU64::new(0),
    };
    let noop_signal = libc::SIGRTMIN() + 2;
    let sampler = match interrupt {
        Interrupt::Sampled => Some(
            Sampler::start(SamplerConfig {
                hz: 1000,
                mode: Mode::Cpu,
                ..SamplerConfig::default()
            })
            .expect("start"),
        ),
        Interrupt::Noop => {
            // SAFETY: installing a valid SA_SIGINFO handler for a signal
            // nobody else here uses.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = noop_handler as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                assert_eq!(
                    libc::sigaction(noop_signal, &action, std::ptr::null_mut()),
                    0
                );
            }
            None
        }
    };
    // SAFETY: a thread on our own stack mapping, joined before the job
    // and the mapping go away.
    unsafe {
        super::c_thread::run_on_stack(
            stack.low(),
            STACK,
            c_thread,
            &job as *const Job as *mut libc::c_void,
            |thread| {
                if interrupt == Interrupt::Noop {
                    while job.done.load(Ordering::Acquire) == 0 {
                        libc::pthread_kill(thread, noop_signal);
                        std::thread::sleep(Duration::from_micros(500));
                    }
                }
            },
        );
    }
    assert_eq!(job.done.load(Ordering::Acquire), 1);
    let Some(sampler) = sampler else {
        return NOOP_SIGNALS.load(Ordering::Relaxed);
    };
    let raw = sampler.stop().expect("stop");
    super::cases::check_clock(&raw);
    // The C thread's samples are those that walked the planted chain.
    raw.table
        .iter()
        .filter(|(k, _)| k.frames.get(1..) == Some(&[0x1234, 0x5678][..]))
        .map(|(_, c)| c)
        .sum()
}

/// Paints the lower half of `stack`, runs the C thread's loop at its
/// middle while interrupted, and returns how far below the stack pointer
/// signal delivery wrote, and how many interruptions there were.
fn stack_used(stack: &GuardedStack, interrupt: Interrupt) -> (usize, u64) {
    let sp = stack.low() + STACK as u64 / 2;
    // SAFETY: the painted range is our own mapping, not in use.
    unsafe { std::ptr::write_bytes(stack.low() as *mut u8, PAINT, STACK / 2) };
    let count = run_sampled(stack, sp, interrupt);
    // SAFETY: reading our own mapping after its thread was joined.
    let painted = unsafe { std::slice::from_raw_parts(stack.low() as *const u8, STACK / 2) };
    let lowest = painted
        .iter()
        .position(|&b| b != PAINT)
        .expect("signal frames were written");
    ((sp - stack.low()) as usize - lowest, count)
}

pub fn run() {
    let stack = GuardedStack::new();
    let (noop, signals) = stack_used(&stack, Interrupt::Noop);
    let (sampled, samples) = stack_used(&stack, Interrupt::Sampled);
    // SAFETY: getauxval has no preconditions.
    let kernel_min = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) };
    println!(
        "measured: taking a sample used {sampled} bytes of a C thread's stack: the kernel's \
         signal frame with an empty handler {noop} bytes (AT_MINSIGSTKSZ {kernel_min}), \
         btprof's handler {} bytes ({samples} samples, {signals} empty signals)",
        sampled.saturating_sub(noop)
    );
    // Not random: a no-op signal every 0.5 ms over 200 ms of its CPU, and
    // ~200 whole periods sampled; over 20 each shows the depths were measured.
    assert!(signals > 20 && samples > 20, "the C thread was interrupted");
    assert!(
        sampled <= noop + HANDLER_BUDGET,
        "btprof's handler used {} bytes of stack beyond the kernel's frame; docs/reliability.md promises at most {HANDLER_BUDGET}",
        sampled - noop
    );

    // And a thread with just that much left (the kernel's frame as measured
    // here plus the budget) survives: the loop runs that far above the
    // guard page, so anything deeper faults.
    let left = noop + HANDLER_BUDGET;
    let samples = run_sampled(&stack, stack.low() + left as u64, Interrupt::Sampled);
    println!("measured: a C thread with {left} bytes of stack left survived {samples} samples");
    // Not random: ~200 whole periods; over 20 shows it was sampled with that
    // little stack left, so its surviving means something.
    assert!(samples > 20, "the C thread was sampled");
}
