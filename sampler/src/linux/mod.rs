//! Linux, own process: two clocks pace the samples ([`SampleClock`]).
//!
//! **Perf** (the default in cpu mode where `perf_event_open` is allowed): the kernel samples
//! every thread into ring buffers by its CPU time, with no signal ([`clocks::ring`]); threads
//! created later inherit the events. A thread the rings cannot take gets a perf timer that
//! signals it ([`clocks::timers`]), and the handler walks its stack into a slot.
//!
//! **The sampler thread** (where perf is refused, when forced, and always in wall mode) paces
//! the samples itself ([`clocks::paced`]): in cpu mode it signals each thread whose CPU time
//! reached a period; in wall mode a blocked thread is counted on the stack it waits in
//! ([`unwind::blocked_stack`]) and a running one gets a one-shot CPU timer
//! ([`kernel::cpu_timers`]).
//!
//! Layout: this file chooses the clock, installs the handler and starts the sampler thread
//! ([`spawn`]); [`engine`] is the sampler thread's loop; [`clocks`] each clock's state;
//! [`signal`] the handler and all it touches, under the async-signal-safety rules stated
//! there; [`kernel`] system-call wrappers; [`unwind`] CFI over stack copies and blocked
//! stacks; [`dump`] one-shot captures, of this process or through `ptrace`.

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

use crate::clock::monotonic_ns;
use crate::sampler_thread::SamplerThread;
use crate::{Error, Mode, SampleClock, SamplerConfig};

pub use signal::slots::MAX_DEPTH;

use clocks::timers::thread_timers;
use engine::SamplerLoop;
use kernel::scheduling;
use signal::install::{self, InstalledHandler};
use signal::{checked_memory, own_stack, slots, stack_copy, stack_regions};

/// The longest `start` waits for the sampler thread's first listing.
const FIRST_LISTING_WAIT: Duration = Duration::from_millis(500);

/// The default profiling signal: `SIGURG`, ignored by default, so one still queued at `execve`
/// is dropped where a real-time one would kill the new program.
pub fn default_signal() -> i32 {
    libc::SIGURG
}

/// Whether `signal` may be the profiling signal: ignored by default with no other meaning to
/// the kernel (`SIGURG`, `SIGWINCH`), or real-time (at the caller's risk on `exec`).
fn usable_signal(signal: i32) -> bool {
    signal == libc::SIGURG
        || signal == libc::SIGWINCH
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal)
}

/// The clock forced by the configuration or the environment, if the kernel allows it; else
/// perf in cpu mode where allowed, the sampler thread otherwise.
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

/// Undone after the sampler thread is joined (it closed every timer): the handler's drop
/// flushes pending signals and restores the previous action.
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

/// Installs the handler and starts the sampler thread, once [`check_config`] passed and the
/// caller holds the process's claim.
pub(crate) fn spawn(config: SamplerConfig) -> Result<(SamplerThread, Running), Error> {
    let signal = config.signal.unwrap_or_else(default_signal);
    // SAFETY: getpid has no preconditions.
    slots::OWN_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    checked_memory::probe();
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
        if clock == SampleClock::Perf {
            scheduling::raise_weight();
        }
        SamplerLoop::new(config, clock, signal, cx.progress, cx.requests)?.run(&cx.stop)
    })?;
    // Threads already running are not sampled until the first listing, so wait for it,
    // bounded (it takes no lock a caller could hold). Perf only: the other lists a period later.
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
