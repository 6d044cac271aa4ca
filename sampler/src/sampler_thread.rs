//! The handle side of a sampler thread, the same on every platform.
//!
//! A platform's `Sampler` is its own start-up (a signal handler on Linux,
//! nothing on macOS) around this: the one-sampler-per-process claim, the
//! thread running the platform's loop, its live counters, the window
//! requests it answers, and stopping and joining it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::window::{self, Request};
use crate::{Error, Progress, RawProfile};

/// One sampler per process: on Linux the signal handler and slots are
/// global, and on any platform two samplers would interrupt each other's
/// threads and profile each other's work.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// This process's claim to run a sampler; released on drop.
pub(crate) struct Claim(());

impl Claim {
    /// Claims the process's sampler, or [`Error::AlreadyRunning`].
    pub(crate) fn take() -> Result<Claim, Error> {
        ACTIVE
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| Claim(()))
            .map_err(|_| Error::AlreadyRunning)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Release);
    }
}

/// What the platform's loop gets on the sampler thread.
pub(crate) struct LoopContext {
    /// Set when the loop must finish.
    pub(crate) stop: Arc<AtomicBool>,
    /// Live counters to update every tick.
    pub(crate) progress: Arc<Progress>,
    /// Window requests to answer between ticks.
    pub(crate) requests: mpsc::Receiver<Request>,
}

/// The running sampler thread.
pub(crate) struct SamplerThread {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    thread: Option<JoinHandle<Result<RawProfile, Error>>>,
    window: window::Client,
}

impl SamplerThread {
    /// Starts the thread `btprof-sampler` running `body`, which ticks at
    /// `hz` (window requests wait a few of its periods), with every
    /// maskable signal blocked.
    pub(crate) fn spawn(
        hz: u32,
        body: impl FnOnce(LoopContext) -> Result<RawProfile, Error> + Send + 'static,
    ) -> Result<SamplerThread, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let (window, requests) = window::channel(hz);
        let context = LoopContext {
            stop: stop.clone(),
            progress: progress.clone(),
            requests,
        };
        // Every maskable signal blocked from its first instruction: a host
        // handler run here while a thread is stopped could deadlock on it.
        let thread = crate::spawn_with_signals_blocked("btprof-sampler", move || body(context))
            .map_err(Error::Io)?;
        Ok(SamplerThread {
            stop,
            progress,
            thread: Some(thread),
            window,
        })
    }

    pub(crate) fn progress(&self) -> &Progress {
        &self.progress
    }

    pub(crate) fn collect(&self, reset: bool) -> Result<RawProfile, Error> {
        self.window.collect(reset)
    }

    /// Whether the thread has not been joined yet.
    pub(crate) fn is_running(&self) -> bool {
        self.thread.is_some()
    }

    /// Tells the loop to finish and waits for its profile.
    pub(crate) fn join(&mut self) -> Result<RawProfile, Error> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(Error::SamplerPanicked)),
            None => Err(Error::AlreadyStopped),
        }
    }
}
