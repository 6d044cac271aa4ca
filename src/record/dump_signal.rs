//! An optional Unix signal that asks a running profiler for a dump.
//!
//! Off by default: a signal is a process-wide resource the application
//! may use itself. When chosen, the handler only raises a flag (an atomic
//! store is async-signal-safe); the dump thread sees it within
//! 50 ms and writes the window.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::Error;

/// Raised by the handler, polled by the dump thread. One profiler runs
/// per process (the sampler enforces it), so one flag serves.
static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_dump_signal(_: libc::c_int) {
    REQUESTED.store(true, Ordering::Release);
}

/// The installed handler; the previous disposition comes back on drop.
pub(crate) struct DumpSignal {
    signal: libc::c_int,
    previous: libc::sigaction,
}

impl DumpSignal {
    /// Installs the handler for `signal`, refusing one that already has a
    /// handler (the application's own).
    pub(crate) fn install(signal: i32) -> Result<DumpSignal, Error> {
        let invalid = || {
            Error::Sampler(btprof_sampler::Error::InvalidConfig(format!(
                "signal {signal} cannot be used to request dumps"
            )))
        };
        if signal <= 0 || [libc::SIGKILL, libc::SIGSTOP].contains(&signal) {
            return Err(invalid());
        }
        // SAFETY: zeroed sigaction structs are valid; the handler only
        // stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut previous) != 0 {
                return Err(invalid());
            }
            if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN {
                return Err(Error::Sampler(btprof_sampler::Error::SignalInUse(signal)));
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_dump_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(Error::Io(std::io::Error::last_os_error()));
            }
            Ok(DumpSignal { signal, previous })
        }
    }

    /// Whether the signal arrived since the last call.
    pub(crate) fn take_request() -> bool {
        REQUESTED.swap(false, Ordering::AcqRel)
    }
}

impl Drop for DumpSignal {
    fn drop(&mut self) {
        // SAFETY: restores the disposition saved by `install`.
        unsafe { libc::sigaction(self.signal, &self.previous, std::ptr::null_mut()) };
    }
}
