//! Whether a walk reached its thread's entry, decided once symbols are
//! known.
//!
//! The sampler's walker stops at the end of the frame-pointer chain (a
//! zero frame pointer or return address) or at the first link it cannot
//! follow. Neither says whether the stack is whole: code built without
//! frame pointers can leave 0 in the frame-pointer register halfway up the
//! stack, and the main thread's chain always breaks after `main`, because
//! the C start code that calls it has no frame pointers. So a walk counts
//! as complete only when it reached the thread's entry:
//!
//! - a thread-entry function among its frames: `main` and the C start
//!   code around it, the std thread start (`…::Thread::new::thread_start`),
//!   the C library's thread start (`start_thread`, `clone`, `clone3`;
//!   `thread_start`, `_pthread_start`, `start_wqthread` and dyld's `start`
//!   on macOS), Go's goroutine and thread starts. Whatever the walk did
//!   after reaching it is the start code's business, not a lost caller;
//! - or the chain's documented terminator: the walk ended at a zero frame
//!   pointer (or return address), as the x86_64 and arm64 ABIs mark the
//!   outermost frame, and that outermost frame lies in the C library (whose
//!   thread start sets it up, and whose symbol table is often stripped, so
//!   it has no name to match).
//!
//! Anything else is truncated, including a walk cut by the depth cap.

use btprof_sampler::walker::WalkEnd;
use btprof_symbols::Symbol;

/// The leaf-most frame of a wall-mode sample of a thread that was off CPU
/// (blocked in the kernel, or waiting for a CPU) and was not interrupted:
/// a signal would make its blocking call fail with `EINTR`. Its frames are
/// the stack it is blocked on, read from outside, or else its last known
/// stack (or only the blocked system call's pc). Every other wall-mode
/// sample was taken while its thread ran.
pub const OFF_CPU_FRAME: &str = "[btprof: off-cpu]";

/// Functions where a thread's stack begins (demangled, without hashes).
const ENTRY_FUNCTIONS: &[&str] = &[
    "main",
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "__clone",
    "clone3",
    "__clone3",
    "__clone_internal",
    // macOS: libsystem_pthread's thread and workqueue starts, dyld's start.
    "thread_start",
    "_pthread_start",
    "start_wqthread",
    "_pthread_wqthread",
    "start",
    "_dyld_start",
];

/// The Go runtime's stack beginnings: `runtime.goexit`, the return
/// address Go plants under every goroutine's first function (its frame
/// chain ends there), and the starts of its threads' own stacks
/// (`runtime.mstart`, `runtime.rt0_go` on the first thread). Assembly
/// functions carry an `.abi0` suffix in the symbol table.
const GO_ENTRY_FUNCTIONS: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.mstart0",
    "runtime.rt0_go",
];

/// Whether `name` is a function a thread's stack begins with.
pub(crate) fn is_entry_function(name: &str) -> bool {
    ENTRY_FUNCTIONS.contains(&name)
        || GO_ENTRY_FUNCTIONS.contains(&name.strip_suffix(".abi0").unwrap_or(name))
        // std's thread entry, whatever module path this Rust version uses
        // (`<std::sys::thread::unix::Thread>::new::thread_start`, …).
        || (name.starts_with("<std::") || name.starts_with("std::"))
            && name.ends_with("::thread_start")
}

/// Whether `module` (a file name) is the C library, whose thread start
/// ends the frame chain.
fn is_c_library(module: &str) -> bool {
    module.starts_with("libc.so")
        || module.starts_with("libc-")
        || module.starts_with("ld-musl")
        || module.starts_with("libc.musl")
        || module.starts_with("libsystem_pthread")
        || module.starts_with("libSystem")
        || module.starts_with("libsystem_c")
}

/// Whether a walk that stopped for `end`, with `names` (any order) and the
/// symbol of its outermost frame, stopped short of the thread's entry.
pub(crate) fn is_truncated<S: AsRef<str>>(
    end: WalkEnd,
    names: impl IntoIterator<Item = S>,
    outermost: &Symbol,
) -> bool {
    if end == WalkEnd::DepthCap {
        return true;
    }
    if names.into_iter().any(|n| is_entry_function(n.as_ref())) {
        return false;
    }
    let chain_ended = end == WalkEnd::Complete;
    let in_c_library = outermost.module.as_deref().is_some_and(is_c_library);
    !(chain_ended && in_c_library)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, module: Option<&str>) -> Symbol {
        Symbol {
            name: name.into(),
            function_start: None,
            module: module.map(Into::into),
        }
    }

    #[test]
    fn reaching_main_is_complete_however_the_start_code_ended_the_walk() {
        let names = [
            "libc.so.6+0x27249",
            "main",
            "std::rt::lang_start_internal",
            "work",
        ];
        let outer = sym("libc.so.6+0x27249", Some("libc.so.6"));
        for end in [
            WalkEnd::NotIncreasing,
            WalkEnd::OutOfBounds,
            WalkEnd::Complete,
        ] {
            assert!(!is_truncated(end, names, &outer), "{end:?}");
        }
        assert!(is_truncated(WalkEnd::DepthCap, names, &outer));
    }

    #[test]
    fn std_and_c_thread_starts_are_entries() {
        assert!(is_entry_function(
            "<std::sys::thread::unix::Thread>::new::thread_start"
        ));
        assert!(is_entry_function(
            "std::sys::pal::unix::thread::Thread::new::thread_start"
        ));
        assert!(is_entry_function("start_thread"));
        assert!(!is_entry_function("my_crate::thread_start_helper"));
        assert!(!is_entry_function("mainloop"));
        // A C thread in a stripped libc: the chain ends in libc with rbp 0.
        let names = ["libc.so.6+0x891f4", "worker", "leaf"];
        let outer = sym("libc.so.6+0x891f4", Some("libc.so.6"));
        assert!(!is_truncated(WalkEnd::Complete, names, &outer));
        // The same place reached through a broken link is not the chain's end.
        assert!(is_truncated(WalkEnd::NotIncreasing, names, &outer));
    }

    /// A goroutine's stack ends at `runtime.goexit`, below its first
    /// function, whatever thread runs it: complete, not truncated.
    #[test]
    fn go_goroutine_and_thread_starts_are_entries() {
        let names = ["runtime.goexit.abi0", "main.main.func1", "main.spinA"];
        let outer = sym("runtime.goexit.abi0", Some("gocgo"));
        assert!(!is_truncated(WalkEnd::Complete, names, &outer));
        for name in [
            "runtime.goexit",
            "runtime.mstart.abi0",
            "runtime.rt0_go.abi0",
        ] {
            assert!(is_entry_function(name), "{name}");
        }
        assert!(!is_entry_function("runtime.goexit1"));
        assert!(!is_entry_function("main.abi0"));
    }

    #[test]
    fn a_zero_frame_pointer_in_the_program_is_truncated() {
        // Code without frame pointers left rbp = 0 halfway up the stack.
        let names = ["compute", "leaf"];
        let outer = sym("compute", Some("myprog"));
        assert!(is_truncated(WalkEnd::Complete, names, &outer));
        let unknown = sym("[unknown]+0x1234", None);
        assert!(is_truncated(
            WalkEnd::Complete,
            ["[unknown]+0x1234"],
            &unknown
        ));
    }
}
