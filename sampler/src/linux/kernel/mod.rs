//! Thin wrappers over the kernel's interfaces: perf events and their attributes, task clocks,
//! one-shot CPU timers, `/proc` listings and clocks, and the sampler thread's scheduling.

pub(crate) mod cpu_timers;
pub(crate) mod perf_attr;
pub(crate) mod scheduling;
pub(crate) mod task_clock;
pub(crate) mod threads;
