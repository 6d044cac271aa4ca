//! Helpers the sampler's integration tests share: the calling thread's CPU
//! clock, a watchdog that fails a test rather than let it hang CI, the
//! names of a sampled stack's frames, and a child process with
//! `perf_event_open` refused ([`seccomp`]).
// Each test binary uses a part of this.
#![allow(dead_code)]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use btprof_symbols::Resolver;

pub mod seccomp;

/// The calling thread's CPU time.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `body` on a thread of its own; aborts the process, saying that
/// `what` did not finish, if it takes longer than `limit`. A panic in
/// `body` is re-raised here, with its message.
pub fn with_watchdog(what: &str, limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    let body = thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    // Disconnected: the body panicked; joining it below re-raises that.
    if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
        eprintln!(
            "WATCHDOG: {what} did not finish within {:?}. Aborting.",
            started.elapsed()
        );
        std::process::abort();
    }
    body.join().unwrap();
}

/// The function names of a sampled stack's frames, leaf first: the leaf
/// is the interrupted pc, each caller a return address looked up one byte
/// back (inside its call instruction).
pub fn frame_names(resolver: &mut Resolver, frames: &[u64]) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let lookup = if i == 0 { a } else { a - 1 };
            resolver.resolve(lookup).name.to_string()
        })
        .collect()
}
