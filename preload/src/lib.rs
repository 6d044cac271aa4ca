//! btprof's sampler as a library that `btprof record` preloads into the
//! programs it runs (`LD_PRELOAD` on Linux, `DYLD_INSERT_LIBRARIES` on
//! macOS), so that any dynamically linked program is profiled by the
//! embedded [`btprof::Profiler`], unprivileged and unchanged.
//!
//! What it does, and why in this order (`docs/record.md` has the whole
//! story):
//!
//! - Nothing while the dynamic loader runs: no constructor of its own on
//!   Linux. It interposes `__libc_start_main`, which the C start code
//!   calls once every library is loaded and initialised, and starts the
//!   profiler just before the program's `main` (`start.rs`). Threads are
//!   created then, never under the loader's lock, and the allocator is
//!   ready.
//! - It writes the process's profile (folded stacks and a JSON
//!   [`btprof::formats::process_record::ProcessRecord`]) when the process
//!   ends: from an `atexit` handler (`exit`, return from `main`), from
//!   `_exit` (`exit.rs`), on SIGINT/SIGTERM that the program leaves at their default action
//!   (`signals.rs`: written, then the signal's default action, so the exit
//!   status is what it would have been), and before `exec` replaces the
//!   program (`exec.rs`).
//! - A forked child that does not `exec` gets no profile: the profiler's
//!   threads did not survive the fork, and everything here checks the pid
//!   it started in before it touches the profiler.
//! - What it cannot do it says once per process on stderr, prefixed
//!   `btprof:`, and carries on: the host program is never stopped.

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod config;
#[cfg(target_os = "linux")]
mod exec;
#[cfg(all(target_os = "linux", target_arch = "x86_64", btprof_naked_exec))]
mod exec_list;
#[cfg(target_os = "linux")]
mod exit;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod session;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod signals;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod start;
