//! One-shot captures over the shared stop/walk/resume window: every
//! thread once, one at a time, each stopped only for its register read and
//! stack copy (the same window, with the same rules, as a sample's).
//! Everything that may allocate (the frames' own vector, the caller's
//! symbolisation) happens after the thread runs again.
//!
//! A capture suspends threads as the sampler does, so under Rosetta 2 it
//! passes the sampler's gate first ([`capture_all_gated`],
//! [`rosetta_gate::check_capture`]).

use std::ffi::OsStr;
use std::ops::Range;
use std::time::Instant;

use super::sampling_loop::{stopped_walk, Target};
use super::stopped::install_abort_on_panic_hook;
use super::{never_stop, rosetta_gate, ThreadControl, ThreadError, MAX_DEPTH};
use crate::capture::{CapturedThread, NotTaken, RunState, Taken};
use crate::stack_window::StackWindow;
use crate::walker::Arch;
use crate::Error;

/// [`capture_all`] behind the Rosetta gate: in a process translated by
/// Rosetta 2 (`translated`) it fails with [`Error::Rosetta`], the
/// sampler's refusal, before any call on `control` (no thread is listed,
/// let alone stopped), unless `env`, the value of
/// [`ALLOW_ROSETTA_ENV`](crate::ALLOW_ROSETTA_ENV), is `1`. A failed
/// listing is an [`Error::Io`].
pub fn capture_all_gated<C: ThreadControl>(
    control: &mut C,
    translated: bool,
    env: Option<&OsStr>,
    arch: Arch,
    frameless: &[Range<u64>],
    skip: impl Fn(u64) -> bool,
) -> Result<Vec<CapturedThread>, Error> {
    rosetta_gate::check_capture(translated, env)?;
    capture_all(control, arch, frameless, skip).map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "cannot list the threads of this task: {e:?}"
        )))
    })
}

/// Captures every thread of `control`'s listing but the calling one, those
/// `skip` names (by id) and those never to be stopped, walking for
/// `arch` (with `frameless`, the code of frameless system-call stubs on
/// x86_64, whose caller is read from the stack). No Rosetta gate: the
/// platform captures go through [`capture_all_gated`]. A thread that
/// exits on the way is reported [`RunState::Gone`];
/// one whose stop or register read fails is reported with
/// [`NotTaken::Unreadable`] (and, having been stopped, was resumed once).
/// Fails only if the threads cannot be listed.
///
/// Installs the abort-on-panic hook first, as the sampler does: a dump or
/// a watchdog's backtrace may be the only thing in the process that ever
/// stops a thread, and a panic while one is stopped must abort there too.
///
/// Its stops take turns with every other stop in the process, a
/// sampler's or another capture's (see `stopped.rs`): two threads that
/// stopped each other at once would both stay stopped for good.
pub fn capture_all<C: ThreadControl>(
    control: &mut C,
    arch: Arch,
    frameless: &[Range<u64>],
    skip: impl Fn(u64) -> bool,
) -> Result<Vec<CapturedThread>, ThreadError> {
    // Before any thread is stopped: installing a hook allocates and locks.
    install_abort_on_panic_hook();
    let list = control.list_threads()?;
    let own = control.current_thread();
    let mut out = Vec::new();
    // Allocated before any thread is stopped.
    let mut frames = vec![0u64; MAX_DEPTH];
    let mut stack_window = StackWindow::new(StackWindow::DEFAULT_WINDOW_BYTES);
    for &thread in list.as_ref() {
        if thread == own {
            continue;
        }
        let id = match control.thread_id(thread) {
            Ok(id) => id,
            Err(_) => continue,
        };
        if skip(id) {
            continue;
        }
        let name = control.name(thread).unwrap_or_default();
        if never_stop::is_protected(&name) {
            continue;
        }
        let gone = |name: String| {
            CapturedThread::not_taken(id, name, RunState::Gone, None, NotTaken::Gone)
        };
        let state = match control.usage(thread) {
            Ok(usage) if usage.running => RunState::Running,
            Ok(_) => RunState::Blocked,
            Err(ThreadError::Exited) => {
                out.push(gone(name));
                continue;
            }
            Err(ThreadError::Failed(_)) => RunState::Blocked,
        };
        let stack = control.stack_range(thread);
        let stopped_at = Instant::now();
        let target = Target {
            arch,
            stack,
            frameless,
        };
        let walked = stopped_walk(control, thread, target, &mut frames, &mut stack_window);
        let held_ns = stopped_at.elapsed().as_nanos() as u64;
        out.push(match walked {
            Ok(sampled) if sampled.exited => gone(name),
            Ok(sampled) => CapturedThread {
                tid: id,
                name,
                state,
                syscall: None,
                frames: frames[..sampled.walk.depth].to_vec(),
                lr: sampled.walk.lr,
                end: sampled.walk.end,
                taken: Taken::Interrupted,
                held_ns: Some(held_ns),
            },
            Err(ThreadError::Exited) => gone(name),
            Err(ThreadError::Failed(_)) => {
                CapturedThread::not_taken(id, name, state, None, NotTaken::Unreadable)
            }
        });
    }
    // Every thread runs again by now.
    for &thread in list.as_ref() {
        control.release_thread(thread);
    }
    control.release_list(list);
    Ok(out)
}
