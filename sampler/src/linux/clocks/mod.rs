//! The clocks that pace samples, each with its per-thread state: [`ring`]
//! (the kernel samples threads into perf rings, with no signal), [`timers`]
//! (perf timers signal the threads the rings cannot take) and [`paced`]
//! (where perf is refused, the sampler thread signals threads as their CPU
//! time falls due). Wall mode's one clock is the sampler thread's ticks.

pub(crate) mod paced;
pub(crate) mod ring;
pub(crate) mod split_mix;
pub(crate) mod timers;
