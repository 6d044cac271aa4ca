//! Label sets, interned: a scope's set is its parent's with the scope's
//! labels added, and every distinct set gets one small id, so that a
//! sample stores a `u32` and the stack table keys on it.
//!
//! Entering a scope must be cheap enough for a request handler, so each
//! thread remembers the children it made (`Children`): a repeated scope
//! costs a hash and a string compare, and only a new one takes the lock.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use hashbrown::{DefaultHashBuilder, HashMap};

/// The id of the empty set: a sample taken outside every scope.
pub const NO_LABELS: u32 = 0;

/// The most distinct sets kept. Labels are for a bounded set of values
/// (endpoints, tenants, test names), as in every profile server; past this,
/// a new set is counted under [`OVERFLOW_LABEL`] rather than grow memory.
pub const MAX_SETS: usize = 1 << 16;

/// The label a scope gets once [`MAX_SETS`] sets exist.
pub const OVERFLOW_LABEL: (&str, &str) = ("btprof_labels", "too many distinct label sets");

/// Entries a thread's cache of children keeps before it starts over.
const CACHE_ENTRIES: usize = 256;

/// One set of labels: names unique, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSet(Arc<[(Arc<str>, Arc<str>)]>);

impl LabelSet {
    /// The labels, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether it holds no label.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many labels it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Its value for `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(name))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// `self` with `labels` added, a later value replacing an earlier one
    /// of the same name.
    fn with(&self, labels: &[(&str, &str)]) -> LabelSet {
        let mut merged: Vec<(Arc<str>, Arc<str>)> = self.0.to_vec();
        for &(name, value) in labels {
            match merged.iter_mut().find(|(k, _)| **k == *name) {
                Some(entry) => entry.1 = Arc::from(value),
                None => merged.push((Arc::from(name), Arc::from(value))),
            }
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        LabelSet(merged.into())
    }
}

/// Every set interned so far, indexed by id: what a profile's label ids
/// refer to. Cheap to clone; a snapshot never changes.
#[derive(Clone, Debug, Default)]
pub struct LabelSets(Arc<Vec<LabelSet>>);

impl LabelSets {
    /// The set with id `id`; the empty set for an unknown id.
    pub fn get(&self, id: u32) -> LabelSet {
        self.0.get(id as usize).cloned().unwrap_or_default()
    }

    /// How many sets it holds, the empty one included.
    pub fn len(&self) -> usize {
        self.0.len().max(1)
    }

    /// Whether only the empty set is known.
    pub fn is_empty(&self) -> bool {
        self.0.len() <= 1
    }

    /// A table of `sets`, id 0 being the empty set: for tests and tools
    /// that build profiles by hand.
    pub fn from_sets(sets: impl IntoIterator<Item = Vec<(String, String)>>) -> LabelSets {
        let mut all = vec![LabelSet::default()];
        all.extend(sets.into_iter().map(|labels| {
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            LabelSet::default().with(&pairs)
        }));
        LabelSets(Arc::new(all))
    }
}

struct Interner {
    sets: Vec<LabelSet>,
    ids: HashMap<LabelSet, u32>,
    /// A copy of `sets` handed out until a new set is added.
    snapshot: Option<LabelSets>,
}

fn interner() -> &'static Mutex<Interner> {
    static INTERNER: OnceLock<Mutex<Interner>> = OnceLock::new();
    INTERNER.get_or_init(|| {
        let empty = LabelSet::default();
        Mutex::new(Interner {
            ids: HashMap::from_iter([(empty.clone(), NO_LABELS)]),
            sets: vec![empty],
            snapshot: None,
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Interner> {
    // A panic while holding it leaves the sets whole (each change is one push).
    interner().lock().unwrap_or_else(|e| e.into_inner())
}

/// Every set interned so far.
pub fn snapshot() -> LabelSets {
    let mut interner = lock();
    if interner.snapshot.is_none() {
        interner.snapshot = Some(LabelSets(Arc::new(interner.sets.clone())));
    }
    interner.snapshot.clone().unwrap_or_default()
}

/// The set with id `id` (the empty set for an unknown id).
pub fn set(id: u32) -> LabelSet {
    lock().sets.get(id as usize).cloned().unwrap_or_default()
}

/// One remembered child: the labels it added, and its id.
struct Child {
    parent: u32,
    labels: Box<[(Box<str>, Box<str>)]>,
    id: u32,
}

/// A thread's memory of the children it made, so a repeated scope costs a
/// hash and a compare, not the interner's lock.
#[derive(Default)]
pub(crate) struct Children {
    hasher: DefaultHashBuilder,
    children: HashMap<u64, Child>,
}

impl Children {
    /// The id of set `parent` with `labels` added.
    pub(crate) fn child(&mut self, parent: u32, labels: &[(&str, &str)]) -> u32 {
        if labels.is_empty() {
            return parent;
        }
        let mut h = self.hasher.build_hasher();
        parent.hash(&mut h);
        labels.hash(&mut h);
        let hash = h.finish();
        if let Some(c) = self.children.get(&hash) {
            let same = c.parent == parent
                && c.labels.len() == labels.len()
                && c.labels
                    .iter()
                    .zip(labels)
                    .all(|((k, v), (k2, v2))| **k == **k2 && **v == **v2);
            if same {
                return c.id;
            }
        }
        let id = intern_child(parent, labels);
        if self.children.len() >= CACHE_ENTRIES {
            self.children.clear();
        }
        let labels = labels
            .iter()
            .map(|&(k, v)| (Box::from(k), Box::from(v)))
            .collect();
        self.children.insert(hash, Child { parent, labels, id });
        id
    }
}

/// The id of set `parent` with `labels` added, without a thread's memory.
pub(crate) fn child(parent: u32, labels: &[(&str, &str)]) -> u32 {
    if labels.is_empty() {
        return parent;
    }
    intern_child(parent, labels)
}

fn intern_child(parent: u32, labels: &[(&str, &str)]) -> u32 {
    let mut interner = lock();
    let base = interner
        .sets
        .get(parent as usize)
        .cloned()
        .unwrap_or_default();
    let full = interner.sets.len() >= MAX_SETS;
    let set = if full {
        base.with(&[OVERFLOW_LABEL])
    } else {
        base.with(labels)
    };
    if let Some(&id) = interner.ids.get(&set) {
        return id;
    }
    if full {
        // Only the overflow sets themselves may still be added, one per
        // parent at most, so the table stays bounded near MAX_SETS.
        if interner.sets.len() >= 2 * MAX_SETS {
            return parent;
        }
    }
    let id = interner.sets.len() as u32;
    interner.sets.push(set.clone());
    interner.ids.insert(set, id);
    interner.snapshot = None;
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_adds_to_its_parent_and_replaces_same_names() {
        let a = child(NO_LABELS, &[("endpoint", "checkout")]);
        let b = child(a, &[("tenant", "t1"), ("endpoint", "search")]);
        let labels: Vec<_> = set(b)
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(
            labels,
            [
                ("endpoint".to_owned(), "search".to_owned()),
                ("tenant".to_owned(), "t1".to_owned())
            ]
        );
        assert_eq!(set(a).get("endpoint"), Some("checkout"));
        assert_eq!(set(a).get("tenant"), None);
    }

    #[test]
    fn the_same_set_gets_the_same_id_whatever_the_path() {
        let a = child(NO_LABELS, &[("x", "1"), ("y", "2")]);
        let b = child(child(NO_LABELS, &[("y", "2")]), &[("x", "1")]);
        assert_eq!(a, b);
        assert_eq!(child(a, &[]), a);
        // Cached and uncached give the same id.
        assert_eq!(child(NO_LABELS, &[("x", "1"), ("y", "2")]), a);
        assert_ne!(child(NO_LABELS, &[("x", "1")]), a);
    }

    #[test]
    fn snapshots_hold_every_set_made_before_them() {
        let id = child(NO_LABELS, &[("snap", "shot")]);
        let sets = snapshot();
        assert_eq!(sets.get(id).get("snap"), Some("shot"));
        assert!(sets.get(NO_LABELS).is_empty());
        assert!(sets.get(u32::MAX).is_empty());
    }
}
