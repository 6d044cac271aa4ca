//! How a thread dump reads: text in the style of `jstack` and `py-spy
//! dump`, JSON for tools, and folded stacks for flamegraph tooling.

use std::fmt;
use std::io::Write;

use btprof_sampler::one_shot::NotTaken;
use btprof_sampler::walker::WalkEnd;
use serde::Serialize;

use super::{Frame, ThreadBacktrace, ThreadDump, ThreadState};
use crate::profile::{Builder, FrameInfo};
use crate::Error;

impl fmt::Display for ThreadState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThreadState::Running => "running",
            ThreadState::Runnable => "runnable",
            ThreadState::Blocked => "blocked",
            ThreadState::Stopped => "stopped",
            ThreadState::Gone => "gone",
        })
    }
}

impl fmt::Display for Frame {
    /// `function (file:line)`, `function (module)`, or the resolver's
    /// `module+0xoffset` where no symbol covers the address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.inlined {
            f.write_str("[inlined] ")?;
        }
        f.write_str(&self.label)?;
        match (&self.file, self.line, &self.module) {
            (Some(file), Some(line), _) => write!(f, " ({file}:{line})"),
            (Some(file), None, _) => write!(f, " ({file})"),
            (None, _, Some(module)) if self.function.is_some() => write!(f, " ({module})"),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for ThreadBacktrace {
    /// A header line (`Thread TID "name" (state)`), then one indented line
    /// per frame, innermost first, and a last line saying why the walk
    /// stopped where it did not reach the thread's entry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Thread {} \"{}\" ({}", self.tid, self.name, self.state)?;
        if let Some(call) = self.syscall() {
            write!(f, " in {call}")?;
        }
        writeln!(f, ")")?;
        for frame in &self.frames {
            writeln!(f, "    {frame}")?;
        }
        if let Some(reason) = self.not_read() {
            writeln!(f, "    (stack not read: {reason})")?;
        } else if let Some(reason) = self.stop_reason() {
            writeln!(f, "    ... (walk stopped: {reason})")?;
        }
        Ok(())
    }
}

impl fmt::Display for ThreadDump {
    /// Every thread as [`ThreadBacktrace`] shows it, a blank line apart.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, thread) in self.threads.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{thread}")?;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct JsonDump<'a> {
    threads: Vec<JsonThread<'a>>,
}

#[derive(Serialize)]
struct JsonThread<'a> {
    name: &'a str,
    tid: u64,
    state: String,
    syscall: Option<String>,
    complete: bool,
    stop_reason: Option<&'static str>,
    interrupted: bool,
    held_ns: Option<u64>,
    frames: Vec<JsonFrame<'a>>,
}

#[derive(Serialize)]
struct JsonFrame<'a> {
    address: String,
    function: Option<&'a str>,
    name: &'a str,
    module: Option<&'a str>,
    file: Option<&'a str>,
    line: Option<u32>,
    inlined: bool,
}

impl ThreadDump {
    /// Writes the dump as one JSON object: `{"threads": [...]}`, each
    /// thread with `name`, `tid`, `state`, `syscall`, `complete`,
    /// `stop_reason`, `interrupted`, `held_ns` and `frames` (innermost
    /// first: `address` in hex, `function` (null where unnamed), `name`
    /// (as the text shows it), `module`, `file`, `line`, `inlined`).
    pub fn write_json(&self, mut w: impl Write) -> Result<(), Error> {
        let dump = JsonDump {
            threads: self.threads.iter().map(json_thread).collect(),
        };
        serde_json::to_writer_pretty(&mut w, &dump).map_err(std::io::Error::from)?;
        writeln!(w)?;
        Ok(())
    }

    /// Writes one folded stack per thread (`name;outermost;...;innermost
    /// 1`), the thread name as the root, as the profiles' folded output
    /// writes them (same escaping). Threads whose stack was not read are
    /// left out.
    pub fn write_folded(&self, w: impl Write) -> Result<(), Error> {
        let mut builder = Builder::new();
        for thread in &self.threads {
            if thread.frames.is_empty() {
                continue;
            }
            let Ok(id) = builder.thread(&thread.name, Some(thread.tid)) else {
                continue;
            };
            let root_first = thread.frames.iter().rev().map(|f| FrameInfo {
                name: &f.label,
                module: f.module.as_deref(),
                address: Some(f.address),
                file: f.file.as_deref(),
                line: f.line,
                inlined: f.inlined,
            });
            let _ = builder.add_frames(Some(id), root_first, !thread.complete, 1);
        }
        builder
            .finish_read("thread dump".to_owned())
            .write_folded(w)
    }
}

fn json_thread(t: &ThreadBacktrace) -> JsonThread<'_> {
    JsonThread {
        name: &t.name,
        tid: t.tid,
        state: t.state.to_string(),
        syscall: t.syscall(),
        complete: t.complete,
        stop_reason: t.stop_reason(),
        interrupted: t.interrupted(),
        held_ns: t.held.map(|d| d.as_nanos() as u64),
        frames: t
            .frames
            .iter()
            .map(|f| JsonFrame {
                address: format!("{:#x}", f.address),
                function: f.function.as_deref(),
                name: &f.label,
                module: f.module.as_deref(),
                file: f.file.as_deref(),
                line: f.line,
                inlined: f.inlined,
            })
            .collect(),
    }
}

/// Why a stack was not read, in words.
pub(super) fn not_read_reason(why: NotTaken) -> &'static str {
    match why {
        NotTaken::SignalBlocked => "the thread blocks the capture signal",
        NotTaken::Gone => "the thread exited",
        NotTaken::NoReply => "the thread did not answer the capture signal in time",
        NotTaken::NoUserRegisters => "blocked outside a system call, no registers to start from",
        NotTaken::Moved => "the thread kept moving while its stack was read",
        NotTaken::Unreadable => "the thread could not be stopped or its registers read",
    }
}

/// Why a walk stopped short of the thread's entry, in words.
pub(super) fn walk_end_reason(end: WalkEnd) -> &'static str {
    match end {
        WalkEnd::Complete => "the frame chain ended before the thread's entry",
        WalkEnd::DepthCap => "depth limit",
        WalkEnd::NotIncreasing | WalkEnd::Misaligned => "a frame pointer that is not a frame",
        WalkEnd::OutOfBounds => "the chain left the stack",
        WalkEnd::Unreadable => "unreadable stack memory",
        WalkEnd::NoBounds => "the stack's bounds are unknown",
        WalkEnd::Blocked => "not walked",
    }
}

/// A system call's name from its number on this architecture.
#[cfg(not(target_os = "linux"))]
pub(super) fn syscall_name(nr: i64) -> String {
    format!("syscall {nr}")
}

/// A system call's name from its number on this architecture.
#[cfg(target_os = "linux")]
pub(super) fn syscall_name(nr: i64) -> String {
    const NAMES: &[(libc::c_long, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_write, "write"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_writev, "writev"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_futex, "futex"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_waitid, "waitid"),
        (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait"),
        (libc::SYS_rt_sigsuspend, "rt_sigsuspend"),
        (libc::SYS_ioctl, "ioctl"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_fsync, "fsync"),
        (libc::SYS_flock, "flock"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_poll, "poll"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_select, "select"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_epoll_wait, "epoll_wait"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_accept, "accept"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_pause, "pause"),
    ];
    NAMES
        .iter()
        // `c_long` is `i32` on 32-bit targets.
        .find(|&&(n, _)| {
            #[allow(clippy::useless_conversion)]
            let n = i64::from(n);
            n == nr
        })
        .map(|&(_, name)| name.to_owned())
        .unwrap_or_else(|| format!("syscall {nr}"))
}
