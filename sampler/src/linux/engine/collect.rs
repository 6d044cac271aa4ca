//! Picking up finished samples: armed slots polled (and cancelled when
//! never taken), each walk copied out so the slot frees at once, completed
//! with CFI, named and interned; on stop, the last of them drained.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::labels::NO_LABELS;
use crate::stack_table::StackKey;
use crate::walker::WalkEnd;
use crate::{Mode, SamplerStats};

use super::super::kernel::threads;
use super::super::signal::slots::{Collected, Poll, SLOTS};
use super::super::unwind::{self, CfiWalker};
use super::{SamplerLoop, DRAIN_TIMEOUT, RECENT_WALKS, SAMPLE_TIMEOUT, YOUNG};

/// A finished walk copied out of its slot, so the slot is free before the
/// sample is named and interned.
#[derive(Clone)]
pub(super) struct OwnedWalk {
    pub(super) frames: Vec<u64>,
    pub(super) lr: u64,
    pub(super) end: WalkEnd,
    /// When it was taken (`CLOCK_MONOTONIC` ns).
    pub(super) time: u64,
    /// The label set its thread had then ([`SamplerLoop::label`]).
    pub(super) labels: u32,
}

impl OwnedWalk {
    /// The same frames for a thread off CPU, under `[btprof: off-cpu]`.
    pub(super) fn off_cpu(&self) -> OwnedWalk {
        OwnedWalk {
            end: WalkEnd::Blocked,
            ..self.clone()
        }
    }

    /// Copies `walk` out of its slot or ring record into `frames` (cleared
    /// first, [`SpareFrames`]), completed with CFI from the stack copy when
    /// there is a `cfi` walker.
    pub(super) fn of_reusing(
        mut frames: Vec<u64>,
        walk: &Collected<'_>,
        cfi: Option<&mut CfiWalker>,
        max_depth: usize,
        stats: &mut SamplerStats,
    ) -> Self {
        let (unwound, end) = unwind::finish(cfi, walk, max_depth, stats);
        frames.clear();
        frames.extend_from_slice(unwound);
        OwnedWalk {
            frames,
            lr: walk.lr,
            end,
            time: walk.time,
            labels: NO_LABELS,
        }
    }
}

/// Frame vectors of replaced walks, for the next samples
/// ([`OwnedWalk::of_reusing`]): an allocation and free per sample is a
/// large share of the sampler's time at low rates.
#[derive(Default)]
pub(super) struct SpareFrames(Vec<Vec<u64>>);

impl SpareFrames {
    /// The most vectors kept: about a collection's worth.
    const MOST: usize = 1024;

    pub(super) fn take(&mut self) -> Vec<u64> {
        self.0.pop().unwrap_or_default()
    }

    pub(super) fn give(&mut self, walk: OwnedWalk) {
        if self.0.len() < Self::MOST {
            self.0.push(walk.frames);
        }
    }
}

impl SamplerLoop {
    /// The key for a sample of `tid`: a young thread's name is re-read first
    /// (once per pass), since threads often rename after being listed.
    pub(super) fn key_for_sample(&mut self, tid: i32, fallback: Option<u32>) -> Option<u32> {
        let pass = self.pass;
        match self.threads.get_mut(&tid) {
            Some(state) => {
                if state.first_seen.elapsed() < YOUNG && state.name_pass != pass {
                    state.name_pass = pass;
                    if let Some(key) = self.read_name(tid) {
                        return Some(key);
                    }
                }
                self.threads.get(&tid).map(|s| s.key)
            }
            None => fallback.or_else(|| self.departed.get(&tid).copied()),
        }
    }

    /// Interns finished walks and cancels samples that waited too long;
    /// with `cancel_all`, every sample whose handler has not started.
    /// Returns how many timer samples handlers are still writing.
    pub(super) fn collect(&mut self, cancel_all: bool) -> usize {
        self.pass += 1;
        let writing = if self.timers() {
            let writing = self.collect_timer_samples();
            self.collect_born_samples(false);
            writing
        } else {
            0
        };
        for slot in 0..SLOTS {
            let Some(slot_use) = self.slot_uses[slot] else {
                continue;
            };
            let mut finished_walk = None;
            let (cfi, stats, max_depth) = (&mut self.cfi, &mut self.stats, self.config.max_depth);
            let spare = &mut self.spare_frames;
            let finished = match self.slots.poll(slot, |walk| {
                let frames = spare.take();
                let walk = OwnedWalk::of_reusing(frames, &walk, cfi.as_mut(), max_depth, stats);
                finished_walk = Some(walk);
            }) {
                Poll::Collected => true,
                Poll::Late => {
                    // Its periods ride on its next samples (`CpuDebt::refund`).
                    self.stats.late_samples += 1;
                    if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                        if self.config.mode == Mode::Cpu {
                            self.stats.skipped_samples += state.paced.debt.refund(slot_use.weight);
                        }
                    }
                    true
                }
                Poll::Busy => false,
                Poll::Pending => {
                    // A thread that exited with its signal pending: an exit,
                    // not a failure.
                    let exited = threads::thread_cpu_ns(slot_use.tid).is_none();
                    let expired = cancel_all || slot_use.armed_at.elapsed() > SAMPLE_TIMEOUT;
                    if slot_use.by_request && (exited || expired) {
                        // Deleted first: its signal, if queued, goes too.
                        if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                            state.paced.request = None;
                        }
                    }
                    if (exited || expired) && self.slots.cancel(slot) {
                        if slot_use.by_request && !exited && !cancel_all {
                            // It has not run through a scheduler tick since,
                            // so its running ticks wait for the next request.
                            let _ = self.cannot_take_signal(slot_use.tid);
                        } else if slot_use.by_request {
                            self.stats.exited_threads += u64::from(exited);
                            self.count_running_ticks_left(slot_use.tid);
                        } else if exited {
                            self.stats.exited_threads += 1;
                            // Counted with its last moments ([`ExitTails`]).
                            if let (Some(state), true) = (
                                self.threads.get_mut(&slot_use.tid),
                                self.cpu_pacing.is_some(),
                            ) {
                                self.stats.skipped_samples +=
                                    state.paced.debt.refund(slot_use.weight);
                            }
                        } else if !cancel_all && self.cannot_take_signal(slot_use.tid) {
                            self.stats.signal_blocked_samples += slot_use.weight;
                            self.stats
                                .add_signal_blocked(slot_use.tid as u64, slot_use.weight);
                        } else {
                            self.stats.failed_samples += slot_use.weight;
                        }
                        true
                    } else {
                        false
                    }
                }
            };
            if let Some(mut walk) = finished_walk {
                self.label(slot_use.tid, &mut walk);
                let key = self
                    .key_for_sample(slot_use.tid, Some(slot_use.key))
                    .unwrap_or(slot_use.key);
                let mut weight = slot_use.weight;
                if slot_use.by_request {
                    if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                        weight = std::mem::take(&mut state.paced.running_ticks).max(1);
                    }
                }
                self.intern(key, &walk, weight);
                let spare = &mut self.spare_frames;
                match self.threads.get_mut(&slot_use.tid) {
                    Some(state) if self.config.mode == Mode::Wall => {
                        // Its clock now includes the sample's cost.
                        state.paced.walk_cpu_ns = threads::thread_cpu_ns(slot_use.tid).unwrap_or(0);
                        if let Some(replaced) = state.paced.last_walk.replace(walk) {
                            spare.give(replaced);
                        }
                        state.paced.last_walk_whole = true;
                    }
                    Some(state) if self.cpu_pacing.is_some() => {
                        // A young thread keeps its last few, as its tail is a
                        // large part of its life; later, only the last one.
                        let young = state.young_born();
                        let walks = &mut state.paced.recent_walks;
                        if walks.len() == RECENT_WALKS || (!young && !walks.is_empty()) {
                            spare.give(walks.remove(0));
                        }
                        walks.push(walk);
                    }
                    _ => spare.give(walk),
                }
            }
            if finished {
                self.slot_uses[slot] = None;
                if let Some(state) = self.threads.get_mut(&slot_use.tid) {
                    state.pending = false;
                    state.paced.request = None;
                }
            }
        }
        self.progress
            .samples
            .store(self.stats.samples, Ordering::Relaxed);
        self.progress
            .recorded
            .store(self.stats.recorded, Ordering::Relaxed);
        writing
    }

    /// Gives `walk` the label set thread `tid` had when it was taken.
    pub(super) fn label(&mut self, tid: i32, walk: &mut OwnedWalk) {
        walk.labels = self.labels.at(tid as u64, walk.time);
    }

    /// Adds `weight` samples of `walk` to the table and the weighted count,
    /// not as a distinct sample: periods a sample taken earlier stands for.
    pub(super) fn intern_weight(&mut self, key: u32, walk: &OwnedWalk, weight: u64) {
        self.table.add(
            StackKey {
                thread: key,
                frames: &walk.frames,
                lr: walk.lr,
                end: walk.end,
                labels: walk.labels,
            },
            weight,
        );
        self.stats.count_weight(walk.end, weight);
    }

    /// Adds `walk` as one distinct sample standing for `weight` periods.
    pub(super) fn intern(&mut self, key: u32, walk: &OwnedWalk, weight: u64) {
        self.intern_weight(key, walk, weight);
        self.stats.recorded += 1;
    }

    /// On stop: collects what finished, cancels what never started and
    /// waits a little for handlers still walking.
    pub(super) fn drain(&mut self) {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            let writing = self.collect(true);
            let busy = (0..SLOTS).filter(|&s| self.slots.is_armed(s)).count() + writing;
            if busy == 0 {
                return;
            }
            if Instant::now() >= deadline {
                // Their slots stay `Writing` until the handlers finish;
                // the next sampler skips them.
                self.stats.failed_samples += busy as u64;
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
