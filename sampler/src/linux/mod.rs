//! Linux, own process: two clocks pace the samples ([`SampleClock`]).
//!
//! **Perf** ([`SampleClock::Perf`], the default in cpu mode where
//! `perf_event_open` is allowed): the kernel samples every thread into ring
//! buffers by its own CPU time, with no signal ([`clocks::ring`]). The
//! threads found at start get task-clock events, and every thread they
//! create inherits a copy, so a thread that lives 2 ms is sampled from its
//! first instruction. The sampler thread reads the rings, unwinds each
//! stack copy with CFI, lists threads and reads their CPU clocks. A thread
//! the rings cannot take (beyond the descriptor budget, deeper than the
//! kernel's call chains, or created by a thread no event covers) gets a
//! perf timer of its own that signals it ([`clocks::timers`]), and the
//! handler walks its stack into a static slot ([`signal::slots`]).
//!
//! **The sampler thread** (where perf events are refused, when forced, and
//! always in wall mode) paces the samples itself. In cpu mode it signals
//! each thread whose CPU time since its last sample reached one period,
//! waking when each falls due and at random moments, so that samples do
//! not line up with where threads resume after waiting for a CPU; a thread
//! that could not be sampled when due is owed the periods
//! ([`clocks::paced`]). In wall mode every thread is due at each tick: one
//! off CPU is counted on the stack it is blocked on without being
//! interrupted ([`unwind::blocked_stack`]), and a running one is asked for
//! its sample with a one-shot CPU timer ([`kernel::cpu_timers`]), which
//! only a running thread can take. It never waits for a handler, so a
//! thread slow to take its signal delays only its own sample.
//!
//! A `setitimer(ITIMER_PROF)` is no alternative: it fires at the kernel
//! tick rate for the whole process, and its signal lands in whichever
//! thread the kernel picks.
//!
//! ## Layout
//!
//! - This file: choosing the clock, installing the handler and starting
//!   the sampler thread ([`spawn`]).
//! - [`engine`]: the sampler thread's loop: collecting samples, listing
//!   threads and accounting their CPU time, and each clock's part of a
//!   wakeup.
//! - [`clocks`]: each clock's own state and arithmetic.
//! - [`signal`]: the signal handler and everything it touches, under the
//!   async-signal-safety rules stated there.
//! - [`kernel`]: thin wrappers over perf events, task clocks, CPU timers,
//!   `/proc` and scheduling.
//! - [`unwind`]: CFI over the handlers' and the rings' stack copies, and
//!   the stacks of blocked threads.
//! - [`dump`]: one-shot captures of this process and, through `ptrace`, of
//!   another.

pub mod bench_support;
mod clocks;
pub(crate) mod dump;
mod engine;
pub(crate) mod kernel;
pub(crate) mod signal;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
mod unwind;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::sampler_thread::SamplerThread;
use crate::{Error, Mode, SampleClock, SamplerConfig};

pub use signal::slots::MAX_DEPTH;

use clocks::timers::thread_timers;
use engine::SamplerLoop;
use kernel::{scheduling, threads};
use signal::install::{self, InstalledHandler};
use signal::{checked_memory, own_stack, slots, stack_copy, stack_regions};

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
    stack_copy::CAPTURE.store(!config.frame_pointers_only, Ordering::Relaxed);
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
        install::block_in_this_thread(signal);
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
