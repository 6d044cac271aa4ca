//! The sampler-thread clock's arithmetic in cpu mode: when each thread
//! falls due, what it is owed, and the CPU time no sample stood for.

pub(crate) mod cpu_debt;
pub(crate) mod cpu_wakeups;
pub(crate) mod exit_tails;
pub(crate) mod unseen_cpu;
pub(crate) mod wake_timers;
