//! SIGINT and SIGTERM: what `btprof record` forwards to stop a program.
//!
//! A program that leaves them at their default action would die without
//! running `atexit` handlers, and its profile would be lost. So where the
//! action is the default when profiling starts, a handler takes them; it
//! only writes the signal number to a pipe (async-signal-safe). The
//! helper thread `btprof-record` reads it, writes the profile, restores
//! the default action and sends the signal again: the process then dies
//! of it, with the exit status it would have had. A program that handles
//! the signals itself (and one that installs its handler after `main`
//! started, as Python does for SIGINT) keeps its own behaviour: it ends
//! through `exit`, where the `atexit` handler writes the profile.
//!
//! The same thread stops sampling at `--duration`'s deadline.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::SystemTime;

use crate::session;

/// The pipe's write end for the handler (-1: none).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// The read end of the pipe on which the helper says it wrote the
/// profile asked for by [`finish_on_helper`] (-1: none).
static DONE_READ: AtomicI32 = AtomicI32::new(-1);

/// What the pipe carries besides signal numbers: write the profile, the
/// process is about to `_exit`.
const FINISH_FOR_EXIT: u8 = 0;

/// The signals taken when left at their default action.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Starts the helper thread and takes SIGINT/SIGTERM where they are at
/// their default action. Without the thread (it could not be started),
/// the signals are left alone.
pub fn start(deadline: Option<SystemTime>) {
    let (mut fds, mut done) = ([-1; 2], [-1; 2]);
    // SAFETY: each array has room for the two descriptors pipe writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) != 0 || libc::pipe(done.as_mut_ptr()) != 0 } {
        session::say_once(
            "signals",
            "cannot create a pipe, so SIGINT/SIGTERM will not write the profile",
        );
        return;
    }
    for fd in fds.into_iter().chain(done) {
        // SAFETY: `fd` is a descriptor pipe just returned.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let [read_end, write_end] = fds;
    let [done_read, done_write] = done;
    // Every signal blocked, so the program's handlers never run on it;
    // and never sampled: it is btprof's, not the program's.
    let spawned = btprof_sampler::spawn_with_signals_blocked("btprof-record", move || {
        let _unsampled = btprof_sampler::exclude_current_thread();
        helper(read_end, done_write, deadline)
    });
    if let Err(e) = spawned {
        session::say_once(
            "signals",
            format_args!("cannot start its helper thread ({e}), so SIGINT/SIGTERM and --duration will not write the profile"),
        );
        // SAFETY: both descriptors are ours and used by nobody else.
        unsafe {
            for fd in fds.into_iter().chain(done) {
                libc::close(fd);
            }
        }
        return;
    }
    DONE_READ.store(done_read, Ordering::Release);
    PIPE_WRITE.store(write_end, Ordering::Release);
    for signal in STOP_SIGNALS {
        take_if_default(signal);
    }
}

/// Installs the handler for `signal` if its action is the default.
fn take_if_default(signal: libc::c_int) {
    // SAFETY: sigaction with a null new action only reads the current
    // one into `old`; then installs a handler whose code is
    // async-signal-safe (see `on_signal`).
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigfillset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut());
    }
}

/// The handler: hands the signal to the helper thread. In a forked child
/// (where that thread does not exist) it restores the default action and
/// raises the signal again, as if it had never been taken.
extern "C" fn on_signal(signal: libc::c_int) {
    // SAFETY: errno is saved and restored around the calls; getpid,
    // write, signal and raise are async-signal-safe.
    unsafe {
        let errno = *errno_location();
        let fd = PIPE_WRITE.load(Ordering::Acquire);
        if session::is_owner() && fd >= 0 {
            let byte = signal as u8;
            libc::write(fd, (&raw const byte).cast(), 1);
        } else {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        *errno_location() = errno;
    }
}

#[cfg(target_os = "linux")]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__errno_location() }
}

#[cfg(target_os = "macos")]
unsafe fn errno_location() -> *mut libc::c_int {
    // SAFETY: always valid for the calling thread.
    unsafe { libc::__error() }
}

/// Has the helper thread write the profile, and waits for it at most
/// `patience`: for `_exit`, which may be called where the calling thread
/// must not allocate (a signal handler that interrupted `malloc`), so
/// the work is done on another thread and a helper stuck behind such a
/// lock costs at most that long, never a hang. (Linux only: macOS has no
/// interposed `_exit`.)
///
/// The wait goes on through signals: the calling thread's own (a
/// shell's SIGCHLD, any handler installed without `SA_RESTART`) and the
/// sampler's can interrupt it, and a wait that ended there would let the
/// process end while the profile is half written.
#[cfg(target_os = "linux")]
pub fn finish_on_helper(patience: std::time::Duration) {
    let (fd, done) = (
        PIPE_WRITE.load(Ordering::Acquire),
        DONE_READ.load(Ordering::Acquire),
    );
    if fd < 0 || done < 0 || !session::is_owner() {
        return;
    }
    let byte = FINISH_FOR_EXIT;
    let give_up = monotonic_ms().saturating_add(patience.as_millis().min(i64::MAX as u128) as i64);
    // SAFETY: writes one byte from `byte`; polls one valid pollfd and
    // reads one byte into `reply`; reads errno. All async-signal-safe.
    unsafe {
        while libc::write(fd, (&raw const byte).cast(), 1) != 1 {
            if *errno_location() != libc::EINTR {
                return;
            }
        }
        loop {
            let mut poll = libc::pollfd {
                fd: done,
                events: libc::POLLIN,
                revents: 0,
            };
            let left = give_up
                .saturating_sub(monotonic_ms())
                .clamp(0, i32::MAX as i64);
            match libc::poll(&mut poll, 1, left as i32) {
                1 => {
                    let mut reply = 0u8;
                    if libc::read(done, (&raw mut reply).cast(), 1) == 1
                        || *errno_location() != libc::EINTR
                    {
                        return;
                    }
                }
                -1 if *errno_location() == libc::EINTR && left > 0 => {}
                _ => return,
            }
        }
    }
}

/// Milliseconds on the monotonic clock, by a call that is
/// async-signal-safe (`_exit` may run in a signal handler).
#[cfg(target_os = "linux")]
fn monotonic_ms() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the time into `now`; clock_gettime is
    // async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec.saturating_mul(1000) + now.tv_nsec / 1_000_000
}

/// The helper thread: waits for a forwarded signal, a request from
/// `_exit`, and the deadline.
fn helper(read_end: libc::c_int, done_write: libc::c_int, mut deadline: Option<SystemTime>) {
    loop {
        let timeout = match deadline {
            Some(d) => d
                .duration_since(SystemTime::now())
                .map_or(0, |left| left.as_millis().min(i32::MAX as u128) as i32),
            None => -1,
        };
        let mut poll = libc::pollfd {
            fd: read_end,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout) };
        if ready == 0 {
            // The deadline: stop sampling, let the program go on.
            deadline = None;
            session::finish("duration");
            continue;
        }
        if ready < 0 {
            continue;
        }
        let mut byte = 0u8;
        // SAFETY: reads one byte into `byte`.
        if unsafe { libc::read(read_end, (&raw mut byte).cast(), 1) } != 1 {
            continue;
        }
        if byte == FINISH_FOR_EXIT {
            session::finish("_exit");
            let reply = 1u8;
            // SAFETY: writes one byte from `reply`.
            unsafe { libc::write(done_write, (&raw const reply).cast(), 1) };
            continue;
        }
        let signal = libc::c_int::from(byte);
        session::finish(&format!("signal {}", signal_name(signal)));
        // SAFETY: restores the default action and sends the signal to the
        // process, which dies of it (this thread blocks it; another takes it).
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
        }
        return;
    }
}

fn signal_name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "?",
    }
}
