//! For btprof's own tests, not the API: built only with the `test-hooks` feature (a
//! dev-dependency of this crate on itself), so the hooks stay out of the handler elsewhere.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// While set, no listing of the threads falls due.
pub(crate) static HOLD_LISTINGS: AtomicBool = AtomicBool::new(false);
/// While set, the rings are read only at the stop, until a listing finds a thread gone.
pub(crate) static HOLD_DRAINS: AtomicBool = AtomicBool::new(false);
/// Run on the sampler thread just before the ring events open.
pub(crate) static BEFORE_RING_EVENTS: Mutex<Option<fn()>> = Mutex::new(None);
/// While set, born threads' CPU time at exit is their task clock's count.
pub(crate) static KERNEL_COUNTS_ONLY: AtomicBool = AtomicBool::new(false);
/// While set, the ring events open on no thread found at start but the rings' owner.
pub(crate) static NO_FD_BUDGET: AtomicBool = AtomicBool::new(false);
/// What every count read from a task clock seems to hold more.
pub(crate) static TEST_STOLEN_NS: AtomicU64 = AtomicU64::new(0);

/// Makes every handler on thread `tid` spend `cpu` of CPU time after claiming its slot (zero:
/// off), as a slow walk would.
pub fn set_handler_delay(tid: u64, cpu: Duration) {
    super::signal::handler::HANDLER_TEST_DELAY_TID.store(tid as i32, Relaxed);
    super::signal::handler::HANDLER_TEST_DELAY_NS.store(cpu.as_nanos() as u64, Relaxed);
}

/// While `on`, the perf clock opens ring events only on the rings' owner, as when the
/// descriptor budget is spent; the other threads found at start get signal timers.
pub fn spend_the_ring_descriptor_budget(on: bool) {
    NO_FD_BUDGET.store(on, Relaxed);
}

/// While `on`, no listing of the threads falls due.
pub fn hold_back_listings(on: bool) {
    HOLD_LISTINGS.store(on, Relaxed);
}

/// While `on`, no ring samples are read (but at the stop) until a listing found a thread gone,
/// so that listing sees it before its last samples, as on a busy machine.
pub fn hold_back_ring_drains_until_an_exit(on: bool) {
    HOLD_DRAINS.store(on, Relaxed);
}

/// While `on`, a born thread's CPU time at its exit is its task clock's count, not the
/// estimate from its CPU clock (they differ by time a VM's host stole).
pub fn kernel_counts_only(on: bool) {
    KERNEL_COUNTS_ONLY.store(on, Relaxed);
}

/// Makes every count read from now on of a perf timer or ring events seem `stolen` more (zero:
/// off), as a VM's host stealing time would: counts include it, the CPU clock does not.
pub fn add_stolen_time_to_counts(stolen: Duration) {
    TEST_STOLEN_NS.store(stolen.as_nanos() as u64, Relaxed);
}

/// Runs `hook` (while set) on the sampler thread just before the ring events open, after the
/// first listing read the threads' names: what a thread does then leaves no record.
pub fn run_before_ring_events(hook: Option<fn()>) {
    *BEFORE_RING_EVENTS.lock().unwrap_or_else(|e| e.into_inner()) = hook;
}
