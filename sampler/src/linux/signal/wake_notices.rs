//! Wake notices: which idle threads started to run again.
//!
//! On the sampler-thread clock the sampler looks only at the threads that
//! ran since the last listing of the threads, and with thousands of threads
//! listings come hundreds of milliseconds apart. An idle thread that
//! starts to run in between is given a one-shot CPU timer at the listing
//! that found it idle ([`crate::linux::kernel::cpu_timers::PosixTimer::
//! open_wake`]): once it used a period of CPU time, the timer raises the
//! profiling signal in that thread, and the handler sets the timer's bit
//! here. The sampler thread takes the bits at its next wakeup and looks
//! at those threads from then on. Setting a bit is one atomic `fetch_or`,
//! async-signal-safe; the bits are static, so a notice that lands after
//! the profiler stopped touches memory that still exists.

use core::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed};

/// How many threads may hold a wake timer at once.
pub(crate) const WAKE_NOTICES: usize = 8192;

const WORDS: usize = WAKE_NOTICES / 64;

static BITS: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

/// The handler's side: the timer with notice `index` fired. Indices past
/// [`WAKE_NOTICES`] are ignored.
pub(crate) fn note(index: usize) {
    if let Some(word) = BITS.get(index / 64) {
        word.fetch_or(1 << (index % 64), Relaxed);
    }
}

/// The sampler thread's side: appends the indices noted since the last
/// call to `out`, and clears them.
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

/// Forgets every notice (at the start of a run: one that landed after the
/// last run stopped says nothing about this one).
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
