//! Running the command: spawned with the library preloaded, SIGINT and
//! SIGTERM sent to `btprof` passed on to it, waited for.
//!
//! A signal some process sent to `btprof` (`kill`, a CI runner's
//! timeout) is forwarded to the command's process. One the terminal sent
//! (Ctrl-C) is not: the terminal sent it to the command too, as to every
//! process of the foreground group, and a second one would, for a Python
//! program, raise `KeyboardInterrupt` twice. `btprof` itself keeps
//! running until the command has ended, then writes the profile.
//!
//! Linux says who sent a signal in `si_code` (at most 0 from a process,
//! `SI_KERNEL` from the terminal). macOS does not: its kernel hands a
//! caught SIGINT `si_code` 0 whoever sent it (`SI_USER` there is
//! 0x10001). So on macOS a SIGINT is taken to be the terminal's while
//! `btprof` is in the terminal's foreground process group, where Ctrl-C
//! reaches the command directly, and forwarded otherwise (a CI runner, a
//! background job). SIGTERM never comes from a terminal: always forwarded.

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

/// The kernels whose ways of saying who sent a signal differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    Linux,
    Darwin,
}

impl Kernel {
    /// The kernel this is built for.
    const fn host() -> Kernel {
        if cfg!(target_vendor = "apple") {
            Kernel::Darwin
        } else {
            Kernel::Linux
        }
    }
}

const KERNEL: Kernel = Kernel::host();

/// Whether a stop signal `btprof` caught goes on to the command: not when
/// the terminal sent it, since the command got it too. `code` is the
/// signal's `si_code`; `foreground`, whether `btprof` is in its
/// terminal's foreground process group (see the module documentation).
fn forwards(kernel: Kernel, signal: libc::c_int, code: libc::c_int, foreground: bool) -> bool {
    match kernel {
        // SI_USER, SI_QUEUE, SI_TKILL and the like are <= 0: another
        // process sent it. The terminal's signals come from the kernel
        // (SI_KERNEL, > 0).
        Kernel::Linux => code <= 0,
        Kernel::Darwin => signal != libc::SIGINT || !foreground,
    }
}

/// Whether this process is in the foreground process group of the
/// terminal on its standard input, output or error. Async-signal-safe:
/// `tcgetpgrp` and `getpgrp` only.
fn in_terminal_foreground() -> bool {
    // SAFETY: getpgrp has no preconditions.
    let own = unsafe { libc::getpgrp() };
    (0..3).any(|fd| {
        // SAFETY: tcgetpgrp only reads the terminal of descriptor `fd`,
        // and fails on one that is not open or not a terminal.
        unsafe { libc::tcgetpgrp(fd) == own }
    })
}

extern "C" fn on_stop_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // Asked only where the answer counts: Linux knows from the code.
    let foreground = KERNEL == Kernel::Darwin && in_terminal_foreground();
    if forwards(KERNEL, signal, code, foreground) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_from_a_process_is_forwarded_and_the_terminals_is_not() {
        // Linux: si_code says who sent it, in the foreground or not.
        const SI_USER: i32 = 0;
        const SI_QUEUE: i32 = -1;
        const SI_TKILL: i32 = -6;
        const SI_KERNEL: i32 = 0x80;
        for foreground in [false, true] {
            for code in [SI_USER, SI_QUEUE, SI_TKILL] {
                assert!(forwards(Kernel::Linux, libc::SIGINT, code, foreground));
            }
            assert!(!forwards(
                Kernel::Linux,
                libc::SIGINT,
                SI_KERNEL,
                foreground
            ));
        }
        // macOS: every caught SIGINT has si_code 0, Ctrl-C's and kill's
        // alike, so the terminal's foreground group decides.
        assert!(!forwards(Kernel::Darwin, libc::SIGINT, 0, true));
        assert!(forwards(Kernel::Darwin, libc::SIGINT, 0, false));
        assert!(forwards(Kernel::Darwin, libc::SIGTERM, 0, true));
        assert!(forwards(Kernel::Darwin, libc::SIGTERM, 0, false));
    }

    #[test]
    fn without_a_terminal_nothing_is_in_its_foreground() {
        // Under `cargo test` standard input may be a terminal; a child
        // with none of the three on one is in no foreground.
        if std::env::var_os("BTPROF_LAUNCH_NO_TTY_CHILD").is_some() {
            assert!(!in_terminal_foreground());
            return;
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "commands::record::launch::tests::without_a_terminal_nothing_is_in_its_foreground",
            ])
            .env("BTPROF_LAUNCH_NO_TTY_CHILD", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }
}
