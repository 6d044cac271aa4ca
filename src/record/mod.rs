//! Recording this process: the [`Profiler`] and its builder, periodic
//! dumps and the signal that asks for one, and the scope guard. What it
//! records becomes a [`Profile`](crate::Profile) (`symbolize.rs`).

mod dump;
mod dump_signal;
pub mod lost_samples;
mod profiler;
pub mod scope;
pub(crate) mod symbolize;
pub(crate) mod thread_names;
pub(crate) mod walk_ends;
mod warm_up;

pub use dump::DumpStats;
#[cfg(feature = "push")]
pub(crate) use dump::MIN_INTERVAL;
pub(crate) use profiler::stop_dwarf_loads;
pub use profiler::{Profiler, ProfilerBuilder};
pub use symbolize::Symbolize;
pub use thread_names::register_current_thread;
pub use warm_up::WarmUpStats;
