//! Named threads that work until told to stop: the busy program that
//! profiling tests and benchmarks sample, started before the profiler and
//! stopped when the caller chooses (before or after the profiler stops).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Running worker threads and the flag that stops them.
pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` threads named `{prefix}{i}`, thread `i` running
    /// `work(i, stop)`, which should return once `stop` is set.
    pub fn start<F>(n: usize, prefix: &str, work: F) -> Workers
    where
        F: Fn(usize, &AtomicBool) + Clone + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let (stop, work) = (stop.clone(), work.clone());
                std::thread::Builder::new()
                    .name(format!("{prefix}{i}"))
                    .spawn(move || work(i, &stop))
                    .expect("spawn a worker thread")
            })
            .collect();
        Workers { stop, threads }
    }

    /// Sets the stop flag and waits for every thread, re-raising a panic.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}
