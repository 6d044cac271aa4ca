//! The clocks that pace samples, each with the state it keeps per thread.
//!
//! - [`ring`]: the perf clock. The kernel samples every thread into ring
//!   buffers by its own CPU time, with no signal.
//! - [`timers`]: the perf clock's hand-offs. A thread the rings cannot
//!   take gets a perf timer that signals it once per period of its CPU
//!   time.
//! - [`paced`]: the sampler-thread clock in cpu mode, where perf events
//!   are refused. The sampler thread signals each thread as its CPU time
//!   falls due.
//!
//! Wall mode has one clock, the sampler thread's ticks; its requests to
//! running threads are one-shot CPU timers ([`super::kernel::cpu_timers`]).

pub(crate) mod paced;
pub(crate) mod ring;
pub(crate) mod split_mix;
pub(crate) mod timers;
