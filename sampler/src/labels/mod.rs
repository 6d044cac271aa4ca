//! Labels: code marks a region (`endpoint=checkout`, `tenant=acme`), and
//! the samples its thread gives inside the region carry those labels, so a
//! profile can be split by request, tenant or test.
//!
//! ```
//! use btprof_sampler::labels;
//! let total = labels::with_labels(&[("endpoint", "checkout")], || 2 + 2);
//! let _guard = labels::labels(&[("tenant", "acme")]); // until dropped
//! # assert_eq!(total, 4);
//! ```
//!
//! Scopes nest: an inner scope's set is the outer one's with its labels
//! added, a name given again taking the inner value. Each distinct set is
//! interned once ([`sets`]); a sample stores its id. Which set a sample
//! gets is decided by the sample's time, not by when the sampler reads it
//! (`log.rs`).

pub(crate) mod log;
pub mod sets;

use std::cell::{Cell, OnceCell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;

pub use log::{monotonic_ns, Resolver};
pub use sets::{snapshot, LabelSet, LabelSets, NO_LABELS};

/// The calling thread's label state, in one thread-local so that a scope
/// costs one lookup of it.
struct Current {
    id: Cell<u32>,
    log: OnceCell<Arc<log::ThreadLog>>,
    children: RefCell<Option<sets::Children>>,
}

impl Drop for Current {
    fn drop(&mut self) {
        if let Some(log) = self.log.get() {
            log.exited();
        }
    }
}

thread_local! {
    static CURRENT: Current = const {
        Current {
            id: Cell::new(sets::NO_LABELS),
            log: OnceCell::new(),
            children: RefCell::new(None),
        }
    };
}

impl Current {
    /// Makes set `id` the thread's, returning the one it replaces.
    fn switch_to(&self, id: u32) -> u32 {
        let before = self.id.replace(id);
        if before != id {
            let log = self
                .log
                .get_or_init(|| log::register(crate::current_thread_id()));
            log.changed(before, id);
        }
        before
    }
}

/// The id of the calling thread's label set now.
pub fn current() -> u32 {
    CURRENT.try_with(|c| c.id.get()).unwrap_or(sets::NO_LABELS)
}

/// Runs `f` with `labels` added to the calling thread's labels.
pub fn with_labels<R>(labels: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    let _guard = self::labels(labels);
    f()
}

/// Adds `labels` to the calling thread's labels until the guard drops.
/// Guards must drop in the reverse order they were made, as scopes do.
pub fn labels(labels: &[(&str, &str)]) -> LabelGuard {
    let before = CURRENT
        .try_with(|current| {
            let parent = current.id.get();
            let id = match current.children.try_borrow_mut() {
                Ok(mut children) => children
                    .get_or_insert_with(Default::default)
                    .child(parent, labels),
                Err(_) => sets::child(parent, labels),
            };
            current.switch_to(id)
        })
        // The thread is being torn down: no sample of it is to come.
        .unwrap_or(sets::NO_LABELS);
    LabelGuard {
        before,
        _not_send: PhantomData,
    }
}

/// Restores the thread's labels from before [`labels`] when dropped.
/// It belongs to the thread that made it, so it is neither `Send` nor `Sync`.
#[must_use = "the labels apply only while the guard lives"]
pub struct LabelGuard {
    before: u32,
    _not_send: PhantomData<*const ()>,
}

impl Drop for LabelGuard {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|current| current.switch_to(self.before));
    }
}

impl std::fmt::Debug for LabelGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelGuard").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore() {
        assert_eq!(current(), NO_LABELS);
        let outer = labels(&[("endpoint", "checkout")]);
        let outer_id = current();
        with_labels(&[("tenant", "t1")], || {
            let set = sets::set(current());
            assert_eq!(set.get("endpoint"), Some("checkout"));
            assert_eq!(set.get("tenant"), Some("t1"));
        });
        assert_eq!(current(), outer_id);
        drop(outer);
        assert_eq!(current(), NO_LABELS);
    }

    #[test]
    fn a_sampler_sees_the_set_a_thread_had_at_each_time() {
        let _recording = log::recording();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tid = crate::current_thread_id();
            let before = monotonic_ns();
            let guard = labels(&[("phase", "a")]);
            let inside = monotonic_ns();
            drop(guard);
            let after = monotonic_ns();
            tx.send((tid, before, inside, after)).unwrap();
        })
        .join()
        .unwrap();
        let (tid, before, inside, after) = rx.recv().unwrap();
        let mut resolver = Resolver::default();
        assert_eq!(resolver.at(tid, before), NO_LABELS);
        assert_eq!(sets::set(resolver.at(tid, inside)).get("phase"), Some("a"));
        assert_eq!(resolver.at(tid, after), NO_LABELS);
        assert_eq!(resolver.at(tid + 1_000_000, inside), NO_LABELS);
    }
}
