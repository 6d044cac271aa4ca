//! The perf clock's rings ([`crate::SampleClock::Perf`]): inherited task-clock
//! events ([`BornThreads`]) sample every thread without a signal, and their
//! ring samples are unwound and interned here. A thread whose ring walks
//! keep falling short of the depth asked for is handed to a timer
//! ([`RingWalks`]).

use std::time::{Duration, Instant};

use hashbrown::HashMap;

use crate::exclusions;
use crate::walker::{Arch, WalkEnd};

use super::super::clocks::ring::born_threads::{BornThreads, Settled};
use super::super::clocks::ring::ring_samples::{BornSample, HeldRecords};
use super::super::kernel::threads;
use super::super::signal::slots::Collected;
use super::super::signal::stack_copy::{self, CopiedStack};
use super::super::MAX_DEPTH;
use super::collect::OwnedWalk;
use super::{monotonic_ns, SamplerLoop};

/// The longest `stop` waits for exit records of born threads already gone.
const EXIT_RECORDS_WAIT: Duration = Duration::from_millis(200);

/// The perf clock's state in the engine; empty on the other clocks.
#[derive(Default)]
pub(super) struct RingState {
    /// The inherited events; `None` before the first listing or if refused.
    pub(super) events: Option<BornThreads>,
    pub(super) tried: bool,
    /// Ring samples taken in, reused between drains.
    pub(super) samples: Vec<BornSample<OwnedWalk>>,
    /// Ring records a drain left for the next one.
    pub(super) held: HeldRecords<OwnedWalk>,
    pub(super) settled: Vec<Settled>,
    /// Born threads no listing has found yet: their keys and names.
    pub(super) keys: HashMap<i32, BornKey>,
    /// Born threads' last walks and keys, for their tail when settled.
    pub(super) walks: HashMap<i32, (u32, OwnedWalk)>,
    /// A thread on the rings needs a timer ([`RingThread::deep`]): opened
    /// right after this collection, so few samples are cut short.
    pub(super) deep_found: bool,
    /// Born threads unlisted before settling: their clocks' last reading (ns).
    pub(super) accounted: HashMap<i32, u64>,
    /// Born threads whose CPU clocks a collection reads, reused.
    pub(super) clock_reads: Vec<i32>,
}

/// One thread's perf clock state; default on the other clocks.
#[derive(Default)]
pub(super) struct RingThread {
    /// Born under the inherited events, which sample it without a signal,
    /// unless `deep`.
    pub(super) born: bool,
    /// A thread the inherited events were opened on; like `born`.
    pub(super) opened_on: bool,
    /// Listed before its birth was read from the rings: decided at the next
    /// listing, once earlier records are in; until then no timer, no clock
    /// read, so it is never timed under a name its renames would not reach.
    pub(super) birth_unread: bool,
    /// Its stacks go deeper than ring samples reach ([`RingWalks::cut_short`])
    /// while `max_depth` asks for more: it gets a timer, which walks deeper.
    pub(super) deep: bool,
    /// Its ring samples' walks so far.
    pub(super) walks: RingWalks,
    /// Its name was read while on the rings: renames now come as records.
    pub(super) named: bool,
    /// A ring sample of it was counted since its clock was last read.
    pub(super) sampled: bool,
}

/// A not-yet-listed born thread's key, and the pass that last read its name.
#[derive(Clone, Copy)]
pub(super) struct BornKey {
    pub(super) key: u32,
    pub(super) named_pass: u64,
}

/// Ring walks cut short before a thread is handed to a timer.
const RING_CUTS_BEFORE_HANDOFF: u64 = 3;

/// How a thread's ring walks went, to find one they keep cutting short.
#[derive(Default)]
pub(super) struct RingWalks {
    walks: u64,
    /// Walks ending short of the depth asked for.
    cut: u64,
}

impl RingWalks {
    /// Counts one walk; `cut` if it ended so.
    pub(super) fn count(&mut self, cut: bool) {
        self.walks += 1;
        self.cut += u64::from(cut);
    }

    /// Whether walks were cut short more than by accident: at least
    /// [`RING_CUTS_BEFORE_HANDOFF`] times and in at least 1% of them, since
    /// a handoff costs a signal per sample from then on.
    pub(super) fn cut_short(&self) -> bool {
        self.cut >= RING_CUTS_BEFORE_HANDOFF && self.cut * 100 >= self.walks
    }
}

impl SamplerLoop {
    /// Timer path, first listing: opens the inherited events on the threads
    /// listed, so that threads they create are sampled from birth.
    pub(super) fn open_born_events(&mut self) {
        if self.ring.tried || !self.rings_wanted() {
            return;
        }
        self.ring.tried = true;
        #[cfg(feature = "test-hooks")]
        if let Some(hook) = *crate::linux::test_hooks::BEFORE_RING_EVENTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            hook();
        }
        let seed = monotonic_ns().rotate_left(17) ^ u64::from(self.own_tid.unsigned_abs());
        let tids: Vec<i32> = self
            .tids
            .iter()
            .copied()
            .filter(|&t| !exclusions::is_excluded(t as u64))
            .collect();
        match BornThreads::open(
            &tids,
            self.own_tid,
            self.period_ns,
            self.config.max_depth.clamp(1, MAX_DEPTH),
            seed,
        ) {
            Ok(born) => {
                // The events sample their own threads too, with no timer;
                // CPU counts from the event's opening, the first sampled time.
                for tid in born.parents() {
                    if let Some(state) = self.threads.get_mut(&tid) {
                        state.ring.opened_on = true;
                        if let Some(cpu_ns) = threads::thread_cpu_ns(tid) {
                            state.accounted_ns = Some(cpu_ns);
                            state.read_at_ns = monotonic_ns();
                        }
                    }
                }
                self.ring.events = Some(born);
            }
            // Every thread then gets a timer.
            Err(_) => self.ring.events = None,
        }
    }

    /// Timer path: interns born threads' ring samples and settles those all
    /// in; with `everything` (last collection), also too-recent records.
    pub(super) fn collect_born_samples(&mut self, everything: bool) {
        if !everything && super::drains_held() {
            return;
        }
        let Some(born) = self.ring.events.as_mut() else {
            return;
        };
        let mut samples = std::mem::take(&mut self.ring.samples);
        let mut settled = std::mem::take(&mut self.ring.settled);
        let max_depth = self.config.max_depth;
        let (cfi, stats, spare) = (&mut self.cfi, &mut self.stats, &mut self.spare_frames);
        let lost = born.drain(
            &mut samples,
            &mut self.ring.held,
            &mut settled,
            everything,
            |tid| exclusions::is_excluded(tid as u64),
            |sample| {
                // No frames: taken as the exiting thread left user memory.
                (!sample.frames.is_empty()).then(|| {
                    let copy = sample
                        .regs
                        .filter(|_| !sample.stack.is_empty())
                        .map(|regs| CopiedStack::from_parts(regs, regs.sp, sample.stack));
                    let collected = Collected {
                        frames: sample.frames,
                        lr: sample.regs.map_or(0, |r| r.link_register(Arch::host())),
                        end: sample.end,
                        // Set from the record's time once drained.
                        time: 0,
                        copy,
                    };
                    let frames = spare.take();
                    OwnedWalk::of_reusing(frames, &collected, cfi.as_mut(), max_depth, stats)
                })
            },
        );
        self.stats.lost_samples += lost;
        self.stats.ring_threads = born.sampled_threads();
        let copy_is_smaller = born.stack_bytes() < stack_copy::COPY_WORDS * 8;
        for sample in samples.drain(..) {
            // A sample taken before its clock's last reading is in that reading.
            if let Some(state) = self.threads.get_mut(&sample.tid) {
                state.sampled_since_read += u64::from(sample.time > state.read_at_ns);
            }
            let Some(mut walk) = sample.walk else {
                self.stats.failed_samples += 1;
                continue;
            };
            walk.time = sample.time;
            self.label(sample.tid, &mut walk);
            let Some(key) = self.key_for_born(sample.tid, sample.name.as_deref()) else {
                self.stats.exited_threads += 1;
                continue;
            };
            if let Some(state) = self.threads.get_mut(&sample.tid) {
                // Cut short where the kernel's chain hit its limit, or where
                // CFI ran out of copied stack and a handler copies more.
                let cut = walk.frames.len() < max_depth
                    && walk.end.is_truncated()
                    && (sample.end == WalkEnd::DepthCap
                        || (walk.end == WalkEnd::OutOfBounds && copy_is_smaller));
                state.ring.walks.count(cut);
                state.ring.sampled = true;
                if state.ring.walks.cut_short() && !state.ring.deep {
                    state.ring.deep = true;
                    self.ring.deep_found = true;
                }
            }
            self.intern(key, &walk, 1);
            self.stats.ring_samples += 1;
            if !self
                .threads
                .get(&sample.tid)
                .is_some_and(|s| s.ring.opened_on)
            {
                self.stats.born_samples += 1;
            }
            if let Some((_, replaced)) = self.ring.walks.insert(sample.tid, (key, walk)) {
                self.spare_frames.give(replaced);
            }
        }
        self.ring.samples = samples;
        self.read_born_clocks();
        self.settle_born(&mut settled);
        self.ring.settled = settled;
    }

    /// Reads born threads' CPU clocks for due samples, since the task clock
    /// also counts time the host stole.
    fn read_born_clocks(&mut self) {
        #[cfg(feature = "test-hooks")]
        if crate::linux::test_hooks::KERNEL_COUNTS_ONLY.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Some(born) = self.ring.events.as_mut() else {
            return;
        };
        let mut due = std::mem::take(&mut self.ring.clock_reads);
        born.clock_reads_due(monotonic_ns(), &mut due);
        for tid in due.drain(..) {
            let at_ns = monotonic_ns();
            // Gone already: its exit record will come.
            if let Some(cpu_ns) = threads::thread_cpu_ns(tid) {
                born.clock_read(tid, cpu_ns, at_ns);
            }
        }
        self.ring.clock_reads = due;
    }

    /// The key a ring sample of `tid` is counted under: `name` from its last
    /// name change, else a listed thread's key, else its name read per pass.
    pub(super) fn key_for_born(&mut self, tid: i32, name: Option<&str>) -> Option<u32> {
        let events = self.ring.events.as_ref()?;
        let (creator, rename_recorded) = (events.creator(tid), events.rename_recorded(tid));
        if let Some(state) = self.threads.get_mut(&tid) {
            // A listing may have read its name before it named itself.
            return match name {
                Some(name) => {
                    state.key = self
                        .thread_keys
                        .key_named(tid as u64, name, Some(state.key));
                    Some(state.key)
                }
                None if state.ring.named => Some(state.key),
                // Named before its events opened, a rename between left no
                // record: read once now, unless a later record is newer.
                None if state.on_rings() => {
                    state.ring.named = true;
                    if rename_recorded {
                        Some(state.key)
                    } else {
                        self.read_name(tid)
                            .or_else(|| self.key_for_sample(tid, None))
                    }
                }
                None => self.key_for_sample(tid, None),
            };
        }
        let known = self.ring.keys.get(&tid).copied();
        let key = match name {
            Some(name) => self
                .thread_keys
                .key_named(tid as u64, name, known.map(|k| k.key)),
            None => {
                if let Some(known) = known.filter(|k| k.named_pass == self.pass) {
                    return Some(known.key);
                }
                // Forgotten at the latest listing, its samples read later.
                if let Some(&key) = self.departed.get(&tid) {
                    return Some(key);
                }
                let name = threads::thread_name(tid).or_else(|| {
                    let creator = creator?;
                    self.threads
                        .get(&creator)
                        .and_then(|s| self.thread_keys.infos().get(s.key as usize))
                        .map(|info| info.name.clone())
                        .or_else(|| threads::thread_name(creator))
                })?;
                self.thread_keys.key(tid as u64, name, known.map(|k| k.key))
            }
        };
        self.ring.keys.insert(
            tid,
            BornKey {
                key,
                named_pass: self.pass,
            },
        );
        Some(key)
    }

    /// Counts settled born threads' CPU time, and the periods their ends
    /// stood for under their last stacks.
    pub(super) fn settle_born(&mut self, settled: &mut Vec<Settled>) {
        for s in settled.drain(..) {
            if s.ended {
                // Its clock was read up to `accounted`; the kernel's count
                // gives the rest. One never listed counts only if sampled.
                let accounted = match self.threads.get_mut(&s.tid) {
                    Some(state) if state.ring.born => {
                        let before = state.accounted_ns.unwrap_or(0);
                        state.accounted_ns = Some(before.max(s.cpu_ns));
                        Some(before)
                    }
                    Some(_) => None,
                    None => self.ring.accounted.remove(&s.tid),
                };
                let add = match accounted {
                    Some(before) => s.cpu_ns.saturating_sub(before),
                    None if s.sampled && !self.threads.contains_key(&s.tid) => s.cpu_ns,
                    None => 0,
                };
                if add > 0 {
                    self.stats
                        .add_thread_cpu(s.tid as u64, Duration::from_nanos(add));
                }
            }
            self.ring.keys.remove(&s.tid);
            if let Some((key, walk)) = self.ring.walks.remove(&s.tid) {
                if s.extra_sample {
                    self.intern(key, &walk, 1);
                    self.stats.born_samples += 1;
                    self.stats.ring_samples += 1;
                }
            }
        }
    }

    /// Counts the part of a period `tid`, a thread the events were opened on,
    /// ran after its last sample ([`BornThreads::parent_tail`]), by its
    /// event's count, else its CPU clock `cpu_ns`.
    pub(super) fn count_parent_tail(&mut self, tid: i32, cpu_ns: u64) {
        let Some(born) = self.ring.events.as_mut() else {
            return;
        };
        // The events' count paced its samples, so it measures the tail too.
        let cpu_ns = born.parent_cpu_ns(tid).unwrap_or(cpu_ns);
        if born.parent_tail(tid, cpu_ns) {
            if let Some((key, walk)) = self.ring.walks.remove(&tid) {
                self.intern(key, &walk, 1);
                self.stats.ring_samples += 1;
            }
        }
        self.ring.walks.remove(&tid);
    }

    /// On stop, once no timer fires: the last ring samples, and every born
    /// thread settled (the living with their CPU clocks now).
    pub(super) fn finish_born(&mut self) {
        if self.ring.events.is_none() {
            return;
        }
        self.collect_born_samples(false);
        // `join` returns before the kernel writes exit records and final
        // counts: wait briefly rather than count gone threads as nothing.
        let deadline = Instant::now() + EXIT_RECORDS_WAIT;
        while self.ring.events.as_ref().is_some_and(|b| {
            let now = monotonic_ns();
            b.awaiting_exit(now, threads::thread_cpu_ns) || b.stop_settling(now)
        }) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
            self.collect_born_samples(false);
        }
        self.collect_born_samples(true);
        let parents: Vec<(i32, u64)> = self
            .threads
            .iter()
            .filter(|(_, s)| s.ring.opened_on)
            .map(|(&tid, s)| (tid, s.accounted_ns.unwrap_or(0)))
            .collect();
        for (tid, cpu_ns) in parents {
            self.count_parent_tail(tid, cpu_ns);
        }
        let mut settled = std::mem::take(&mut self.ring.settled);
        if let Some(born) = self.ring.events.as_mut() {
            born.finish(&mut settled, threads::thread_cpu_ns);
        }
        self.settle_born(&mut settled);
        self.ring.events = None;
    }
}
