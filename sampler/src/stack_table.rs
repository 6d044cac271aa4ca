//! The interned stack-count table.
//!
//! Sampling at 1000 Hz produces the same few hundred stacks over and over,
//! so the table stores each distinct stack once and counts repeats. Frames
//! of all stacks live in one arena `Vec<u64>`; the hash table holds only
//! offsets into it. Counting a stack that was seen before hashes it, finds
//! the entry and bumps a counter: no allocation.

use core::hash::{BuildHasher, Hash, Hasher};

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::walker::WalkEnd;

/// One raw stack as the sampler recorded it, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackKey<'a> {
    /// Index of the thread (name) the stack was taken on; see
    /// [`crate::ThreadInfo`].
    pub thread: u32,
    /// `frames[0]` is the pc, the rest return addresses, innermost first.
    pub frames: &'a [u64],
    /// The aarch64 link register beside the walk, 0 if none.
    pub lr: u64,
    /// Why the walk stopped.
    pub end: WalkEnd,
}

impl Hash for StackKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.thread);
        state.write_u64(self.lr);
        state.write_u8(self.end as u8);
        state.write_usize(self.frames.len());
        for &f in self.frames {
            state.write_u64(f);
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    hash: u64,
    start: usize,
    len: usize,
    thread: u32,
    end: WalkEnd,
    lr: u64,
    count: u64,
}

/// Distinct stacks with their sample counts.
#[derive(Clone, Default)]
pub struct StackTable {
    entries: HashTable<Entry>,
    arena: Vec<u64>,
    hasher: DefaultHashBuilder,
    samples: u64,
}

impl core::fmt::Debug for StackTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StackTable")
            .field("distinct", &self.len())
            .field("samples", &self.samples)
            .finish()
    }
}

impl StackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `count` samples of `key`. Allocates only for a stack not seen
    /// before (arena growth and, rarely, a table resize).
    pub fn add(&mut self, key: StackKey<'_>, count: u64) {
        let hash = self.hasher.hash_one(key);
        let arena = &self.arena;
        let found = self.entries.find_mut(hash, |e| {
            e.hash == hash
                && e.thread == key.thread
                && e.lr == key.lr
                && e.end == key.end
                && arena[e.start..e.start + e.len] == *key.frames
        });
        if let Some(e) = found {
            e.count += count;
        } else {
            let start = self.arena.len();
            self.arena.extend_from_slice(key.frames);
            let entry = Entry {
                hash,
                start,
                len: key.frames.len(),
                thread: key.thread,
                end: key.end,
                lr: key.lr,
                count,
            };
            self.entries.insert_unique(hash, entry, |e| e.hash);
        }
        self.samples += count;
    }

    /// Adds every stack of `other`, e.g. to combine windows.
    pub fn merge(&mut self, other: &StackTable) {
        for (key, count) in other.iter() {
            self.add(key, count);
        }
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total samples over all stacks.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The distinct stacks with their counts, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (StackKey<'_>, u64)> + '_ {
        self.entries.iter().map(|e| {
            (
                StackKey {
                    thread: e.thread,
                    frames: &self.arena[e.start..e.start + e.len],
                    lr: e.lr,
                    end: e.end,
                },
                e.count,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(thread: u32, frames: &[u64]) -> StackKey<'_> {
        StackKey {
            thread,
            frames,
            lr: 0,
            end: WalkEnd::Complete,
        }
    }

    #[test]
    fn counts_repeats_and_separates_distinct_stacks() {
        let mut t = StackTable::new();
        t.add(key(0, &[1, 2, 3]), 1);
        t.add(key(0, &[1, 2, 3]), 2);
        t.add(key(1, &[1, 2, 3]), 1); // other thread
        t.add(key(0, &[1, 2]), 1); // prefix
        t.add(
            StackKey {
                end: WalkEnd::DepthCap,
                ..key(0, &[1, 2, 3])
            },
            1,
        );
        t.add(
            StackKey {
                lr: 9,
                ..key(0, &[1, 2, 3])
            },
            1,
        );
        assert_eq!(t.len(), 5);
        assert_eq!(t.samples(), 7);
        let mut counts: Vec<_> = t
            .iter()
            .map(|(k, c)| (k.thread, k.frames.to_vec(), k.lr, k.end, c))
            .collect();
        counts.sort();
        assert_eq!(counts[0], (0, vec![1, 2], 0, WalkEnd::Complete, 1));
        assert_eq!(counts[1], (0, vec![1, 2, 3], 0, WalkEnd::Complete, 3));
        assert_eq!(counts[2], (0, vec![1, 2, 3], 0, WalkEnd::DepthCap, 1));
        assert_eq!(counts[3], (0, vec![1, 2, 3], 9, WalkEnd::Complete, 1));
        assert_eq!(counts[4], (1, vec![1, 2, 3], 0, WalkEnd::Complete, 1));
    }

    #[test]
    fn repeat_does_not_grow_the_arena() {
        let mut t = StackTable::new();
        let frames: Vec<u64> = (0..30).collect();
        t.add(key(0, &frames), 1);
        let (arena_cap, arena_len) = (t.arena.capacity(), t.arena.len());
        for _ in 0..10_000 {
            t.add(key(0, &frames), 1);
        }
        assert_eq!(t.arena.capacity(), arena_cap);
        assert_eq!(t.arena.len(), arena_len);
        assert_eq!(t.samples(), 10_001);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = StackTable::new();
        a.add(key(0, &[1]), 2);
        let mut b = StackTable::new();
        b.add(key(0, &[1]), 3);
        b.add(key(0, &[2]), 1);
        a.merge(&b);
        assert_eq!(a.len(), 2);
        assert_eq!(a.samples(), 6);
    }
}
