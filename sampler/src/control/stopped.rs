//! The stopped window: the guard that resumes a stopped thread on every
//! path, and the panic hook that aborts instead of unwinding while a thread
//! is stopped.
//!
//! A stopped thread may hold any lock of the process. If the sampler
//! panicked then, unwinding would allocate the panic payload and run the
//! default hook, which locks stderr: either can wait forever on the lock the
//! stopped thread holds, and with it the whole process. Aborting is the
//! only safe way out.

use std::cell::Cell;
use std::sync::Once;

use super::{ThreadControl, ThreadError};
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

/// Writes to stderr without locking or allocating.
fn write_stderr(msg: &[u8]) {
    // SAFETY: `msg` is valid for `msg.len()` bytes; writing to fd 2 has no
    // other precondition, and a failed write is ignored (we abort next).
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// A thread stopped through `C`, resumed when this is dropped.
///
/// Borrowing the control mutably for the whole window means nothing else
/// can be done through it but what the window allows: read registers and
/// memory.
pub(crate) struct Stopped<'c, C: ThreadControl> {
    control: &'c mut C,
    thread: C::Thread,
}

impl<'c, C: ThreadControl> Stopped<'c, C> {
    /// Stops `thread`; the returned guard resumes it. A failed stop returns
    /// the error and nothing is resumed.
    pub(crate) fn stop(control: &'c mut C, thread: C::Thread) -> Result<Self, ThreadError> {
        // Marked before the call: a panic inside `stop`, after the thread
        // may already be suspended, must abort too.
        HOLDING_STOPPED.set(true);
        match control.stop(thread) {
            Ok(()) => Ok(Stopped { control, thread }),
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

    /// Memory to walk the stopped thread's stack through.
    pub(crate) fn memory(&self) -> &C::Memory {
        self.control.memory()
    }
}

impl<C: ThreadControl> Drop for Stopped<'_, C> {
    fn drop(&mut self) {
        self.control.resume(self.thread);
        HOLDING_STOPPED.set(false);
    }
}
