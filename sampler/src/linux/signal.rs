//! Installing the profiling signal, sending it, and putting everything back.

use std::io;
use std::mem::MaybeUninit;

use super::slots;
use crate::Error;

/// The previous disposition of the profiling signal, restored on drop.
pub(crate) struct InstalledHandler {
    signal: libc::c_int,
    previous: libc::sigaction,
}

impl InstalledHandler {
    /// Installs `slots::on_signal` for `signal` with
    /// `SA_SIGINFO | SA_RESTART | SA_ONSTACK`. Refuses a signal that already
    /// has a handler: taking it over would break whoever installed it.
    pub fn install(signal: libc::c_int) -> Result<Self, Error> {
        let mut previous = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: querying the current action into a valid out-pointer.
        if unsafe { libc::sigaction(signal, std::ptr::null(), previous.as_mut_ptr()) } != 0 {
            return Err(Error::Io(io::Error::last_os_error()));
        }
        // SAFETY: sigaction filled it in.
        let previous = unsafe { previous.assume_init() };
        if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN {
            return Err(Error::SignalInUse(signal));
        }
        // SAFETY: an all-zero sigaction is a valid starting point.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = slots::on_signal as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a valid sigset; the signal itself is blocked
        // during the handler by default (no SA_NODEFER).
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: installing a valid action; the handler is async-signal-safe.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(Error::Io(io::Error::last_os_error()));
        }
        Ok(InstalledHandler { signal, previous })
    }
}

impl Drop for InstalledHandler {
    /// Discards any instance of the signal still pending in any thread (by
    /// setting `SIG_IGN`, which POSIX and Linux define to do that), then
    /// restores the previous action. Restoring `SIG_DFL` directly could
    /// let a late, still-queued signal terminate the process.
    fn drop(&mut self) {
        // SAFETY: an all-zero sigaction with SIG_IGN (0 is SIG_DFL; set it).
        let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
        ignore.sa_sigaction = libc::SIG_IGN;
        // SAFETY: valid actions for a valid signal number.
        unsafe {
            libc::sigaction(self.signal, &ignore, std::ptr::null_mut());
            libc::sigaction(self.signal, &self.previous, std::ptr::null_mut());
        }
    }
}

/// Blocks `signal` in the calling thread, so the sampler thread can never
/// be interrupted by its own signal.
pub(crate) fn block_in_this_thread(signal: libc::c_int) {
    // SAFETY: building a sigset and changing this thread's mask.
    unsafe {
        let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), signal);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// `siginfo_t` as `rt_tgsigqueueinfo` reads it for an `SI_QUEUE` signal on
/// 64-bit Linux: three ints, padding, then the `_rt` member (pid, uid,
/// value), in a 128-byte record.
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
        SignalSender {
            // SAFETY: getpid and getuid have no preconditions.
            pid: unsafe { libc::getpid() },
            // SAFETY: as above.
            uid: unsafe { libc::getuid() },
            signal,
        }
    }

    /// The signal sent.
    pub fn signal(&self) -> libc::c_int {
        self.signal
    }

    /// Sends the signal to thread `tid` carrying `value` in `si_value`.
    /// `ESRCH` means the thread exited.
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
        // SAFETY: `info` is a complete 128-byte siginfo record that outlives
        // the call; the kernel copies it.
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
