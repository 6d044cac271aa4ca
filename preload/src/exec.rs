//! `exec` replaces the program: this process's profile is written first,
//! or it would be lost with the old image. The new program, which
//! inherits the environment (and with it `LD_PRELOAD`), starts a profile
//! of its own.
//!
//! The C library's `exec*` functions call each other (and the system
//! call) internally, not through symbols this library can take over, so
//! each one programs call is interposed here: `execve`, `execv`,
//! `execvp`, `execvpe`, `execveat`, `fexecve`; the variadic `execl`,
//! `execlp` and `execle` in `exec_list.rs` (x86_64, Rust 1.88 or later),
//! which call these. `posix_spawn` and `posix_spawnp` need nothing: they
//! run the new program in a new process, and the calling one goes on
//! recording (glibc's child never runs this library's code before its
//! `exec`, and starts a profile of its own after it).
//!
//! A call that fails returns to the old program, which is then profiled
//! again from there (a second profile of the same process).
//!
//! In a child of `fork` or `vfork` (another pid) nothing is touched: the
//! profiler belongs to the parent, and a `vfork` child shares its memory.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::session;

type Argv = *const *const c_char;

/// The next definition of `name` (the C library's).
fn next(name: &CStr) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT looks past this library.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// Writes the profile, runs `call` (the real `exec`), and when it returns
/// (it failed) profiles the old program again, keeping `call`'s errno.
fn around_exec(call: impl FnOnce() -> c_int) -> c_int {
    let stopped = session::is_owner()
        && std::panic::catch_unwind(|| session::finish("exec")).unwrap_or(false);
    let result = call();
    if stopped {
        // SAFETY: errno is the calling thread's.
        let errno = unsafe { *libc::__errno_location() };
        let _ = std::panic::catch_unwind(session::begin);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
    result
}

/// ENOSYS when the real function cannot be found (cannot happen with a C
/// library that has it).
fn missing() -> c_int {
    // SAFETY: errno is the calling thread's.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Interposed `execve`: see the module documentation.
///
/// # Safety
///
/// As `execve(2)`.
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    let real = next(c"execve");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `execve` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(path, argv, envp) })
}

/// Interposed `execv`: see the module documentation.
///
/// # Safety
///
/// As `execv(3)`.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    let real = next(c"execv");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `execv` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(path, argv) })
}

/// Interposed `execvp`: see the module documentation.
///
/// # Safety
///
/// As `execvp(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    let real = next(c"execvp");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `execvp` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(file, argv) })
}

/// Interposed `execvpe`: see the module documentation.
///
/// # Safety
///
/// As `execvpe(3)`.
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    let real = next(c"execvpe");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `execvpe` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(file, argv, envp) })
}

/// Interposed `execveat`: see the module documentation.
///
/// # Safety
///
/// As `execveat(2)`.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const c_char, Argv, Argv, c_int) -> c_int;
    let real = next(c"execveat");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `execveat` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(dirfd, path, argv, envp, flags) })
}

/// Interposed `fexecve`: see the module documentation.
///
/// # Safety
///
/// As `fexecve(3)`.
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
    let real = next(c"fexecve");
    if real.is_null() {
        return missing();
    }
    // SAFETY: the C library's `fexecve` has this type.
    let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
    // SAFETY: the caller's arguments, passed through.
    around_exec(|| unsafe { real(fd, argv, envp) })
}
