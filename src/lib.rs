//! A continuous sampling profiler: sample a program's threads from inside
//! it, fold their stacks, render flamegraphs, and compare two profiles.
//!
//! This page is a guide to the API. How to install and run the `btprof`
//! command is in the repository's `README.md`; how the sampler works, and
//! the rules it keeps so that it can stay on inside a program, are in
//! `docs/architecture.md`.
//!
//! # Profiling a piece of work
//!
//! A [`Profiler`] samples every thread of the process but its own until
//! it is stopped; [`Profiler::stop`] symbolises what it took into a
//! [`Profile`]. Only one profiler runs per process at a time.
//!
//! ```no_run
//! use btprof::{Mode, Profiler};
//!
//! # fn main() -> Result<(), btprof::Error> {
//! let profiler = Profiler::builder().hz(1000).mode(Mode::Cpu).start()?;
//! let worker = std::thread::spawn(|| (0..50_000_000u64).fold(0, |a, x| a ^ x.wrapping_mul(31)));
//! let _ = worker.join();
//! let profile = profiler.stop()?;
//!
//! let stats = profile.stats().expect("a recording knows how it was taken");
//! println!("{} samples, {:.0} per CPU-second", stats.samples, stats.achieved_hz());
//! profile.write_folded(std::fs::File::create("run.folded")?)?;
//! if !profile.is_empty() {
//!     profile.write_flamegraph(std::fs::File::create("run.svg")?)?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`Mode::Cpu`] samples each thread per period of its own CPU time;
//! [`Mode::Wall`] samples every thread at wall-clock ticks, blocked ones
//! included. [`Stats`] counts what was sampled, missed, truncated or
//! lost.
//!
//! # Scopes and tests
//!
//! [`profile_scope`] profiles until the guard is dropped and writes the
//! profile's folded file, JSON metadata and SVG, but only when
//! `BTPROF_PROFILE=1` is set, so guards can stay in a test suite. A scope
//! that starts while another profiles runs unprofiled rather than wait,
//! so nested scopes cannot deadlock ([`scope`]).
//!
//! ```no_run
//! let _profile = btprof::profile_scope("parse_large_file");
//! // ... the work ...
//! // dropped: writes parse_large_file.folded, .json and .svg
//! ```
//!
//! # Continuous profiling
//!
//! A profiler can stay on and write a window every interval from a thread
//! of its own ([`ProfilerBuilder::dump_every`]), keep the newest few, and
//! dump on a signal as well:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), btprof::Error> {
//! let profiler = btprof::Profiler::builder()
//!     .dump_every(Duration::from_secs(60))
//!     .dump_dir("/var/tmp/myapp-profiles")
//!     .keep(60)
//!     .dump_on_signal(btprof::DUMP_SIGNAL)
//!     .start()?;
//! // ... the application runs ...
//! let so_far = profiler.snapshot()?;
//! let (whole_run, dumps) = profiler.stop_with_dump_stats()?;
//! println!("{} windows written, {} failed", dumps.written, dumps.failed);
//! # Ok(())
//! # }
//! ```
//!
//! # Labels
//!
//! Code marks a region with labels ([`with_labels`], or the guard
//! [`labels`]), and every sample its thread gives inside carries them
//! ([`Stack::labels`]): the set the thread had when the sample was taken,
//! however late the sampler reads it. Scopes nest, an inner value
//! replacing an outer one of the same name. pprof files and pushed
//! profiles carry them as sample labels; folded files and flamegraphs
//! show them as a frame under the thread with
//! [`FoldOptions::label_frames`].
//!
//! ```
//! # fn main() -> Result<(), btprof::Error> {
//! let profiler = btprof::Profiler::builder().hz(1000).start()?;
//! let spin = || {
//!     let start = std::time::Instant::now();
//!     let mut x = 1u64;
//!     while start.elapsed() < std::time::Duration::from_millis(100) {
//!         x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
//!     }
//!     x
//! };
//! btprof::with_labels(&[("endpoint", "checkout")], spin);
//! let _tenant = btprof::labels(&[("tenant", "acme")]); // until dropped
//! spin();
//! let profile = profiler.stop()?;
//! for stack in profile.stacks().filter(|s| !s.labels().is_empty()) {
//!     let labels: Vec<_> = stack.labels().iter().collect();
//!     println!("{labels:?}: {} samples", stack.count());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Reading folded files and comparing profiles
//!
//! [`Profile::read_folded`] reads a folded file of any tool into the same
//! model; [`diff::compare`] tells which functions' share of samples grew
//! beyond a threshold and sampling noise, and [`report`] prints the
//! result.
//!
//! ```
//! use btprof::diff::{compare, DiffOptions};
//! use btprof::report::{diff_report, Format};
//! use btprof::Profile;
//!
//! # fn main() -> Result<(), btprof::ReadError> {
//! let base = Profile::read_folded_from(&b"main;parse 900\nmain;render 100\n"[..], "base")?;
//! let new = Profile::read_folded_from(&b"main;parse 600\nmain;render 400\n"[..], "new")?;
//! let report = compare(&base, &new, &DiffOptions::default());
//! assert!(report.regressed());
//! assert_eq!(report.regressions().next().unwrap().name, "render");
//! print!("{}", diff_report(&report, Format::Text, Some(10)));
//! # Ok(())
//! # }
//! ```
//!
//! # Crate layout
//!
//! The folders follow the data path, and each imports only from the
//! folders left of it:
//!
//! ```text
//!  record/                 profile/              analysis/             formats/
//!  Profiler ─ sampler ──►                   ──►  functions (self,  ──►  folded (write)
//!    symbolise (symbols)    Profile              total), diff +         flamegraph (SVG,
//!    dumps, dump signal,    names, frames,       significance,          plain and diff)
//!    scope guard,           threads, stacks,     report (text,          sidecar (JSON
//!    thread names           RunInfo, Stats       Markdown, JSON)        run metadata),
//!                                                                       pprof; every file
//!                                                                       all or nothing
//!                                                                       (output_file)
//!  formats/folded (read: folded files, other profilers' raw output) ─►
//! ```
//!
//! [`Profiler::stop`] symbolises what the sampler ([`btprof_sampler`])
//! took, with [`btprof_symbols`], into a [`Profile`]. Every output
//! ([`Profile::write_folded`], [`Profile::write_flamegraph`],
//! [`formats::flamegraph::write_differential`], [`Profile::write_pprof`])
//! and analysis ([`analysis::functions`], [`diff::compare`], [`report`])
//! takes a `Profile`.
//!
//! Beside that path, [`thread_dump`] answers "what is each thread doing
//! right now?" ([`ThreadDump::capture`], [`backtrace`]) with the
//! sampler's one-shot capture and the same symbol resolver.

pub mod analysis;
pub mod duration;
mod error;
pub mod formats;
pub mod profile;
#[cfg(feature = "push")]
pub mod push;
pub mod record;
pub mod thread_dump;
pub mod watchdog;

pub use analysis::{diff, report};
/// Labels for the samples of a region of code (see [Labels](#labels)).
pub use btprof_sampler::labels::{labels, with_labels, LabelGuard};
/// Why sampling or a capture failed (inside [`Error::Sampler`]).
pub use btprof_sampler::Error as SamplerError;
pub use btprof_sampler::{
    clock_from_env, Mode, Progress, SampleClock, SamplerStats as Stats, ThreadCpu,
    DEFAULT_MAX_STACKS,
};
pub use diff::{DiffOptions, DiffReport};
pub use error::Error;
pub use formats::flamegraph::FlamegraphOptions;
pub use formats::folded::{self as folded, FoldOptions, ReadError};
pub use profile::{LabelSet, Profile, RunInfo, Stack};
#[cfg(feature = "push")]
pub use push::{Push, PushStats};
pub use record::lost_samples::signal_blocked_warnings;
pub use record::scope::{self as scope, profile_scope, ProfileScope};
pub use record::{
    register_current_thread, DumpStats, Profiler, ProfilerBuilder, Symbolize, WarmUpStats,
};
pub use thread_dump::{backtrace, Frame, Thread, ThreadBacktrace, ThreadDump, ThreadState};
pub use watchdog::{Heartbeat, Stall, Watchdog, WatchdogBuilder};

/// For btprof's tests and benchmarks only: not part of the API.
#[doc(hidden)]
pub mod test_hooks {
    /// DWARF loads ([`btprof_symbols::Resolver::dwarf_loads`]) the last
    /// [`crate::Profiler::stop`] in this process did itself, not counting
    /// what the warm-up had loaded before.
    pub fn stop_dwarf_loads() -> u64 {
        crate::record::stop_dwarf_loads()
    }
}

/// This btprof's version, as written into run metadata.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The signal [`ProfilerBuilder::dump_on_signal`] is usually given
/// (`kill -USR2 PID` asks for a dump), so an application needs no `libc`
/// for it.
pub const DUMP_SIGNAL: i32 = libc::SIGUSR2;

/// The signal the Linux sampler interrupts threads with unless
/// [`ProfilerBuilder::signal`] picks another (`SIGURG`, whose default
/// action is to ignore it, so one still queued across `exec` is harmless).
#[cfg(target_os = "linux")]
pub use btprof_sampler::default_signal;

/// The README's Rust examples, compiled and run as doctests so that the
/// README cannot show code that does not build.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
