//! Installing the profiling signal, sending it, and putting everything back.

use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

use super::{handler, slots, stack_regions};
use crate::Error;

/// The previous disposition of the profiling signal, restored on drop.
pub(crate) struct InstalledHandler {
    signal: libc::c_int,
    previous: libc::sigaction,
    /// The installing process: a forked child's copy must not act.
    pid: libc::pid_t,
}

/// The signal whose handler is installed (0: none), for the fork handler.
pub(crate) static INSTALLED_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The action before ours, for the fork handler.
struct SavedAction(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written by `install` before the Release store of `INSTALLED_SIGNAL`, read after an
// Acquire load sees it; one sampler per process, so installs never overlap.
unsafe impl Sync for SavedAction {}

static SAVED_ACTION: SavedAction = SavedAction(UnsafeCell::new(MaybeUninit::zeroed()));

static REGISTER_FORK_HANDLER: Once = Once::new();

impl InstalledHandler {
    /// Installs [`handler::on_signal`] for `signal`, with the capture's signal masked so a
    /// capture never walks from inside a sample.
    pub fn install(signal: libc::c_int) -> Result<Self, Error> {
        let previous = unused_action(signal)?;
        REGISTER_FORK_HANDLER.call_once(|| {
            // SAFETY: the child handler is async-signal-safe and 'static.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
        // SAFETY: the claim is held: nobody reads this before the store of `INSTALLED_SIGNAL`.
        unsafe { (*SAVED_ACTION.0.get()).write(previous) };
        set_handler(signal, |mask| {
            // SAFETY: a valid sigset and signal.
            unsafe { libc::sigaddset(mask, super::dump_slot::capture_signal()) };
        })?;
        INSTALLED_SIGNAL.store(signal, Ordering::Release);
        Ok(InstalledHandler {
            signal,
            previous,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
        })
    }
}

fn current_action(signal: libc::c_int) -> io::Result<libc::sigaction> {
    let mut current = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: querying the current action into a valid out-pointer.
    if unsafe { libc::sigaction(signal, std::ptr::null(), current.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigaction filled it in.
    Ok(unsafe { current.assume_init() })
}

/// `signal`'s action, refused if it has a handler: taking it over would break its owner.
pub(crate) fn unused_action(signal: libc::c_int) -> Result<libc::sigaction, Error> {
    let previous = current_action(signal).map_err(Error::Io)?;
    if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN {
        return Err(Error::SignalInUse(signal));
    }
    Ok(previous)
}

/// Makes [`handler::on_signal`] `signal`'s handler, with the signals `mask` adds to an empty
/// set blocked while it runs.
pub(crate) fn set_handler(
    signal: libc::c_int,
    mask: impl FnOnce(&mut libc::sigset_t),
) -> Result<(), Error> {
    // SAFETY: an all-zero sigaction is valid.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler::on_signal as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    // SAFETY: a valid sigset.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    mask(&mut action.sa_mask);
    // SAFETY: a valid action; the handler is async-signal-safe.
    if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
        return Err(Error::Io(io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether our handler is `signal`'s action right now.
pub(crate) fn handler_is_ours(signal: libc::c_int) -> bool {
    current_action(signal)
        .is_ok_and(|current| current.sa_sigaction == handler::on_signal as *const () as usize)
}

/// Puts the previous action back if ours is still installed, passing through `SIG_IGN` to
/// discard pending instances: a queued real-time signal meeting `SIG_DFL` would kill the
/// process. Async-signal-safe.
pub(crate) fn restore_if_ours(signal: libc::c_int, previous: &libc::sigaction) {
    if !handler_is_ours(signal) {
        return;
    }
    // SAFETY: an all-zero sigaction; SIG_IGN is set below.
    let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    // SAFETY: valid actions for a valid signal number.
    unsafe {
        libc::sigaction(signal, &ignore, std::ptr::null_mut());
        libc::sigaction(signal, previous, std::ptr::null_mut());
    }
}

/// `pthread_atfork` child handler: restores the previous action and frees the slots and region
/// readers of parent threads that do not exist here. Async-signal-safe.
extern "C" fn after_fork_in_child() {
    let signal = INSTALLED_SIGNAL.swap(0, Ordering::Acquire);
    if signal != 0 {
        // SAFETY: the Acquire saw the publication, made after the write.
        let previous = unsafe { (*SAVED_ACTION.0.get()).assume_init_ref() };
        restore_if_ours(signal, previous);
    }
    slots::reset_after_fork();
    stack_regions::reset_after_fork();
}

impl Drop for InstalledHandler {
    /// Restores the previous action; a forked child's copy does nothing (the fork handler did).
    fn drop(&mut self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.pid {
            return;
        }
        INSTALLED_SIGNAL.store(0, Ordering::Release);
        restore_if_ours(self.signal, &self.previous);
    }
}

/// Blocks `signal` in the calling thread (the sampler thread).
pub(crate) fn block_in_this_thread(signal: libc::c_int) {
    // SAFETY: building a sigset and changing this thread's mask.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), signal);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// `siginfo_t` for `SI_QUEUE` on 64-bit Linux (128 bytes).
#[repr(C)]
struct QueuedInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: usize,
    _rest: [u64; 12],
}

const _: () = assert!(std::mem::size_of::<QueuedInfo>() == 128);

/// Sends the profiling signal to threads of this process.
pub(crate) struct SignalSender {
    pid: i32,
    uid: u32,
    signal: libc::c_int,
}

impl SignalSender {
    pub fn new(signal: libc::c_int) -> Self {
        // SAFETY: getpid and getuid have no preconditions.
        let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
        SignalSender { pid, uid, signal }
    }

    pub fn signal(&self) -> libc::c_int {
        self.signal
    }

    /// Sends the signal to thread `tid` with `value` in `si_value`; `ESRCH`: the thread exited.
    pub fn send(&self, tid: i32, value: usize) -> io::Result<()> {
        let info = QueuedInfo {
            signo: self.signal,
            errno: 0,
            code: libc::SI_QUEUE,
            _pad: 0,
            pid: self.pid,
            uid: self.uid,
            value,
            _rest: [0; 12],
        };
        // SAFETY: a complete 128-byte record the kernel copies.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_tgsigqueueinfo,
                self.pid,
                tid,
                self.signal,
                &info as *const QueuedInfo,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
