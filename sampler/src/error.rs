//! Why sampling, or a capture, could not start or finish.

use std::fmt;

/// Set to `1`, lets btprof sample a process translated by Rosetta 2 (see
/// [`SamplerConfig::allow_rosetta`](crate::SamplerConfig::allow_rosetta)).
/// Here because [`Error::Rosetta`] names it.
pub const ALLOW_ROSETTA_ENV: &str = "BTPROF_ALLOW_ROSETTA";

/// Why sampling could not start or finish.
#[derive(Debug)]
pub enum Error {
    /// A configuration value is out of range.
    InvalidConfig(String),
    /// Another sampler is running in this process.
    AlreadyRunning,
    /// `stop` was called twice.
    AlreadyStopped,
    /// `stop` was called in a process forked from the one that started
    /// the sampler: the sampler thread runs in the parent only. The child
    /// can start a sampler of its own.
    ForkedChild,
    /// The profiling signal already has a handler that is not ours.
    SignalInUse(i32),
    /// The sampler thread panicked (a bug; its samples are lost).
    SamplerPanicked,
    /// The sampler thread did not answer a request for the stacks so far
    /// in time.
    Timeout,
    /// This platform has no sampler backend.
    Unsupported,
    /// macOS: the process is an x86_64 build translated by Rosetta 2,
    /// where suspending threads can hang the process, and the user did not
    /// opt in ([`SamplerConfig::allow_rosetta`](crate::SamplerConfig::allow_rosetta), [`ALLOW_ROSETTA_ENV`]).
    Rosetta,
    /// A dump of another process: no process has this pid.
    NoSuchProcess(u32),
    /// A dump of another process: the kernel refused to let this process
    /// trace `pid`; `ptrace_scope` is `kernel.yama.ptrace_scope`, where
    /// Yama is on ([`trace_refused_message`]).
    TraceRefused {
        /// The process asked for.
        pid: u32,
        /// `/proc/sys/kernel/yama/ptrace_scope`, where it exists.
        ptrace_scope: Option<u32>,
    },
    /// A dump of another process asked for this one, which cannot trace
    /// itself.
    OwnProcess(u32),
    /// An operating-system call failed.
    Io(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidConfig(msg) => write!(f, "invalid profiler configuration: {msg}"),
            Error::AlreadyRunning => f.write_str(
                "a btprof profiler is already running in this process; stop it before starting another",
            ),
            Error::AlreadyStopped => f.write_str("the profiler was already stopped"),
            Error::ForkedChild => f.write_str(
                "this profiler was started before fork() by the parent process, where it still runs; \
                 a forked child cannot stop it (start a new profiler in the child instead)",
            ),
            Error::SignalInUse(sig) => write!(
                f,
                "signal {sig} already has a handler installed by someone else; choose another profiling signal"
            ),
            Error::SamplerPanicked => f.write_str("the sampler thread panicked"),
            Error::Timeout => f.write_str("the sampler thread did not hand over its stacks in time"),
            Error::Unsupported => f.write_str("sampling is not supported on this platform"),
            Error::Rosetta => write!(
                f,
                "this x86_64 build runs under Rosetta 2, where suspending threads to sample them \
                 can hang the process (reading a translated thread's registers may wait for a \
                 thread stopped inside the translator); run the native arm64 build instead \
                 (cargo build --target aarch64-apple-darwin), or set {ALLOW_ROSETTA_ENV}=1 to \
                 sample anyway at that risk"
            ),
            Error::NoSuchProcess(pid) => write!(f, "no process with pid {pid}"),
            Error::TraceRefused { pid, ptrace_scope } => f.write_str(
                &trace_refused_message(*pid, *ptrace_scope),
            ),
            Error::OwnProcess(pid) => write!(
                f,
                "pid {pid} is this process, which cannot trace itself; take an in-process dump instead"
            ),
            Error::Io(e) => write!(f, "system call failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Why tracing process `pid` was refused, in words a user can act on:
/// the same-user rule, what `kernel.yama.ptrace_scope` (`ptrace_scope`,
/// where Yama is present) allows, and `CAP_SYS_PTRACE`.
pub fn trace_refused_message(pid: u32, ptrace_scope: Option<u32>) -> String {
    let mut text = format!(
        "not permitted to trace pid {pid}: a process may be traced only by the same user \
         (and not if it is setuid or otherwise undumpable), or by one with CAP_SYS_PTRACE \
         (root, or `sudo setcap cap_sys_ptrace+ep` on the btprof binary)"
    );
    let scope = match ptrace_scope {
        None => {
            text.push_str("; Yama is not enabled here (no /proc/sys/kernel/yama/ptrace_scope)");
            return text;
        }
        Some(0) => "0: classic, any process of the same user may be traced",
        Some(1) => {
            "1: restricted, only a descendant (or a process that allowed it with \
             prctl(PR_SET_PTRACER)) may be traced without CAP_SYS_PTRACE; run btprof as root, \
             or `sudo sysctl kernel.yama.ptrace_scope=0`"
        }
        Some(2) => "2: admin-only, tracing needs CAP_SYS_PTRACE; run btprof as root",
        Some(3) => "3: no tracing at all, not even by root, until the next reboot",
        Some(_) => "an unknown value",
    };
    text.push_str(&format!("; kernel.yama.ptrace_scope is {scope}"));
    text
}
