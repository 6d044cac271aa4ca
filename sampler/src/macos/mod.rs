//! macOS, own process: Mach thread suspension.
//!
//! A sampler thread lists the task's threads every tick (`task_threads`),
//! and for each one but itself reads its id, CPU time, name and stack
//! bounds, suspends it, reads its registers (`thread_get_state`), walks its
//! frame-pointer chain and resumes it. That loop is the shared
//! [`SamplingLoop`](crate::control::SamplingLoop), tested on Linux with a
//! recording fake; this module supplies the Mach calls
//! ([`mach_threads`]), the registers per architecture ([`thread_state`]),
//! the clock ([`mach_clock`]), the sampler thread's priority
//! ([`scheduling`]) and the Rosetta 2 refusal ([`rosetta`]).
//!
//! No signal is involved and no privilege is needed: a task may suspend
//! its own threads. Profiling another process (`task_for_pid`) is not
//! supported.
//!
//! Nothing here has run on a Mac from this project's machines (none run
//! macOS): it is type-checked and linked for both Apple architectures by
//! `scripts/check-macos`.

mod mach_clock;
mod mach_threads;
pub(crate) mod one_shot;
mod rosetta;
mod scheduling;
mod syscall_stubs;
mod thread_state;

use crate::control::SamplingLoop;
use crate::sampler_thread::SamplerThread;
use crate::walker::Arch;
use crate::{Error, SamplerConfig};

pub use crate::control::MAX_DEPTH;

use mach_clock::MachClock;
use mach_threads::MachThreads;

/// What a running sampler undoes after its thread is joined: nothing,
/// since the thread resumes every thread it suspended before it ends.
pub(crate) struct Running;

/// Refuses a profiling signal: macOS samples by suspending threads and
/// sends no signal, so a signal asked for is an error rather than
/// silently ignored.
pub(crate) fn check_config(config: &SamplerConfig) -> Result<(), Error> {
    if let Some(signal) = config.signal {
        return Err(Error::InvalidConfig(format!(
            "signal {signal} was requested, but a profiling signal is a Linux option: \
             on macOS btprof suspends threads with thread_suspend and sends no signal"
        )));
    }
    Ok(())
}

/// Starts the sampler thread, once [`check_config`] passed and the caller
/// holds the process's claim.
pub(crate) fn spawn(config: SamplerConfig) -> Result<(SamplerThread, Running), Error> {
    let translated = rosetta::refuse_unless_allowed(&config)?;
    let thread = SamplerThread::spawn(config.hz, move |cx| {
        // First, so no thread is ever stopped at a lower priority. A
        // refusal leaves the default priority; missed ticks show it.
        scheduling::raise_sampler_priority();
        // Built on the sampler thread: `MachThreads` records the
        // calling thread as the one never to stop.
        let control = MachThreads::for_calling_thread();
        let stubs = one_shot::frameless_stubs();
        let mut sampling = SamplingLoop::new(control, &config, Arch::host(), cx.progress)
            .with_frameless_stubs(stubs)
            .with_requests(cx.requests)
            .sparing_young_threads(translated);
        sampling.run(&MachClock::new(), &cx.stop)?;
        Ok(sampling.finish())
    })?;
    Ok((thread, Running))
}
