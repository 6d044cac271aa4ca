//! The perf clock's signal timers, for the threads its rings cannot take.

pub(crate) mod thread_timers;
