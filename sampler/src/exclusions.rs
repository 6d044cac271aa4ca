//! Threads the sampler must never interrupt besides its own.
//!
//! A profiler that symbolises and writes dumps while sampling runs threads
//! of its own; sampled, they would show up in the profile they produce and,
//! worse, be stopped in the middle of the allocator. Such a thread
//! registers itself here with [`exclude_current_thread`]. The set is a
//! fixed array of atomics, so the sampler reads it every tick without a
//! lock or an allocation.

use std::sync::atomic::{AtomicU64, Ordering};

/// Threads that can be excluded at once; a profiler needs one or two.
const CAPACITY: usize = 8;

/// Thread ids (the id the platform's sampler uses), 0 for a free entry.
static EXCLUDED: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];

/// Keeps the calling thread out of every sampler until dropped.
#[must_use = "the thread is sampled again when this is dropped"]
#[derive(Debug)]
pub struct Excluded {
    index: usize,
}

impl Drop for Excluded {
    fn drop(&mut self) {
        EXCLUDED[self.index].store(0, Ordering::Release);
    }
}

/// Excludes the calling thread from sampling until the guard is dropped.
/// `None` when every entry is taken (the thread is then sampled).
pub fn exclude_current_thread() -> Option<Excluded> {
    exclude(crate::current_thread_id())
}

fn exclude(tid: u64) -> Option<Excluded> {
    EXCLUDED.iter().enumerate().find_map(|(index, entry)| {
        entry
            .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Excluded { index })
    })
}

/// Whether a thread is excluded.
pub(crate) fn is_excluded(tid: u64) -> bool {
    tid != 0 && EXCLUDED.iter().any(|e| e.load(Ordering::Acquire) == tid)
}

/// btprof's own threads that are running (the sampler, dump and warm-up
/// threads), by id, 0 for a free entry: a thread dump leaves them out.
static OWN: [AtomicU64; CAPACITY] = [const { AtomicU64::new(0) }; CAPACITY];

/// Marks the calling thread as one of btprof's own until dropped.
pub(crate) struct OwnThread(Option<usize>);

impl OwnThread {
    /// Registers the calling thread (left unregistered when every entry
    /// is taken: it then shows in thread dumps, which is harmless).
    pub(crate) fn register() -> OwnThread {
        let tid = crate::current_thread_id();
        OwnThread(OWN.iter().position(|entry| {
            entry
                .compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }))
    }
}

impl Drop for OwnThread {
    fn drop(&mut self) {
        if let Some(index) = self.0 {
            OWN[index].store(0, Ordering::Release);
        }
    }
}

/// Whether a thread is one of btprof's own or excluded from sampling.
pub(crate) fn is_own_or_excluded(tid: u64) -> bool {
    is_excluded(tid) || (tid != 0 && OWN.iter().any(|e| e.load(Ordering::Acquire) == tid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excluded_thread_is_excluded_until_the_guard_drops() {
        // Ids no real thread has, so parallel tests cannot collide.
        let guard = exclude(u64::MAX - 1).expect("a free entry");
        assert!(is_excluded(u64::MAX - 1));
        assert!(!is_excluded(u64::MAX - 2));
        drop(guard);
        assert!(!is_excluded(u64::MAX - 1));
        assert!(!is_excluded(0), "0 marks a free entry, never a thread");
    }
}
