//! Threads the sampler must never interrupt besides its own.
//!
//! A profiler that symbolises and writes dumps while sampling runs threads
//! of its own; sampled, they would show up in the profile they produce and,
//! worse, be stopped in the middle of the allocator. Such a thread
//! registers itself here with [`exclude_current_thread`]. The set is a
//! fixed array of atomics, so the sampler reads it every tick without a
//! lock or an allocation.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// Whether a thread is kept out of sampling and thread dumps: excluded,
/// one of btprof's own, or one of btprof's own that finished its work less
/// than [`ENDED_GRACE`] ago.
///
/// The last: a thread of btprof's own still runs after its body returns
/// and its guards drop (the C library's and Rust's teardown, unmapping its
/// signal stack), and a sampler that reads samples after the fact (the
/// perf rings) looks at its exclusion only then: a short-lived warm-up
/// thread's exit showed up in a profile under its name.
pub(crate) fn is_excluded(tid: u64) -> bool {
    tid != 0
        && (EXCLUDED.iter().any(|e| e.load(Ordering::Acquire) == tid)
            || OWN.iter().any(|e| e.load(Ordering::Acquire) == tid)
            || ended_lately(tid))
}

/// How long a thread of btprof's own stays out of sampling after its body
/// returned: its teardown takes microseconds, a second covers a machine
/// too busy to run it. A new thread that reuses its id so soon (the kernel
/// hands ids out in turn) would go unsampled for that long.
const ENDED_GRACE: Duration = Duration::from_secs(1);

/// Threads of btprof's own that finished lately: their ids, and when
/// (nanoseconds since [`epoch`]), the oldest overwritten first.
static ENDED: [(AtomicU64, AtomicU64); CAPACITY] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; CAPACITY];
static ENDED_NEXT: AtomicUsize = AtomicUsize::new(0);

/// The clock [`ENDED`] counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Reads the clock only for an id in [`ENDED`]: this runs for every ring
/// sample the sampler thread takes in.
fn ended_lately(tid: u64) -> bool {
    ENDED.iter().any(|(id, at)| {
        id.load(Ordering::Acquire) == tid && {
            let now = epoch().elapsed().as_nanos() as u64;
            now.saturating_sub(at.load(Ordering::Acquire)) < ENDED_GRACE.as_nanos() as u64
        }
    })
}

/// Records that the thread `tid` of btprof's own finished its work now.
fn ended(tid: u64) {
    let (id, at) = &ENDED[ENDED_NEXT.fetch_add(1, Ordering::Relaxed) % CAPACITY];
    id.store(0, Ordering::Release);
    at.store(epoch().elapsed().as_nanos() as u64, Ordering::Release);
    id.store(tid, Ordering::Release);
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
            ended(OWN[index].load(Ordering::Acquire));
            OWN[index].store(0, Ordering::Release);
        }
    }
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

    /// A thread of btprof's own is never sampled, nor for a while after its
    /// body returns (its teardown still runs); other threads are.
    #[test]
    fn an_own_thread_stays_out_of_sampling_through_its_teardown() {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let own = OwnThread::register();
            let tid = crate::current_thread_id();
            assert!(is_excluded(tid), "a running own thread");
            drop(own);
            tx.send(tid).unwrap();
        });
        let tid = rx.recv().unwrap();
        handle.join().unwrap();
        assert!(is_excluded(tid), "right after its body returned");
        assert!(!is_excluded(crate::current_thread_id()), "another thread");
    }
}
