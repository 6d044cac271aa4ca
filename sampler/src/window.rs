//! Handing out the stacks collected so far while sampling goes on.
//!
//! The stack table belongs to the sampler thread: nothing else touches it,
//! so interning needs no lock. A caller that wants the profile so far (a
//! snapshot, or a periodic dump that starts the next window) sends a
//! [`Request`]; the sampler answers between two ticks with a copy of the
//! table, or the table itself and a fresh one in its place. The counters
//! of a window are the run's counters minus those at the window's start.

use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use crate::stack_table::StackTable;
use crate::walker::Arch;
use crate::{Error, RawProfile, SamplerStats, ThreadInfo};

/// One request for the stacks so far.
pub(crate) struct Request {
    /// Start a new window: hand over the table and continue with an empty
    /// one. Otherwise hand over a copy.
    reset: bool,
    reply: mpsc::SyncSender<RawProfile>,
}

/// The caller's side: sends requests and waits for the answer.
pub(crate) struct Client {
    requests: mpsc::Sender<Request>,
    /// The longest a request may wait: a few ticks.
    timeout: Duration,
}

/// A connected pair: the client for the handle, the receiver for the
/// sampler thread.
pub(crate) fn channel(hz: u32) -> (Client, mpsc::Receiver<Request>) {
    let (requests, receiver) = mpsc::channel();
    let period = Duration::from_secs(1) / hz.max(1);
    let timeout = (period * 4).max(Duration::from_secs(2));
    (Client { requests, timeout }, receiver)
}

impl Client {
    /// Asks the sampler thread for the stacks so far and waits for them.
    pub(crate) fn collect(&self, reset: bool) -> Result<RawProfile, Error> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.requests
            .send(Request { reset, reply })
            .map_err(|_| Error::AlreadyStopped)?;
        answer.recv_timeout(self.timeout).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => Error::Timeout,
            mpsc::RecvTimeoutError::Disconnected => Error::AlreadyStopped,
        })
    }
}

/// The sampler thread's side: the run's counters when the current window
/// started.
pub(crate) struct Window {
    base: SamplerStats,
    start_time: SystemTime,
}

impl Window {
    /// The first window, starting now with `stats` (all zero).
    pub(crate) fn new(stats: &SamplerStats) -> Window {
        Window {
            base: stats.clone(),
            start_time: SystemTime::now(),
        }
    }

    /// Answers `request` from the sampler's table and the run's counters
    /// so far (`stats`, complete up to this moment, `duration` included).
    pub(crate) fn serve(
        &mut self,
        request: Request,
        table: &mut StackTable,
        threads: &[ThreadInfo],
        stats: &SamplerStats,
        arch: Arch,
    ) {
        let profile = self.cut(request.reset, table, threads, stats, arch);
        // The caller may have given up waiting; its window is then lost,
        // which its timeout error reported.
        let _ = request.reply.send(profile);
    }

    /// The current window as a profile; with `reset`, the table is taken
    /// and the next window starts now.
    pub(crate) fn cut(
        &mut self,
        reset: bool,
        table: &mut StackTable,
        threads: &[ThreadInfo],
        stats: &SamplerStats,
        arch: Arch,
    ) -> RawProfile {
        let mut window_stats = stats.since(&self.base);
        window_stats.start_time = self.start_time;
        let table = if reset {
            let fresh = table.empty_like();
            self.base = stats.clone();
            self.start_time = SystemTime::now();
            std::mem::replace(table, fresh)
        } else {
            table.clone()
        };
        RawProfile {
            table,
            threads: threads.to_vec(),
            stats: window_stats,
            arch,
            labels: crate::labels::snapshot(),
        }
    }
}
