//! What a one-shot capture hands back about each thread: its state, its
//! raw walk or why none was taken. Shared by the platforms' captures and
//! re-exported by [`crate::one_shot`].

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
