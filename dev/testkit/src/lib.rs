//! Helpers that the tests, benchmarks and examples of several btprof
//! crates share, so that each exists once instead of as copies or
//! `#[path]` includes: the calling thread's CPU clock, a watchdog that
//! fails a test rather than let it hang CI, a spin on that clock, CPU-burning processes for runs
//! that must hold on a busy machine, a child process with
//! `perf_event_open` refused by a real seccomp filter, the measuring
//! helpers of benchmarks that run variants in child processes, seeded
//! synthetic profiles, named worker threads to profile, holding a
//! thread to one CPU, blocking every signal in a thread, the bars
//! of statistical assertions (`stats`), and the frames of a flamegraph
//! SVG (`svg`).
//!
//! Not published and not part of btprof's API.

pub mod hogs;
pub mod measure;
#[cfg(target_os = "linux")]
pub mod seccomp;
#[cfg(unix)]
pub mod signal_mask;
pub mod stats;
pub mod svg;
pub mod synthetic;
pub mod temp_dir;
pub mod workers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// The calling thread's CPU time.
///
/// Never inlined, like [`thread_cpu_ns`]: a profiled test can tell its
/// harness's clock reads from the work under test by the frame name.
#[inline(never)]
pub fn thread_cpu() -> Duration {
    Duration::from_nanos(thread_cpu_ns())
}

/// The calling thread's CPU time, in nanoseconds.
#[inline(never)]
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Burns `work` of the calling thread's CPU time, reading its clock every
/// `batch` multiply-adds, and returns the result (for `black_box`). Always
/// inlined: the loop is then code of the calling function, the frame a
/// profiled test expects its samples in. A larger `batch` reads the clock
/// (a system call, kernel time) less often.
#[inline(always)]
pub fn spin_cpu(work: Duration, batch: u32) -> u64 {
    let end = thread_cpu() + work;
    let mut x = 1u64;
    while thread_cpu() < end {
        for _ in 0..batch {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// Runs `body` on a thread of its own and returns its result, re-raising
/// its panic. If it does not finish within `limit`, prints that `what`
/// hung and aborts the process: a hang fails the test binary instead of
/// stalling CI.
pub fn with_watchdog<T: Send + 'static>(
    what: &str,
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let handle = thread::Builder::new()
        .name("btp-test-body".into())
        .spawn(move || {
            let result = body();
            let _ = done_tx.send(());
            result
        })
        .expect("spawn test body");
    match done_rx.recv_timeout(limit) {
        // Disconnected: the body panicked; join re-raises it below.
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(RecvTimeoutError::Timeout) => {
            eprintln!("WATCHDOG: `{what}` did not finish within {limit:?}. Aborting.");
            std::process::abort();
        }
    }
}

/// Waits until a thread that publishes its CPU time in `cpu_ns` has used
/// `more` beyond now, or `limit` of wall time passed. Tests wait for the
/// CPU time their threads got, so a loaded machine makes them slower, not
/// wrong; the caller's assertions report a thread that never ran.
pub fn wait_for_cpu(cpu_ns: &AtomicU64, more: Duration, limit: Duration) {
    let target = cpu_ns.load(Ordering::Relaxed) + more.as_nanos() as u64;
    let give_up = Instant::now() + limit;
    while cpu_ns.load(Ordering::Relaxed) < target && Instant::now() < give_up {
        thread::sleep(Duration::from_micros(500));
    }
}

/// Holds the calling thread to one CPU alone, the first it may run on
/// (a container's CPU set may leave out CPU 0), so that threads held so
/// take turns on it, and returns that CPU's number. Returns the error
/// rather than panicking: forked children call it too.
#[cfg(target_os = "linux")]
pub fn pin_to_one_cpu() -> std::io::Result<usize> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: zeroed cpu_set_t values are empty sets; sched_getaffinity
    // fills `allowed` for the calling thread (0), CPU_ISSET and CPU_SET
    // stay within the set's bits, and sched_setaffinity puts the calling
    // thread on `one` alone.
    let (rc, cpu) = unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &allowed))
        else {
            return Err(std::io::Error::other("no CPU allowed"));
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        (libc::sched_setaffinity(0, size, &one), cpu)
    };
    if rc == 0 {
        Ok(cpu)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The time the hypervisor has stolen from `cpu` since boot (the `steal`
/// column of `/proc/stat`, in clock ticks of usually 10 ms); `None` where
/// the kernel does not report it. On a virtual machine a thread can be
/// "on" a CPU that is not running at all: its CPU clock leaves that time
/// out, while the kernel's perf task clock counts it and the task clock's
/// timer skips the periods it missed, so a test comparing samples paced by
/// the task clock with the thread's CPU clock must allow for it.
#[cfg(target_os = "linux")]
pub fn steal_time(cpu: usize) -> Option<Duration> {
    steal_of(&format!("cpu{cpu}"))
}

/// The time the hypervisor has stolen from all CPUs together since boot
/// ([`steal_time`]).
#[cfg(target_os = "linux")]
pub fn steal_time_all_cpus() -> Option<Duration> {
    steal_of("cpu")
}

/// The steal column of `/proc/stat`'s line `label`.
#[cfg(target_os = "linux")]
fn steal_of(label: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(label))?;
    // user nice system idle iowait irq softirq steal
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| Duration::from_secs_f64(ticks as f64 / per_second as f64))
}
