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
//!   [`crate::stack_window::StackWindow`]);
//! - its port's kernel object is disabled before the thread is terminated:
//!   calls through the port then fail with `KERN_INVALID_ARGUMENT`, also
//!   `thread_resume` of a thread the sampler suspended a moment earlier;
//! - once terminated, calls fail with `KERN_TERMINATED`, and once the port
//!   is a dead name, with `MACH_SEND_INVALID_DEST`.
//!
//! None of these is a reason to abort: the thread is gone, not frozen. But
//! `KERN_INVALID_ARGUMENT` and `KERN_FAILURE` also come back for other
//! reasons from a thread that is alive, so on those codes the thread is
//! asked about once more (`thread_info`) before it is counted as exited.

use super::ThreadError;

/// `KERN_SUCCESS`.
pub const KERN_SUCCESS: i32 = 0;
/// `KERN_INVALID_ADDRESS`: a memory read touched an unmapped page.
pub const KERN_INVALID_ADDRESS: i32 = 1;
/// `KERN_PROTECTION_FAILURE`: a memory read touched an unreadable page.
pub const KERN_PROTECTION_FAILURE: i32 = 2;
/// `KERN_INVALID_ARGUMENT`: the port's thread object is already disabled
/// (the thread is inside its exit), or some other argument was refused.
pub const KERN_INVALID_ARGUMENT: i32 = 4;
/// `KERN_FAILURE`: from `thread_resume`, the suspend count was already 0,
/// so the thread is running; from other calls, a failure of any kind.
pub const KERN_FAILURE: i32 = 5;
/// `KERN_TERMINATED`: the thread has terminated.
pub const KERN_TERMINATED: i32 = 37;
/// `MACH_SEND_INVALID_DEST`: the port is a dead name, its thread gone.
pub const MACH_SEND_INVALID_DEST: i32 = 0x1000_0003;

/// Whether `kr` from a call about a thread says for certain that the thread
/// is gone: terminated, or its port a dead name.
pub const fn is_gone(kr: i32) -> bool {
    matches!(kr, KERN_TERMINATED | MACH_SEND_INVALID_DEST)
}

/// Whether `kr` from `thread_suspend`, `thread_get_state` or
/// `thread_resume` may mean the thread is inside its exit but may also
/// mean something else: `KERN_INVALID_ARGUMENT` (its port's thread object
/// disabled, or an argument the call did not like) and `KERN_FAILURE`.
/// Read as an exit without asking, a live thread loses its samples, and
/// one the sampler suspended may never be resumed; so the thread is asked
/// about with `thread_info` ([`info_says_gone`]) first.
pub const fn is_ambiguous(kr: i32) -> bool {
    matches!(kr, KERN_INVALID_ARGUMENT | KERN_FAILURE)
}

/// Whether `thread_info`'s code `kr` (fixed flavor, a buffer of the
/// flavor's size) says the thread is gone. Besides the certain codes
/// ([`is_gone`]) that includes `KERN_INVALID_ARGUMENT`: with the flavor
/// and the size right by construction, the only argument left to be
/// invalid is the thread, whose port no longer names one (xnu disables it
/// inside the thread's exit). A live thread answers `KERN_SUCCESS`, so it
/// is never taken for gone.
pub const fn info_says_gone(kr: i32) -> bool {
    is_gone(kr) || kr == KERN_INVALID_ARGUMENT
}

/// The result of a `thread_info` call: success, the thread exited
/// ([`info_says_gone`]), or a failure with its code.
pub const fn info_call(kr: i32) -> Result<(), ThreadError> {
    if kr == KERN_SUCCESS {
        Ok(())
    } else if info_says_gone(kr) {
        Err(ThreadError::Exited)
    } else {
        Err(ThreadError::Failed(kr))
    }
}

/// The result of `thread_suspend` or `thread_get_state` returning `kr`:
/// success, the thread exited, or a failure with its code. An ambiguous
/// code ([`is_ambiguous`]) is confirmed by `info`, which makes a
/// `thread_info` call about the same thread and returns its code: gone
/// only if that says so, otherwise a failure with the first code.
pub fn thread_call(kr: i32, info: impl FnOnce() -> i32) -> Result<(), ThreadError> {
    if kr == KERN_SUCCESS {
        Ok(())
    } else if is_gone(kr) || (is_ambiguous(kr) && info_says_gone(info())) {
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

/// Classifies `thread_resume`'s return code `kr`. `KERN_INVALID_ARGUMENT`
/// is confirmed by `info` (a `thread_info` call about the thread, see
/// [`thread_call`]): a thread that is still there may still be frozen.
pub fn resume(kr: i32, info: impl FnOnce() -> i32) -> Resumed {
    match kr {
        KERN_SUCCESS => Resumed::Running,
        KERN_FAILURE => Resumed::AlreadyRunning,
        _ if is_gone(kr) => Resumed::Gone,
        KERN_INVALID_ARGUMENT if info_says_gone(info()) => Resumed::Gone,
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

    /// A `thread_info` that must not be called: the code was not ambiguous.
    fn not_asked() -> i32 {
        panic!("thread_info was asked about an unambiguous code")
    }

    #[test]
    fn certain_codes_mean_exited_without_asking() {
        for kr in [KERN_TERMINATED, MACH_SEND_INVALID_DEST] {
            assert_eq!(
                thread_call(kr, not_asked),
                Err(ThreadError::Exited),
                "{kr:#x}"
            );
        }
        assert_eq!(thread_call(KERN_SUCCESS, not_asked), Ok(()));
        // Anything else unambiguous is a failure to count, with its code.
        for kr in [3, 14, 17, 0x1000_0004, -1] {
            assert_eq!(
                thread_call(kr, not_asked),
                Err(ThreadError::Failed(kr)),
                "{kr:#x}"
            );
        }
    }

    #[test]
    fn ambiguous_codes_are_an_exit_only_if_thread_info_confirms_it() {
        for kr in [KERN_INVALID_ARGUMENT, KERN_FAILURE] {
            // A live thread: thread_info succeeds, so the call failed.
            assert_eq!(
                thread_call(kr, || KERN_SUCCESS),
                Err(ThreadError::Failed(kr)),
                "{kr:#x}"
            );
            // thread_info failing for another reason proves nothing.
            assert_eq!(
                thread_call(kr, || 17),
                Err(ThreadError::Failed(kr)),
                "{kr:#x}"
            );
            for info in [
                KERN_TERMINATED,
                MACH_SEND_INVALID_DEST,
                KERN_INVALID_ARGUMENT,
            ] {
                assert_eq!(
                    thread_call(kr, || info),
                    Err(ThreadError::Exited),
                    "{kr:#x} then {info:#x}"
                );
            }
        }
    }

    #[test]
    fn thread_info_codes_of_a_gone_thread_mean_exited() {
        for kr in [
            KERN_INVALID_ARGUMENT,
            KERN_TERMINATED,
            MACH_SEND_INVALID_DEST,
        ] {
            assert_eq!(info_call(kr), Err(ThreadError::Exited), "{kr:#x}");
        }
        assert_eq!(info_call(KERN_SUCCESS), Ok(()));
        for kr in [KERN_FAILURE, 3, 0x1000_0004] {
            assert_eq!(info_call(kr), Err(ThreadError::Failed(kr)), "{kr:#x}");
        }
    }

    #[test]
    fn a_resume_fails_only_on_codes_that_may_leave_a_thread_frozen() {
        assert_eq!(resume(KERN_SUCCESS, not_asked), Resumed::Running);
        // Suspend count already zero: the thread runs.
        assert_eq!(resume(KERN_FAILURE, not_asked), Resumed::AlreadyRunning);
        for kr in [KERN_TERMINATED, MACH_SEND_INVALID_DEST] {
            assert_eq!(resume(kr, not_asked), Resumed::Gone, "{kr:#x}");
        }
        // Exited while stopped (xnu disables the port before terminating),
        // confirmed; not confirmed, the thread may still be frozen.
        assert_eq!(
            resume(KERN_INVALID_ARGUMENT, || KERN_TERMINATED),
            Resumed::Gone
        );
        assert_eq!(
            resume(KERN_INVALID_ARGUMENT, || KERN_SUCCESS),
            Resumed::Failed(KERN_INVALID_ARGUMENT)
        );
        for kr in [3, 14, 15, 0x1000_0004] {
            assert_eq!(resume(kr, not_asked), Resumed::Failed(kr), "{kr:#x}");
        }
    }

    #[test]
    fn an_unmapped_stack_is_unreadable_not_an_error() {
        assert!(memory_read(0));
        assert!(!memory_read(KERN_INVALID_ADDRESS));
        assert!(!memory_read(KERN_PROTECTION_FAILURE));
    }
}
