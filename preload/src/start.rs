//! When profiling starts: after the dynamic loader has finished, never
//! from inside it.
//!
//! A library constructor runs under the loader's lock, possibly before
//! the allocator or the C library is initialised; a thread started there
//! that needs the lock (to resolve a symbol, load a library or set up
//! thread-local storage) deadlocks against a constructor that waits for
//! it. So on Linux this library has no constructor: it interposes
//! `__libc_start_main`, which the program's C start code calls once every
//! library is loaded and initialised, and starts the profiler from a
//! wrapper around `main`, on the main thread, before the program's own
//! code runs. Threads the program's constructors started are sampled from
//! then on too.
//!
//! macOS has no such entry point to interpose through
//! `DYLD_INSERT_LIBRARIES` without an interpose section; there a
//! constructor reads the settings and registers the `atexit` handler
//! (nothing that waits for anyone), starts one thread and returns at
//! once, and that thread writes the start marker and starts the profiler
//! (waiting for dyld's lock, if it must, until the initialisers are done,
//! but never holding anyone up). The handler is registered before the
//! marker is written on both systems, so a process that exits while the
//! thread is still starting the profiler is caught by it
//! (`session::finish_at_exit`).

use crate::{session, signals};

/// The synchronous half of starting, run before the program's code can
/// exit: reads the settings and registers the exit hook, so that a
/// process that exits at once still writes its profile (or says it
/// exited during start-up). `true` when [`begin`] is to follow.
fn prepare() -> bool {
    if !std::panic::catch_unwind(session::prepare).unwrap_or(false) {
        return false;
    }
    // Before the start marker exists: a process with a marker always has
    // its exit hook.
    // SAFETY: registers a plain `extern "C" fn()`; atexit has no other
    // preconditions.
    if unsafe { libc::atexit(at_exit) } != 0 {
        session::say_once(
            "atexit",
            "cannot register an atexit handler, so the profile is written only on exec, \
             SIGINT and SIGTERM",
        );
    }
    true
}

/// The rest: writes the start marker, starts the profiler and the helper
/// thread that takes SIGINT/SIGTERM and the deadline.
fn begin() {
    if !std::panic::catch_unwind(session::begin).unwrap_or(false) {
        return;
    }
    let deadline = session::config().and_then(|c| c.deadline);
    signals::start(deadline);
}

/// Writes the profile when the process exits (`exit`, return from
/// `main`). Never unwinds into the C library.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(session::finish_at_exit);
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::{c_char, c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The C start code's entry into the C library.
    type StartMain = unsafe extern "C" fn(
        main: MainFn,
        argc: c_int,
        argv: *mut *mut c_char,
        init: *mut c_void,
        fini: *mut c_void,
        rtld_fini: *mut c_void,
        stack_end: *mut c_void,
    ) -> c_int;

    type MainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

    /// The program's `main`, for the wrapper.
    static REAL_MAIN: AtomicUsize = AtomicUsize::new(0);

    /// Interposes the C library's `__libc_start_main` (glibc, and musl,
    /// whose first three arguments are the same): remembers the program's
    /// `main` and passes the rest through unchanged, with the wrapper as
    /// `main`.
    ///
    /// # Safety
    ///
    /// Called by the C start code only, with its arguments.
    #[no_mangle]
    pub unsafe extern "C" fn __libc_start_main(
        main: MainFn,
        argc: c_int,
        argv: *mut *mut c_char,
        init: *mut c_void,
        fini: *mut c_void,
        rtld_fini: *mut c_void,
        stack_end: *mut c_void,
    ) -> c_int {
        // SAFETY: the name is NUL-terminated; RTLD_NEXT finds the C
        // library's definition, the one this call was meant for.
        let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__libc_start_main".as_ptr()) };
        if next.is_null() {
            // Cannot happen in a program that called us through its
            // C library; there is nothing to continue with.
            // SAFETY: abort has no preconditions.
            unsafe { libc::abort() };
        }
        // SAFETY: the C library's symbol of that name has this type.
        let next: StartMain = unsafe { std::mem::transmute::<*mut c_void, StartMain>(next) };
        REAL_MAIN.store(main as usize, Ordering::Relaxed);
        // SAFETY: the caller's arguments, passed through.
        unsafe { next(wrapped_main, argc, argv, init, fini, rtld_fini, stack_end) }
    }

    /// The program's `main`, after starting the profiler.
    unsafe extern "C" fn wrapped_main(
        argc: c_int,
        argv: *mut *mut c_char,
        envp: *mut *mut c_char,
    ) -> c_int {
        if super::prepare() {
            super::begin();
        }
        let main = REAL_MAIN.load(Ordering::Relaxed);
        // SAFETY: stored from the `main` the C start code passed, which
        // has this type.
        let main = unsafe { std::mem::transmute::<usize, MainFn>(main) };
        // SAFETY: the arguments the C library gives `main`.
        unsafe { main(argc, argv, envp) }
    }
}

#[cfg(target_os = "macos")]
mod macos {
    /// Runs as the image's initialiser: reads the settings and registers
    /// the exit hook here, before `main` can run (let alone exit), then
    /// starts the thread that starts the profiler, and returns.
    extern "C" fn on_load() {
        let _ = std::panic::catch_unwind(|| {
            if !super::prepare() {
                return;
            }
            let spawned = std::thread::Builder::new()
                .name("btprof-record-start".into())
                .spawn(super::begin);
            if let Err(e) = spawned {
                crate::session::abandon_start(format_args!("cannot start a thread: {e}"));
            }
        });
    }

    #[used]
    #[link_section = "__DATA,__mod_init_func"]
    static ON_LOAD: extern "C" fn() = on_load;
}
