//! Running the command: spawned with the library preloaded, SIGINT and
//! SIGTERM sent to `btprof` passed on to it, waited for.
//!
//! A signal some process sent to `btprof` (`kill`, a CI runner's
//! timeout) is forwarded to the command's process. One the terminal sent
//! (Ctrl-C) is not: the terminal sent it to the command too, as to every
//! process of the foreground group, and a second one would, for a Python
//! program, raise `KeyboardInterrupt` twice. `btprof` itself keeps
//! running until the command has ended, then writes the profile.

use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

/// The command's pid once it runs (0 before).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// The last stop signal forwarded or seen (0: none).
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// Installs the forwarding handler for SIGINT and SIGTERM.
pub fn forward_stop_signals() -> Result<(), String> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs a handler whose body is async-signal-safe
        // (atomics and kill).
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(format!(
                "cannot handle signal {signal}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

extern "C" fn on_stop_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // SI_USER, SI_QUEUE, SI_TKILL and the like are <= 0: another process
    // sent it. The terminal's signals come from the kernel (> 0).
    if code <= 0 {
        let child = CHILD.load(Ordering::SeqCst);
        if child > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(child, signal) };
        }
    }
}

/// Spawns `command` and waits for it, forwarding stop signals meanwhile.
pub fn run(mut command: Command) -> std::io::Result<(u32, ExitStatus)> {
    let mut child: Child = command.spawn()?;
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::SeqCst);
    // A signal that came while spawning was not forwarded yet.
    let early = INTERRUPTED.load(Ordering::SeqCst);
    if early != 0 {
        // SAFETY: signals our own child.
        unsafe { libc::kill(pid as i32, early) };
    }
    let status = child.wait()?;
    CHILD.store(0, Ordering::SeqCst);
    Ok((pid, status))
}

/// The stop signal `btprof` received while the command ran, if any.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A signal's name (`SIGSEGV`), or its number.
pub fn signal_name(signal: i32) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
    ];
    known.iter().find(|(n, _)| *n == signal).map_or_else(
        || format!("signal {signal}"),
        |(_, name)| (*name).to_owned(),
    )
}
