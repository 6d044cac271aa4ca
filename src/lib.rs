#![doc = include_str!("../README.md")]
//!
//! # Crate layout
//!
//! [`Profiler`] starts a sampler ([`btprof_sampler`]) of the current process;
//! [`Profiler::stop`] symbolises the raw stacks ([`btprof_symbols`]) into a
//! [`Profile`], which writes folded stacks ([`folded`]) and SVG flamegraphs
//! ([`flamegraph`]).
//!
//! Profiles are compared with [`diff`]: [`FoldedProfile`] reads folded
//! files of any tool back (or takes a `Profile`), [`functions`] counts each
//! function's self and total samples, [`diff::compare`] applies the
//! regression gate, [`render`] prints reports and [`folded_flamegraph`]
//! draws re-rendered and differential flamegraphs.

pub mod diff;
mod dump;
mod dump_signal;
mod error;
pub mod flamegraph;
pub mod folded;
pub mod folded_flamegraph;
pub mod folded_profile;
pub mod functions;
mod lost_samples;
mod profile;
mod profiler;
pub mod render;
pub mod run_info;
pub mod scope;
mod symbolize;
mod walk_ends;

pub use btprof_sampler::{
    Mode, Progress, SampleClock, SamplerStats as Stats, ThreadCpu, ThreadInfo, DEFAULT_MAX_STACKS,
};
pub use diff::{DiffOptions, DiffReport};
pub use dump::DumpStats;
pub use error::Error;
pub use flamegraph::FlamegraphOptions;
pub use folded::FoldOptions;
pub use folded_profile::{FoldedProfile, ReadError};
pub use lost_samples::signal_blocked_warnings;
pub use profile::{Profile, Stack};
pub use profiler::{Profiler, ProfilerBuilder};
pub use run_info::RunInfo;
pub use scope::{profile_scope, ProfileScope};
