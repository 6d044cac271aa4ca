//! What a Mach return code says about the thread a call was about.
//!
//! Written without `mach2` so that it builds and is tested on every host:
//! this classification decides whether the sampler counts a thread as
//! exited, counts a failure, or aborts the process, so it must be right
//! before the first run on a Mac.
//!
//! A thread can be caught at every stage of its exit (libpthread
//! `_pthread_exit` → `__bsdthread_terminate`; xnu `thread_terminate`,
//! `ipc_thread_disable`):
//!
//! - its stack is unmapped while the thread is still active, so suspend and
//!   `thread_get_state` succeed on a thread whose stack is gone (see
//!   [`crate::stack_copy::StackCopy`]);
//! - its port's kernel object is disabled before the thread is terminated:
//!   calls through the port then fail with `KERN_INVALID_ARGUMENT`, also
//!   `thread_resume` of a thread the sampler suspended a moment earlier;
//! - once terminated, calls fail with `KERN_TERMINATED`, and once the port
//!   is a dead name, with `MACH_SEND_INVALID_DEST`.
//!
//! None of these is a reason to abort: the thread is gone, not frozen.

use super::ThreadError;

/// `KERN_SUCCESS`.
pub const KERN_SUCCESS: i32 = 0;
/// `KERN_INVALID_ADDRESS`: a memory read touched an unmapped page.
pub const KERN_INVALID_ADDRESS: i32 = 1;
/// `KERN_PROTECTION_FAILURE`: a memory read touched an unreadable page.
pub const KERN_PROTECTION_FAILURE: i32 = 2;
/// `KERN_INVALID_ARGUMENT`: the port's thread object is already disabled
/// (the thread is inside its exit).
pub const KERN_INVALID_ARGUMENT: i32 = 4;
/// `KERN_FAILURE`: from `thread_resume`, the suspend count was already 0,
/// so the thread is running.
pub const KERN_FAILURE: i32 = 5;
/// `KERN_TERMINATED`: the thread has terminated.
pub const KERN_TERMINATED: i32 = 37;
/// `MACH_SEND_INVALID_DEST`: the port is a dead name, its thread gone.
pub const MACH_SEND_INVALID_DEST: i32 = 0x1000_0003;

/// Whether `kr` from a call about a thread means the thread is gone (or on
/// its way out): counted as exited, never a failure, never an abort.
pub const fn is_gone(kr: i32) -> bool {
    matches!(
        kr,
        KERN_INVALID_ARGUMENT | KERN_FAILURE | KERN_TERMINATED | MACH_SEND_INVALID_DEST
    )
}

/// The result of a call about one thread (`thread_info`, `thread_suspend`,
/// `thread_get_state`): success, the thread exited, or a failure with its
/// code.
pub const fn thread_call(kr: i32) -> Result<(), ThreadError> {
    if kr == KERN_SUCCESS {
        Ok(())
    } else if is_gone(kr) {
        Err(ThreadError::Exited)
    } else {
        Err(ThreadError::Failed(kr))
    }
}

/// What happened when a thread the sampler stopped was let go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resumed {
    /// It runs again.
    Running,
    /// It exited while stopped: nothing is frozen. Counted as exited.
    Gone,
    /// Its suspend count was already 0 (`KERN_FAILURE`): it runs, and
    /// nothing is left to undo.
    AlreadyRunning,
    /// Anything else: the thread may still be stopped. The sampler aborts
    /// rather than leave a live thread frozen, possibly holding a lock the
    /// whole process needs.
    Failed(i32),
}

/// Classifies `thread_resume`'s return code.
pub const fn resume(kr: i32) -> Resumed {
    match kr {
        KERN_SUCCESS => Resumed::Running,
        KERN_FAILURE => Resumed::AlreadyRunning,
        _ if is_gone(kr) => Resumed::Gone,
        _ => Resumed::Failed(kr),
    }
}

/// Classifies `mach_vm_read_overwrite`'s return code: `true` when the
/// bytes were copied. Any failure (`KERN_INVALID_ADDRESS` for an unmapped
/// stack, `KERN_PROTECTION_FAILURE`, anything else) means the memory
/// cannot be read now, and the walk ends there as unreadable.
pub const fn memory_read(kr: i32) -> bool {
    kr == KERN_SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_of_a_thread_inside_its_exit_mean_exited() {
        for kr in [4, 5, 37, 0x1000_0003] {
            assert_eq!(thread_call(kr), Err(ThreadError::Exited), "{kr:#x}");
        }
        assert_eq!(thread_call(0), Ok(()));
        // Anything else is a failure to count, with its code.
        for kr in [3, 14, 17, 0x1000_0004, -1] {
            assert_eq!(thread_call(kr), Err(ThreadError::Failed(kr)), "{kr:#x}");
        }
    }

    #[test]
    fn a_resume_fails_only_on_codes_that_may_leave_a_thread_frozen() {
        assert_eq!(resume(0), Resumed::Running);
        // Suspend count already zero: the thread runs.
        assert_eq!(resume(5), Resumed::AlreadyRunning);
        // Exited while stopped (xnu disables the port before terminating).
        for kr in [4, 37, 0x1000_0003] {
            assert_eq!(resume(kr), Resumed::Gone, "{kr:#x}");
        }
        for kr in [3, 14, 15, 0x1000_0004] {
            assert_eq!(resume(kr), Resumed::Failed(kr), "{kr:#x}");
        }
    }

    #[test]
    fn an_unmapped_stack_is_unreadable_not_an_error() {
        assert!(memory_read(0));
        assert!(!memory_read(KERN_INVALID_ADDRESS));
        assert!(!memory_read(KERN_PROTECTION_FAILURE));
    }
}
