//! The interned stack-count table.
//!
//! Sampling produces the same few stacks over and over, so the table
//! stores each distinct stack once and counts repeats. Frames of all
//! stacks live in one arena `Vec<u64>`; the hash table holds only offsets
//! into it. Counting a stack that was seen before hashes it, finds
//! the entry and bumps a counter: no allocation.
//!
//! A profiler that stays on must not grow without bound when a program
//! produces endless distinct stacks (deep recursion of random depth, JIT
//! code), so a table can be given a [`Limit`]. Once it is reached, samples
//! of new stacks are counted per thread as overflow instead of being
//! stored; they are reported, never dropped.

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
    /// The id of the label set the thread had when the sample was taken
    /// ([`crate::labels`]); [`NO_LABELS`](crate::labels::NO_LABELS) for none.
    pub labels: u32,
}

impl Hash for StackKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.thread);
        state.write_u32(self.labels);
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
    len: u32,
    thread: u32,
    labels: u32,
    end: WalkEnd,
    lr: u64,
    count: u64,
}

/// How much a [`StackTable`] may hold. Both bounds apply: distinct stacks,
/// and frames over all of them (a few very deep stacks fill memory as fast
/// as many shallow ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Distinct stacks kept.
    pub stacks: usize,
    /// Frames kept over all distinct stacks.
    pub frames: usize,
}

impl Limit {
    /// No bound.
    pub const NONE: Limit = Limit {
        stacks: usize::MAX,
        frames: usize::MAX,
    };

    /// `stacks` distinct stacks with, on average, up to 64 frames each.
    pub const fn stacks(stacks: usize) -> Limit {
        Limit {
            stacks,
            frames: stacks.saturating_mul(64),
        }
    }

    /// Upper bound on the table's memory in bytes once full: the frame
    /// arena, and the hash table's entries with hashbrown's load factor.
    pub fn max_bytes(&self) -> usize {
        let entries = self.stacks.saturating_mul(8) / 7 + 1;
        self.frames
            .saturating_mul(8)
            .saturating_add(entries.saturating_mul(core::mem::size_of::<Entry>() + 1))
    }
}

impl Default for Limit {
    fn default() -> Self {
        Limit::NONE
    }
}

/// Distinct stacks with their sample counts.
#[derive(Clone, Default)]
pub struct StackTable {
    entries: HashTable<Entry>,
    arena: Vec<u64>,
    hasher: DefaultHashBuilder,
    samples: u64,
    limit: Limit,
    /// Samples of stacks not stored because the limit was reached, per
    /// thread index: `(thread, count)`, one entry per thread.
    overflow: Vec<(u32, u64)>,
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
    /// An empty table without a limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table that stores at most `limit`.
    pub fn with_limit(limit: Limit) -> Self {
        StackTable {
            limit,
            ..Self::default()
        }
    }

    /// The limit this table was created with.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// An empty table with the same limit (and hasher), for the next
    /// window.
    pub fn empty_like(&self) -> Self {
        StackTable {
            hasher: self.hasher.clone(),
            ..Self::with_limit(self.limit)
        }
    }

    /// Adds `count` samples of `key`. Allocates only for a stack not seen
    /// before (arena growth and, rarely, a table resize). A new stack that
    /// would exceed the limit is counted as overflow of its thread.
    pub fn add(&mut self, key: StackKey<'_>, count: u64) {
        let hash = self.hasher.hash_one(key);
        let arena = &self.arena;
        let found = self.entries.find_mut(hash, |e| {
            e.hash == hash
                && e.thread == key.thread
                && e.labels == key.labels
                && e.lr == key.lr
                && e.end == key.end
                && arena[e.start..e.start + e.len as usize] == *key.frames
        });
        if let Some(e) = found {
            e.count += count;
        } else if self.entries.len() >= self.limit.stacks
            || self.arena.len().saturating_add(key.frames.len()) > self.limit.frames
            || u32::try_from(key.frames.len()).is_err()
        {
            self.add_overflow(key.thread, count);
            return;
        } else {
            let start = self.arena.len();
            self.arena.extend_from_slice(key.frames);
            let entry = Entry {
                hash,
                start,
                len: key.frames.len() as u32,
                thread: key.thread,
                labels: key.labels,
                end: key.end,
                lr: key.lr,
                count,
            };
            self.entries.insert_unique(hash, entry, |e| e.hash);
        }
        self.samples += count;
    }

    fn add_overflow(&mut self, thread: u32, count: u64) {
        match self.overflow.iter_mut().find(|(t, _)| *t == thread) {
            Some((_, c)) => *c += count,
            None => self.overflow.push((thread, count)),
        }
        self.samples += count;
    }

    /// Adds every stack of `other`, e.g. to combine windows; the other's
    /// overflow stays overflow, and stacks beyond this table's limit become
    /// overflow.
    pub fn merge(&mut self, other: &StackTable) {
        for (key, count) in other.iter() {
            self.add(key, count);
        }
        for &(thread, count) in &other.overflow {
            self.add_overflow(thread, count);
        }
    }

    /// Samples not stored because the table was full, per thread index, in
    /// the order threads first overflowed.
    pub fn overflow(&self) -> &[(u32, u64)] {
        &self.overflow
    }

    /// Total samples counted as overflow.
    pub fn overflow_samples(&self) -> u64 {
        self.overflow.iter().map(|&(_, c)| c).sum()
    }

    /// Number of distinct stacks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total samples over all stacks, overflow included.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The distinct stacks with their counts, in no particular order
    /// (overflow is not a stack: see [`StackTable::overflow`]).
    pub fn iter(&self) -> impl Iterator<Item = (StackKey<'_>, u64)> + '_ {
        self.entries.iter().map(|e| {
            (
                StackKey {
                    thread: e.thread,
                    frames: &self.arena[e.start..e.start + e.len as usize],
                    lr: e.lr,
                    end: e.end,
                    labels: e.labels,
                },
                e.count,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table that holds at most `stacks` stacks and `frames` frames.
    fn limited(stacks: usize, frames: usize) -> StackTable {
        StackTable::with_limit(Limit { stacks, frames })
    }

    fn key(thread: u32, frames: &[u64]) -> StackKey<'_> {
        StackKey {
            thread,
            frames,
            lr: 0,
            end: WalkEnd::Complete,
            labels: 0,
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
        t.add(
            StackKey {
                labels: 4,
                ..key(0, &[1, 2, 3])
            },
            1,
        );
        assert_eq!(t.len(), 6);
        assert_eq!(t.samples(), 8);
        assert_eq!(t.iter().filter(|(k, _)| k.labels == 4).count(), 1);
        let mut counts: Vec<_> = t
            .iter()
            .map(|(k, c)| (k.thread, k.labels, k.frames.to_vec(), k.lr, k.end, c))
            .collect();
        counts.sort();
        assert_eq!(counts[0], (0, 0, vec![1, 2], 0, WalkEnd::Complete, 1));
        assert_eq!(counts[1], (0, 0, vec![1, 2, 3], 0, WalkEnd::Complete, 3));
        assert_eq!(counts[2], (0, 0, vec![1, 2, 3], 0, WalkEnd::DepthCap, 1));
        assert_eq!(counts[3], (0, 0, vec![1, 2, 3], 9, WalkEnd::Complete, 1));
        assert_eq!(counts[4], (0, 4, vec![1, 2, 3], 0, WalkEnd::Complete, 1));
        assert_eq!(counts[5], (1, 0, vec![1, 2, 3], 0, WalkEnd::Complete, 1));
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

    #[test]
    fn a_full_table_counts_new_stacks_as_overflow_per_thread() {
        let mut t = limited(2, 100);
        t.add(key(0, &[1]), 1);
        t.add(key(0, &[2]), 1);
        t.add(key(0, &[3]), 4); // a third stack: overflow
        t.add(key(1, &[3]), 1); // same, other thread
        t.add(key(0, &[1]), 5); // known stacks still count
        assert_eq!(t.len(), 2);
        assert_eq!(t.overflow(), &[(0, 4), (1, 1)]);
        assert_eq!(t.samples(), 12);
        let stored: u64 = t.iter().map(|(_, c)| c).sum();
        assert_eq!(stored + t.overflow_samples(), t.samples());
    }

    #[test]
    fn the_frame_budget_bounds_the_arena() {
        let mut t = limited(1000, 10);
        t.add(key(0, &[1; 8]), 1);
        t.add(key(0, &[2; 8]), 1); // 16 frames > 10
        t.add(key(0, &[3; 2]), 1); // fits: 10
        assert_eq!(t.len(), 2);
        assert_eq!(t.overflow_samples(), 1);
        assert!(t.arena.len() <= 10);
    }

    #[test]
    fn merge_keeps_overflow_and_applies_the_limit() {
        let mut a = limited(1, 100);
        a.add(key(0, &[1]), 1);
        let mut b = limited(1, 100);
        b.add(key(0, &[2]), 2);
        b.add(key(1, &[3]), 3); // overflow in b
        a.merge(&b);
        assert_eq!(a.len(), 1);
        assert_eq!(a.overflow(), &[(0, 2), (1, 3)]);
        assert_eq!(a.samples(), 6);
        assert_eq!(a.empty_like().limit(), a.limit());
    }
}
