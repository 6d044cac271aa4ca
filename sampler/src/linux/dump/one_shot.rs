//! One-shot captures on Linux: every thread's stack, or one thread's, now.
//!
//! A running thread is asked for its registers by an event on its own CPU time ([`Request`]),
//! raised only on its way back to user code, so no blocking call ends with `EINTR` (the calling
//! thread, and one no event opens for, get an `SI_QUEUE` signal with [`DUMP_MARK`]). The
//! handler fills the dump's own static slot, and the capturing thread unwinds the copy with
//! CFI. A thread not running is read from outside ([`BlockedStackReader`]), retried if it
//! moved, then marked [`NotTaken::Moved`]; one that blocks the signal is reported from `/proc`.

use core::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::capture::{CapturedThread, NotTaken, RunState, Taken};
use crate::walker::WalkEnd;
use crate::Error;

use super::super::kernel::cpu_timers::PosixTimer;
use super::super::kernel::task_clock::TaskClock;
use super::super::kernel::threads::{self, TaskList};
use super::super::signal::checked_memory;
use super::super::signal::dump_slot::{
    capture_signal, DUMP_MARK, NEXT_GENERATION, REQUEST_FD, REQUEST_GENERATION, REQUEST_TID, SLOT,
};
use super::super::signal::install::{self, SignalSender};
use super::super::signal::slots::{state, ARMED, DONE, IDLE};
use super::super::signal::{handler, own_stack, slots};
use super::super::unwind::blocked_stack::{read_syscall, BlockedRead, BlockedStackReader, Syscall};
use super::super::unwind::CfiWalker;
use super::super::MAX_DEPTH;

/// How long a signalled thread may take to reply before the request is withdrawn.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// Tries at reading a blocked thread that keeps moving.
const TRIES: usize = 4;
/// Milliseconds to wait for a thread to leave a profiler's sample handler before reading it
/// as it is.
const MAX_HANDLER_WAITS: u32 = 200;

/// Set once perf events were refused: later captures use POSIX timers.
static PERF_REFUSED: AtomicBool = AtomicBool::new(false);
/// A perf request's period: the shortest the software clock takes.
const REQUEST_PERIOD_NS: u64 = 10_000;

/// How a running thread is asked for its registers; closed, with any signal it queued, on drop.
enum Request {
    /// A perf task-clock event good for one overflow.
    Perf(TaskClock),
    /// A POSIX CPU timer where perf is refused (it waits for a tick); held for its drop.
    Timer(#[allow(dead_code)] PosixTimer),
}

impl Request {
    fn open(tid: i32, signal: libc::c_int, generation: u64) -> std::io::Result<Request> {
        if !PERF_REFUSED.load(Relaxed) {
            match Self::open_perf(tid, signal, generation) {
                Ok(clock) => return Ok(Request::Perf(clock)),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(e),
                Err(_) => PERF_REFUSED.store(true, Relaxed),
            }
        }
        PosixTimer::open_dump_request(tid, signal, generation).map(Request::Timer)
    }

    fn open_perf(tid: i32, signal: libc::c_int, generation: u64) -> std::io::Result<TaskClock> {
        let clock = TaskClock::open(tid, REQUEST_PERIOD_NS)?;
        clock.signal_thread(tid, signal)?;
        REQUEST_TID.store(tid, Relaxed);
        REQUEST_GENERATION.store(generation, Relaxed);
        REQUEST_FD.store(clock.fd(), Release);
        if let Err(e) = clock.enable_for_one_overflow() {
            REQUEST_FD.store(-1, Release);
            return Err(e);
        }
        Ok(clock)
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Request::Perf(clock) = self {
            // Disabled before it is forgotten, so no signal of it follows.
            clock.disable();
            REQUEST_FD.store(-1, Release);
        }
    }
}

/// The capture signal's handler for one capture: the shared handler with all but fault
/// signals blocked, so no profiler handler runs inside it and faults still crash. Drop
/// restores the action as `install` does.
struct CaptureHandler {
    signal: libc::c_int,
    previous: libc::sigaction,
}

impl CaptureHandler {
    fn install(signal: libc::c_int) -> Result<CaptureHandler, Error> {
        let previous = install::unused_action(signal)?;
        install::set_handler(signal, |mask| {
            // SAFETY: a valid sigset and signals.
            unsafe {
                libc::sigfillset(mask);
                for fault in [
                    libc::SIGSEGV,
                    libc::SIGBUS,
                    libc::SIGILL,
                    libc::SIGFPE,
                    libc::SIGTRAP,
                ] {
                    libc::sigdelset(mask, fault);
                }
            }
        })?;
        Ok(CaptureHandler { signal, previous })
    }
}

impl Drop for CaptureHandler {
    fn drop(&mut self) {
        install::restore_if_ours(self.signal, &self.previous);
    }
}

/// The CFI unwinder kept between captures (its module list is costly); the lock makes captures
/// take turns on the one slot.
struct Shared {
    cfi: Option<CfiWalker>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared { cfi: None });

/// The raw stack of every thread of this process but btprof's own.
pub fn capture_threads() -> Result<Vec<CapturedThread>, Error> {
    let mut session = Session::open()?;
    let mut tids = Vec::new();
    TaskList::open()
        .and_then(|mut list| list.read(&mut tids))
        .map_err(Error::Io)?;
    let mut out = Vec::with_capacity(tids.len());
    for tid in tids {
        if crate::exclusions::is_excluded(tid as u64) {
            continue;
        }
        out.push(session.capture(tid));
    }
    Ok(out)
}

/// The raw stack of thread `tid` of this process ([`RunState::Gone`] if not ours).
pub fn capture_thread(tid: u64) -> Result<CapturedThread, Error> {
    let tid = i32::try_from(tid).map_err(|_| Error::InvalidConfig(format!("no thread {tid}")))?;
    Ok(Session::open()?.capture(tid))
}

/// One capture: the lock, the signal and, without a profiler, a handler. Fields drop in order:
/// the lock last, or the next capture would take this one's handler for the program's.
struct Session {
    sender: SignalSender,
    _handler: Option<CaptureHandler>,
    reader: BlockedStackReader,
    shared: MutexGuard<'static, Shared>,
}

impl Session {
    fn open() -> Result<Session, Error> {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: getpid has no preconditions.
        slots::OWN_PID.store(unsafe { libc::getpid() }, Relaxed);
        checked_memory::probe();
        own_stack::probe();
        let cfi = shared.cfi.get_or_insert_with(CfiWalker::new);
        cfi.refresh_modules();
        // Its own signal never merges with a pending sample; a profiler given it serves both.
        let sig = capture_signal();
        let installed = install::INSTALLED_SIGNAL.load(Acquire);
        let handler = if installed == sig && install::handler_is_ours(sig) {
            None
        } else {
            Some(CaptureHandler::install(sig)?)
        };
        Ok(Session {
            shared,
            sender: SignalSender::new(sig),
            _handler: handler,
            reader: BlockedStackReader::new(),
        })
    }

    fn capture(&mut self, tid: i32) -> CapturedThread {
        let name = threads::thread_name(tid).unwrap_or_default();
        let gone = |name: String| {
            CapturedThread::not_taken(tid as u64, name, RunState::Gone, None, NotTaken::Gone)
        };
        let mut last = None;
        let mut handler_waits = 0;
        let mut tries = 0;
        while tries < TRIES {
            let Some(code) = state_code(tid) else {
                return gone(name);
            };
            // Inside a profiler's short sample handler: wait for it.
            if code != b'R' && handler::in_handler(tid) && handler_waits < MAX_HANDLER_WAITS {
                handler_waits += 1;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            tries += 1;
            let state = match code {
                b'R' => match self.by_signal(tid, &name) {
                    Some(captured) => return captured,
                    // It blocked meanwhile.
                    None => continue,
                },
                b'T' | b't' => RunState::Stopped,
                b'Z' | b'X' | b'x' => return gone(name),
                _ => RunState::Blocked,
            };
            match read_syscall(tid) {
                None => return gone(name),
                // Running again: look again.
                Some(Syscall::Running) => continue,
                Some(Syscall::At { nr, sp, pc }) => {
                    let syscall = (nr >= 0).then_some(nr);
                    last = Some((state, syscall));
                    if let Some(captured) = self.read_from_outside(tid, &name, state, nr, sp, pc) {
                        return captured;
                    }
                }
            }
        }
        let (state, syscall) = last.unwrap_or((RunState::Blocked, None));
        CapturedThread::not_taken(tid as u64, name, state, syscall, NotTaken::Moved)
    }

    /// A running thread, through the handler; `None` if it stops running.
    fn by_signal(&mut self, tid: i32, name: &str) -> Option<CapturedThread> {
        let sig = self.sender.signal();
        let not_taken = |state, why| {
            let name = name.to_owned();
            Some(CapturedThread::not_taken(
                tid as u64, name, state, None, why,
            ))
        };
        // A thread that blocks the signal shows it masked at every look, one in a handler only
        // for a moment. A look counts only if the thread ran since the last (one preempted in a
        // profiler's handler stays masked). A withdrawn request still pending may yet land.
        let mut blocked_looks = 0;
        let mut cpu_at_last_look = None;
        let mut waits = 0;
        loop {
            let Some(status) = threads::signal_status(tid, sig) else {
                return not_taken(RunState::Gone, NotTaken::Gone);
            };
            if status.blocked && !handler::in_handler(tid) {
                let cpu = threads::thread_cpu_ns(tid);
                if matches!((cpu, cpu_at_last_look), (Some(now), Some(last)) if now > last) {
                    blocked_looks += 1;
                    if blocked_looks >= 3 {
                        return not_taken(RunState::Running, NotTaken::SignalBlocked);
                    }
                }
                cpu_at_last_look = cpu;
                // Asleep with the signal masked: read it from outside.
                if state_code(tid)? != b'R' {
                    return None;
                }
            } else if !status.blocked && !status.pending {
                break;
            }
            waits += 1;
            if waits > 200 {
                return not_taken(RunState::Running, NotTaken::NoReply);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Checked last, to keep the window for blocking as short as can be.
        if state_code(tid)? != b'R' {
            return None;
        }
        let generation = NEXT_GENERATION.fetch_add(1, Relaxed);
        // Idle: earlier requests were settled under this session's lock.
        SLOT.state.store(state(generation, ARMED), Release);
        // The calling thread is on a CPU in user code now, and one no event opens for (seccomp,
        // timer limit) gets a plain signal.
        let mut request = None;
        let sent = match (tid != threads::gettid()).then(|| Request::open(tid, sig, generation)) {
            Some(Ok(opened)) => {
                request = Some(opened);
                Ok(())
            }
            Some(Err(e)) if e.raw_os_error() == Some(libc::ESRCH) => Err(e),
            _ => self.sender.send(tid, DUMP_MARK | generation as usize),
        };
        if let Err(e) = sent {
            SLOT.state.store(IDLE, Release);
            return match e.raw_os_error() {
                Some(libc::ESRCH) => not_taken(RunState::Gone, NotTaken::Gone),
                _ => not_taken(RunState::Running, NotTaken::NoReply),
            };
        }
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            let now = SLOT.state.load(Acquire);
            if now == state(generation, DONE) {
                break;
            }
            if now == state(generation, ARMED) {
                // Now and then: let go of a thread that exited.
                let look = polls % 16 == 15;
                let exited = look && !threads::thread_exists(tid);
                // One that went to sleep is read from outside instead.
                let asleep = look && request.is_some() && state_code(tid) != Some(b'R');
                if exited || asleep || start.elapsed() > REPLY_TIMEOUT {
                    // Closed first, with any signal it queued.
                    drop(request.take());
                    // Withdraw; a handler that claimed it is waited for.
                    if SLOT
                        .state
                        .compare_exchange(now, IDLE, Relaxed, Relaxed)
                        .is_ok()
                    {
                        return if exited {
                            not_taken(RunState::Gone, NotTaken::Gone)
                        } else if asleep {
                            None
                        } else {
                            not_taken(RunState::Running, NotTaken::NoReply)
                        };
                    }
                }
            }
            polls += 1;
            if polls < 200 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        // SAFETY: `Done` for our generation (Acquire): no handler claims the slot until we arm
        // it again.
        let (frames, copy) = unsafe { (&*SLOT.frames.get(), SLOT.copy.view_any()) };
        let depth = (SLOT.depth.load(Relaxed) as usize).min(MAX_DEPTH);
        let fp_end = WalkEnd::from_u8(SLOT.end.load(Relaxed) as u8);
        let done = self
            .cfi()
            .complete(&copy, &frames[..depth], fp_end, MAX_DEPTH);
        let captured = CapturedThread {
            tid: tid as u64,
            name: name.to_owned(),
            state: RunState::Running,
            syscall: None,
            frames: done.frames.to_vec(),
            lr: SLOT.lr.load(Relaxed),
            end: done.end,
            taken: Taken::Interrupted,
            held_ns: Some(SLOT.held_ns.load(Relaxed)),
        };
        SLOT.state.store(IDLE, Release);
        Some(captured)
    }

    fn cfi(&mut self) -> &mut CfiWalker {
        self.shared
            .cfi
            .as_mut()
            .expect("set when the session opened")
    }

    /// A thread not running, read from outside at the kernel's sp and pc; `None` if it moved.
    fn read_from_outside(
        &mut self,
        tid: i32,
        name: &str,
        state: RunState,
        nr: i64,
        sp: u64,
        pc: u64,
    ) -> Option<CapturedThread> {
        let (tid_u64, name, syscall) = (tid as u64, name.to_owned(), (nr >= 0).then_some(nr));
        let cfi = self
            .shared
            .cfi
            .as_mut()
            .expect("set when the session opened");
        Some(match self.reader.read(tid, cfi, nr, sp, pc) {
            BlockedRead::Read(walk) => {
                let (frames, end) = (walk.frames.to_vec(), walk.end);
                CapturedThread::from_outside(tid_u64, name, state, syscall, frames, end)
            }
            BlockedRead::Moved => return None,
            BlockedRead::Gone => {
                CapturedThread::not_taken(tid_u64, name, RunState::Gone, syscall, NotTaken::Gone)
            }
        })
    }
}

/// The state letter of `/proc/self/task/TID/stat`, `None` if gone.
fn state_code(tid: i32) -> Option<u8> {
    threads::state_code("self", tid)
}
