//! For btprof's own tests: not part of the API. Built with the
//! `test-hooks` feature only, which this crate's own tests turn on (a
//! dev-dependency on itself), so that the hooks stay out of the handler
//! everywhere else.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Makes every handler on thread `tid` spend `cpu` of its CPU time after
/// it claimed its slot (zero: off), as a slow walk would.
pub fn set_handler_delay(tid: u64, cpu: Duration) {
    super::signal::handler::HANDLER_TEST_DELAY_TID.store(tid as i32, Relaxed);
    super::signal::handler::HANDLER_TEST_DELAY_NS.store(cpu.as_nanos() as u64, Relaxed);
}

/// While `on`, the perf clock opens ring events on no thread found at
/// start but the one that owns the rings, as when the descriptor budget is
/// spent: the others are handed to signal timers of their own.
pub fn spend_the_ring_descriptor_budget(on: bool) {
    super::clocks::ring::born_threads::NO_FD_BUDGET.store(on, Relaxed);
}

/// While `on`, no listing of the threads falls due: what the sampler
/// finds then, it finds without one.
pub fn hold_back_listings(on: bool) {
    super::engine::HOLD_LISTINGS.store(on, Relaxed);
}

/// From now on the sampler reads no samples from the rings (but at the
/// stop) until a listing has found a thread gone: that listing
/// looks at it before its last samples are in, as one may on a busy
/// machine, and the next once they are. `false` turns it off.
pub fn hold_back_ring_drains_until_an_exit(on: bool) {
    super::engine::HOLD_DRAINS.store(on, Relaxed);
}

/// While `on`, a born thread's CPU time at its exit is the kernel's count
/// of the task clock that paced its ring samples, not an estimate from its
/// own CPU clock: on a virtual machine the two differ by the time the host
/// stole.
pub fn kernel_counts_only(on: bool) {
    super::engine::KERNEL_COUNTS_ONLY.store(on, Relaxed);
}

/// Makes every count read from now on of a perf timer, or of the ring
/// events opened on a thread, seem `stolen` more (zero: off), as on a
/// virtual machine whose host stopped the CPU under the thread that long:
/// the counts include such time, the thread's CPU clock does not.
pub fn add_stolen_time_to_counts(stolen: Duration) {
    super::kernel::task_clock::TEST_STOLEN_NS.store(stolen.as_nanos() as u64, Relaxed);
}

/// Runs `hook` (while set) on the sampler thread as the ring events are
/// about to open, after the first listing read the threads' names: what a
/// thread does at that moment leaves no record in the rings.
pub fn run_before_ring_events(hook: Option<fn()>) {
    *super::engine::BEFORE_RING_EVENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = hook;
}
