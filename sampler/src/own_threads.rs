//! Starting btprof's own threads (the sampler, the dump thread) with every
//! maskable signal blocked from their first instruction, except the
//! synchronous fault signals.
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
//! put back. The kernel never blocks `SIGKILL` and `SIGSTOP`, and glibc
//! keeps the two signals it uses internally (cancellation and `setxid`)
//! unblocked.
//!
//! The new thread waits for that before it runs its body: the sampler
//! reads other threads' masks to find those that block its signal, and a
//! creator caught with everything blocked was taken for one (in a forked
//! child, a few starts in a hundred), and the thread that started the
//! profile went unsampled.
//!
//! The synchronous fault signals ([`FAULT_SIGNALS`]: `SIGSEGV`, `SIGBUS`,
//! `SIGILL`, `SIGFPE`, `SIGTRAP`) stay unblocked. They are raised by the
//! thread's own faulting instruction, never sent by the host, so leaving
//! them open lets no host handler in by accident; and a blocked one is
//! worse than useless. Linux forces it through with its default action,
//! but macOS retries the faulting instruction forever: a bug in btprof's
//! thread would spin at 100% CPU and the process would never exit or
//! report a crash. Unblocked, a fault is a crash the user can see.
use std::io;
use std::sync::mpsc;
use std::thread::{Builder, JoinHandle};

/// The signals a faulting instruction raises in the thread that ran it,
/// left unblocked in btprof's threads so a fault crashes visibly.
#[cfg(unix)]
pub const FAULT_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
];

/// Spawns the thread `name` running `body`, with every maskable signal but
/// the synchronous fault signals (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`,
/// `SIGTRAP`) blocked from its first instruction, so a fault in it crashes
/// visibly. The calling thread's mask is unchanged when this returns, and
/// `body` starts only once it is back.
pub fn spawn_with_signals_blocked<T, F>(name: &str, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (restored, wait_for_restore) = mpsc::channel::<()>();
    let handle = {
        let _restore = BlockAll::in_this_thread();
        Builder::new().name(name.to_owned()).spawn(move || {
            // Left out of thread dumps while it runs.
            let _own = crate::exclusions::OwnThread::register();
            // The creator only drops its end, so this returns also if it
            // unwinds before.
            let _ = wait_for_restore.recv();
            body()
        })?
    };
    drop(restored);
    Ok(handle)
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
        // SAFETY: sigfillset initialises `all` and sigdelset removes valid
        // signal numbers from it; pthread_sigmask reads it and writes the
        // old mask into `previous`, both valid sigsets. None can fail with
        // these arguments.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            for sig in FAULT_SIGNALS {
                libc::sigdelset(&mut all, sig);
            }
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
        sigblk_of(unsafe { libc::gettid() })
    }

    /// Thread `tid`'s blocked signals as `/proc` reports them.
    fn sigblk_of(tid: i32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
        u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).unwrap()
    }

    /// The signals the kernel or glibc never let a thread block:
    /// `SIGKILL`, `SIGSTOP`, and glibc's cancellation and `setxid`
    /// signals (the first two real-time numbers, below `SIGRTMIN`).
    fn unblockable(sig: i32) -> bool {
        sig == libc::SIGKILL || sig == libc::SIGSTOP || (32..libc::SIGRTMIN()).contains(&sig)
    }

    #[test]
    fn the_new_thread_blocks_all_but_the_fault_signals_and_the_caller_keeps_its_mask() {
        if crate::emulation::not_checked_under_qemu(
            "signal masks read from /proc",
            "SigBlk in /proc shows the emulator's host mask, not the guest's",
        ) {
            return;
        }
        let before = sigblk_of_this_thread();
        let inside = spawn_with_signals_blocked("btprof-t-mask", sigblk_of_this_thread)
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(sigblk_of_this_thread(), before, "the caller's mask changed");
        for sig in 1..=libc::SIGRTMAX() {
            let blocked = inside & (1u64 << (sig - 1)) != 0;
            if FAULT_SIGNALS.contains(&sig) {
                assert!(!blocked, "fault signal {sig} blocked: {inside:#x}");
            } else if !unblockable(sig) {
                assert!(blocked, "signal {sig} not blocked: {inside:#x}");
            }
        }
    }

    /// The sampler reads other threads' masks from its first instruction:
    /// by then its creator has its own mask back.
    #[test]
    fn the_new_thread_starts_once_its_creator_has_its_mask_back() {
        if crate::emulation::not_checked_under_qemu(
            "signal masks read from /proc",
            "SigBlk in /proc shows the emulator's host mask, not the guest's (and \
             5000 forks of the emulator take minutes)",
        ) {
            return;
        }
        // Without the wait, one or two starts in a thousand lost the race
        // here: enough rounds that a broken build fails nearly every run.
        const ROUNDS: u32 = 5000;
        let before = sigblk_of_this_thread();
        let mut early = 0;
        for _ in 0..ROUNDS {
            // In a child held to one CPU, where the new thread, once
            // runnable, may preempt its creator before `spawn` returns.
            // SAFETY: the child spawns one thread, joins it and ends with
            // `_exit`, without unwinding into the test runner.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                if btprof_testkit::pin_to_one_cpu().is_err() {
                    // SAFETY: ends the child at once.
                    unsafe { libc::_exit(2) };
                }
                // SAFETY: gettid has no preconditions.
                let creator = unsafe { libc::gettid() };
                let seen = spawn_with_signals_blocked("btprof-t-gate", move || sigblk_of(creator))
                    .ok()
                    .and_then(|t| t.join().ok());
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(i32::from(seen != Some(before))) };
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
            assert_ne!(
                libc::WEXITSTATUS(status),
                2,
                "the child could not be held to one CPU"
            );
            early += u32::from(libc::WEXITSTATUS(status) != 0);
        }
        assert_eq!(
            early, 0,
            "in {early} of {ROUNDS} starts the new thread saw its creator's mask changed"
        );
    }
}
