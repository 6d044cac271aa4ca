//! Starting btprof's own threads (the sampler, the dump thread) with every
//! maskable signal blocked from their first instruction.
//!
//! A process-directed signal (`kill`, `SIGCHLD`, a terminal's `SIGINT`,
//! `SIGPROF` from a timer) is delivered to any thread that does not block
//! it. Run on the sampler while it holds another thread suspended, a host's
//! handler that locks or allocates can wait forever on the stopped thread,
//! and with it the whole process. So btprof's threads block every signal
//! that can be blocked, and the host's handlers run on the host's threads.
//!
//! Blocking inside the new thread would leave a window at its start, so the
//! spawning thread blocks everything around `spawn`: a new thread inherits
//! its creator's mask (POSIX `pthread_create`), then the creator's mask is
//! put back. `sigfillset` asks for all; the kernel never blocks `SIGKILL`
//! and `SIGSTOP`, and glibc keeps the two signals it uses internally
//! (cancellation and `setxid`) unblocked.
//!
//! A hardware fault (`SIGSEGV`, `SIGBUS`) raised by such a thread itself is
//! not held back by the mask on Linux: the kernel forces it with its
//! default action, so a bug in btprof's own thread ends the process rather
//! than running a host handler in the middle of a sample. (What xnu does
//! with a fault signal its thread blocks is not verified here.)

use std::io;
use std::thread::{Builder, JoinHandle};

/// Spawns the thread `name` running `body`, with every maskable signal
/// blocked from its first instruction. The calling thread's mask is
/// unchanged when this returns.
pub fn spawn_with_signals_blocked<T, F>(name: &str, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _restore = BlockAll::in_this_thread();
    Builder::new().name(name.to_owned()).spawn(move || {
        // Left out of thread dumps while it runs.
        let _own = crate::exclusions::OwnThread::register();
        body()
    })
}

/// The calling thread's mask before everything was blocked, restored on
/// drop (also if `spawn` panics).
struct BlockAll {
    #[cfg(unix)]
    previous: libc::sigset_t,
}

impl BlockAll {
    #[cfg(unix)]
    fn in_this_thread() -> BlockAll {
        // SAFETY: sigfillset initialises `all`; pthread_sigmask reads it
        // and writes the old mask into `previous`, both valid sigsets. It
        // cannot fail with these arguments.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
            BlockAll { previous }
        }
    }

    #[cfg(not(unix))]
    fn in_this_thread() -> BlockAll {
        BlockAll {}
    }
}

impl Drop for BlockAll {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved above, a valid sigset.
        #[cfg(unix)]
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The calling thread's blocked signals as `/proc` reports them.
    fn sigblk_of_this_thread() -> u64 {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
        u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).unwrap()
    }

    #[test]
    fn the_new_thread_blocks_everything_and_the_caller_keeps_its_mask() {
        let before = sigblk_of_this_thread();
        let inside = spawn_with_signals_blocked("btprof-t-mask", sigblk_of_this_thread)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(sigblk_of_this_thread(), before, "the caller's mask changed");
        let bit = |sig: i32| 1u64 << (sig - 1);
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGCHLD,
            libc::SIGPROF,
            libc::SIGALRM,
            libc::SIGSEGV,
            libc::SIGRTMAX(),
        ] {
            assert_ne!(
                inside & bit(sig),
                0,
                "signal {sig} not blocked: {inside:#x}"
            );
        }
    }
}
