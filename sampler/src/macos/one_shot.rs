//! One-shot captures on macOS: the shared stop/walk/resume window
//! ([`crate::control::capture_all`]) over Mach thread calls, one thread at
//! a time. The calling thread cannot suspend itself: it walks its own
//! frame-pointer chain instead ([`walk_calling_thread`]), which needs no
//! stop. Under Rosetta 2 a capture is refused as sampling is, unless
//! `BTPROF_ALLOW_ROSETTA=1` ([`capture_all_gated`]).

use crate::capture::{CapturedThread, NotTaken, RunState, Taken};
use crate::control::{capture_all_gated, rosetta_gate, ThreadControl, MAX_DEPTH};
use crate::walker::{walk_calling_thread, Arch};
use crate::{Error, ALLOW_ROSETTA_ENV};

use super::mach_threads::MachThreads;
use super::{rosetta, syscall_stubs};

/// The code of frameless system-call stubs, whose caller is read from the
/// stack: x86_64 only, as arm64 stubs keep their caller in lr.
pub(super) fn frameless_stubs() -> Vec<std::ops::Range<u64>> {
    if cfg!(target_arch = "x86_64") {
        syscall_stubs::ranges()
    } else {
        Vec::new()
    }
}

/// One capture of every thread `skip` does not name, behind the Rosetta
/// gate; when the user opted in under Rosetta, the sampler's warning is
/// printed once, before any thread is stopped.
fn capture(skip: impl Fn(u64) -> bool) -> Result<Vec<CapturedThread>, Error> {
    let translated = rosetta::is_translated();
    let env = std::env::var_os(ALLOW_ROSETTA_ENV);
    if translated && rosetta_gate::check_capture(translated, env.as_deref()).is_ok() {
        rosetta::warn_once();
    }
    let mut control = MachThreads::for_calling_thread();
    capture_all_gated(
        &mut control,
        translated,
        env.as_deref(),
        Arch::host(),
        &frameless_stubs(),
        skip,
    )
}

/// Whether captures may run in this process: [`Error::Rosetta`] under
/// Rosetta 2 without `BTPROF_ALLOW_ROSETTA=1`.
pub fn captures_allowed() -> Result<(), Error> {
    let env = std::env::var_os(ALLOW_ROSETTA_ENV);
    rosetta_gate::check_capture(rosetta::is_translated(), env.as_deref())
}

/// Every thread of this process but btprof's own, the calling one walked
/// from inside. [`Error::Rosetta`] under Rosetta 2 without the opt-in.
pub fn capture_threads() -> Result<Vec<CapturedThread>, Error> {
    let mut threads = capture(crate::exclusions::is_excluded)?;
    let own = crate::current_thread_id();
    if !crate::exclusions::is_excluded(own) {
        threads.push(capture_calling_thread(own));
    }
    Ok(threads)
}

/// Thread `tid` alone (no other thread is stopped); the calling thread is
/// walked from inside, one that is gone comes back [`RunState::Gone`].
/// [`Error::Rosetta`] under Rosetta 2 without the opt-in.
pub fn capture_thread(tid: u64) -> Result<CapturedThread, Error> {
    if tid == crate::current_thread_id() {
        captures_allowed()?;
        return Ok(capture_calling_thread(tid));
    }
    let found = capture(|id| id != tid)?;
    Ok(found.into_iter().next().unwrap_or_else(|| {
        CapturedThread::not_taken(tid, String::new(), RunState::Gone, None, NotTaken::Gone)
    }))
}

/// The calling thread (`tid`), walked from inside from here up to the top
/// of its stack: it is running this code, so it is running.
fn capture_calling_thread(tid: u64) -> CapturedThread {
    // SAFETY: pthread_self is the calling thread, alive; on macOS the
    // stack address is the stack's highest address.
    let top = unsafe { libc::pthread_get_stackaddr_np(libc::pthread_self()) } as u64;
    let mut frames = vec![0u64; MAX_DEPTH];
    let walk = walk_calling_thread(top, &mut frames);
    frames.truncate(walk.depth);
    // The name the other threads of a dump get: the kernel's copy, or the
    // process's name for a thread that has none.
    let mut control = MachThreads::for_calling_thread();
    let own = control.current_thread();
    let name = control.name(own).unwrap_or_default();
    CapturedThread {
        tid,
        name,
        state: RunState::Running,
        syscall: None,
        frames,
        lr: walk.lr,
        end: walk.end,
        taken: Taken::Itself,
        held_ns: None,
    }
}
