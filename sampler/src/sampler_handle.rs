//! The public [`Sampler`] handle, written once over the platform backends.
//!
//! Starting, collecting from and stopping a sampler follow the same
//! contract on every platform: one sampler per process (the [`Claim`]),
//! a sampler thread that answers requests between ticks, and a stop that
//! returns only once the host is as it was. What differs is how a backend
//! checks its configuration, what it sets up before its thread starts and
//! what it must undo after that thread is joined (on Linux the signal
//! handler; on macOS nothing). Each backend module supplies those as
//! `check_config`, `spawn` and a `Running` value.

#[cfg(target_os = "linux")]
use crate::linux as backend;
#[cfg(target_os = "macos")]
use crate::macos as backend;
use crate::sampler_thread::{Claim, SamplerThread};
use crate::{Error, Progress, RawProfile, SamplerConfig};

/// A running sampler of the current process.
pub struct Sampler {
    thread: SamplerThread,
    /// What the backend undoes after the thread is joined (on Linux,
    /// dropping it flushes pending signals and restores the previous
    /// signal action).
    running: Option<backend::Running>,
    /// Released last: only then may another sampler start.
    _claim: Claim,
}

impl Sampler {
    /// Starts sampling the threads of this process from a sampler thread.
    ///
    /// On Linux this installs the profiling signal's handler first
    /// ([`SamplerConfig::signal`], `SIGURG` by default). On macOS
    /// [`SamplerConfig::signal`] must be `None`: threads are suspended and
    /// no signal is sent, so a signal asked for is an error rather than
    /// silently ignored.
    pub fn start(config: SamplerConfig) -> Result<Sampler, Error> {
        config.validate()?;
        backend::check_config(&config)?;
        let claim = Claim::take()?;
        let (thread, running) = backend::spawn(config)?;
        Ok(Sampler {
            thread,
            running: Some(running),
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

    /// The stacks collected so far, while sampling goes on. With `reset`,
    /// the next window starts: the sampler continues with an empty table
    /// and later calls (and [`Sampler::stop`]) return only what came
    /// after. The counters in the result cover the window alone.
    ///
    /// The sampler answers at its next wakeup, so this waits up to a
    /// period, or up to 100 ms where the kernel paces the samples and the
    /// sampler thread sleeps longer; [`Error::Timeout`] if it does not
    /// answer within four periods or 2 s, whichever is longer.
    pub fn collect(&self, reset: bool) -> Result<RawProfile, Error> {
        self.thread.collect(reset)
    }

    /// Stops sampling and returns everything collected since the start or
    /// the last [`Sampler::collect`] with `reset`. When this returns every
    /// thread runs as before: on Linux the previous signal disposition is
    /// back in place with no signal left pending, on macOS every thread
    /// the sampler suspended has been resumed.
    pub fn stop(mut self) -> Result<RawProfile, Error> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<RawProfile, Error> {
        let result = self.thread.join();
        self.running.take();
        result
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.thread.is_running() {
            let _ = self.shutdown();
        }
    }
}
