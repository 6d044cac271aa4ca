//! One-shot captures of another process's threads (`btprof dump --pid`), each in turn. A
//! running thread is seized, stopped with `PTRACE_INTERRUPT`, its registers read and stack
//! copied, and detached at once ([`ptrace`]). A thread blocked in the kernel is never stopped
//! (a ptrace stop can end `epoll_wait` with `EINTR`): it is read from outside, as
//! `unwind::blocked_stack` does. Unwinding ([`modules`]) runs on the copies.

mod modules;
mod ptrace;

use std::io;

use crate::capture::{CapturedThread, NotTaken, RunState, Taken};
use crate::walker::{self, Arch, Registers, StackBounds, WalkEnd};
use crate::Error;

use super::super::signal::checked_memory;
use super::super::signal::stack_copy::CopiedStack;
use super::super::signal::stack_regions::parse_rw_regions;
use super::super::unwind::blocked_stack::{parse_syscall, region_of, Syscall};
use super::super::unwind::modules::ModuleList;
use super::super::unwind::CfiWalker;
use super::super::MAX_DEPTH;

use self::ptrace::StopError;

/// Stack copied per thread, at most, up to the mapping's end; larger than in-process since the
/// whole walk runs on the copy.
pub(crate) const COPY_BYTES: usize = 512 << 10;
/// Tries at reading a blocked thread that keeps moving.
const TRIES: usize = 4;
/// For btprof's own tests: milliseconds to hold each stopped thread.
pub(crate) const HOLD_STOPPED_ENV: &str = "BTPROF_TEST_HOLD_STOPPED_MS";

/// The raw stack of every thread of process `pid`, each stopped only for its register read and
/// stack copy if running. Fails with [`Error::NoSuchProcess`], [`Error::OwnProcess`] (see
/// [`crate::one_shot::capture_threads`]) or [`Error::TraceRefused`].
pub fn capture_process(pid: u32) -> Result<Vec<CapturedThread>, Error> {
    // SAFETY: getpid has no preconditions.
    if pid == unsafe { libc::getpid() } as u32 {
        return Err(Error::OwnProcess(pid));
    }
    let id = i32::try_from(pid).map_err(|_| Error::NoSuchProcess(pid))?;
    let refused = || Error::TraceRefused {
        pid,
        ptrace_scope: ptrace_scope(),
    };
    let maps =
        std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
            io::ErrorKind::PermissionDenied => refused(),
            _ => Error::Io(e),
        })?;
    // This file needs the same permission as `ptrace`.
    if let Err(e) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) {
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => refused(),
            Some(libc::ENOENT) | Some(libc::ESRCH) => Error::NoSuchProcess(pid),
            _ => Error::Io(e),
        });
    }
    let tids = list_tasks(pid).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::NoSuchProcess(pid),
        _ => Error::Io(e),
    })?;
    let mut session = Session {
        pid: id,
        cfi: CfiWalker::with_modules(ModuleList::fixed(modules::objects(id, &maps))),
        regions: Vec::new(),
        copy: vec![0; COPY_BYTES / 8],
        fp_frames: vec![0; MAX_DEPTH],
    };
    parse_rw_regions(&maps, &mut session.regions);
    let mut out = Vec::with_capacity(tids.len());
    for tid in tids {
        match session.capture(tid) {
            Ok(thread) => out.push(thread),
            Err(Refusal) => return Err(refused()),
        }
    }
    Ok(out)
}

/// `kernel.yama.ptrace_scope`, where Yama is present.
fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The thread ids of process `pid`, in `/proc`'s order.
fn list_tasks(pid: u32) -> io::Result<Vec<i32>> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// Copies up to `out.len()` bytes at `addr` of process `pid`; returns how many were copied.
pub(super) fn read_memory(pid: i32, addr: u64, out: &mut [u8]) -> usize {
    // SAFETY: `out` is valid for writes of its own length.
    unsafe { checked_memory::read_process(pid, addr, out.as_mut_ptr(), out.len()) }
}

/// The kernel refused to let us trace a thread: the capture fails.
struct Refusal;

/// What one capture keeps from thread to thread.
struct Session {
    pid: i32,
    cfi: CfiWalker,
    /// The process's `rw` mappings, sorted: a stack ends with its mapping.
    regions: Vec<(u64, u64)>,
    copy: Vec<u64>,
    fp_frames: Vec<u64>,
}

impl Session {
    fn capture(&mut self, tid: i32) -> Result<CapturedThread, Refusal> {
        let name = self.read_task(tid, "comm").unwrap_or_default();
        let name = name.trim_end_matches('\n').to_owned();
        let gone = |name: String, syscall| {
            CapturedThread::not_taken(tid as u64, name, RunState::Gone, syscall, NotTaken::Gone)
        };
        let mut last = None;
        for _ in 0..TRIES {
            let Some(code) = self.state_code(tid) else {
                return Ok(gone(name, None));
            };
            let state = match code {
                b'R' => return self.stopped(tid, name),
                b'T' | b't' => RunState::Stopped,
                b'Z' | b'X' | b'x' => return Ok(gone(name, None)),
                _ => RunState::Blocked,
            };
            let text = self.read_task(tid, "syscall");
            match text.as_deref().and_then(parse_syscall) {
                None => return Ok(gone(name, None)),
                Some(Syscall::Running) => continue,
                Some(Syscall::At { nr, sp, pc }) => {
                    let syscall = (nr >= 0).then_some(nr);
                    last = Some((state, syscall));
                    match self.read_blocked(tid, nr, sp, pc) {
                        Outside::Read(frames, end) => {
                            return Ok(CapturedThread::from_outside(
                                tid as u64, name, state, syscall, frames, end,
                            ))
                        }
                        Outside::Gone => return Ok(gone(name, syscall)),
                        Outside::Moved => continue,
                    }
                }
            }
        }
        let (state, syscall) = last.unwrap_or((RunState::Blocked, None));
        let moved = NotTaken::Moved;
        Ok(CapturedThread::not_taken(
            tid as u64, name, state, syscall, moved,
        ))
    }

    /// A running thread: stopped for its registers and stack copy.
    fn stopped(&mut self, tid: i32, name: String) -> Result<CapturedThread, Refusal> {
        let not_taken =
            |state, why| CapturedThread::not_taken(tid as u64, name.clone(), state, None, why);
        let stopped = match ptrace::stop(tid) {
            Ok(stopped) => stopped,
            // Traced by a debugger: only this thread is unreadable.
            Err(StopError::Refused) if self.traced() => {
                return Ok(not_taken(RunState::Running, NotTaken::Unreadable))
            }
            Err(StopError::Refused) => return Err(Refusal),
            Err(StopError::Gone) => return Ok(not_taken(RunState::Gone, NotTaken::Gone)),
            Err(StopError::NoStop) => return Ok(not_taken(RunState::Running, NotTaken::NoReply)),
            Err(StopError::Other) => return Ok(not_taken(RunState::Running, NotTaken::Unreadable)),
        };
        let Ok(regs) = stopped.registers() else {
            drop(stopped);
            return Ok(not_taken(RunState::Running, NotTaken::Unreadable));
        };
        let (base, len) = self.copy_stack(regs.sp);
        if let Some(ms) = std::env::var(HOLD_STOPPED_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
        {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        let since = stopped.since;
        let _ = stopped.detach();
        let held_ns = since.elapsed().as_nanos() as u64;
        let (frames, end) = self.unwind(regs, base, len);
        Ok(CapturedThread {
            tid: tid as u64,
            name,
            state: RunState::Running,
            syscall: None,
            frames,
            lr: regs.link_register(Arch::host()),
            end,
            taken: Taken::Interrupted,
            held_ns: Some(held_ns),
        })
    }

    /// A thread blocked at `sp` and `pc` in call `nr`, read without a stop.
    fn read_blocked(&mut self, tid: i32, nr: i64, sp: u64, pc: u64) -> Outside {
        let (base, len) = self.copy_stack(sp);
        let regs = self
            .cfi
            .registers_at_syscall(pc, sp, base, &self.copy[..len]);
        // Still blocked where it was read: the copy is of that stack.
        let text = self.read_task(tid, "syscall");
        match text.as_deref().and_then(parse_syscall) {
            Some(now) if now == (Syscall::At { nr, sp, pc }) => {}
            None => return Outside::Gone,
            _ => return Outside::Moved,
        }
        let (frames, end) = self.unwind(regs, base, len);
        Outside::Read(frames, end)
    }

    /// Copies the stack from `sp` to its mapping's end; returns its base and length in words.
    fn copy_stack(&mut self, sp: u64) -> (u64, usize) {
        let base = sp & !7;
        let high = region_of(&self.regions, sp).unwrap_or(base + COPY_BYTES as u64);
        let words = ((high.saturating_sub(base)) / 8).min(self.copy.len() as u64) as usize;
        let buf = &mut self.copy[..words];
        // SAFETY: a `u64` slice viewed as bytes; every bit pattern is valid.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) };
        let got = read_memory(self.pid, base, bytes);
        (base, got / 8)
    }

    /// Walks the copy taken at `regs`: frame pointers, then CFI.
    fn unwind(&mut self, regs: Registers, base: u64, len: usize) -> (Vec<u64>, WalkEnd) {
        let mut copy = CopiedStack::from_parts(regs, base, &self.copy[..len]);
        let bounds = (len > 0).then_some(StackBounds {
            low: regs.sp,
            high: copy.end(),
        });
        let fp = walker::walk(Arch::host(), &regs, bounds, &mut copy, &mut self.fp_frames);
        let fp_frames = &self.fp_frames[..fp.depth];
        let done = self.cfi.complete(&copy, fp_frames, fp.end, MAX_DEPTH);
        (done.frames.to_vec(), done.end)
    }

    /// Whether another tracer (a debugger) holds the process.
    fn traced(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .ok()
            .and_then(|s| {
                let pid = s.lines().find_map(|l| l.strip_prefix("TracerPid:"))?;
                pid.trim().parse::<u32>().ok()
            })
            .is_some_and(|tracer| tracer != 0)
    }

    fn read_task(&self, tid: i32, file: &str) -> Option<String> {
        std::fs::read_to_string(format!("/proc/{}/task/{tid}/{file}", self.pid)).ok()
    }

    /// The state letter of `/proc/PID/task/TID/stat`, `None` if gone.
    fn state_code(&self, tid: i32) -> Option<u8> {
        super::super::kernel::threads::state_code(&self.pid.to_string(), tid)
    }
}

/// What reading a blocked thread from outside came to.
enum Outside {
    Read(Vec<u64>, WalkEnd),
    Moved,
    Gone,
}
