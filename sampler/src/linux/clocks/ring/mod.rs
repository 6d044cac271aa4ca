//! The perf clock: task-clock events, inherited by every thread created,
//! write each thread's samples into one ring buffer per CPU.

pub(crate) mod born_threads;
pub(crate) mod perf_ring;
pub(crate) mod ring_samples;
