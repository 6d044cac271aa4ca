//! Interning for profiles: every distinct name, frame and stack is stored
//! once.
//!
//! A frame name appears in thousands of stacks, and a folded file may
//! repeat a stack on many lines (concatenated dumps, tools that do not
//! merge). With names stored once, frames as small fixed-size records
//! naming them, and stacks as slices of `u32` frame ids in one arena, the
//! memory a profile takes follows the number of distinct stacks and frames,
//! never the number of samples or the size of the file it came from.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

/// A dense id for an interned name (of a frame, a module, a file or a
/// thread).
pub type NameId = u32;

/// A dense id for an interned frame ([`Profile::frame`](crate::Profile::frame)
/// describes it).
pub type FrameId = u32;

/// A dense id for a thread of a profile's thread table.
pub type ThreadId = u32;

/// Strings, each stored once and named by a [`NameId`].
#[derive(Clone, Debug, Default)]
pub(crate) struct NameTable {
    names: Vec<Box<str>>,
    /// Ids of `names`, found by the hash of the name they point to, so the
    /// name is not stored twice.
    index: HashTable<NameId>,
    hasher: DefaultHashBuilder,
}

impl NameTable {
    /// The id of `name`, adding it if new; `None` once `u32` ids run out.
    pub(crate) fn intern(&mut self, name: &str) -> Option<NameId> {
        let hash = self.hasher.hash_one(name);
        let names = &self.names;
        if let Some(&id) = self.index.find(hash, |&id| &*names[id as usize] == name) {
            return Some(id);
        }
        let id = NameId::try_from(self.names.len()).ok()?;
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
    pub(crate) fn get(&self, id: NameId) -> &str {
        &self.names[id as usize]
    }

    /// Distinct names.
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// One frame of a profile: a function, as precisely as its source knows
/// it. A folded file knows names only; a recording may know where the code
/// is (module, address) and, with debug information, the source line and
/// whether the frame was inlined into its caller.
///
/// Frames are interned by all their fields: two frames with the same name
/// but different lines are different frames (and the same function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    pub(crate) name: NameId,
    pub(crate) module: Option<NameId>,
    pub(crate) address: Option<u64>,
    pub(crate) file: Option<NameId>,
    pub(crate) line: Option<u32>,
    pub(crate) inlined: bool,
}

impl Frame {
    /// A frame known by its name only.
    pub(crate) fn named(name: NameId) -> Frame {
        Frame {
            name,
            module: None,
            address: None,
            file: None,
            line: None,
            inlined: false,
        }
    }
}

/// Frames, each stored once and named by a [`FrameId`].
#[derive(Clone, Debug, Default)]
pub(crate) struct FrameTable {
    frames: Vec<Frame>,
    index: HashTable<FrameId>,
    hasher: DefaultHashBuilder,
}

impl FrameTable {
    /// The id of `frame`, adding it if new; `None` once `u32` ids run out.
    pub(crate) fn intern(&mut self, frame: Frame) -> Option<FrameId> {
        let hash = self.hasher.hash_one(frame);
        let frames = &self.frames;
        if let Some(&id) = self.index.find(hash, |&id| frames[id as usize] == frame) {
            return Some(id);
        }
        let id = FrameId::try_from(self.frames.len()).ok()?;
        self.frames.push(frame);
        let (frames, hasher) = (&self.frames, &self.hasher);
        self.index
            .insert_unique(hash, id, |&id| hasher.hash_one(frames[id as usize]));
        Some(id)
    }

    /// The frame `id`.
    ///
    /// # Panics
    ///
    /// If `id` did not come from this table.
    pub(crate) fn get(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// Distinct frames.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }
}

/// What identifies a stack besides its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StackHead {
    /// The thread it was sampled on; `None` when the source does not say
    /// (a folded file's root frame may be a thread name, or not).
    pub(crate) thread: Option<ThreadId>,
    /// Whether the walk ended before the root of the thread's stack.
    pub(crate) truncated: bool,
    /// The labels its thread had when sampled (an id of the profile's
    /// label table; 0: none).
    pub(crate) labels: u32,
}

/// Where one distinct stack's frames live in the arena, and its samples.
#[derive(Clone, Copy, Debug)]
struct StackEntry {
    start: usize,
    len: u32,
    head: StackHead,
    count: u64,
}

/// Distinct stacks (root first) with summed sample counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct StackTable {
    /// Every distinct stack's frame ids, one after another.
    arena: Vec<FrameId>,
    entries: Vec<StackEntry>,
    /// Indexes of `entries`, found by the hash of the stack's head and
    /// frames.
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

/// Adding samples to a stack overflowed its `u64` count, or there were more
/// distinct stacks (or frames in one) than `u32` indexes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StackTableFull;

impl StackTable {
    fn hash(&self, head: StackHead, frames: &[FrameId]) -> u64 {
        self.hasher.hash_one((head, frames))
    }

    /// Adds `count` samples of the stack `frames` (root first) under
    /// `head`.
    pub(crate) fn add(
        &mut self,
        head: StackHead,
        frames: &[FrameId],
        count: u64,
    ) -> Result<(), StackTableFull> {
        let hash = self.hash(head, frames);
        let (arena, entries) = (&self.arena, &mut self.entries);
        if let Some(&i) = self.index.find(hash, |&i| {
            let e = &entries[i as usize];
            e.head == head && arena[e.start..e.start + e.len as usize] == *frames
        }) {
            let entry = &mut entries[i as usize];
            entry.count = entry.count.checked_add(count).ok_or(StackTableFull)?;
            return Ok(());
        }
        let i = u32::try_from(self.entries.len()).map_err(|_| StackTableFull)?;
        let len = u32::try_from(frames.len()).map_err(|_| StackTableFull)?;
        self.entries.push(StackEntry {
            start: self.arena.len(),
            len,
            head,
            count,
        });
        self.arena.extend_from_slice(frames);
        let (arena, entries, hasher) = (&self.arena, &self.entries, &self.hasher);
        self.index.insert_unique(hash, i, |&i| {
            let e = &entries[i as usize];
            hasher.hash_one((e.head, &arena[e.start..e.start + e.len as usize]))
        });
        Ok(())
    }

    /// The distinct stacks in the order they were first added, with
    /// counts.
    pub(crate) fn iter(
        &self,
    ) -> impl ExactSizeIterator<Item = (StackHead, &[FrameId], u64)> + Clone + '_ {
        self.entries.iter().map(|e| {
            (
                e.head,
                &self.arena[e.start..e.start + e.len as usize],
                e.count,
            )
        })
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
    fn names_and_frames_are_interned_once() {
        let mut names = NameTable::default();
        let a = names.intern("a").unwrap();
        let b = names.intern("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(names.intern("a"), Some(a));
        assert_eq!(names.len(), 2);
        assert_eq!(names.get(b), "b");

        let mut frames = FrameTable::default();
        let fa = frames.intern(Frame::named(a)).unwrap();
        assert_eq!(frames.intern(Frame::named(a)), Some(fa));
        let with_line = Frame {
            line: Some(7),
            ..Frame::named(a)
        };
        assert_ne!(frames.intern(with_line), Some(fa));
        assert_eq!(frames.len(), 2);
    }

    const NO_HEAD: StackHead = StackHead {
        thread: None,
        truncated: false,
        labels: 0,
    };

    #[test]
    fn identical_stacks_merge_and_prefixes_do_not() {
        let mut s = StackTable::default();
        s.add(NO_HEAD, &[0, 1, 2], 3).unwrap();
        s.add(NO_HEAD, &[0, 1], 4).unwrap();
        s.add(NO_HEAD, &[0, 1, 2], 5).unwrap();
        let all: Vec<_> = s.iter().map(|(_, f, n)| (f.to_vec(), n)).collect();
        assert_eq!(all, vec![(vec![0, 1, 2], 8), (vec![0, 1], 4)]);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn the_same_frames_on_another_thread_truncated_or_labelled_are_another_stack() {
        let mut s = StackTable::default();
        s.add(NO_HEAD, &[0, 1], 1).unwrap();
        let threaded = StackHead {
            thread: Some(0),
            ..NO_HEAD
        };
        s.add(threaded, &[0, 1], 1).unwrap();
        s.add(
            StackHead {
                truncated: true,
                ..threaded
            },
            &[0, 1],
            1,
        )
        .unwrap();
        s.add(
            StackHead {
                labels: 1,
                ..threaded
            },
            &[0, 1],
            1,
        )
        .unwrap();
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn an_overflowing_count_is_an_error_not_a_wrap() {
        let mut s = StackTable::default();
        s.add(NO_HEAD, &[0], u64::MAX).unwrap();
        assert_eq!(s.add(NO_HEAD, &[0], 1), Err(StackTableFull));
        assert_eq!(s.iter().next().unwrap().2, u64::MAX);
    }
}
