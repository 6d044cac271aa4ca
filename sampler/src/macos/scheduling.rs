//! Getting the sampler thread onto a CPU on time (macOS).
//!
//! While the sampler holds a thread suspended, that thread waits for the
//! sampler: if the sampler is preempted in that window, the thread stays
//! frozen for a scheduling quantum (10 ms). And the wake-up itself is late
//! when the sampler's priority is low: in a background process the kernel
//! coalesces a 1 ms `mach_wait_until` with a leeway of up to about 32 ms.
//!
//! So the sampler thread runs at the `QOS_CLASS_USER_INTERACTIVE` quality
//! of service: base priority 46 for a normal app's thread on current macOS
//! (47 only for the focal app's main thread), above every default-QoS
//! thread of the program (31) and near the top of what a thread may take
//! without privileges (Sentry's sampler uses priority 50 for the same
//! reason), and the timer tier with the least coalescing. The priority it
//! gets is measured on a Mac by `scripts/mac-first-run` (`ps -M`). It does not make the sampler
//! take more CPU: it sleeps between ticks. Late wake-ups that remain are
//! reported as missed ticks.

/// Raises the calling thread's QoS class to user-interactive; returns
/// whether the system accepted it (it fails for a thread whose QoS was
/// fixed by `pthread_setschedparam`, which btprof never calls).
pub(crate) fn raise_sampler_priority() -> bool {
    // SAFETY: no pointer arguments; changes only the calling thread's QoS.
    let rc = unsafe {
        libc::pthread_set_qos_class_self_np(libc::qos_class_t::QOS_CLASS_USER_INTERACTIVE, 0)
    };
    rc == 0
}
