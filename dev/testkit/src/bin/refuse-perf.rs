//! Runs a command with `perf_event_open` refused by a real seccomp filter,
//! as a container under the default profile or a Debian or Ubuntu user
//! meets it, so that measurements of the clocks btprof falls back to run
//! its detection for real:
//!
//! ```sh
//! cargo run -p btprof-testkit --bin refuse-perf -- \
//!     target/release/btprof --pid-self --hz 1000 --duration 3s
//! ```
//!
//! `--errno EPERM` refuses as Docker's profile does (`EACCES`, a paranoid
//! kernel's answer, is the default). Exits with the command's status.
//! Linux only: elsewhere there is no `perf_event_open` to refuse.

use std::process::ExitCode;

#[cfg(not(target_os = "linux"))]
fn main() -> ExitCode {
    eprintln!("refuse-perf: Linux only (perf_event_open and seccomp are Linux's)");
    ExitCode::from(2)
}

#[cfg(target_os = "linux")]
const USAGE: &str = "usage: refuse-perf [--errno EACCES|EPERM] [--] COMMAND [ARG...]";

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    use btprof_testkit::seccomp::refuse_perf_event_open;

    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut errno = libc::EACCES;
    if args.first().map(String::as_str) == Some("--errno") {
        errno = match args.get(1).map(String::as_str) {
            Some("EACCES") => libc::EACCES,
            Some("EPERM") => libc::EPERM,
            other => {
                eprintln!("refuse-perf: --errno takes EACCES or EPERM, not {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        args.drain(..2);
    }
    if args.first().map(String::as_str) == Some("--") {
        args.remove(0);
    }
    let Some((program, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    refuse_perf_event_open(&mut cmd, errno);
    // Replaces this process, so signals and the exit status are the
    // command's own; `exec` returns only on failure.
    let e = cmd.exec();
    eprintln!("refuse-perf: cannot run {program}: {e}");
    ExitCode::from(127)
}
