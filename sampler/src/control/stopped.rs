//! The stopped window: the guard that resumes a stopped thread on every
//! path, the lock that makes every stop in the process take turns, and
//! the panic hook that aborts instead of unwinding while a thread is
//! stopped.
//!
//! Mach's `thread_suspend` returns once its target is off the CPU, and a
//! thread waiting inside its own `thread_suspend` is off the CPU. So if
//! thread A suspended B while B suspended A (two threads dumping each
//! other, or one taking the backtrace of the other's dump), both calls
//! would return and each thread would then stay suspended by the other,
//! for good. Every stopped window holds [`TURNS`], so no two overlap: a
//! thread waiting for its turn is blocked, off the CPU, and the window
//! that holds the lock may stop it and resumes it before letting go.
//!
//! A stopped thread may hold any lock of the process. If the sampler
//! panicked then, unwinding would allocate the panic payload and run the
//! default hook, which locks stderr: either can wait forever on the lock the
//! stopped thread holds, and with it the whole process. Aborting is the
//! only safe way out.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard, Once};

use super::{Resumed, ThreadControl, ThreadError};
use crate::stack_window::CopyMemory;
use crate::walker::Registers;

thread_local! {
    /// Whether the current thread holds another thread stopped. Per thread
    /// (not one global flag) so a panic on any *other* thread takes the
    /// normal path. `const`-initialised with no destructor, so reading it
    /// never allocates once the thread touched it; the first touch (which on
    /// macOS may allocate the thread's TLS block) happens when it is set
    /// *before* a thread is stopped.
    static HOLDING_STOPPED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread currently holds another thread stopped.
pub fn holding_a_thread_stopped() -> bool {
    HOLDING_STOPPED.try_with(Cell::get).unwrap_or(false)
}

/// Installs, once per process, a panic hook that aborts the process when
/// the panicking thread holds another thread stopped, and otherwise hands
/// the panic to the hook that was installed before.
///
/// The hook stays installed for the life of the process (removing it later
/// could drop a hook someone else installed after it); outside a stopped
/// window it only forwards. A program that replaces the panic hook after
/// the profiler started loses the abort, but not the resume: the
/// guard around each stopped window still resumes the thread while
/// unwinding.
pub fn install_abort_on_panic_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if holding_a_thread_stopped() {
                write_stderr(
                    b"btprof: the sampler panicked while a thread of this process was stopped; \
                      aborting, because unwinding could deadlock on a lock that thread holds\n",
                );
                std::process::abort();
            }
            previous(info);
        }));
    });
}

/// Aborts, saying so, when a resume may have left a live thread frozen;
/// otherwise nothing: a thread that is gone or already running is not
/// frozen. Runs while the thread may still be stopped, so it neither
/// allocates nor locks.
fn abort_if_frozen(resumed: Resumed) {
    if let Resumed::Failed(code) = resumed {
        write_stderr(
            b"btprof: resuming a thread the sampler suspended failed with an unexpected code; \
              aborting rather than leave it frozen. code: ",
        );
        let mut digits = [0u8; 12];
        write_stderr(format_code(code, &mut digits));
        write_stderr(b"\n");
        std::process::abort();
    }
}

/// `code` in hexadecimal (how Mach codes are documented), into `buf`.
fn format_code(code: i32, buf: &mut [u8; 12]) -> &[u8] {
    let mut v = code as u32;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    i -= 2;
    buf[i..i + 2].copy_from_slice(b"0x");
    &buf[i..]
}

/// Writes to stderr without locking or allocating.
fn write_stderr(msg: &[u8]) {
    // SAFETY: `msg` is valid for `msg.len()` bytes; writing to fd 2 has no
    // other precondition, and a failed write is ignored (we abort next).
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// Held for every stopped window of the process (see the module
/// documentation). Taken before the stop, so a wait for it never holds a
/// thread stopped.
static TURNS: Mutex<()> = Mutex::new(());

/// A thread stopped through `C`, resumed when this is dropped.
///
/// Borrowing the control mutably for the whole window means nothing else
/// can be done through it but what the window allows: read registers and
/// memory.
pub(crate) struct Stopped<'c, C: ThreadControl> {
    control: &'c mut C,
    thread: C::Thread,
    /// Set once [`Stopped::resume`] ran, so the drop does not resume again.
    resumed: bool,
    /// This window's turn; released after the resume, as fields drop
    /// after [`Drop::drop`].
    _turn: MutexGuard<'static, ()>,
}

impl<'c, C: ThreadControl> Stopped<'c, C> {
    /// Stops `thread`; the returned guard resumes it. A failed stop returns
    /// the error and nothing is resumed.
    pub(crate) fn stop(control: &'c mut C, thread: C::Thread) -> Result<Self, ThreadError> {
        // A window that panicked aborted the process or resumed its thread
        // while unwinding, so a poisoned lock guards nothing left undone.
        let turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        // Marked before the call: a panic inside `stop`, after the thread
        // may already be suspended, must abort too.
        HOLDING_STOPPED.set(true);
        match control.stop(thread) {
            Ok(()) => Ok(Stopped {
                control,
                thread,
                resumed: false,
                _turn: turn,
            }),
            Err(e) => {
                HOLDING_STOPPED.set(false);
                Err(e)
            }
        }
    }

    /// The stopped thread's registers.
    pub(crate) fn registers(&mut self) -> Result<Registers, ThreadError> {
        self.control.registers(self.thread)
    }

    /// Lets the thread run again and says how that went; aborts if it may
    /// still be frozen.
    pub(crate) fn resume(mut self) -> Resumed {
        self.resume_once()
    }

    fn resume_once(&mut self) -> Resumed {
        self.resumed = true;
        let resumed = self.control.resume(self.thread);
        abort_if_frozen(resumed);
        HOLDING_STOPPED.set(false);
        resumed
    }
}

/// The stopped thread's memory, read by copy only.
impl<C: ThreadControl> CopyMemory for Stopped<'_, C> {
    fn copy_words(&mut self, addr: u64, out: &mut [u64]) -> bool {
        self.control.copy_memory(addr, out)
    }
}

impl<C: ThreadControl> Drop for Stopped<'_, C> {
    /// The resume of every path [`Stopped::resume`] was not called on:
    /// an early return, or unwinding from a panic.
    fn drop(&mut self) {
        if !self.resumed {
            self.resume_once();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::format_code;

    #[test]
    fn codes_are_written_in_hex_without_allocating() {
        let mut buf = [0u8; 12];
        assert_eq!(format_code(0x1000_0003, &mut buf), b"0x10000003");
        assert_eq!(format_code(0, &mut buf), b"0x0");
        assert_eq!(format_code(-1, &mut buf), b"0xffffffff");
    }
}
