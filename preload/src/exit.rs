//! `_exit` and `_Exit`: the process ends without `atexit` handlers, so
//! the profile is written here (shells such as dash end this way, even
//! for `exit 7`). The work is done by the helper thread, bounded in time
//! (`signals::finish_on_helper`), because `_exit` is async-signal-safe
//! and may be called from a signal handler. A forked child's `_exit`
//! (the usual end of a child whose `exec` failed) touches nothing.

use std::ffi::{c_int, c_void, CStr};
use std::time::Duration;

use crate::{session, signals};

/// How long `_exit` waits for the profile to be written.
const PATIENCE: Duration = Duration::from_secs(10);

/// Writes the profile if this process owns one, then ends the process
/// through the C library's function `name`.
fn end(name: &CStr, status: c_int) -> ! {
    if session::is_owner() {
        signals::finish_on_helper(PATIENCE);
    }
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT looks past this library.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !real.is_null() {
        type F = unsafe extern "C" fn(c_int) -> !;
        // SAFETY: the C library's `_exit` and `_Exit` have this type.
        let real = unsafe { std::mem::transmute::<*mut c_void, F>(real) };
        // SAFETY: ends the process with the caller's status.
        unsafe { real(status) }
    }
    // SAFETY: the exit_group system call ends the process; it does not
    // return.
    unsafe {
        libc::syscall(libc::SYS_exit_group, status);
        libc::abort()
    }
}

/// Interposed `_exit`: see the module documentation.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    end(c"_exit", status)
}

/// Interposed `_Exit`: see the module documentation.
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    end(c"_Exit", status)
}
