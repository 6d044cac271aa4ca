//! For btprof's benchmarks only (`sampler/benches/stack_reads.rs`, the
//! overhead benchmark's floor): not part of the API.

pub use super::handler::checked_memory::{probe, CheckedMemory, WINDOW_WORDS};
pub use super::task_clock::TaskClock;
