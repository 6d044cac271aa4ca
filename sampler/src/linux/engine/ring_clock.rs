//! The perf ring clock ([`crate::SampleClock::Perf`] where perf
//! events are allowed): the inherited task-clock events ([`BornThreads`])
//! opened at the first listing, whose ring samples of every thread they
//! cover are unwound in place and interned here; threads whose walks the
//! rings keep cutting short handed to a timer ([`RingWalks`]); born
//! threads named and settled (their CPU time and the part of a period
//! after their last sample), and on stop the last samples and exit
//! records waited for.

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

/// The longest `stop` waits for the exit records of born threads that are
/// gone.
const EXIT_RECORDS_WAIT: Duration = Duration::from_millis(200);

/// The ring clock's state in the engine: the inherited events and what
/// their records leave to do between collections. Empty on the other
/// clocks.
#[derive(Default)]
pub(super) struct RingState {
    /// The inherited events that sample threads born while sampling (and
    /// the threads they were opened on); `None` where the kernel refused
    /// them (then `tried`), or before the first listing.
    pub(super) events: Option<BornThreads>,
    pub(super) tried: bool,
    /// Ring samples taken in, reused between drains.
    pub(super) samples: Vec<BornSample<OwnedWalk>>,
    /// Ring records a drain left for the next one.
    pub(super) held: HeldRecords<OwnedWalk>,
    pub(super) settled: Vec<Settled>,
    /// Born threads no listing has found yet: their keys and names.
    pub(super) keys: HashMap<i32, BornKey>,
    /// Born threads' last walks (and their keys), under which the part of
    /// a period after their last sample is counted when they are settled.
    pub(super) walks: HashMap<i32, (u32, OwnedWalk)>,
    /// A thread on the rings turned out to need a timer
    /// ([`RingThread::deep`]): opened right after the
    /// collection that found it, not at the next listing, so that few of
    /// its samples are cut short.
    pub(super) deep_found: bool,
    /// Born threads gone from the listings before they were settled: the
    /// CPU time their clocks had when last read.
    pub(super) accounted: HashMap<i32, u64>,
    /// Born threads whose CPU clocks a collection reads, reused.
    pub(super) clock_reads: Vec<i32>,
}

/// One thread's part of the ring clock's state: whether the inherited
/// events sample it, and how their walks of it went; left at its default
/// on the other clocks.
#[derive(Default)]
pub(super) struct RingThread {
    /// Born while sampling under the inherited events ([`BornThreads`]),
    /// which sample it instead of a timer of its own (no signal, so its
    /// mask, `sigwait` and blocking calls never see them) unless `deep`.
    pub(super) born: bool,
    /// One of the threads the inherited events were opened on, which
    /// sample it too: like a born thread, it gets no timer of its own
    /// unless `deep`.
    pub(super) opened_on: bool,
    /// Found by a listing before its birth was read from the rings, if it
    /// was born under the inherited events at all: decided at the next
    /// listing, when the rings' records from before this one are in (they
    /// are held back a moment, and more come in while a listing runs).
    /// Until then it gets no timer and its clock is not read. Deciding at
    /// once handed such a thread to a signal timer, under the name the
    /// listing read, which its renames never reached.
    pub(super) birth_unread: bool,
    /// Its stacks go deeper than its ring samples reach, while `max_depth`
    /// asks for more: deeper than the kernel's call chains
    /// (`perf_event_max_stack`) or the stack it copies for CFI
    /// ([`RingWalks::cut_short`]). It gets a timer, whose handler walks as
    /// deep as asked.
    pub(super) deep: bool,
    /// Its ring samples' walks so far.
    pub(super) walks: RingWalks,
    /// Its name was read while the rings sampled it, so its renames from
    /// then on come as name-change records with its samples, and its name
    /// is not read again while it stays on them.
    pub(super) named: bool,
    /// A ring sample of it was counted since its clock was last read
    /// ([`SamplerLoop::account_cpu`]).
    pub(super) sampled: bool,
}

/// The key of a born thread no listing found yet, and the collection pass
/// that last read its name (read again at most once per pass).
#[derive(Clone, Copy)]
pub(super) struct BornKey {
    pub(super) key: u32,
    pub(super) named_pass: u64,
}

/// Ring walks of one thread cut short before it is handed to a timer
/// ([`RingWalks::cut_short`]).
const RING_CUTS_BEFORE_HANDOFF: u64 = 3;

/// How a thread's ring samples' walks went, to tell a thread whose stacks
/// its ring samples keep cutting short.
#[derive(Default)]
pub(super) struct RingWalks {
    walks: u64,
    /// Walks that ended where the kernel's call chain or its stack copy
    /// did, short of the depth asked for.
    cut: u64,
}

impl RingWalks {
    /// Counts one walk; `cut` if it ended so.
    pub(super) fn count(&mut self, cut: bool) {
        self.walks += 1;
        self.cut += u64::from(cut);
    }

    /// Whether this thread's walks were cut short more than by accident:
    /// at least [`RING_CUTS_BEFORE_HANDOFF`] times and in at least 1% of
    /// them (a single system call below a large buffer on the stack, say,
    /// is not worth a signal per sample from then on).
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
                // The events sample the threads they were opened on too:
                // those need no timer of their own, and take no signal.
                // Their CPU time is counted from their event's opening, not
                // from the listing's reading just before: what they ran in
                // between (the opening takes a while, and a busy machine
                // may preempt the sampler thread in it) is no sample's.
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
            // Every thread then gets a timer, and born threads wait for a
            // listing.
            Err(_) => self.ring.events = None,
        }
    }

    /// Timer path: interns the samples the inherited events took of born
    /// threads, and settles those whose samples are all in; with
    /// `everything`, the records a drain would hold back as too recent too
    /// (the last collection).
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
                // No frames: taken in the kernel after the thread let go of
                // its user memory, on its way out; no user stack to count.
                (!sample.frames.is_empty()).then(|| {
                    let copy = sample
                        .regs
                        .filter(|_| !sample.stack.is_empty())
                        .map(|regs| CopiedStack::from_parts(regs, regs.sp, sample.stack));
                    let collected = Collected {
                        frames: sample.frames,
                        lr: sample.regs.map_or(0, |r| r.link_register(Arch::host())),
                        end: sample.end,
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
            // One taken before the last reading of its clock is in it.
            if let Some(state) = self.threads.get_mut(&sample.tid) {
                state.sampled_since_read += u64::from(sample.time > state.read_at_ns);
            }
            let Some(walk) = sample.walk else {
                self.stats.failed_samples += 1;
                continue;
            };
            let Some(key) = self.key_for_born(sample.tid, sample.name.as_deref()) else {
                self.stats.exited_threads += 1;
                continue;
            };
            if let Some(state) = self.threads.get_mut(&sample.tid) {
                // Cut short of `max_depth` where the kernel's chain was cut
                // at its limit (a handler's walk has none), or where CFI
                // ran out of copied stack (the kernel's chain never ends
                // out of bounds) and a handler copies more.
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
            self.intern(key, &walk.as_collected(), 1);
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

    /// Reads the CPU clocks of the born threads with samples that are due,
    /// so that their CPU time at exit is their clock's, not the kernel's
    /// task clock's, which counts what the host stole on a virtual machine
    /// (`born_cpu`).
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
            // Gone already: its exit record is on its way.
            if let Some(cpu_ns) = threads::thread_cpu_ns(tid) {
                born.clock_read(tid, cpu_ns, at_ns);
            }
        }
        self.ring.clock_reads = due;
    }

    /// The key a ring sample of thread `tid` is counted under: its name
    /// when the sample was taken (`name`, from its last name change), else
    /// a listed thread's own key, else the name it has now (its `comm`, or
    /// that of the thread that created it, whose name it inherited), read
    /// once per collection pass.
    pub(super) fn key_for_born(&mut self, tid: i32, name: Option<&str>) -> Option<u32> {
        let events = self.ring.events.as_ref()?;
        let (creator, rename_recorded) = (events.creator(tid), events.rename_recorded(tid));
        if let Some(state) = self.threads.get_mut(&tid) {
            // A listing may have read its name before it named itself, and
            // it may be gone before its name is read again.
            return match name {
                Some(name) => {
                    state.key = self
                        .thread_keys
                        .key_named(tid as u64, name, Some(state.key));
                    Some(state.key)
                }
                // Not renamed since a listing read its name on the rings.
                None if state.ring.named => Some(state.key),
                // Its name was read before the events opened on it (a
                // thread found at start): a rename between the two left
                // no record, and the listings that would read it again
                // may be far apart. Read now, once, unless a rename
                // recorded later in this drain shows the sample is older
                // than it; from here on renames come as records. (A rename
                // newer than the records this drain read shows here early,
                // on this drain's samples.)
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
                // Its clock was read at listings up to `accounted`: the rest
                // of its time is the kernel's count beyond that. One no
                // listing found is counted only if it was sampled (else its
                // time is left to the unsampled estimate).
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
                    self.intern(key, &walk.as_collected(), 1);
                    self.stats.born_samples += 1;
                    self.stats.ring_samples += 1;
                }
            }
        }
    }

    /// Counts the last part of a period that thread `tid`, one the ring
    /// events were opened on, ran after its last sample, at random by its
    /// fraction ([`BornThreads::parent_tail`]), as it exits or sampling
    /// stops: by its events' count, or its CPU clock `cpu_ns` where that
    /// cannot be read.
    pub(super) fn count_parent_tail(&mut self, tid: i32, cpu_ns: u64) {
        let Some(born) = self.ring.events.as_mut() else {
            return;
        };
        // Its part of a period is one of the clock that paced its samples:
        // the events' count, which on a virtual machine runs on while the
        // host has stopped the CPU under the thread, as its clock does not.
        let cpu_ns = born.parent_cpu_ns(tid).unwrap_or(cpu_ns);
        if born.parent_tail(tid, cpu_ns) {
            if let Some((key, walk)) = self.ring.walks.remove(&tid) {
                self.intern(key, &walk.as_collected(), 1);
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
        // A thread's `join` returns before the kernel writes its exit
        // record and final counts: wait for the record of a thread whose
        // clock is gone, and briefly for the counts after it, rather than
        // count a gone thread's time as nothing. (A thread still on its
        // way out is settled with its clock below.) Every record from
        // before the stop is in after a moment.
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
