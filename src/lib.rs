#![doc = include_str!("../README.md")]
//!
//! # Crate layout
//!
//! [`Profiler`] starts a sampler ([`btprof_sampler`]) of the current process;
//! [`Profiler::stop`] symbolises the raw stacks ([`btprof_symbols`]) into a
//! [`Profile`], which writes folded stacks ([`folded`]) and SVG flamegraphs
//! ([`flamegraph`]).

mod error;
pub mod flamegraph;
pub mod folded;
mod profile;
mod profiler;
mod symbolize;

pub use btprof_sampler::{Mode, Progress, SamplerStats as Stats, ThreadInfo};
pub use error::Error;
pub use flamegraph::FlamegraphOptions;
pub use folded::FoldOptions;
pub use profile::{Profile, Stack};
pub use profiler::{Profiler, ProfilerBuilder};
