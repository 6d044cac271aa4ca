//! Linux, own process: two clocks pace the samples ([`SampleClock`]).
//!
//! **Perf events** ([`SampleClock::Perf`], the default in cpu mode
//! where `perf_event_open` is allowed): the kernel samples every thread
//! into ring buffers, with no signal ([`born_threads`]): the threads found
//! at start through task-clock events opened on them, and every thread
//! they create through the copies those events leave at creation, so a
//! thread that lives 2 ms is sampled from its first instruction. The
//! sampler thread reads the rings, unwinds each stack copy with CFI,
//! lists threads and reads their CPU clocks. A thread the rings cannot
//! take (beyond the descriptor budget, deeper than the kernel's call
//! chains, or created by a thread no event covers) gets a timer of its
//! own ([`thread_timers`]: a perf task-clock event whose overflow raises
//! the profiling signal in that thread), and the handler walks its stack
//! into a static slot ([`slots`]).
//!
//! **The sampler thread** (where perf events are refused, when forced, and
//! always in wall mode) paces the samples itself. In cpu mode it sends the
//! profiling signal with `rt_tgsigqueueinfo` to every thread due: a thread
//! is due when its CPU time since its last sample reaches one period, and
//! the sampler wakes at the moment each thread will be due, plus at random
//! moments ([`CpuWakeups`]), so that samples do not line up with where
//! threads resume after waiting for a CPU. A thread that could not be
//! sampled when due (it waited for a CPU, or the sampler ran late) is owed
//! the periods, paid by later samples weighted as [`CpuDebt`] says. In wall
//! mode it wakes on a fixed period and every thread is due: one that is
//! off CPU is counted so without being interrupted, on the stack it is
//! blocked on ([`blocked_stack`]), and a running one is asked for its
//! sample with a one-shot CPU timer, which only a running thread can take.
//! It never waits for a handler, so a thread that is slow to take its
//! signal delays only its own sample.
//!
//! A `setitimer(ITIMER_PROF)` is no alternative: it fires at the kernel
//! tick rate for the whole process, and its signal lands in whichever
//! thread the kernel picks.
//!
//! ## Layout
//!
//! - This file: choosing the clock, installing the handler and starting
//!   the sampler thread ([`spawn`]).
//! - [`engine`]: the sampler thread's [`SamplerLoop`], split by clock and
//!   responsibility (collecting samples, listing threads, the ring clock,
//!   signal timers, threads that block the signal, the sampler thread's
//!   own pacing).
//! - [`handler`]: the signal handler and everything it touches, under the
//!   async-signal-safety rules stated there.
//! - The clocks' kernel interfaces: [`born_threads`], [`perf_ring`] and
//!   [`perf_attr`] (the ring clock); [`thread_timers`], [`task_clock`],
//!   [`posix_timers`] and [`cpu_timer`] (signal timers).
//! - The sampler-thread clock's arithmetic: [`cpu_debt`], [`cpu_wakeups`],
//!   [`unseen_cpu`], [`exit_tails`] (and [`split_mix`], their random
//!   numbers, which the ring clock shares).
//! - Reading threads: [`threads`] (`/proc/self/task`: listing, CPU clocks,
//!   names, signal masks), [`blocked_stack`] (the stack of a thread blocked
//!   in a system call, from outside), [`unwind`] (CFI for the stack copies),
//!   [`scheduling`] (the sampler thread's own priority).
//! - One-shot captures: [`one_shot`] (this process) and [`remote`] (another
//!   process, through `ptrace`).
//!
//! [`CpuTimer`]: cpu_timer::CpuTimer
//! [`CpuWakeups`]: cpu_wakeups::CpuWakeups
//! [`CpuDebt`]: cpu_debt::CpuDebt

pub mod bench_support;
mod blocked_stack;
mod born_cpu;
mod born_threads;
mod context_anchor;
mod cpu_debt;
mod cpu_wakeups;
mod engine;
mod exit_tails;
pub(crate) mod handler;
mod new_threads;
pub(crate) mod one_shot;
mod perf_attr;
mod perf_ring;
mod posix_timers;
pub(crate) mod remote;
mod ring_samples;
mod ring_size;
mod scheduling;
mod split_mix;
pub(crate) mod task_clock;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
mod thread_timers;
mod threads;
mod unseen_cpu;
mod unwind;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::sampler_thread::SamplerThread;
use crate::{Error, Mode, SampleClock, SamplerConfig};

pub use handler::slots::MAX_DEPTH;

use engine::SamplerLoop;
use handler::signal::{self, InstalledHandler};
use handler::{checked_memory, own_stack, slots, stack_regions};

/// The longest `start` waits for the sampler thread's first listing.
const FIRST_LISTING_WAIT: Duration = Duration::from_millis(500);

/// The default profiling signal: `SIGURG`, because its default action is
/// to ignore it. A signal still queued for a thread when that thread calls
/// `execve` survives into the new program, where every handler is back to
/// its default; for a real-time signal that default is to terminate, so an
/// `exec` while profiling would kill the new program (it did, 54 times in
/// 100). `SIGURG` is then dropped instead. It is also a standard signal, so
/// the kernel never queues more than one instance per thread, whatever
/// happens, and it is rarely used (TCP out-of-band data, Go's runtime):
/// btprof refuses it when it already has a handler, and an instance from
/// elsewhere that reaches our handler is ignored, as it would have been.
pub fn default_signal() -> i32 {
    libc::SIGURG
}

/// Whether `signal` may be the profiling signal: a signal whose default
/// action is to ignore it and that has no other meaning to the kernel
/// (`SIGURG`, `SIGWINCH`), or a real-time signal (at the caller's risk on
/// `exec`, see [`default_signal`]).
fn usable_signal(signal: i32) -> bool {
    signal == libc::SIGURG
        || signal == libc::SIGWINCH
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal)
}

/// The clock forced by the configuration or the environment, checked
/// against what the kernel allows; else perf timers in cpu mode where perf
/// events are allowed, and the sampler thread's ticks otherwise.
fn choose_clock(config: &SamplerConfig) -> Result<SampleClock, Error> {
    let forced = match config.clock {
        Some(clock) => Some(clock),
        // The environment forces cpu-mode clocks only: wall mode has one.
        None if config.mode == Mode::Cpu => crate::clock_from_env()?,
        None => None,
    };
    let refused = |clock: SampleClock, e: std::io::Error| {
        Error::InvalidConfig(format!(
            "the {} clock was asked for, but the kernel refuses it: {e}",
            clock.short_name()
        ))
    };
    match forced {
        Some(SampleClock::SamplerThread) => Ok(SampleClock::SamplerThread),
        Some(clock) if config.mode == Mode::Wall => Err(Error::InvalidConfig(format!(
            "wall mode samples every thread from the sampler thread: the {} clock is for cpu mode",
            clock.short_name()
        ))),
        Some(SampleClock::Perf) => thread_timers::available()
            .map(|()| SampleClock::Perf)
            .map_err(|e| refused(SampleClock::Perf, e)),
        None if config.mode == Mode::Cpu && thread_timers::available().is_ok() => {
            Ok(SampleClock::Perf)
        }
        None => Ok(SampleClock::SamplerThread),
    }
}

/// What a running sampler undoes after its thread is joined, which
/// closed every timer before it returned: the installed signal handler's
/// drop flushes pending signals and restores the previous action.
pub(crate) struct Running {
    _handler: InstalledHandler,
}

/// Refuses a profiling signal the sampler cannot use.
pub(crate) fn check_config(config: &SamplerConfig) -> Result<(), Error> {
    let signal = config.signal.unwrap_or_else(default_signal);
    if !usable_signal(signal) {
        return Err(Error::InvalidConfig(format!(
            "signal {signal} cannot be the profiling signal: use SIGURG ({}), SIGWINCH ({}) \
             or a real-time signal ({}..={})",
            libc::SIGURG,
            libc::SIGWINCH,
            libc::SIGRTMIN(),
            libc::SIGRTMAX()
        )));
    }
    Ok(())
}

/// Installs the signal handler and starts the sampler thread, once
/// [`check_config`] passed and the caller holds the process's claim.
pub(crate) fn spawn(config: SamplerConfig) -> Result<(SamplerThread, Running), Error> {
    let signal = config.signal.unwrap_or_else(default_signal);
    // SAFETY: getpid has no preconditions.
    slots::OWN_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    // Without a fault-safe read, walks keep only the pc (counted as
    // unreadable) rather than trust a snapshot of the mappings.
    checked_memory::probe();
    // Where the thread pointer cannot be read cheaply, every read stays
    // checked.
    own_stack::probe();
    unwind::stack_copy::CAPTURE.store(!config.frame_pointers_only, Ordering::Relaxed);
    slots::TIMER_MAX_DEPTH.store(
        config.max_depth.clamp(1, MAX_DEPTH) as u32,
        Ordering::Relaxed,
    );
    let clock = choose_clock(&config)?;
    let mut scratch = Vec::new();
    stack_regions::refresh(&mut scratch);
    let handler = InstalledHandler::install(signal)?;
    let running = Running { _handler: handler };
    let thread = SamplerThread::spawn(config.hz, move |cx| {
        signal::block_in_this_thread(signal);
        scheduling::request_short_slice();
        // Only where it reads the rings: the sampler-thread clock's
        // accuracy was measured, and its wakeups placed, with the
        // thread at the weight of the threads it samples.
        if clock == SampleClock::Perf {
            scheduling::raise_weight();
        }
        SamplerLoop::new(config, clock, signal, cx.progress, cx.requests)?.run(&cx.stop)
    })?;
    // Until the first listing, threads that already run are not sampled:
    // a program that starts its workers right after `start` would lose
    // their first moments (200 ms of one beside busy processes). The
    // listing takes no lock a caller could hold (it reads `/proc`, opens
    // perf events); the wait is bounded all the same.
    // (The perf clock only: the sampler thread's own clock lists the
    // threads a period later, and it measured with `start` returning at
    // once.)
    let deadline = Instant::now() + FIRST_LISTING_WAIT;
    while clock.is_kernel_paced()
        && thread.progress().listings.load(Ordering::Acquire) == 0
        && !thread.is_finished()
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((thread, running))
}

fn monotonic_ns() -> u64 {
    threads::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0)
}
