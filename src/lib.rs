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

#[path = "analysis/diff.rs"]
pub mod diff;
#[path = "record/dump.rs"]
mod dump;
#[path = "record/dump_signal.rs"]
mod dump_signal;
mod error;
#[path = "record/recorded_flamegraph.rs"]
pub mod flamegraph;
#[path = "formats/folded/write.rs"]
pub mod folded;
#[path = "formats/flamegraph.rs"]
pub mod folded_flamegraph;
#[path = "profile/mod.rs"]
pub mod folded_profile;
#[path = "analysis/functions.rs"]
pub mod functions;
#[path = "record/recorded_profile.rs"]
mod profile;
#[path = "record/profiler.rs"]
mod profiler;
#[path = "analysis/report/mod.rs"]
pub mod render;
#[path = "profile/run_info.rs"]
pub mod run_info;
#[path = "record/scope.rs"]
pub mod scope;
#[path = "record/symbolize.rs"]
mod symbolize;

pub use btprof_sampler::{Mode, Progress, SamplerStats as Stats, ThreadInfo, DEFAULT_MAX_STACKS};
pub use diff::{DiffOptions, DiffReport};
pub use dump::DumpStats;
pub use error::Error;
pub use flamegraph::FlamegraphOptions;
pub use folded::FoldOptions;
pub use folded_profile::{FoldedProfile, ReadError};
pub use profile::{Profile, Stack};
pub use profiler::{Profiler, ProfilerBuilder};
pub use run_info::RunInfo;
pub use scope::{profile_scope, ProfileScope};
