//! Interning for folded profiles: every distinct frame name and every
//! distinct stack is stored once.
//!
//! A folded file may repeat a stack on many lines (concatenated dumps, tools
//! that do not merge), and a frame name appears in thousands of stacks. With
//! names stored once and stacks stored as slices of `u32` frame ids in one
//! arena, the memory a profile takes follows the number of distinct stacks
//! and frames, never the size of the file it came from.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// A dense id for an interned frame name.
pub type FrameId = u32;

/// Frame names, each stored once and named by a [`FrameId`].
#[derive(Clone, Debug, Default)]
pub(crate) struct FrameTable {
    names: Vec<Box<str>>,
    /// Ids of `names`, found by the hash of the name they point to, so the
    /// name is not stored twice.
    index: HashTable<FrameId>,
    hasher: DefaultHashBuilder,
}

impl FrameTable {
    /// The id of `name`, adding it if new; `None` once `u32` ids run out.
    pub(crate) fn intern(&mut self, name: &str) -> Option<FrameId> {
        let hash = self.hasher.hash_one(name);
        let names = &self.names;
        if let Some(&id) = self.index.find(hash, |&id| &*names[id as usize] == name) {
            return Some(id);
        }
        let id = FrameId::try_from(self.names.len()).ok()?;
        self.names.push(name.into());
        let (names, hasher) = (&self.names, &self.hasher);
        self.index
            .insert_unique(hash, id, |&id| hasher.hash_one(&*names[id as usize]));
        Some(id)
    }

    /// The name of `id`.
    ///
    /// # Panics
    ///
    /// If `id` did not come from this table.
    pub(crate) fn name(&self, id: FrameId) -> &str {
        &self.names[id as usize]
    }

    /// Distinct names.
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// Where one distinct stack's frames live in the arena, and its samples.
#[derive(Clone, Copy, Debug)]
struct StackEntry {
    start: usize,
    len: usize,
    count: u64,
}

/// Distinct stacks (root first) with summed sample counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct StackTable {
    /// Every distinct stack's frame ids, one after another.
    arena: Vec<FrameId>,
    entries: Vec<StackEntry>,
    /// Indexes of `entries`, found by the hash of the stack's frames.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

/// Adding samples to a stack overflowed its `u64` count, or there were more
/// distinct stacks than `u32` indexes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StackTableFull;

impl StackTable {
    /// Adds `count` samples of the stack `frames` (root first).
    pub(crate) fn add(&mut self, frames: &[FrameId], count: u64) -> Result<(), StackTableFull> {
        let hash = self.hasher.hash_one(frames);
        let (arena, entries) = (&self.arena, &mut self.entries);
        if let Some(&i) = self.index.find(hash, |&i| {
            let e = &entries[i as usize];
            arena[e.start..e.start + e.len] == *frames
        }) {
            let entry = &mut entries[i as usize];
            entry.count = entry.count.checked_add(count).ok_or(StackTableFull)?;
            return Ok(());
        }
        let i = u32::try_from(self.entries.len()).map_err(|_| StackTableFull)?;
        self.entries.push(StackEntry {
            start: self.arena.len(),
            len: frames.len(),
            count,
        });
        self.arena.extend_from_slice(frames);
        let (arena, entries, hasher) = (&self.arena, &self.entries, &self.hasher);
        self.index.insert_unique(hash, i, |&i| {
            let e = &entries[i as usize];
            hasher.hash_one(&arena[e.start..e.start + e.len])
        });
        Ok(())
    }

    /// The distinct stacks in the order they were first seen, with counts.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = (&[FrameId], u64)> + '_ {
        self.entries
            .iter()
            .map(|e| (&self.arena[e.start..e.start + e.len], e.count))
    }

    /// Distinct stacks.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_interned_once() {
        let mut t = FrameTable::default();
        let a = t.intern("a").unwrap();
        let b = t.intern("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(t.intern("a"), Some(a));
        assert_eq!(t.len(), 2);
        assert_eq!(t.name(b), "b");
    }

    #[test]
    fn identical_stacks_merge_and_prefixes_do_not() {
        let mut s = StackTable::default();
        s.add(&[0, 1, 2], 3).unwrap();
        s.add(&[0, 1], 4).unwrap();
        s.add(&[0, 1, 2], 5).unwrap();
        let all: Vec<_> = s.iter().map(|(f, n)| (f.to_vec(), n)).collect();
        assert_eq!(all, vec![(vec![0, 1, 2], 8), (vec![0, 1], 4)]);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn an_overflowing_count_is_an_error_not_a_wrap() {
        let mut s = StackTable::default();
        s.add(&[0], u64::MAX).unwrap();
        assert_eq!(s.add(&[0], 1), Err(StackTableFull));
        assert_eq!(s.iter().next().unwrap().1, u64::MAX);
    }
}
