//! Starting and stopping a profiler of the current process.

use btprof_sampler::{Progress, Sampler, SamplerConfig};
use btprof_symbols::Resolver;

use crate::{Error, Mode, Profile};

/// Configures a [`Profiler`]. Defaults: 1000 Hz, [`Mode::Cpu`], 256 frames.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ProfilerBuilder {
    config: SamplerConfig,
}

impl ProfilerBuilder {
    /// Samples per second per thread (1..=20000).
    pub fn hz(mut self, hz: u32) -> Self {
        self.config.hz = hz;
        self
    }

    /// Which threads to sample: [`Mode::Cpu`] (running) or [`Mode::Wall`] (all).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.config.mode = mode;
        self
    }

    /// The most frames kept per stack; deeper stacks are marked truncated.
    pub fn max_depth(mut self, frames: usize) -> Self {
        self.config.max_depth = frames;
        self
    }

    /// The real-time signal used on Linux, if the default is taken. macOS
    /// samples without a signal, and starting fails if one is set.
    pub fn signal(mut self, signal: i32) -> Self {
        self.config.signal = Some(signal);
        self
    }

    /// Starts sampling every other thread of this process.
    pub fn start(self) -> Result<Profiler, Error> {
        Ok(Profiler {
            sampler: Sampler::start(self.config)?,
        })
    }
}

/// A running profiler of the current process. Dropping it stops sampling
/// and discards the profile; call [`Profiler::stop`] to keep it.
pub struct Profiler {
    sampler: Sampler,
}

impl Profiler {
    /// A builder with the defaults.
    pub fn builder() -> ProfilerBuilder {
        ProfilerBuilder::default()
    }

    /// Live counters (ticks, samples, threads) for progress displays.
    pub fn progress(&self) -> &Progress {
        self.sampler.progress()
    }

    /// Stops sampling and symbolises what was collected.
    pub fn stop(self) -> Result<Profile, Error> {
        let raw = self.sampler.stop()?;
        let mut resolver = Resolver::for_current_process().map_err(Error::Symbols)?;
        Ok(Profile::from_raw(&raw, &mut resolver))
    }
}
