//! Stopping one thread of another process just long enough to read its registers and copy its
//! stack. No ptrace option is set (above all no `PTRACE_O_EXITKILL`): if btprof dies, its
//! tracees run on.

use std::io;
use std::time::{Duration, Instant};

use crate::walker::{Arch, Registers};

/// `PTRACE_EVENT_STOP`: the stop `PTRACE_INTERRUPT` reports to a seizer.
const PTRACE_EVENT_STOP: i32 = 128;
const NT_PRSTATUS: usize = 1;
/// How long a thread may take to stop (after any scheduling latency).
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A thread of another process, seized and stopped.
pub(super) struct Stopped {
    tid: i32,
    /// The signal of a signal-delivery stop, handed back at detach; 0: none.
    signal: i32,
    pub since: Instant,
    detached: bool,
}

/// Why a thread could not be stopped.
pub(super) enum StopError {
    /// It exited (or was never there).
    Gone,
    Refused,
    /// Not stopped in time; it stays seized until btprof exits.
    NoStop,
    Other,
}

/// Seizes thread `tid` and stops it with `PTRACE_INTERRUPT`.
pub(super) fn stop(tid: i32) -> Result<Stopped, StopError> {
    // SAFETY: PTRACE_SEIZE takes no memory arguments.
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
        // It exited meanwhile (ESRCH).
        return Err(StopError::Gone);
    }
    let started = Instant::now();
    let mut polls = 0u32;
    loop {
        let mut status = 0;
        // SAFETY: a valid out-pointer; __WALL for another process's thread.
        let got = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if got == tid {
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Err(StopError::Gone);
            }
            if libc::WIFSTOPPED(status) {
                // A signal-delivery stop (no event) keeps its signal.
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
    pub fn registers(&self) -> io::Result<Registers> {
        let mut words = [0u64; PRSTATUS_WORDS];
        let mut iov = libc::iovec {
            iov_base: words.as_mut_ptr().cast(),
            iov_len: std::mem::size_of_val(&words),
        };
        // SAFETY: the thread is in our stop; the kernel writes at most `iov_len` bytes.
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
        // The kernel set `iov_len` to the bytes it wrote.
        prstatus_registers(Arch::host(), &words[..iov.iov_len / 8])
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
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
    // SAFETY: detaching a thread in our stop; `data` is a signal or 0.
    if unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0usize, signal as usize) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Words in the largest `NT_PRSTATUS` set read here (aarch64's).
const PRSTATUS_WORDS: usize = 34;

// The buffer holds the host's set, and libc agrees with the words read.
const _: () = assert!(std::mem::size_of::<libc::user_regs_struct>() <= PRSTATUS_WORDS * 8);
#[cfg(target_arch = "x86_64")]
const _: () = {
    use libc::user_regs_struct as R;
    use std::mem::offset_of;
    assert!(offset_of!(R, rbp) == 4 * 8);
    assert!(offset_of!(R, rip) == 16 * 8);
    assert!(offset_of!(R, rsp) == 19 * 8);
};
#[cfg(target_arch = "aarch64")]
const _: () = {
    use libc::user_regs_struct as R;
    use std::mem::offset_of;
    assert!(offset_of!(R, regs) == 0);
    assert!(offset_of!(R, sp) == 31 * 8);
    assert!(offset_of!(R, pc) == 32 * 8);
};

/// The walk's registers from an `NT_PRSTATUS` set of `arch`, raw; `None` if too short. From
/// words, not libc's struct, so every layout is tested on every machine.
fn prstatus_registers(arch: Arch, words: &[u64]) -> Option<Registers> {
    Some(match arch {
        Arch::X86_64 => Registers {
            pc: *words.get(16)?,
            fp: *words.get(4)?,
            sp: *words.get(19)?,
            lr: 0,
        },
        Arch::Aarch64 { .. } => Registers {
            pc: *words.get(32)?,
            fp: *words.get(29)?,
            sp: *words.get(31)?,
            lr: *words.get(30)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An aarch64 set with `xN` = N * 0x100, so a wrong index shows.
    #[test]
    fn an_aarch64_register_set_gives_pc_fp_sp_and_lr() {
        let mut words: Vec<u64> = (0..31).map(|i| 0x100 * i).collect();
        let (sp, pc) = (0xffff_f7ff_e000, 0xaaaa_c000_1234);
        let fp = sp + 0x40;
        // A signed return address, kept as it is.
        let lr = 0x0035_aaaa_c000_0f00;
        words[29] = fp;
        words[30] = lr;
        words.extend([sp, pc, 0x6000_0000]);
        assert_eq!(words.len(), PRSTATUS_WORDS);
        assert_eq!(
            prstatus_registers(Arch::AARCH64_LINUX, &words),
            Some(Registers { pc, fp, sp, lr })
        );
        // A set cut short is refused.
        assert_eq!(prstatus_registers(Arch::AARCH64_LINUX, &words[..32]), None);
    }

    #[test]
    fn an_x86_64_register_set_gives_pc_fp_and_sp() {
        let mut words: Vec<u64> = (0..27).map(|i| 0x100 * i).collect();
        words[4] = 0x7ffc_0000_0040; // rbp
        words[16] = 0x5555_0000_1234; // rip
        words[19] = 0x7ffc_0000_0000; // rsp
        assert_eq!(
            prstatus_registers(Arch::X86_64, &words),
            Some(Registers {
                pc: 0x5555_0000_1234,
                fp: 0x7ffc_0000_0040,
                sp: 0x7ffc_0000_0000,
                lr: 0,
            })
        );
    }
}
