//! The label sets of a profile's stacks: which labels (`endpoint=checkout`)
//! the thread had when its samples were taken (`btprof_sampler::labels`).
//!
//! A profile keeps a table of its distinct sets, id 0 being the empty set,
//! and each stack stores the id of its set: stacks of equal frames but
//! different labels are different stacks. Each set's label frame (the
//! folded format's view of it, [`label_frame`]) is interned as a name when
//! the set is, so folded lines name it by id like any frame.

use std::collections::HashMap;

pub use btprof_sampler::labels::LabelSet;
use btprof_sampler::labels::LabelSets;

use super::intern::{NameId, NameTable};
use super::{sanitize_frame, Profile, Stack};

/// A dense id for a label set of a profile ([`Profile::label_set`]); 0
/// ([`NO_LABELS`]) is the empty set.
pub type LabelId = u32;

/// The id of the empty set: a stack sampled outside every label scope, or
/// read from a folded file.
pub const NO_LABELS: LabelId = 0;

/// The frame folded output puts under the thread root of a labelled stack
/// (with [`crate::FoldOptions::label_frames`]): `[label: endpoint=checkout,
/// tenant=acme]`, the labels sorted by name, made safe for the folded
/// format ([`sanitize_frame`]). Its brackets and `label:` keep it apart
/// from every function name.
pub fn label_frame(set: &LabelSet) -> String {
    let mut frame = String::from("[label: ");
    for (i, (name, value)) in set.iter().enumerate() {
        if i > 0 {
            frame.push_str(", ");
        }
        frame.push_str(name);
        frame.push('=');
        frame.push_str(value);
    }
    frame.push(']');
    sanitize_frame(&frame).into_owned()
}

/// A set of labels from `(name, value)` pairs, sorted by name, a later
/// value replacing an earlier one of the same name.
pub fn label_set(pairs: &[(&str, &str)]) -> LabelSet {
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    // Id 1 of a table built from one set is that set.
    LabelSets::from_sets([owned]).get(1)
}

/// A profile's distinct label sets, each with its label frame's name.
#[derive(Clone, Debug)]
pub(crate) struct LabelTable {
    /// Indexed by [`LabelId`]; id 0 is the empty set, which has no frame.
    sets: Vec<(LabelSet, Option<NameId>)>,
    ids: HashMap<LabelSet, LabelId>,
}

impl Default for LabelTable {
    fn default() -> Self {
        LabelTable {
            sets: vec![(LabelSet::default(), None)],
            ids: HashMap::from([(LabelSet::default(), NO_LABELS)]),
        }
    }
}

impl LabelTable {
    /// The id of `set`, adding it (and its label frame's name to `names`)
    /// if new; `None` once `u32` ids run out.
    pub(crate) fn intern(&mut self, set: &LabelSet, names: &mut NameTable) -> Option<LabelId> {
        if let Some(&id) = self.ids.get(set) {
            return Some(id);
        }
        let id = LabelId::try_from(self.sets.len()).ok()?;
        let frame = names.intern(&label_frame(set))?;
        self.sets.push((set.clone(), Some(frame)));
        self.ids.insert(set.clone(), id);
        Some(id)
    }

    /// The set `id`.
    ///
    /// # Panics
    ///
    /// If `id` did not come from this table.
    pub(crate) fn get(&self, id: LabelId) -> &LabelSet {
        &self.sets[id as usize].0
    }

    /// The name of set `id`'s label frame; `None` for the empty set.
    pub(crate) fn frame(&self, id: LabelId) -> Option<NameId> {
        self.sets[id as usize].1
    }

    /// Distinct sets, the empty one included.
    pub(crate) fn len(&self) -> usize {
        self.sets.len()
    }
}

impl<'a> Stack<'a> {
    /// The labels its thread had when its samples were taken (empty
    /// outside every label scope, and for a folded file read back).
    pub fn labels(&self) -> &'a LabelSet {
        self.profile.labels.get(self.head.labels)
    }

    /// The id of its label set ([`Profile::label_set`]).
    pub fn label_id(&self) -> LabelId {
        self.head.labels
    }
}

impl Profile {
    /// The label set `id` (from [`Stack::label_id`]).
    ///
    /// # Panics
    ///
    /// If `id` is not from this profile.
    pub fn label_set(&self, id: LabelId) -> &LabelSet {
        self.labels.get(id)
    }

    /// Distinct label sets of its stacks, the empty one included: 1 for
    /// a profile without labels.
    pub fn distinct_label_sets(&self) -> usize {
        self.labels.len()
    }

    /// Whether any stack carries labels.
    pub fn has_labels(&self) -> bool {
        self.labels.len() > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_frame_lists_the_labels_sorted_and_safe() {
        let set = label_set(&[("tenant", "acme"), ("endpoint", "check;out")]);
        assert_eq!(
            label_frame(&set),
            "[label: endpoint=check,out, tenant=acme]"
        );
        // A value ending in a number is no count.
        assert_eq!(label_frame(&label_set(&[("n", "a 5")])), "[label: n=a 5]");
    }

    #[test]
    fn equal_sets_get_one_id_and_the_empty_set_is_zero() {
        let mut names = NameTable::default();
        let mut table = LabelTable::default();
        let a = table.intern(&label_set(&[("x", "1")]), &mut names).unwrap();
        let b = table.intern(&label_set(&[("x", "2")]), &mut names).unwrap();
        assert_ne!(a, b);
        assert_eq!(table.intern(&label_set(&[("x", "1")]), &mut names), Some(a));
        assert_eq!(
            table.intern(&LabelSet::default(), &mut names),
            Some(NO_LABELS)
        );
        assert_eq!(table.len(), 3);
        assert_eq!(table.frame(NO_LABELS), None);
        assert_eq!(names.get(table.frame(a).unwrap()), "[label: x=1]");
        assert_eq!(table.get(b).get("x"), Some("2"));
    }
}
