//! For btprof's benchmarks only (`sampler/benches/stack_reads.rs`, the overhead floor).

pub use super::kernel::task_clock::TaskClock;
pub use super::signal::checked_memory::{probe, CheckedMemory, WINDOW_WORDS};
