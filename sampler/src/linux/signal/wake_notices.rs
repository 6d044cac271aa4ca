//! Wake notices: which idle threads ran again. The sampler-thread clock looks only at threads
//! that ran since the last listing, so an idle thread gets a wake timer
//! ([`crate::linux::kernel::cpu_timers::PosixTimer::open_wake`]) whose signal sets its bit.

use core::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed};

/// How many threads may hold a wake timer at once.
pub(crate) const WAKE_NOTICES: usize = 8192;

const WORDS: usize = WAKE_NOTICES / 64;

static BITS: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

/// The handler's side: notice `index` fired (ignored past the end).
pub(crate) fn note(index: usize) {
    if let Some(word) = BITS.get(index / 64) {
        word.fetch_or(1 << (index % 64), Relaxed);
    }
}

/// The sampler's side: appends the noted indices to `out`, clearing them.
pub(crate) fn take(out: &mut Vec<usize>) {
    for (i, word) in BITS.iter().enumerate() {
        if word.load(Relaxed) == 0 {
            continue;
        }
        let mut bits = word.swap(0, Acquire);
        while bits != 0 {
            out.push(i * 64 + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
    }
}

/// Forgets every notice, at the start of a run.
pub(crate) fn clear() {
    for word in &BITS {
        word.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_taken_once_each() {
        clear();
        for i in [0, 63, 64, 4097, WAKE_NOTICES - 1, WAKE_NOTICES] {
            note(i);
        }
        let mut out = Vec::new();
        take(&mut out);
        assert_eq!(out, vec![0, 63, 64, 4097, WAKE_NOTICES - 1]);
        out.clear();
        take(&mut out);
        assert!(out.is_empty());
    }
}
