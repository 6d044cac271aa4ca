//! The perf clock: task-clock events on the threads found at start, and
//! the copies the kernel makes of them in every thread they create, write
//! each thread's samples into one ring buffer per CPU.

pub(crate) mod born_cpu;
pub(crate) mod born_threads;
pub(crate) mod perf_ring;
pub(crate) mod ring_samples;
pub(crate) mod ring_size;
