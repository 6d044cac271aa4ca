//! `execl`, `execlp` and `execle`: the `exec` functions that take their
//! arguments as a list. The C library's own build their vector and call
//! its internal `execve` directly, past the one interposed in `exec.rs`,
//! so a program calling them would lose its old image's samples.
//!
//! They are variadic, and stable Rust cannot define a variadic function.
//! Each is a naked function of a few instructions instead (x86_64 only):
//! on x86_64 a variadic call passes its first six arguments in registers
//! and the rest on the stack, each pointer in one 8-byte slot, exactly
//! as a call with those arguments would. Pushing the six registers just
//! below the first stack argument, where the return address was, lays
//! every argument out in memory in order: `path, arg0, arg1, ..., NULL`
//! (and `envp` after the NULL for `execle`). That list from `arg0` on is
//! already the `argv` vector the `execv*` functions take, so nothing is
//! copied and nothing allocated: the list functions stay as
//! async-signal-safe as POSIX makes them, and work in a `vfork` child.
//! The calls then go to this library's `execv`, `execvp` and `execve`,
//! which write the profile first.

use std::ffi::{c_char, c_int};

use crate::exec;

/// Which list function the trampoline was entered through.
const EXECL: c_int = 0;
const EXECLP: c_int = 1;
const EXECLE: c_int = 2;

/// Called by the trampolines with the caller's arguments in order:
/// `args[0]` the path (or file), `args[1]` `arg0`, ... up to a null
/// pointer, then for `execle` the environment.
///
/// # Safety
///
/// `args` is the argument list of a call to `execl`, `execlp` or
/// `execle`, laid out by its trampoline.
unsafe extern "C" fn list_exec(args: *const *const c_char, which: c_int) -> c_int {
    // SAFETY: the list holds at least the path and arg0 (both named
    // parameters); argv runs from arg0 to the null pointer the caller
    // must pass, as `execv` requires.
    unsafe {
        let path = *args;
        let argv = args.add(1);
        match which {
            EXECL => exec::execv(path, argv),
            EXECLP => exec::execvp(path, argv),
            _ => {
                // The environment follows the null pointer that ends the
                // arguments (POSIX: `arg0` itself may be that pointer).
                let mut end = argv;
                while !(*end).is_null() {
                    end = end.add(1);
                }
                let envp = *end.add(1) as *const *const c_char;
                exec::execve(path, argv, envp)
            }
        }
    }
}

/// Lays out the arguments of a variadic call (see the module
/// documentation) and calls [`list_exec`] with them and `$which`,
/// returning what it returns with the stack as the caller left it.
macro_rules! trampoline {
    ($which:expr) => {
        core::arch::naked_asm!(
            // Entry: rsp -> return address, rsp+8 -> the 7th argument.
            "pop rax",
            "push r9",
            "push r8",
            "push rcx",
            "push rdx",
            "push rsi",
            "push rdi",
            // rsp -> path, arg0, ..., the 6th argument, then the stack
            // arguments: the whole list in order.
            "push rax",
            "lea rdi, [rsp + 8]",
            "mov esi, {which}",
            // Entry rsp was 8 modulo 16; 16 less 8 bytes since: align.
            "sub rsp, 8",
            "call {list_exec}",
            "add rsp, 8",
            "pop rcx",
            "add rsp, 48",
            // The return address back where the caller's call put it.
            "push rcx",
            "ret",
            which = const $which,
            list_exec = sym list_exec,
        )
    };
}

/// Interposed `execl`: see the module documentation.
///
/// # Safety
///
/// As `execl(3)`; called from C with its variadic arguments.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execl() -> c_int {
    trampoline!(EXECL)
}

/// Interposed `execlp`: see the module documentation.
///
/// # Safety
///
/// As `execlp(3)`; called from C with its variadic arguments.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execlp() -> c_int {
    trampoline!(EXECLP)
}

/// Interposed `execle`: see the module documentation.
///
/// # Safety
///
/// As `execle(3)`; called from C with its variadic arguments.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn execle() -> c_int {
    trampoline!(EXECLE)
}
