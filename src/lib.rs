#![doc = include_str!("../README.md")]
//!
//! # Crate layout
//!
//! [`Profiler`] starts a sampler ([`btprof_sampler`]) of the current process;
//! [`Profiler::stop`] symbolises the raw stacks ([`btprof_symbols`]) into a
//! [`Profile`], which writes folded stacks ([`folded`]) and SVG flamegraphs
//! ([`flamegraph`]).

mod dump;
mod dump_signal;
mod error;
pub mod flamegraph;
pub mod folded;
mod profile;
mod profiler;
pub mod run_info;
pub mod scope;
mod symbolize;

pub use btprof_sampler::{Mode, Progress, SamplerStats as Stats, ThreadInfo, DEFAULT_MAX_STACKS};
pub use dump::DumpStats;
pub use error::Error;
pub use flamegraph::FlamegraphOptions;
pub use folded::FoldOptions;
pub use profile::{Profile, Stack};
pub use profiler::{Profiler, ProfilerBuilder};
pub use run_info::RunInfo;
pub use scope::{profile_scope, ProfileScope};
