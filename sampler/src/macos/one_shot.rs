//! One-shot captures on macOS: the shared stop/walk/resume window
//! ([`crate::control::capture_all`]) over Mach thread calls, one thread at
//! a time. The calling thread cannot suspend itself and is left out.

use crate::control::{capture_all, ThreadError};
use crate::one_shot::{CapturedThread, NotTaken, RunState};
use crate::walker::Arch;
use crate::Error;

use super::mach_threads::MachThreads;
use super::syscall_stubs;

/// The code of frameless system-call stubs, whose caller is read from the
/// stack: x86_64 only, as arm64 stubs keep their caller in lr.
pub(super) fn frameless_stubs() -> Vec<std::ops::Range<u64>> {
    if cfg!(target_arch = "x86_64") {
        syscall_stubs::ranges()
    } else {
        Vec::new()
    }
}

fn listing_failed(e: ThreadError) -> Error {
    Error::Io(std::io::Error::other(format!(
        "cannot list the threads of this task: {e:?}"
    )))
}

/// Every thread of this process but btprof's own and the calling one.
pub fn capture_threads() -> Result<Vec<CapturedThread>, Error> {
    let mut control = MachThreads::for_calling_thread();
    capture_all(
        &mut control,
        Arch::host(),
        &frameless_stubs(),
        crate::exclusions::is_own_or_excluded,
    )
    .map_err(listing_failed)
}

/// Thread `tid` alone (no other thread is stopped); the calling thread, or
/// one that is gone, comes back [`RunState::Gone`].
pub fn capture_thread(tid: u64) -> Result<CapturedThread, Error> {
    let mut control = MachThreads::for_calling_thread();
    let found = capture_all(&mut control, Arch::host(), &frameless_stubs(), |id| {
        id != tid
    })
    .map_err(listing_failed)?;
    Ok(found.into_iter().next().unwrap_or_else(|| {
        CapturedThread::not_taken(tid, String::new(), RunState::Gone, None, NotTaken::Gone)
    }))
}
