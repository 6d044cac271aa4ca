//! Stopping one thread of another process just long enough to read its
//! registers and copy its stack: `PTRACE_SEIZE`, `PTRACE_INTERRUPT`, wait
//! for the stop, `PTRACE_GETREGSET` (`NT_PRSTATUS`), the copy, and
//! `PTRACE_DETACH` at once.
//!
//! `PTRACE_SEIZE` does not stop the thread (unlike `PTRACE_ATTACH`, it
//! sends no `SIGSTOP`), and no option is set (`PTRACE_O_EXITKILL` above
//! all): if btprof dies at any point, the kernel detaches its tracees and
//! lets a thread stopped by `PTRACE_INTERRUPT` run on.

use std::io;
use std::time::{Duration, Instant};

use crate::walker::Registers;

/// `PTRACE_EVENT_STOP`: the stop `PTRACE_INTERRUPT` (or a group stop)
/// reports to a seizing tracer.
const PTRACE_EVENT_STOP: i32 = 128;
/// `NT_PRSTATUS`: the general registers' register set.
const NT_PRSTATUS: usize = 1;
/// How long a thread may take to reach its stop: it stops on its way back
/// to user space, which behind busy processes takes a scheduling latency.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A thread of another process, seized and stopped.
pub(super) struct Stopped {
    tid: i32,
    /// The signal the thread was stopped to receive (a signal-delivery
    /// stop that came first), handed back to it at detach; 0: none.
    signal: i32,
    /// When the stop was seen.
    pub since: Instant,
    detached: bool,
}

/// Why a thread could not be stopped.
pub(super) enum StopError {
    /// It exited (or was never there).
    Gone,
    /// The kernel refused to let us trace it.
    Refused,
    /// Seized and interrupted, but it did not stop in time. It stays
    /// seized until btprof exits (the kernel then detaches it); it stops
    /// briefly whenever it reaches the interrupt.
    NoStop,
    /// Anything else.
    Other,
}

/// Seizes thread `tid` and stops it with `PTRACE_INTERRUPT`.
pub(super) fn stop(tid: i32) -> Result<Stopped, StopError> {
    // SAFETY: PTRACE_SEIZE takes no memory arguments (addr 0, no options).
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0usize, 0usize) } != 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => StopError::Gone,
            Some(libc::EPERM) | Some(libc::EACCES) => StopError::Refused,
            _ => StopError::Other,
        });
    }
    // SAFETY: as above.
    if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0usize, 0usize) } != 0 {
        // Seized but not stopped: it exited meanwhile (ESRCH).
        return Err(StopError::Gone);
    }
    let started = Instant::now();
    let mut polls = 0u32;
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer; __WALL waits for a thread of another
        // process (a "clone" child from our point of view).
        let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if got == tid {
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Err(StopError::Gone);
            }
            if libc::WIFSTOPPED(status) {
                // `status >> 16` is the event; a plain signal-delivery stop
                // has none, and its signal must be handed back at detach.
                let signal = if status >> 16 == PTRACE_EVENT_STOP {
                    0
                } else {
                    libc::WSTOPSIG(status)
                };
                return Ok(Stopped {
                    tid,
                    signal,
                    since: Instant::now(),
                    detached: false,
                });
            }
            continue;
        }
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(if e.raw_os_error() == Some(libc::ECHILD) {
                StopError::Gone
            } else {
                StopError::Other
            });
        }
        if started.elapsed() > STOP_TIMEOUT {
            return Err(StopError::NoStop);
        }
        polls += 1;
        if polls < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Stopped {
    /// The stopped thread's registers.
    pub fn registers(&self) -> io::Result<Registers> {
        // SAFETY: an all-zero register struct is valid.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: (&raw mut regs).cast(),
            iov_len: std::mem::size_of::<libc::user_regs_struct>(),
        };
        // SAFETY: the thread is in a ptrace stop of ours; `iov` describes a
        // writable buffer of the register set's size.
        let rc = unsafe {
            libc::ptrace(
                libc::PTRACE_GETREGSET,
                self.tid,
                NT_PRSTATUS,
                &raw mut iov as usize,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(registers(&regs))
    }

    /// Lets the thread go on (with the signal it was stopped for, if any).
    pub fn detach(mut self) -> io::Result<()> {
        self.detached = true;
        detach(self.tid, self.signal)
    }
}

impl Drop for Stopped {
    /// Never leaves a thread stopped, on any path.
    fn drop(&mut self) {
        if !self.detached {
            let _ = detach(self.tid, self.signal);
        }
    }
}

fn detach(tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH of a thread in our ptrace stop; `data` is a
    // signal number to deliver, or 0.
    if unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, signal as usize) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
fn registers(r: &libc::user_regs_struct) -> Registers {
    Registers {
        pc: r.rip,
        fp: r.rbp,
        sp: r.rsp,
        lr: 0,
    }
}

#[cfg(target_arch = "aarch64")]
fn registers(r: &libc::user_regs_struct) -> Registers {
    Registers {
        pc: r.pc,
        fp: r.regs[29],
        sp: r.sp,
        lr: r.regs[30],
    }
}
