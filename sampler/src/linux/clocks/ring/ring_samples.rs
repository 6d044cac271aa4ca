//! What the sampler takes out of a ring's records: samples unwound in place,
//! the rest kept only to order the CPUs' records by time.

use std::sync::Arc;

use crate::walker::{Registers, WalkEnd};

use super::perf_ring::{words_in_place, Record};

/// A sample borrowed from the ring for [`drain`](super::born_threads::BornThreads::drain)'s
/// caller to unwind in place, as a CFI walk reads few of its stack words.
pub(crate) struct RingSample<'a> {
    /// Return addresses by frame pointers, pc first.
    pub frames: &'a [u64],
    /// [`WalkEnd::DepthCap`] where the kernel's chain was cut at its limit.
    pub end: WalkEnd,
    pub regs: Option<Registers>,
    /// The copied stack words, from `regs.sp` up (empty if none).
    pub stack: &'a [u64],
}

/// A ring sample, unwound by the caller into `W` (`None`: nothing to count).
pub(crate) struct BornSample<W> {
    pub tid: i32,
    /// When the kernel took it (`CLOCK_MONOTONIC` ns).
    pub time: u64,
    pub end: WalkEnd,
    pub walk: Option<W>,
    /// The thread's name then, from its last name record (`None`: none seen).
    pub name: Option<Arc<str>>,
}

/// Records a drain held back, newer than what every ring surely held, in
/// time order. Two vectors take turns, so that drains stop allocating.
pub(crate) struct HeldRecords<W> {
    held: Vec<(u64, Owned<W>)>,
    spare: Vec<(u64, Owned<W>)>,
}

impl<W> Default for HeldRecords<W> {
    fn default() -> Self {
        HeldRecords {
            held: Vec::new(),
            spare: Vec::new(),
        }
    }
}

impl<W> HeldRecords<W> {
    /// The records held, to read with the rings' new ones.
    pub(crate) fn take(&mut self) -> Vec<(u64, Owned<W>)> {
        std::mem::replace(&mut self.held, std::mem::take(&mut self.spare))
    }

    /// Moves the records of `sorted` newer than `horizon` here.
    pub(crate) fn keep(&mut self, sorted: &mut Vec<(u64, Owned<W>)>, horizon: u64) {
        let newer = sorted.partition_point(|(time, _)| *time <= horizon);
        self.held.extend(sorted.drain(newer..));
    }

    /// The list [`Self::take`] gave, kept for its capacity.
    pub(crate) fn give_back(&mut self, mut list: Vec<(u64, Owned<W>)>) {
        list.clear();
        self.spare = list;
    }
}

/// A record copied out of the ring.
pub(crate) enum Owned<W> {
    Sample(BornSample<W>),
    Fork { tid: i32, parent: i32 },
    Exit(i32),
    Comm(i32, String),
    Read(i32, u64),
}

/// What the sampler needs of a ring record; a sample is unwound in place.
pub(crate) fn own<W>(
    record: Record<'_>,
    own_pid: i32,
    max_stack: usize,
    unwind: &mut impl FnMut(&RingSample<'_>) -> Option<W>,
) -> Option<(u64, Owned<W>)> {
    let time = record.time()?;
    Some((
        time,
        match record {
            Record::Sample {
                tid,
                callchain,
                regs,
                stack,
                ..
            } => {
                let end = if callchain.len() >= max_stack {
                    WalkEnd::DepthCap
                } else {
                    // Decided with the symbols, as for a handler's walk.
                    WalkEnd::Complete
                };
                // The copy starts at sp; words are read 8-aligned.
                let aligned = regs.is_some_and(|r| r.sp % 8 == 0);
                let copied;
                let words: &[u64] = if !aligned {
                    &[]
                } else if let Some(words) = words_in_place(stack) {
                    words
                } else {
                    copied = stack
                        .chunks_exact(8)
                        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                        .collect::<Vec<u64>>();
                    &copied
                };
                let walk = unwind(&RingSample {
                    frames: &callchain,
                    end,
                    regs,
                    stack: words,
                });
                Owned::Sample(BornSample {
                    tid,
                    time,
                    end,
                    walk,
                    name: None,
                })
            }
            Record::Fork { pid, tid, ptid, .. } if pid == own_pid && tid != pid => {
                Owned::Fork { tid, parent: ptid }
            }
            Record::Exit { tid, .. } => Owned::Exit(tid),
            Record::Comm { tid, name, .. } => Owned::Comm(tid, name),
            Record::Read { tid, value, .. } => Owned::Read(tid, value),
            _ => return None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One drain: 100 new records, the newest 10 held back.
    fn drain_once(held: &mut HeldRecords<()>, first: u64) -> usize {
        let mut list = held.take();
        let capacity = list.capacity();
        list.extend((first..first + 100).map(|t| (t, Owned::Exit(t as i32))));
        list.sort_by_key(|(time, _)| *time);
        held.keep(&mut list, first + 89);
        assert_eq!(held.held.len(), 10);
        held.give_back(list);
        capacity
    }

    #[test]
    fn drains_of_the_same_size_reuse_their_lists() {
        let mut held = HeldRecords::default();
        // Each list grows once in each role; from then on nothing is allocated.
        for round in 0..3 {
            drain_once(&mut held, 1 + round * 100);
        }
        for round in 3..9 {
            let capacity = drain_once(&mut held, 1 + round * 100);
            assert!(capacity >= 110, "round {round}: capacity {capacity}");
        }
    }
}
