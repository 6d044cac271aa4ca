//! How large the perf clock's rings are, and how much stack each sample
//! copies: large enough to hold what a busy machine can keep the sampler
//! thread from reading, small enough that mapping them (every page is
//! allocated and locked at once) stays cheap and within the locked-memory
//! limits of unprivileged users.

use crate::linux::signal::stack_copy::COPY_WORDS;

/// Bytes of user stack each ring sample copies for CFI unwinding: as much
/// as a handler copies ([`COPY_WORDS`]), so that deep recursions and
/// frames under large stack buffers are walked in full.
pub(crate) const STACK_BYTES: u32 = (COPY_WORDS * 8) as u32;
/// The copy in rings too small to hold [`MIN_RING_RECORDS`] records of
/// [`STACK_BYTES`] (where locked memory is short).
const SMALL_STACK_BYTES: u32 = 8 << 10;
/// Fewest records a ring should hold: at one sample per period on its
/// CPU, the time the sampler thread has to read it.
const MIN_RING_RECORDS: usize = 64;
/// Data pages per CPU's ring, largest first; each record reserves the
/// whole [`STACK_BYTES`]. A ring is no larger than what holds
/// [`RING_HOLDS_NS`] at the rate ([`ring_pages_for`]), all of them at most
/// [`RING_MEMORY`]; where locked memory is short (`perf_event_mlock_kb`
/// per CPU, then `RLIMIT_MEMLOCK`), the next size is tried.
const RING_PAGES: [usize; 9] = [2048, 1024, 512, 256, 128, 64, 32, 16, 8];
/// How long (ns) a ring should hold at one sample per period on its CPU
/// (and at least [`MIN_RING_RECORDS`]): no more, as mapping a ring
/// allocates every page of it.
const RING_HOLDS_NS: u64 = 500_000_000;
/// The most memory all the rings may take together.
const RING_MEMORY: usize = 16 << 20;

/// The ring sizes to try, in data pages per CPU, largest first, for
/// `cpus` CPUs at one sample per `period_ns` on each: from what
/// [`ring_pages_for`] needs (within [`RING_MEMORY`]) down to the
/// smallest, where locked memory is short.
pub(crate) fn candidates(
    period_ns: u64,
    max_stack: usize,
    page: usize,
    cpus: usize,
) -> impl Iterator<Item = usize> + Clone {
    let smallest = RING_PAGES[RING_PAGES.len() - 1];
    let largest = ring_pages_for(period_ns, max_stack, page);
    RING_PAGES.into_iter().filter(move |&pages| {
        pages == smallest || (pages <= largest && pages * page * cpus <= RING_MEMORY)
    })
}

/// The most a sample record takes: the whole stack copy, the registers
/// and the longest call chain.
pub(crate) fn record_bytes(stack_bytes: u32, max_stack: usize) -> usize {
    stack_bytes as usize + 8 * (max_stack + 32)
}

/// The most pages a ring needs at one sample per `period_ns` on its CPU:
/// the fewest of [`RING_PAGES`] that hold [`RING_HOLDS_NS`] of records,
/// and at least [`MIN_RING_RECORDS`].
fn ring_pages_for(period_ns: u64, max_stack: usize, page: usize) -> usize {
    let records = (RING_HOLDS_NS / period_ns.max(1)).max(MIN_RING_RECORDS as u64) as usize;
    let bytes = records.saturating_mul(record_bytes(STACK_BYTES, max_stack));
    RING_PAGES
        .iter()
        .rev()
        .copied()
        .find(|&pages| pages * page >= bytes)
        .unwrap_or(RING_PAGES[0])
}

/// Bytes of stack each sample copies in rings of `ring_bytes`: all of
/// [`STACK_BYTES`] where they still hold [`MIN_RING_RECORDS`] records.
pub(crate) fn stack_bytes(ring_bytes: usize) -> u32 {
    if ring_bytes / STACK_BYTES as usize >= MIN_RING_RECORDS {
        STACK_BYTES
    } else {
        SMALL_STACK_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_sized_by_the_rate() {
        let at = |hz: u64| ring_pages_for(1_000_000_000 / hz, 127, 4096);
        // 500 ms of 1000 Hz is more than the largest ring holds.
        assert_eq!(at(1000), 2048);
        assert_eq!(at(250), 1024);
        // 64 records at least, whatever the rate.
        assert_eq!(at(100), 512);
        assert_eq!(at(1), 512);
    }

    #[test]
    fn all_the_rings_fit_in_their_memory_whatever_the_cpus() {
        let tried: Vec<usize> = candidates(1_000_000, 127, 4096, 4).collect();
        // 8 MiB per CPU on four CPUs is over 16 MiB: 4 MiB first.
        assert_eq!(tried, [1024, 512, 256, 128, 64, 32, 16, 8]);
        let tried: Vec<usize> = candidates(10_000_000, 127, 4096, 64).collect();
        assert_eq!(tried, [64, 32, 16, 8]);
        let tried: Vec<usize> = candidates(10_000_000, 127, 4096, 1024).collect();
        // The smallest is tried however many CPUs there are.
        assert_eq!(tried, [8]);
    }
}
