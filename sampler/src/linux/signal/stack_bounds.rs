//! How far a walk from sp may go: the snapshot's mapping holding sp, else a fixed span.

use super::{own_stack, stack_regions};

/// How far above sp a walk may go when the snapshot lacks the stack: a default thread stack.
pub(crate) const UNKNOWN_STACK_SPAN: u64 = 8 << 20;

/// Where a walk from `sp` must stop, the top of the thread's own stack block if it is one
/// ([`own_stack`]), and whether the snapshot lists the stack. The bound only limits a corrupt
/// chain, as reads are fault-safe; an unlisted stack gets a fixed span.
pub(crate) fn stack_bounds(sp: u64) -> (u64, Option<u64>, bool) {
    let region = stack_regions::region_containing(sp);
    let high = region.map_or(sp.saturating_add(UNKNOWN_STACK_SPAN), |(_, high)| high);
    let own_top = region.and_then(|region| own_stack::readable_top(sp, region));
    (high, own_top, region.is_some())
}
