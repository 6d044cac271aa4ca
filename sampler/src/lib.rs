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
pub mod stack_table;
pub mod walker;

mod profile;

pub use profile::{Error, Mode, Progress, RawProfile, SamplerConfig, SamplerStats, ThreadInfo};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::{default_signal, Sampler, MAX_DEPTH};

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::{Sampler, MAX_DEPTH};
