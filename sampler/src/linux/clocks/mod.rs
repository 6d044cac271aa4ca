//! The clocks that pace samples, each with the state it keeps per thread.
//!
//! - [`ring`]: the perf clock; the kernel samples every thread into ring
//!   buffers by its CPU time, with no signal.
//! - [`timers`]: per-thread perf timers that signal the threads the rings
//!   cannot take, once per period of their CPU time.
//! - [`paced`]: cpu mode where perf events are refused; the sampler thread
//!   signals each thread as its CPU time falls due.
//!
//! Wall mode's one clock is the sampler thread's ticks, with one-shot CPU
//! timers for running threads ([`super::kernel::cpu_timers`]).

pub(crate) mod paced;
pub(crate) mod ring;
pub(crate) mod split_mix;
pub(crate) mod timers;
