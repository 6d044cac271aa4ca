//! The perf clock's rings. Each thread found at start gets a task-clock event per CPU opened
//! with `inherit`, so every thread it creates gets a copy; at each whole period of a thread's
//! CPU time the kernel writes its call chain, registers and stack top into its CPU's ring
//! ([`PerfRing`]), and the sampled thread runs no btprof code. Needs Linux 5.13:
//! `inherit_thread` (forked children are never counted) and `remove_on_exec`.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

mod open;

use open::{record_bytes, ContextAnchor};

use super::super::split_mix::SplitMix64;
use super::perf_ring::{sample_tid_time, PerfRing, Record, USER_REGS_MASK};
use super::ring_samples::{own, BornSample, HeldRecords, Owned, RingSample};
use crate::linux::kernel::perf_attr::{
    PerfEventAttr, FLAGS_EXCLUDE_KERNEL_HV, FLAG_COMM, FLAG_EXCLUDE_CALLCHAIN_KERNEL,
    FLAG_EXCLUDE_HV, FLAG_INHERIT, FLAG_INHERIT_STAT, FLAG_INHERIT_THREAD, FLAG_REMOVE_ON_EXEC,
    FLAG_SAMPLE_ID_ALL, FLAG_TASK, FLAG_USE_CLOCKID, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER,
    PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

/// How long a born thread's final counts may lag its exit record before it is settled without.
const FINAL_COUNTS_WAIT_NS: u64 = 500_000_000;
/// How long `stop` waits for final counts after an exit record: they come at once if at all.
const FINAL_COUNTS_GRACE_NS: u64 = 5_000_000;
/// How long after its timestamp a record may still be on its way into its ring (a virtual
/// CPU can stop in between). Drains take only older records, so a sample is never counted
/// before a rename that preceded it in another ring.
const RECORD_SETTLE_NS: u64 = 2_000_000;
/// How often (ns) a born thread's CPU clock is read again while it runs, to bound the time
/// estimated from samples, which stolen time inflates.
const READ_AGAIN_NS: u64 = 100_000_000;
/// Samples since the last reading before it is read again, so reads stay few beside them.
const READ_AGAIN_SAMPLES: u64 = 8;

/// A born thread whose ring samples are all in (exited, handed off or stopped): its CPU time,
/// and whether its last part-period counts as one more sample, by chance as its fraction.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    pub tid: i32,
    /// It exited (or sampling stopped): `cpu_ns` is its whole CPU time.
    pub ended: bool,
    pub sampled: bool,
    /// CPU time from birth to its exit, its hand-off or the stop.
    pub cpu_ns: u64,
    pub extra_sample: bool,
}

/// Thread births and exits the rings showed ([`BornThreads::task_records`]).
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
    /// How many of those counts came in (they may lag the exit record).
    reads: usize,
    /// The drain pass that read its exit, and that record's time (monotonic ns).
    exited_pass: Option<u64>,
    exit_record_ns: u64,
    handoff: Option<Handoff>,
    /// Its name from its last name-change record, and its creator.
    name: Option<Arc<str>>,
    parent: i32,
    excluded: bool,
    clock: ClockReading,
}

/// A born thread's CPU clock as last read, and its samples since. Its CPU time at exit is
/// the last reading plus a period per later sample (the partial periods cancel on average):
/// the kernel's final count would include time a VM's host stole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClockReading {
    /// Its CPU clock and when it was read (`CLOCK_MONOTONIC` ns, as ring records are
    /// stamped); `None` before the first reading.
    read: Option<(u64, u64)>,
    samples_since: u64,
}

impl ClockReading {
    fn sampled(&mut self, time_ns: u64) {
        if self.read.is_some_and(|(_, at)| time_ns > at) {
            self.samples_since += 1;
        }
    }

    /// Whether its clock is to be read at `now_ns`, given it has samples.
    fn due(&self, now_ns: u64) -> bool {
        match self.read {
            None => true,
            Some((_, at)) => {
                self.samples_since >= READ_AGAIN_SAMPLES
                    && now_ns.saturating_sub(at) >= READ_AGAIN_NS
            }
        }
    }

    /// Its clock read `cpu_ns` at `at_ns`, after every sample counted so far (a drain takes
    /// in only records older than its start).
    fn read(&mut self, cpu_ns: u64, at_ns: u64) {
        self.read = Some((cpu_ns, at_ns));
        self.samples_since = 0;
    }

    /// Its CPU time at exit; the kernel's count `counted_ns` if never read.
    fn at_exit(&self, counted_ns: u64, period_ns: u64) -> u64 {
        match self.read {
            Some((cpu_ns, _)) => cpu_ns + self.samples_since * period_ns,
            None => counted_ns,
        }
    }
}

/// A thread the events were opened on.
#[derive(Default)]
struct Parent {
    /// When it was handed to a timer (monotonic ns).
    handoff: Option<u64>,
    sampled: bool,
    /// Its CPU clock when its events opened, where its periods start.
    cpu_at_open: u64,
    /// Its last part of a period was counted ([`BornThreads::parent_tail`]).
    tail_counted: bool,
    /// Its events, one per CPU (owned by `rings` or `redirected`).
    fds: Vec<libc::c_int>,
    /// Final counts of exited threads born under it, which the kernel adds to its events.
    children_ns: u64,
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

/// The inherited events and the threads born under them. Sampler thread only.
pub(crate) struct BornThreads {
    rings: Vec<PerfRing>,
    /// Events writing into one of `rings` (closed on drop).
    redirected: Vec<libc::c_int>,
    parents: HashMap<i32, Parent>,
    /// Threads with at least one ring sample so far.
    sampled_threads: u64,
    young: HashMap<i32, Young>,
    pid: i32,
    own_tid: i32,
    period_ns: u64,
    max_stack: usize,
    /// Bytes of stack each sample copies ([`open::stack_bytes`]).
    stack_bytes: u32,
    pass: u64,
    births: u64,
    exits: u64,
    /// One per opened-on thread where allowed ([`ContextAnchor`]).
    anchors: Vec<ContextAnchor>,
    rng: SplitMix64,
    /// When sampling stopped (monotonic ns): later samples are not counted.
    stopped_at_ns: Option<u64>,
}

impl BornThreads {
    /// Whether `tid` was born under the events and not handed off: the rings sample it.
    pub(crate) fn is_young(&self, tid: i32) -> bool {
        self.young
            .get(&tid)
            .is_some_and(|y| y.handoff.is_none() && !y.excluded)
    }

    /// Pushes to `due` the sampled born threads whose clocks are due at `now_ns`.
    pub(crate) fn clock_reads_due(&self, now_ns: u64, due: &mut Vec<i32>) {
        due.extend(self.young.iter().filter_map(|(&tid, y)| {
            let live = y.exited_pass.is_none() && y.handoff.is_none() && !y.excluded;
            (live && y.samples > 0 && y.clock.due(now_ns)).then_some(tid)
        }));
    }

    pub(crate) fn clock_read(&mut self, tid: i32, cpu_ns: u64, at_ns: u64) {
        if let Some(y) = self.young.get_mut(&tid) {
            y.clock.read(cpu_ns, at_ns);
        }
    }

    /// Whether a drain read a name-change record of `tid`, a thread the events opened on.
    pub(crate) fn rename_recorded(&self, tid: i32) -> bool {
        self.parents.get(&tid).is_some_and(|p| p.name.is_some())
    }

    /// The thread that created born thread `tid`, whose name it inherited.
    pub(crate) fn creator(&self, tid: i32) -> Option<i32> {
        self.young
            .get(&tid)
            .and_then(|y| (y.parent != 0).then_some(y.parent))
    }

    /// Thread `tid` has its own timer from `at_ns` (`CLOCK_MONOTONIC`), after `cpu_ns` of
    /// CPU time since birth. Events cannot be closed per thread, so its later ring samples
    /// are dropped by thread id; it is settled after the next drain. For a thread not yet
    /// known as born here, earlier ring samples count.
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

    /// The threads the events were opened on, ring-sampled until [`Self::hand_off`].
    pub(crate) fn parents(&self) -> impl Iterator<Item = i32> + '_ {
        self.parents.keys().copied()
    }

    /// About how many samples one ring holds, at the largest record size.
    pub(crate) fn samples_per_ring(&self) -> u64 {
        let record = record_bytes(self.stack_bytes, self.max_stack) as u64;
        self.rings.first().map_or(0, |r| r.data_size() / record)
    }

    /// Births and exits the rings showed so far, one each per covered thread: equal
    /// births at two moments mean no covered thread was born between them.
    pub(crate) fn task_records(&self) -> TaskRecords {
        TaskRecords {
            births: self.births,
            exits: self.exits,
        }
    }

    /// Whether what opened-on thread `tid` ran after its last ring sample counts as one more
    /// sample, by chance as its fraction of a period; asked once, with its events' count.
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

    /// Opened-on thread `tid`'s CPU clock from its events' counts, for after it exited,
    /// less its exited born threads' counts; with user code only, its user time.
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

    /// The opened-on thread whose events `tid` was born under, through its creators.
    fn root_parent(&self, mut tid: i32) -> Option<i32> {
        for _ in 0..64 {
            if self.parents.contains_key(&tid) {
                return Some(tid);
            }
            tid = self.young.get(&tid)?.parent;
        }
        None
    }

    pub(crate) fn stack_bytes(&self) -> usize {
        self.stack_bytes as usize
    }

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

    /// Reads every ring: samples to count, unwound by `unwind`, go to `samples` with their
    /// thread's name then, threads whose samples are all in to `settled`; records newer than
    /// [`RECORD_SETTLE_NS`] wait in `held` unless `everything`. Returns the records lost.
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
        // Dropped before unwinding: the sampler's, and those after the stop or a hand-off.
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
                        // Accounted from its clock like any listed thread: no settling.
                        if parent.handoff.is_none_or(|at| time < at) && !is_excluded(tid) {
                            self.sampled_threads += u64::from(!parent.sampled);
                            parent.sampled = true;
                            sample.name = parent.name.clone();
                            samples.push(sample);
                        }
                        continue;
                    }
                    // Only threads whose birth was read: one forgotten after
                    // its hand-off must not count again.
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

    /// Samples taken from now on are not counted.
    pub(crate) fn stop_sampling(&mut self) {
        self.stopped_at_ns
            .get_or_insert(crate::linux::monotonic_ns());
    }

    /// Whether records from before the stop may still be arriving at `now_ns`.
    pub(crate) fn stop_settling(&self, now_ns: u64) -> bool {
        self.stopped_at_ns
            .is_some_and(|at| now_ns <= at.saturating_add(RECORD_SETTLE_NS))
    }

    /// Whether a born thread's exit is still coming at `now_ns`: its clock is gone (`cpu_of`)
    /// with no exit record, or the record lacks counts and is within [`FINAL_COUNTS_GRACE_NS`].
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

    /// At stop, after a last [`Self::drain`]: settles every born thread, the living by `cpu_of`.
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
            // Another CPU's ring may hold samples for one more pass, and final counts may
            // come later still.
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

            // The event overflows at each whole period from birth, so what ran
            // after the last overflow is the count modulo the period.
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

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;

    #[test]
    fn a_thread_never_read_keeps_the_kernels_count() {
        let mut c = ClockReading::default();
        c.sampled(5);
        assert!(c.due(0));
        assert_eq!(c.at_exit(7 * P, P), 7 * P);
    }

    #[test]
    fn samples_after_the_reading_add_a_period_each() {
        let mut c = ClockReading::default();
        c.read(40 * P + 300, 1_000);
        // Taken before the reading: already in the clock's value.
        c.sampled(999);
        for t in 1_001..1_011 {
            c.sampled(t);
        }
        // A stolen pause made the kernel count 20 ms more than ran.
        assert_eq!(c.at_exit(70 * P, P), 50 * P + 300);
    }

    #[test]
    fn it_is_read_again_after_enough_time_and_samples() {
        let mut c = ClockReading::default();
        c.read(0, 0);
        for t in 1..READ_AGAIN_SAMPLES {
            c.sampled(t);
        }
        assert!(!c.due(READ_AGAIN_NS), "too few samples since");
        c.sampled(READ_AGAIN_SAMPLES);
        assert!(!c.due(READ_AGAIN_NS - 1), "too soon");
        assert!(c.due(READ_AGAIN_NS));
        c.read(5 * P, READ_AGAIN_NS);
        assert!(!c.due(2 * READ_AGAIN_NS));
    }
}
