//! The handle side of a sampler thread, the same on every platform.
//!
//! A platform's `Sampler` is its own start-up (a signal handler on Linux,
//! nothing on macOS) around this: the one-sampler-per-process claim, the
//! thread running the platform's loop, its live counters, the window
//! requests it answers, and stopping and joining it.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::window::{self, Request};
use crate::{Error, Progress, RawProfile};

/// One sampler per process: on Linux the signal handler and slots are
/// global, and on any platform two samplers would interrupt each other's
/// threads and profile each other's work. Holds the pid of the process
/// whose sampler runs (0: none): a forked child inherits the parent's
/// value, and since the parent's sampler thread does not exist in the
/// child, a claim held for another pid is free there.
static ACTIVE: AtomicI32 = AtomicI32::new(0);

fn own_pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// This process's claim to run a sampler; released on drop.
pub(crate) struct Claim {
    pid: i32,
}

impl Claim {
    /// Claims the process's sampler, or [`Error::AlreadyRunning`].
    pub(crate) fn take() -> Result<Claim, Error> {
        let pid = own_pid();
        let mut current = ACTIVE.load(Ordering::Acquire);
        loop {
            if current == pid {
                return Err(Error::AlreadyRunning);
            }
            // 0, or a claim copied from the parent by fork: free here.
            match ACTIVE.compare_exchange(current, pid, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(Claim { pid }),
                Err(now) => current = now,
            }
        }
    }
}

impl Drop for Claim {
    /// Releases the claim, unless this is a forked child's copy of its
    /// parent's: the child may hold a claim of its own by now.
    fn drop(&mut self) {
        if own_pid() == self.pid {
            let _ = ACTIVE.compare_exchange(self.pid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
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
    /// The process that started the thread. In a forked child the thread
    /// does not exist: joining it would wait forever.
    pid: i32,
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
            pid: own_pid(),
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

    /// Whether the thread has returned (it failed to start, or was told to
    /// stop): nothing more will come from it.
    #[cfg(target_os = "linux")]
    pub(crate) fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Whether this handle was copied into a forked child, where its thread
    /// does not run.
    pub(crate) fn forked_away(&self) -> bool {
        own_pid() != self.pid
    }

    /// Tells the loop to finish and waits for its profile. In a forked
    /// child, [`Error::ForkedChild`] at once: the thread is the parent's.
    pub(crate) fn join(&mut self) -> Result<RawProfile, Error> {
        if self.forked_away() {
            // Dropping a JoinHandle detaches the pthread, which in the
            // child is only a copy of the parent's bookkeeping; forget it.
            std::mem::forget(self.thread.take());
            return Err(Error::ForkedChild);
        }
        self.stop.store(true, Ordering::Release);
        // A loop sleeping between collections wakes now, not at its
        // next deadline.
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(Error::SamplerPanicked)),
            None => Err(Error::AlreadyStopped),
        }
    }
}
