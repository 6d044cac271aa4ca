#![doc = include_str!("../README.md")]
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
//! took, with [`btprof_symbols`], into a [`Profile`];
//! [`Profile::read_folded`] reads a folded file of any tool into the same
//! model. Every output ([`Profile::write_folded`],
//! [`Profile::write_flamegraph`], [`formats::flamegraph::write_differential`])
//! and analysis ([`analysis::functions`], [`diff::compare`], [`report`])
//! takes a `Profile`.
//!
//! Beside that path, [`thread_dump`] answers "what is each thread doing
//! right now?" ([`ThreadDump::capture`], [`backtrace`]) with the
//! sampler's one-shot capture and the same symbol resolver.

pub mod analysis;
mod error;
pub mod formats;
pub mod profile;
pub mod record;
pub mod thread_dump;

pub use analysis::{diff, report};
pub use btprof_sampler::{
    Mode, Progress, SampleClock, SamplerStats as Stats, ThreadCpu, DEFAULT_MAX_STACKS,
};
pub use diff::{DiffOptions, DiffReport};
pub use error::Error;
pub use formats::flamegraph::FlamegraphOptions;
pub use formats::folded::{self as folded, FoldOptions, ReadError};
pub use profile::{Profile, RunInfo, Stack};
pub use record::lost_samples::signal_blocked_warnings;
pub use record::scope::{self as scope, profile_scope, ProfileScope};
pub use record::{
    register_current_thread, DumpStats, Profiler, ProfilerBuilder, Symbolize, WarmUpStats,
};
pub use thread_dump::{backtrace, Frame, Thread, ThreadBacktrace, ThreadDump, ThreadState};

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
