//! One-shot captures: the raw stack of every thread, or of one thread, at
//! one moment, with no profiler needed ("what is this thread doing right
//! now?").
//!
//! The platform captures ([`capture_threads`], [`capture_thread`]) hand
//! back addresses only: a thread is held just long enough to copy its
//! registers and the top of its stack, and everything that may allocate or
//! lock (unwinding with call frame information, symbolising) runs after it
//! is going again. On Linux a running thread is walked by the profiling
//! signal's handler and a thread blocked in a system call is read from
//! outside, never signalled, so a capture never makes a blocking call fail
//! with `EINTR`; on macOS each thread is suspended for its register read
//! and stack copy by the shared control loop. See `docs/architecture.md`.

use crate::walker::WalkEnd;

/// What the operating system says a thread was doing when it was captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunState {
    /// On a CPU or waiting for one. Linux does not tell the two apart in
    /// `/proc` (`R` is both); macOS does, see [`RunState::Runnable`].
    Running,
    /// Ready to run but not on a CPU (macOS only).
    Runnable,
    /// Waiting in the kernel: a system call, a page fault, a lock.
    Blocked,
    /// Stopped by a signal or a debugger.
    Stopped,
    /// The thread exited while it was being captured.
    Gone,
}

/// How a thread's stack was read, or why it was not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Taken {
    /// Interrupted (Linux: the profiling signal; macOS: suspended) for its
    /// registers and a copy of its stack.
    Interrupted,
    /// Read from outside while it stayed blocked in a system call, at the
    /// pc and stack pointer the kernel reports; never interrupted.
    FromOutside,
    /// The calling thread, which walked its own stack where it cannot be
    /// stopped (macOS): never interrupted.
    Itself,
    /// Not read: see [`NotTaken`].
    NotTaken(NotTaken),
}

/// Why a thread's stack was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotTaken {
    /// The thread blocks the profiling signal, so no signal is queued to it
    /// (it would stay pending, and reach the thread when it unblocks).
    SignalBlocked,
    /// The thread exited during the capture.
    Gone,
    /// The signal was sent but the handler did not run in time (a thread
    /// starved of CPU); the request was withdrawn.
    NoReply,
    /// Blocked in the kernel but not in a system call (a page fault, say):
    /// the kernel gives no user registers to start from, and interrupting
    /// it is not allowed.
    NoUserRegisters,
    /// It kept moving between the read and the check that it was still
    /// blocked at the same place, on every try.
    Moved,
    /// The thread could not be stopped or its registers read (macOS).
    Unreadable,
}

/// One thread of a capture, in raw addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedThread {
    /// The id samplers report ([`crate::ThreadInfo::tid`]).
    pub tid: u64,
    /// The thread's name as the OS keeps it (cut to 15 bytes on Linux).
    pub name: String,
    /// What it was doing.
    pub state: RunState,
    /// The system call it is blocked in, by number, where the OS says.
    pub syscall: Option<i64>,
    /// `frames[0]` is the pc, the rest return addresses, innermost first.
    /// Empty when the walk was not taken.
    pub frames: Vec<u64>,
    /// The link register on aarch64 (0 elsewhere), for the caller decision
    /// that needs symbols.
    pub lr: u64,
    /// Why the walk stopped; [`WalkEnd::Complete`] only if it reached the
    /// end of the frame chain.
    pub end: WalkEnd,
    /// How the stack was read.
    pub taken: Taken,
    /// How long the thread was kept from running for this capture, in
    /// nanoseconds: from handler entry to exit (Linux), suspend to resume
    /// (macOS), reported ptrace stop to detach (another process). `None`
    /// when it was never interrupted.
    pub held_ns: Option<u64>,
}

impl CapturedThread {
    /// A thread blocked (or stopped) in the kernel, its stack read from
    /// outside without interrupting it.
    pub(crate) fn from_outside(
        tid: u64,
        name: String,
        state: RunState,
        syscall: Option<i64>,
        frames: Vec<u64>,
        end: WalkEnd,
    ) -> Self {
        CapturedThread {
            tid,
            name,
            state,
            syscall,
            frames,
            lr: 0,
            end,
            taken: Taken::FromOutside,
            held_ns: None,
        }
    }

    /// A thread whose stack was not read.
    pub(crate) fn not_taken(
        tid: u64,
        name: String,
        state: RunState,
        syscall: Option<i64>,
        why: NotTaken,
    ) -> Self {
        CapturedThread {
            taken: Taken::NotTaken(why),
            ..Self::from_outside(tid, name, state, syscall, Vec::new(), WalkEnd::Unreadable)
        }
    }
}

#[cfg(target_os = "linux")]
pub use crate::linux::dump::one_shot::{capture_thread, capture_threads};
#[cfg(target_os = "linux")]
pub use crate::linux::dump::remote::capture_process;
pub use crate::linux::signal::dump_slot::capture_signal;

/// Another process's threads: only Linux has a backend (`ptrace`). On
/// macOS it would need `task_for_pid`, which takes root or the debugger
/// entitlement; a program dumps its own threads with [`capture_threads`].
#[cfg(not(target_os = "linux"))]
pub fn capture_process(_pid: u32) -> Result<Vec<CapturedThread>, crate::Error> {
    Err(crate::Error::Unsupported)
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

#[cfg(target_os = "macos")]
pub use crate::macos::one_shot::{capture_thread, capture_threads, captures_allowed};

/// Whether one-shot captures may run in this process. Only macOS refuses:
/// under Rosetta 2 without `BTPROF_ALLOW_ROSETTA=1` it is
/// [`Error::Rosetta`](crate::Error::Rosetta), as every capture there
/// would be. For callers that take captures later (the stall watchdog) and
/// should refuse when they start, not fail each capture in silence.
#[cfg(not(target_os = "macos"))]
pub fn captures_allowed() -> Result<(), crate::Error> {
    Ok(())
}

/// No capture backend on this platform.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn capture_threads() -> Result<Vec<CapturedThread>, crate::Error> {
    Err(crate::Error::Unsupported)
}

/// No capture backend on this platform.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub fn capture_thread(_tid: u64) -> Result<CapturedThread, crate::Error> {
    Err(crate::Error::Unsupported)
}
