//! Thread sampling for btprof.
//!
//! The platform layer (`Sampler`) lists threads, interrupts them at a
//! fixed rate and captures registers; everything it hands on is shared,
//! platform-independent code: the frame-pointer [`walker`], the interned
//! [`stack_table`] and the [`clock`] that schedules ticks. Backends that
//! stop threads from outside (macOS) run the shared [`control`] loop over a
//! thin platform trait. A stopped profile comes back as a [`RawProfile`] of
//! addresses; symbolising and folding happen elsewhere, after every thread
//! runs again.
//!
//! `Sampler` exists on Linux (a real-time signal per sample) and macOS
//! (Mach thread suspension); both have the same API: `Sampler::start`,
//! `progress`, `stop`, and the `MAX_DEPTH` cap. Only Linux has
//! `default_signal`: macOS sends no signal.

pub mod clock;
pub mod control;
pub mod labels;
pub mod one_shot;
pub mod stack_table;
pub mod stack_window;
pub mod walker;

mod capture;
mod config;
#[cfg(all(test, target_os = "linux"))]
mod emulation;
mod error;
mod exclusions;
mod own_threads;
mod profile;
#[cfg(any(target_os = "linux", target_os = "macos"))]
mod sampler_thread;
mod stats;
mod thread_keys;
#[cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]
mod window;

pub use config::{
    clock_from_env, Mode, SampleClock, SamplerConfig, ALLOW_ROSETTA_ENV, CLOCK_ENV,
    DEFAULT_MAX_STACKS, FORCE_SAMPLER_THREAD_ENV,
};
pub use error::Error;
pub use exclusions::{exclude_current_thread, Excluded};
pub use own_threads::spawn_with_signals_blocked;
pub use profile::{Progress, RawProfile, ThreadInfo};
pub use stack_table::Limit;
pub use stats::{SamplerStats, ThreadCpu};

/// The calling thread's id as samplers report it in [`ThreadInfo::tid`]:
/// the kernel thread id on Linux.
#[cfg(target_os = "linux")]
pub fn current_thread_id() -> u64 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u64 }
}

/// The calling thread's id as samplers report it in [`ThreadInfo::tid`]:
/// the 64-bit thread id on Apple platforms (stable, unlike port names).
#[cfg(target_vendor = "apple")]
pub fn current_thread_id() -> u64 {
    let mut id = 0u64;
    // SAFETY: a null thread means the calling thread; `id` is writable.
    unsafe { libc::pthread_threadid_np(0 as libc::pthread_t, &mut id) };
    id
}

/// No sampler backend here, so no thread id either.
#[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
pub fn current_thread_id() -> u64 {
    0
}

#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
#[doc(hidden)]
pub use linux::bench_support;
#[cfg(all(target_os = "linux", feature = "test-hooks"))]
#[doc(hidden)]
pub use linux::test_hooks;
#[cfg(target_os = "linux")]
pub use linux::{default_signal, MAX_DEPTH};

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::MAX_DEPTH;

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod sampler_handle;
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub use sampler_handle::Sampler;
