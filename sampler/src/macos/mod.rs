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
//! ([`scheduling`]) and the Rosetta 2 check ([`rosetta`]).
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
mod thread_state;

use crate::control::SamplingLoop;
use crate::sampler_thread::{Claim, SamplerThread};
use crate::walker::Arch;
use crate::{Error, Progress, RawProfile, SamplerConfig};

pub use crate::control::MAX_DEPTH;

use mach_clock::MachClock;
use mach_threads::MachThreads;

/// A running sampler of the current process.
pub struct Sampler {
    thread: SamplerThread,
    /// Released after the thread is joined: only then may another sampler
    /// start.
    _claim: Claim,
}

impl Sampler {
    /// Starts the sampler thread.
    ///
    /// [`SamplerConfig::signal`] must be `None`: macOS samples by
    /// suspending threads and sends no signal, so a signal asked for is an
    /// error rather than silently ignored.
    pub fn start(config: SamplerConfig) -> Result<Sampler, Error> {
        config.validate()?;
        if let Some(signal) = config.signal {
            return Err(Error::InvalidConfig(format!(
                "signal {signal} was requested, but a profiling signal is a Linux option: \
                 on macOS btprof suspends threads with thread_suspend and sends no signal"
            )));
        }
        let claim = Claim::take()?;
        rosetta::warn_once_if_translated();
        let thread = SamplerThread::spawn(config.hz, move |cx| {
            // First, so no thread is ever stopped at a lower priority. A
            // refusal leaves the default priority; missed ticks show it.
            scheduling::raise_sampler_priority();
            // Built on the sampler thread: `MachThreads` records the
            // calling thread as the one never to stop.
            let control = MachThreads::for_calling_thread();
            let mut sampling = SamplingLoop::new(control, &config, Arch::host(), cx.progress)
                .with_requests(cx.requests);
            sampling.run(&MachClock::new(), &cx.stop)?;
            Ok(sampling.finish())
        })?;
        Ok(Sampler {
            thread,
            _claim: claim,
        })
    }

    /// Whether this sampler was started by the calling process; `false` in
    /// a child forked while it ran, where it cannot be stopped (the child
    /// gets [`Error::ForkedChild`] and may start its own).
    pub fn started_in_this_process(&self) -> bool {
        !self.thread.forked_away()
    }

    /// Live counters, for progress displays.
    pub fn progress(&self) -> &Progress {
        self.thread.progress()
    }

    /// The stacks collected so far, while sampling goes on; with `reset`,
    /// the next window starts (see the Linux `Sampler::collect`, the same
    /// contract).
    pub fn collect(&self, reset: bool) -> Result<RawProfile, Error> {
        self.thread.collect(reset)
    }

    /// Stops sampling and returns everything collected since the start or
    /// the last [`Sampler::collect`] with `reset`. Every thread the sampler
    /// suspended runs again when this returns.
    pub fn stop(mut self) -> Result<RawProfile, Error> {
        self.thread.join()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.thread.is_running() {
            let _ = self.thread.join();
        }
    }
}
