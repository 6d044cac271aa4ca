//! How large the perf clock's rings are: enough to hold what a busy machine
//! keeps the sampler thread from reading, few enough pages to map cheaply
//! (each is allocated and locked) within unprivileged locked-memory limits.

use crate::linux::signal::stack_copy::COPY_WORDS;

/// Bytes of user stack a ring sample copies for CFI unwinding: as much as
/// a handler ([`COPY_WORDS`]), for deep stacks and large stack buffers.
pub(crate) const STACK_BYTES: u32 = (COPY_WORDS * 8) as u32;
/// The copy in rings too small to hold [`MIN_RING_RECORDS`] records of
/// [`STACK_BYTES`] (where locked memory is short).
const SMALL_STACK_BYTES: u32 = 8 << 10;
/// Fewest records a ring should hold, so that at a slow rate the sampler
/// thread still has time to read it.
const MIN_RING_RECORDS: usize = 64;
/// Data pages per CPU's ring, largest first; where locked memory is short
/// (`perf_event_mlock_kb`, then `RLIMIT_MEMLOCK`), the next is tried.
const RING_PAGES: [usize; 9] = [2048, 1024, 512, 256, 128, 64, 32, 16, 8];
/// How long (ns) a ring should hold at one sample per period on its CPU,
/// and no longer, as mapping allocates every page.
const RING_HOLDS_NS: u64 = 500_000_000;
/// The most memory all the rings may take together.
const RING_MEMORY: usize = 16 << 20;

/// The ring sizes to try in pages per CPU, largest first: from what
/// [`ring_pages_for`] needs (within [`RING_MEMORY`]) down to the smallest.
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

/// The fewest of [`RING_PAGES`] that hold [`RING_HOLDS_NS`] of records at
/// one per `period_ns`, and at least [`MIN_RING_RECORDS`].
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
