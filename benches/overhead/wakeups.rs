//! What a timed wakeup costs the thread that sleeps, with nothing done
//! between wakeups: the floor under a sampler thread's cost, which wakes
//! tens to thousands of times a second depending on its clock.
//!
//! Measured beside the job's busy workers, in a child of its own, as the
//! sampler thread wakes beside them: on this project's VMs the same
//! probe paid about 28 µs a wakeup on an otherwise idle machine and about
//! 10 µs beside the workers, so a floor measured alone would overstate
//! the share of waking in a sampler's cost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use btprof_testkit::thread_cpu;

/// How long each park lasts: about the sampler-thread clock's interval at
/// 100 Hz.
pub(crate) const INTERVAL: Duration = Duration::from_millis(5);

/// A thread that parks for [`INTERVAL`] again and again (`park_timeout`,
/// as the sampler thread sleeps) and does nothing else.
pub(crate) struct WakeupProbe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Duration, u32)>,
}

impl WakeupProbe {
    pub(crate) fn start() -> WakeupProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let start = thread_cpu();
            let mut wakeups = 0;
            while !flag.load(Ordering::Relaxed) {
                let deadline = Instant::now() + INTERVAL;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    std::thread::park_timeout(left);
                }
                wakeups += 1;
            }
            (thread_cpu() - start, wakeups)
        });
        WakeupProbe { stop, thread }
    }

    /// Stops the probe: its CPU time per wakeup (µs).
    pub(crate) fn finish(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let (cpu, wakeups) = self.thread.join().expect("the wakeup probe");
        cpu.as_secs_f64() * 1e6 / f64::from(wakeups.max(1))
    }
}
