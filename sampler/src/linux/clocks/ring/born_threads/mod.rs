//! The perf ring clock: every thread sampled by the kernel, with no signal.
//!
//! At start, each thread found by the first listing (up to [`FD_BUDGET`](open::FD_BUDGET)
//! descriptors) gets a task-clock perf event per CPU, opened with
//! `inherit`: every thread it creates later gets a copy at creation, and
//! so on down. Each CPU's events write into one ring buffer
//! ([`PerfRing`]) that the sampler thread reads. At each whole period of a
//! thread's CPU time the kernel takes the sample itself: the user call
//! chain by frame pointers, the user registers and the top of the user
//! stack ([`ring_size::STACK_BYTES`], less in small rings), which
//! the sampler thread unwinds with CFI as it does the handlers' copies. No signal is involved, so the sampled thread never
//! runs btprof code: its signal mask, `sigwait`, `signalfd` and blocking
//! calls never see the profiler, and a sample costs it the interrupt and
//! the copy, not a signal delivery and a walk as well.
//!
//! Where the kernel allows it (`perf_event_paranoid` 1 or less, or
//! `CAP_PERFMON`), samples are taken in kernel code too, on the user stack
//! that made the system call: CPU time is user and system time, and a
//! thread's system time is then sampled like the rest (perf's default
//! without `:u`). Elsewhere user code only, as perf's `:u`.
//!
//! A thread keeps being sampled so, and gets no timer, unless its stack
//! is deeper than its ring samples reach: deeper than the kernel's call
//! chains (`perf_event_max_stack`, 127 frames by default) while the
//! sampler is asked for more, or its walks keep running off the end of the
//! copied stack (frameless code below it, where the frame-pointer chain
//! does not go on). Then the sampler opens a timer too, whose handler walks as deep as asked, and
//! [`BornThreads::hand_off`] drops its ring samples from then on. The
//! events cannot be closed one thread at a time, so a handed-off thread's
//! samples are still taken by the kernel, and dropped by the sampler by
//! their thread id. Threads beyond the descriptor budget, and threads no
//! event covers (created by one beyond it), get a timer of their own too.
//!
//! A task clock samples at each whole period of CPU time, so a thread that
//! ends in the middle of one leaves its last part unsampled: for a 2.5 ms
//! thread a fifth of its time. With `inherit_stat` the kernel records an
//! inherited event's count as its thread exits; the part after the last
//! whole period counts as one more sample of the thread's last stack with
//! the probability of its fraction of a period, so that over many threads
//! the count is right on average ([`Settled`]). A thread that ran less
//! than one period has no sample, so no stack to count it under: its time
//! stays in [`crate::SamplerStats::unsampled_cpu`]. The threads the events
//! were opened on are accounted from their CPU clocks at each listing, as
//! any listed thread.
//!
//! A full ring drops records (`PERF_RECORD_LOST`), counted in
//! [`crate::SamplerStats::lost_samples`]. Rings are sized by
//! [`ring_size`], and the sampler thread reads them at a quarter of the
//! time one takes to fill.
//!
//! Needs Linux 5.13 (`inherit_thread`, so that a forked child process is
//! never counted, and `remove_on_exec`); where the events cannot be opened
//! every thread gets a timer, and born threads wait for a listing.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

mod open;

use super::super::split_mix::SplitMix64;
use super::born_cpu::ClockReading;
use super::context_anchor::ContextAnchor;

use super::perf_ring::{sample_tid_time, PerfRing, Record, USER_REGS_MASK};
use super::ring_samples::{own, BornSample, HeldRecords, Owned, RingSample};
use super::ring_size::{self, record_bytes};
use crate::linux::kernel::perf_attr::{
    PerfEventAttr, FLAGS_EXCLUDE_KERNEL_HV, FLAG_COMM, FLAG_EXCLUDE_CALLCHAIN_KERNEL,
    FLAG_EXCLUDE_HV, FLAG_INHERIT, FLAG_INHERIT_STAT, FLAG_INHERIT_THREAD, FLAG_REMOVE_ON_EXEC,
    FLAG_SAMPLE_ID_ALL, FLAG_TASK, FLAG_USE_CLOCKID, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER,
    PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

/// How long after a born thread's exit record its final counts may still
/// come (it was preempted on its way out) before it is settled without.
const FINAL_COUNTS_WAIT_NS: u64 = 500_000_000;
/// How long `stop` waits for final counts after an exit record. The
/// kernel writes them right after the exit record, in the same call (1 to
/// 5 µs later here), when it writes them at all: of two threads that end
/// together, often only the last one gets them. Waiting longer for the
/// others only delayed every `stop` by the full wait.
const FINAL_COUNTS_GRACE_NS: u64 = 5_000_000;
/// How long after its time a record may still be on its way into its
/// ring: the kernel stamps it, then writes it, and a virtual CPU can be
/// stopped in between. A drain takes in only records older than this at
/// its start, so that no CPU's ring can still get one older than those it
/// takes in: a sample read from one ring is never counted before the
/// rename that preceded it, written into a ring read a moment earlier.
const RECORD_SETTLE_NS: u64 = 2_000_000;
/// A born thread whose ring samples are all in (it exited, was handed to a
/// timer, or sampling stopped): its CPU time, and whether the part of a
/// period after its last sample counts as one more sample (at random, see
/// the module doc).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    pub tid: i32,
    /// It exited (or sampling stopped): `cpu_ns` is its whole CPU time.
    pub ended: bool,
    /// It had ring samples.
    pub sampled: bool,
    /// CPU time from its birth to its exit (from its CPU clock as last
    /// read, see `born_cpu`, else the kernel's count), to its hand-off, or
    /// to the stop.
    pub cpu_ns: u64,
    /// Whether one more sample counts under its last stack.
    pub extra_sample: bool,
}

/// The thread births and exits the rings showed up to a moment
/// ([`BornThreads::task_records`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskRecords {
    pub births: u64,
    pub exits: u64,
}

#[derive(Default)]
struct Young {
    samples: u64,
    /// Sum of its inherited events' final counts (one per CPU).
    read_ns: u64,
    /// How many of those counts came in: the kernel writes them after the
    /// exit record, and a thread preempted on its way out writes them
    /// later.
    reads: usize,
    /// The drain pass in which its exit was read, and when the kernel
    /// wrote that record (monotonic ns).
    exited_pass: Option<u64>,
    exit_record_ns: u64,
    handoff: Option<Handoff>,
    /// Its name from its last name-change record, and the thread that
    /// created it.
    name: Option<Arc<str>>,
    parent: i32,
    excluded: bool,
    /// Its CPU clock as last read, for its CPU time at exit.
    clock: ClockReading,
}

/// A thread the events were opened on.
#[derive(Default)]
struct Parent {
    /// When it was handed to a timer (monotonic ns).
    handoff: Option<u64>,
    sampled: bool,
    /// Its CPU clock when its events were opened: they overflow at each
    /// whole period of its CPU time from then on.
    cpu_at_open: u64,
    /// Its last part of a period was counted ([`BornThreads::parent_tail`]).
    tail_counted: bool,
    /// Its events, one per CPU (owned by `rings` or `redirected`).
    fds: Vec<libc::c_int>,
    /// The final counts of the threads born under its events that exited:
    /// the kernel adds them to its events' counts.
    children_ns: u64,
    /// Its name from its last name-change record.
    name: Option<Arc<str>>,
}

impl Parent {
    fn opened(tid: i32) -> Parent {
        Parent {
            cpu_at_open: crate::linux::kernel::threads::thread_cpu_ns(tid).unwrap_or(0),
            ..Parent::default()
        }
    }
}

struct Handoff {
    at_ns: u64,
    cpu_ns: u64,
    pass: u64,
    settled: bool,
}

/// The inherited events and what the sampler knows of the threads born
/// under them. Sampler thread only.
pub(crate) struct BornThreads {
    rings: Vec<PerfRing>,
    /// Events writing into one of `rings` (closed on drop).
    redirected: Vec<libc::c_int>,
    /// Threads the events were opened on, sampled by them too, and when
    /// each was handed to a timer (monotonic ns): its ring samples from
    /// then on are dropped.
    parents: HashMap<i32, Parent>,
    /// Threads with at least one ring sample so far.
    sampled_threads: u64,
    young: HashMap<i32, Young>,
    pid: i32,
    own_tid: i32,
    period_ns: u64,
    max_stack: usize,
    /// Bytes of stack each sample copies ([`ring_size::stack_bytes`]).
    stack_bytes: u32,
    pass: u64,
    /// Thread births and exits in this process read from the rings so far
    /// ([`Self::task_records`]).
    births: u64,
    exits: u64,
    /// One per thread the events were opened on, where the kernel allowed
    /// it: the threads they create keep their own events.
    anchors: Vec<ContextAnchor>,
    rng: SplitMix64,
    /// When sampling stopped (monotonic ns): samples taken later, while
    /// [`Self::finish`] waits for exit records, are not counted (the
    /// threads' CPU time was last read then).
    stopped_at_ns: Option<u64>,
}

impl BornThreads {
    /// Whether thread `tid` was born under the events and has not been
    /// handed off to a timer: its samples come from the rings.
    pub(crate) fn is_young(&self, tid: i32) -> bool {
        self.young
            .get(&tid)
            .is_some_and(|y| y.handoff.is_none() && !y.excluded)
    }

    /// Born threads with samples whose CPU clocks are due to be read at
    /// `now_ns` ([`ClockReading::due`]), into `due`.
    pub(crate) fn clock_reads_due(&self, now_ns: u64, due: &mut Vec<i32>) {
        due.extend(self.young.iter().filter_map(|(&tid, y)| {
            let live = y.exited_pass.is_none() && y.handoff.is_none() && !y.excluded;
            (live && y.samples > 0 && y.clock.due(now_ns)).then_some(tid)
        }));
    }

    /// Born thread `tid`'s CPU clock read `cpu_ns` at `at_ns`.
    pub(crate) fn clock_read(&mut self, tid: i32, cpu_ns: u64, at_ns: u64) {
        if let Some(y) = self.young.get_mut(&tid) {
            y.clock.read(cpu_ns, at_ns);
        }
    }

    /// Whether the rings hold a name-change record of thread `tid`, one
    /// the events were opened on (read in a drain so far).
    pub(crate) fn rename_recorded(&self, tid: i32) -> bool {
        self.parents.get(&tid).is_some_and(|p| p.name.is_some())
    }

    /// The thread that created born thread `tid`, whose name it inherited.
    pub(crate) fn creator(&self, tid: i32) -> Option<i32> {
        self.young
            .get(&tid)
            .and_then(|y| (y.parent != 0).then_some(y.parent))
    }

    /// Thread `tid` now has its own timer, at `at_ns` (`CLOCK_MONOTONIC`),
    /// having used `cpu_ns` of CPU time since birth: its ring samples taken
    /// later are dropped, and it is settled after the next drain.
    ///
    /// Also for a thread a listing found that is not (yet) known to be
    /// born here: its start may not have been read from the rings yet, so
    /// any ring samples it has from before `at_ns` count; the sampler
    /// counts its time from its clock from then on, as for any thread.
    pub(crate) fn hand_off(&mut self, tid: i32, at_ns: u64, cpu_ns: u64) {
        if let Some(parent) = self.parents.get_mut(&tid) {
            parent.handoff.get_or_insert(at_ns);
            return;
        }
        let y = self.young.entry(tid).or_default();
        if y.handoff.is_none() {
            y.handoff = Some(Handoff {
                at_ns,
                cpu_ns,
                pass: self.pass,
                settled: false,
            });
        }
    }

    /// The threads the events were opened on: the rings sample them as
    /// they do born threads, until [`Self::hand_off`].
    pub(crate) fn parents(&self) -> impl Iterator<Item = i32> + '_ {
        self.parents.keys().copied()
    }

    /// About how many samples one ring holds: each record reserves the
    /// whole stack copy, the registers and the longest call chain.
    pub(crate) fn samples_per_ring(&self) -> u64 {
        let record = record_bytes(self.stack_bytes, self.max_stack) as u64;
        self.rings.first().map_or(0, |r| r.data_size() / record)
    }

    /// How many thread births and exits the rings have shown so far, in
    /// that order: every thread the events cover writes one at birth (its
    /// creator's copy of the events) and one at exit. The same births at
    /// two moments means no covered thread came between them.
    pub(crate) fn task_records(&self) -> TaskRecords {
        TaskRecords {
            births: self.births,
            exits: self.exits,
        }
    }

    /// Whether the part of a period that thread `tid`, one the events were
    /// opened on, ran after its last ring sample counts as one more sample
    /// of its last stack: with the probability of its fraction of a
    /// period, so that over many threads the count is right on average
    /// (half a period per thread is a tenth of the time of a pool thread
    /// that ran 4 ms once). Asked once, when it exits or sampling stops,
    /// with its events' count then (`cpu_ns`); never for one handed to a timer.
    pub(crate) fn parent_tail(&mut self, tid: i32, cpu_ns: u64) -> bool {
        let Some(parent) = self.parents.get_mut(&tid) else {
            return false;
        };
        if !parent.sampled || parent.handoff.is_some() || parent.tail_counted {
            return false;
        }
        parent.tail_counted = true;
        let rest = cpu_ns.saturating_sub(parent.cpu_at_open) % self.period_ns;
        self.rng.chance(rest, self.period_ns)
    }

    /// The CPU clock of thread `tid`, one the events were opened on, from
    /// its events' counts: for when it exited and its own clock can no
    /// longer be read. The counts hold what its born threads that exited
    /// used as well, known from their records read so far, which are taken
    /// off; with samples of user code only, the counts are its user time.
    pub(crate) fn parent_cpu_ns(&self, tid: i32) -> Option<u64> {
        let parent = self.parents.get(&tid)?;
        let mut total = 0u64;
        for &fd in &parent.fds {
            let mut count = 0u64;
            // SAFETY: reading one u64 (read_format 0) from our own event.
            let n = unsafe { libc::read(fd, (&raw mut count).cast(), 8) };
            if n != 8 {
                return None;
            }
            total += count;
        }
        let stolen = crate::linux::kernel::task_clock::stolen_for_tests();
        Some(parent.cpu_at_open + total.saturating_sub(parent.children_ns) + stolen)
    }

    /// The thread the events were opened on whose event thread `tid` was
    /// born under, through the threads that created it.
    fn root_parent(&self, mut tid: i32) -> Option<i32> {
        for _ in 0..64 {
            if self.parents.contains_key(&tid) {
                return Some(tid);
            }
            tid = self.young.get(&tid)?.parent;
        }
        None
    }

    /// Bytes of stack each ring sample copies.
    pub(crate) fn stack_bytes(&self) -> usize {
        self.stack_bytes as usize
    }

    /// How many threads have had a ring sample so far.
    pub(crate) fn sampled_threads(&self) -> u64 {
        self.sampled_threads
    }

    /// Thread `tid` is gone from the listings: nothing more of it counts.
    pub(crate) fn forget(&mut self, tid: i32) {
        if self
            .young
            .get(&tid)
            .is_some_and(|y| y.handoff.as_ref().is_some_and(|h| h.settled))
        {
            self.young.remove(&tid);
        }
    }

    /// Reads every ring: each sample to count is unwound in place by
    /// `unwind` and goes to `samples`, with its thread's name at the time
    /// as far as name-change records tell; threads whose samples are all
    /// in go to `settled`. Records too recent to be sure no other ring
    /// still gets an older one ([`RECORD_SETTLE_NS`]) wait in `held` for
    /// the next drain, unless `everything` (the last drain). Returns how
    /// many records were lost (the kernel found a ring full, or one was
    /// malformed).
    pub(crate) fn drain<W>(
        &mut self,
        samples: &mut Vec<BornSample<W>>,
        held: &mut HeldRecords<W>,
        settled: &mut Vec<Settled>,
        everything: bool,
        is_excluded: impl Fn(i32) -> bool,
        mut unwind: impl FnMut(&RingSample<'_>) -> Option<W>,
    ) -> u64 {
        self.pass += 1;
        let horizon = match everything {
            true => u64::MAX,
            false => crate::linux::monotonic_ns().saturating_sub(RECORD_SETTLE_NS),
        };
        let mut records = held.take();
        let (own_pid, own_tid, max_stack) = (self.pid, self.own_tid, self.max_stack);
        let (parents, young, stopped_at) = (&self.parents, &self.young, self.stopped_at_ns);
        // Samples that will not count are dropped here, before they are
        // unwound: the sampler's own, those taken after the stop, and
        // those of threads handed to a timer.
        let wanted = |tid: i32, time: u64| {
            tid != own_tid
                && stopped_at.is_none_or(|at| time <= at)
                && match parents.get(&tid) {
                    Some(parent) => parent.handoff.is_none_or(|at| time < at),
                    None => young
                        .get(&tid)
                        .is_none_or(|y| y.handoff.as_ref().is_none_or(|h| time < h.at_ns)),
                }
        };
        let mut lost = 0;
        for ring in &mut self.rings {
            ring.read(|bytes| {
                if sample_tid_time(bytes).is_some_and(|(tid, time)| !wanted(tid, time)) {
                    return;
                }
                match Record::parse(bytes) {
                    Some(Record::Lost { lost: n }) => lost += n,
                    Some(record) => {
                        if let Some(owned) = own(record, own_pid, max_stack, &mut unwind) {
                            records.push(owned);
                        }
                    }
                    None => lost += 1,
                }
            });
        }
        // Records of one thread can sit in two CPUs' rings.
        records.sort_by_key(|(time, _)| *time);
        held.keep(&mut records, horizon);
        for (time, record) in records.drain(..) {
            match record {
                Owned::Fork { tid, parent } => {
                    self.births += 1;
                    self.young.entry(tid).or_default().parent = parent;
                }
                Owned::Comm(tid, name) => {
                    let name = Some(Arc::from(name));
                    if let Some(y) = self.young.get_mut(&tid) {
                        y.name = name;
                    } else if let Some(parent) = self.parents.get_mut(&tid) {
                        parent.name = name;
                    }
                }
                Owned::Read(tid, value) => {
                    if let Some(y) = self.young.get_mut(&tid) {
                        y.read_ns += value;
                        y.reads += 1;
                    }
                    if let Some(root) = self.root_parent(tid) {
                        if let Some(parent) = self.parents.get_mut(&root) {
                            parent.children_ns += value;
                        }
                    }
                }
                Owned::Exit(tid) => {
                    self.exits += 1;
                    if let Some(y) = self.young.get_mut(&tid) {
                        y.exited_pass = Some(self.pass);
                        y.exit_record_ns = time;
                    }
                }
                Owned::Sample(mut sample) => {
                    let tid = sample.tid;
                    if tid == self.own_tid || self.stopped_at_ns.is_some_and(|at| time > at) {
                        continue;
                    }
                    if let Some(parent) = self.parents.get_mut(&tid) {
                        // A parent's time is accounted from its clock, as
                        // any listed thread's: its samples need no settling.
                        if parent.handoff.is_none_or(|at| time < at) && !is_excluded(tid) {
                            self.sampled_threads += u64::from(!parent.sampled);
                            parent.sampled = true;
                            sample.name = parent.name.clone();
                            samples.push(sample);
                        }
                        continue;
                    }
                    // Only threads whose start was read count: a thread
                    // forgotten after its hand-off must not count again.
                    let Some(y) = self.young.get_mut(&tid) else {
                        continue;
                    };
                    y.excluded |= is_excluded(tid);
                    if y.excluded || y.handoff.as_ref().is_some_and(|h| time >= h.at_ns) {
                        continue;
                    }
                    self.sampled_threads += u64::from(y.samples == 0);
                    y.samples += 1;
                    y.clock.sampled(time);
                    sample.name = y.name.clone();
                    samples.push(sample);
                }
            }
        }
        held.give_back(records);
        self.settle(settled, false, |_| None);
        lost
    }

    /// Sampling stops now: samples taken from here on are not counted.
    pub(crate) fn stop_sampling(&mut self) {
        self.stopped_at_ns
            .get_or_insert(crate::linux::monotonic_ns());
    }

    /// Whether records taken before the stop may still be on their way
    /// into the rings at `now_ns` ([`RECORD_SETTLE_NS`]).
    pub(crate) fn stop_settling(&self, now_ns: u64) -> bool {
        self.stopped_at_ns
            .is_some_and(|at| now_ns <= at.saturating_add(RECORD_SETTLE_NS))
    }

    /// Whether a born thread's exit is still coming in at `now_ns`: its
    /// clock can no longer be read (`cpu_of`) but its exit record is not in
    /// yet, or that record is in without all its final counts and is less
    /// than [`FINAL_COUNTS_GRACE_NS`] old.
    pub(crate) fn awaiting_exit(&self, now_ns: u64, cpu_of: impl Fn(i32) -> Option<u64>) -> bool {
        let counts = self.rings.len();
        self.young.iter().any(|(&tid, y)| {
            !y.excluded
                && y.handoff.is_none()
                && match y.exited_pass {
                    Some(_) => {
                        y.reads < counts
                            && now_ns < y.exit_record_ns.saturating_add(FINAL_COUNTS_GRACE_NS)
                    }
                    None => cpu_of(tid).is_none(),
                }
        })
    }

    /// At stop, after a last [`Self::drain`]: settles every born thread,
    /// the living ones with their CPU clock now (`cpu_of`).
    pub(crate) fn finish(
        &mut self,
        settled: &mut Vec<Settled>,
        cpu_of: impl Fn(i32) -> Option<u64>,
    ) {
        self.settle(settled, true, cpu_of);
    }

    fn settle(
        &mut self,
        settled: &mut Vec<Settled>,
        all: bool,
        cpu_of: impl Fn(i32) -> Option<u64>,
    ) {
        let (pass, period, counts) = (self.pass, self.period_ns, self.rings.len());
        let now_ns = crate::linux::monotonic_ns();
        let rng = &mut self.rng;
        self.young.retain(|&tid, y| {
            if y.excluded {
                return y.exited_pass.is_none();
            }
            // Samples from another CPU's ring may still come in the pass
            // after the one that read the exit or the hand-off, and the
            // final counts later still from a thread preempted on its way
            // out (given [`FINAL_COUNTS_WAIT_NS`]).
            let exited = y.exited_pass.is_some_and(|p| {
                all || (pass > p
                    && (y.reads >= counts
                        || now_ns.saturating_sub(y.exit_record_ns) > FINAL_COUNTS_WAIT_NS))
            });
            let cpu = match &mut y.handoff {
                Some(h) if h.settled => return !exited,
                Some(h) if all || pass > h.pass => {
                    h.settled = true;
                    Some(h.cpu_ns)
                }
                Some(_) => None,
                None if exited => Some(y.clock.at_exit(y.read_ns, period)),
                None if all => cpu_of(tid).or(Some(y.clock.at_exit(y.read_ns, period))),
                None => None,
            };
            let Some(cpu_ns) = cpu else {
                return true;
            };

            // The event overflows at each whole period of the thread's task
            // clock from its birth (one that falls in kernel code is skipped
            // where only user code may be sampled), so what ran after the
            // last overflow is the kernel's count modulo the period.
            let counted = if exited && y.handoff.is_none() {
                y.read_ns
            } else {
                cpu_ns
            };
            let rest = counted % period;
            let extra = rng.chance(rest, period);
            settled.push(Settled {
                tid,
                ended: exited || (all && y.handoff.is_none()),
                sampled: y.samples > 0,
                cpu_ns,
                extra_sample: y.samples > 0 && extra,
            });
            y.handoff.is_some() && !exited
        });
    }
}

impl Drop for BornThreads {
    fn drop(&mut self) {
        for &fd in &self.redirected {
            // SAFETY: closing descriptors this value owns.
            unsafe { libc::close(fd) };
        }
    }
}
