//! What the engine knows about each thread ([`ThreadState`], declared in
//! the engine's `mod.rs` beside the loop's other state, so that every part
//! of the engine reads its fields), and the listings that keep it
//! current: new threads registered and named (their names read again,
//! often while they are young, later at growing intervals), every
//! thread's CPU time read into the stats, exited threads forgotten, and,
//! on the sampler-thread clock, the CPU time an exited thread used after
//! its last sample counted on its last stacks ([`ExitTails`]).
//!
//! [`ExitTails`]: super::super::clocks::paced::exit_tails::ExitTails

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::exclusions;
use crate::thread_keys::ThreadKeys;

use super::super::clocks::paced::cpu_debt::MAX_OWED_PERIODS;
use super::super::clocks::paced::exit_tails::{share_out, ExitTail};
use super::super::clocks::ring::born_threads::BornThreads;
use super::super::kernel::threads;
use super::super::signal::stack_regions;
use super::collect::OwnedWalk;
use super::pacing::{CpuPacing, IDLE_SLACK_NS};
use super::{monotonic_ns, SamplerLoop, ThreadState, LISTING_SHARE, RECENT_WALKS};
use super::{PacedThread, RingThread, TimerThread, RELIST_INTERVAL, YOUNG};

/// The longest a thread on the rings with no ring sample goes without its
/// clock read ([`SamplerLoop::account_cpu`]).
const IDLE_RING_READ_NS: u64 = 250_000_000;

/// With every thread on the rings, the longest a due listing is put off
/// while nothing says a thread came or went
/// ([`SamplerLoop::listing_can_wait`]).
const RINGS_RELIST_INTERVAL: Duration = Duration::from_secs(1);

/// The same where some thread has a timer of its own, and where only the
/// thread count tells of a birth: a thread born while another exited, the
/// count unchanged, gets its timer at most this late. On the
/// sampler-thread clock, the longest a listing is put off while the
/// threads it looks at keep running.
const COUNT_RELIST_INTERVAL: Duration = Duration::from_millis(100);

/// Sampler-thread clock: how often, between listings spaced more than
/// twice [`RELIST_INTERVAL`] apart, the threads created since are looked
/// for ([`SamplerLoop::find_new_threads`]). A look reads one small file:
/// a few microseconds, against milliseconds for a listing of thousands.
const NEW_THREADS_INTERVAL: Duration = Duration::from_millis(5);

impl ThreadState {
    pub(super) fn new(now: Instant, listing: u64) -> Self {
        ThreadState {
            key: u32::MAX,
            accounted_ns: None,
            sampled_since_read: 0,
            exit_counted: false,
            pending: false,
            seen_listing: listing,
            first_seen: now,
            name_pass: 0,
            name_check_listing: listing,
            name_check_interval: 1,
            name_read_cpu_ns: None,
            blocked: None,
            mask_checked: false,
            read_ns: None,
            read_at_ns: 0,
            gone_at_ns: None,
            state_file: None,
            syscall_file_tried: false,
            paced: PacedThread::default(),
            timer: TimerThread::default(),
            ring: RingThread::default(),
        }
    }

    /// Born while sampling (sampler-thread path) less than [`YOUNG`] ago:
    /// it may live only a period or two, so it is sampled at any wakeup
    /// and its last few stacks are kept for its exit.
    pub(super) fn young_born(&self) -> bool {
        self.paced.born_during_run && self.first_seen.elapsed() < YOUNG
    }

    /// A thread whose birth was unread at its first listing was born under
    /// the inherited events after all: sampled by them from its birth, its
    /// clock counted from zero, its renames read from the rings' records.
    pub(super) fn judge_born(&mut self) {
        self.ring.birth_unread = false;
        self.ring.born = true;
        self.accounted_ns = Some(0);
        self.ring.named = true;
    }

    /// The CPU time read at the ticks beyond what was counted (a thread
    /// that exited since the last listing), now counted too.
    fn take_read_since_accounted(&mut self) -> Option<Duration> {
        let (read, accounted) = (self.read_ns?, self.accounted_ns?);
        self.accounted_ns = Some(read.max(accounted));
        Some(Duration::from_nanos(read.saturating_sub(accounted)))
    }

    /// Whether the kernel samples it into the rings: born under the
    /// inherited events or one they were opened on, and not handed to a
    /// timer.
    pub(super) fn on_rings(&self) -> bool {
        (self.ring.opened_on || self.ring.born) && self.timer.open.is_none()
    }

    /// Its name is read now, at `listing`: the next read is scheduled at a
    /// growing interval (renames later in life), spread over the listings
    /// of that interval by its id, so that a pool of threads found together
    /// has its names re-read over several listings rather than all at one
    /// (5,000 names cost a listing about 16 ms).
    fn name_read_now(&mut self, tid: i32, listing: u64) {
        let interval = self.name_check_interval;
        let spread = (tid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        self.name_check_listing = listing + interval + ((spread * (interval + 1)) >> 32);
        self.name_check_interval = (interval * 2).min(1024);
        self.name_read_cpu_ns = self.accounted_ns;
        // Read before its events open (a thread found at start), a rename
        // may fall between the two: read once more.
        self.ring.named = self.on_rings();
    }

    /// Whether the thread is running or blocked now, through a state file
    /// kept open ([`threads::StateFile`]). A young thread's is its stat
    /// file, for the name it gives ([`YOUNG`]): the thread may have named
    /// itself since it was listed (a thread starts with its creator's
    /// name), and a short one can be gone by the time its sample is
    /// collected, when its name cannot be read again; it was then counted
    /// under its creator's name, as was what it ran after its last sample.
    /// An older thread's is its `syscall` file, a third of the cost, or its
    /// stat file where that one cannot be opened.
    pub(super) fn run_state(
        &mut self,
        tid: i32,
        keys: &mut ThreadKeys,
    ) -> Option<threads::RunState> {
        let young = self.first_seen.elapsed() < YOUNG;
        let grown_up = !young && !self.syscall_file_tried;
        if self.state_file.is_none() || grown_up {
            // Closed first: the budget of open files counts it.
            self.state_file = None;
            self.state_file = match young {
                true => threads::StateFile::open_stat(tid),
                false => {
                    self.syscall_file_tried = true;
                    threads::StateFile::open_syscall(tid)
                        .or_else(|| threads::StateFile::open_stat(tid))
                }
            };
        }
        let mut buf = [0u8; 512];
        let stat = match &self.state_file {
            Some(file) => file.read(&mut buf),
            None => threads::stat(tid, &mut buf),
        }?;
        if let Some(name) = stat.name {
            let known = Some(self.key).filter(|&k| k != u32::MAX);
            if known.is_some() && young {
                self.key = keys.key_named(tid as u64, name, known);
            }
        }
        Some(stat.state)
    }

    /// The thread's CPU time as the sampler accounts it: its timer's count
    /// if it has one (a timer starts at zero when opened), else its clock.
    pub(super) fn cpu_reading(&self, tid: i32) -> Option<u64> {
        match &self.timer.open {
            Some(timer) => timer.cpu_ns(),
            None => threads::thread_cpu_ns(tid),
        }
    }

    /// For a thread that exited, whose clock can no longer be read: its
    /// CPU time from the kernel's count of its perf timer, or of the ring
    /// events opened on it, `born`'s, taken at `read_at` (monotonic ns).
    ///
    /// Those counts run on while the host has stopped the virtual CPU
    /// under the thread (stolen time, which its CPU clock leaves out), and
    /// a pause can be longer than the thread's whole last stretch. So the
    /// count may add to the clock's last reading no more than the wall
    /// time since then, nor than the periods its samples since then stood
    /// for and two more (a pause's skipped periods bring no samples; the
    /// last partial period may be a whole one, and one whose end fell in
    /// kernel code brought no sample either where only user code is
    /// sampled: thread pools' threads, woken and gone in 4 ms, often have
    /// one).
    fn counted_at_exit(
        &mut self,
        tid: i32,
        born: Option<&BornThreads>,
        read_at: u64,
        period_ns: u64,
    ) -> Option<u64> {
        let count = match &self.timer.open {
            Some(timer) => timer.counted_ns(),
            None if self.ring.opened_on => born?.parent_cpu_ns(tid),
            None => None,
        }?;
        let before = self.accounted_ns?;
        let wall = read_at.saturating_sub(self.read_at_ns);
        // Later readings add only the samples drained since; the two
        // periods more are allowed for once.
        let periods = self.sampled_since_read + 2 * u64::from(!self.exit_counted);
        self.sampled_since_read = 0;
        self.exit_counted = true;
        let most = wall.min(periods.saturating_mul(period_ns));
        Some(count.clamp(before, before.saturating_add(most)))
    }
}

/// A thread that exited at the last listing, and its last stacks
/// ([`SamplerLoop::settle_exits`]).
pub(super) struct Exit {
    pub(super) tid: i32,
    pub(super) key: u32,
    pub(super) walks: Vec<OwnedWalk>,
    pub(super) tail: ExitTail,
}

impl AsMut<ExitTail> for Exit {
    fn as_mut(&mut self) -> &mut ExitTail {
        &mut self.tail
    }
}

impl SamplerLoop {
    /// Whether a listing of the threads that fell due can be put off, on
    /// the clocks the kernel paces: every known thread is sampled (on the
    /// rings, or by a timer of its own, or counted as blocking the signal),
    /// the last listing is recent, and since it began the process's thread
    /// count is the same and, on the rings, no thread's birth or exit was
    /// read; with every thread on the rings, the count may have fallen by
    /// the exits read.
    ///
    /// A thread the inherited events cover writes its birth into the rings
    /// and is sampled from its first instruction whether a listing found it
    /// or not, so with every thread on the rings and nothing born or gone a
    /// listing finds nothing to do ([`RINGS_RELIST_INTERVAL`]). A timer
    /// needs a listing to find a new thread, but a birth changes the count,
    /// unless another thread exited since ([`COUNT_RELIST_INTERVAL`]). A
    /// thread still waiting for its timer (one a listing opens, or the
    /// second look at a mask seen blocking the signal once), or whose
    /// birth record is not read yet, keeps the listings coming; so does one
    /// whose timer fell silent, for the listing that finds out why
    /// ([`SamplerLoop::watch_blocked_threads`]).
    ///
    /// Reading `/proc/self/task` and the listed threads' clocks is most of
    /// the sampler thread's time with a steady set of threads, so it is
    /// skipped while nothing changed. The clocks of threads sampled since are
    /// read anyway ([`SamplerLoop::account_cpu`]), as after a listing.
    /// Looks that find nothing changed also tell how long the threads held
    /// still, which lengthens the wakeups ([`super::QUIET_AFTER`]).
    pub(super) fn listing_can_wait(&mut self) -> bool {
        let records = self.ring.events.as_ref().map(|b| b.task_records());
        let (put_off, rings_only) = if !self.timers() {
            return self.paced_listing_can_wait();
        } else {
            let (mut on_rings, mut sampled) = (true, true);
            for s in self.threads.values() {
                let rings =
                    (s.ring.born || s.ring.opened_on) && !s.ring.deep && !s.ring.birth_unread;
                on_rings &= rings;
                // Seen blocking once is no verdict: the next listing looks
                // again, and gives a thread that was starting its timer.
                let blocks = s.blocked.as_ref().is_some_and(|b| b.confirmed);
                sampled &= rings || s.timer.open.is_some() || blocks;
                sampled &= !s.timer_silent(self.period_ns);
            }
            let rings_only = on_rings && records.is_some();
            match (sampled, rings_only) {
                (false, _) => (Duration::ZERO, false),
                (true, true) => (RINGS_RELIST_INTERVAL, true),
                (true, false) => (COUNT_RELIST_INTERVAL, false),
            }
        };
        if put_off.is_zero() {
            // Compared again only after a listing that read them.
            self.listed_as = None;
            self.steady_since = None;
            return false;
        }
        let Ok(count) = self.tasks.count() else {
            self.listed_as = None;
            self.steady_since = None;
            return false;
        };
        let now = (count, records);
        let recent = self.listed_at.is_some_and(|at| at.elapsed() < put_off);
        let same = match (self.listed_as, records) {
            // On the rings alone, threads that exited since are the ones
            // whose exit records came: a pool that winds down is not
            // listed again at each exit. What a listing does for them
            // (their last CPU time, the rest of their last period) waits
            // for the next one, or the stop.
            (Some((listed, Some(then))), Some(now)) if rings_only => {
                now.births == then.births
                    && now.exits >= then.exits
                    && count + (now.exits - then.exits) == listed
            }
            (listed, _) => listed == Some(now),
        };
        if same {
            self.steady_since.get_or_insert_with(Instant::now);
        } else {
            self.steady_since = None;
        }
        if recent && same {
            return true;
        }
        // Read before the listing: a thread that comes or goes while it
        // runs shows at the next check.
        self.listed_as = Some(now);
        false
    }

    /// Sampler-thread clock, cpu mode: whether a listing that fell due can
    /// be put off. Only while the last listing is recent
    /// ([`COUNT_RELIST_INTERVAL`]) and the process's thread count is the
    /// same as when it began, and while few of the threads the ticks look
    /// at stopped running since then (at most a tenth of the threads known,
    /// or one): the ticks read one clock for each, against every thread's
    /// for a listing. Nor while a thread born while sampling is young
    /// ([`YOUNG`]): it may name itself, or end, within milliseconds, and
    /// the listings read its name and count what it ran.
    ///
    /// The listings every [`RELIST_INTERVAL`] were a fifth of this clock's
    /// cost at 100 Hz with a steady set of busy threads: reading
    /// `/proc/self/task`, every thread's clock and the last thread id
    /// given. A thread born meanwhile shows in the count, or, where
    /// another exited, its CPU time shows as spent out of sight
    /// ([`UnseenCpu`]), which brings a listing at once; so that one look
    /// costs one `fstat`, the last thread id given ([`NewThreads`]) is not
    /// read (it cost twice as much). An idle thread that runs again (its
    /// wake timer, [`super::wake_timers`]) is looked at as after a listing.
    /// A thread that blocks the signal keeps the listings coming: they
    /// look at its mask again.
    ///
    /// [`NewThreads`]: super::new_threads::NewThreads
    /// [`UnseenCpu`]: super::super::clocks::paced::unseen_cpu::UnseenCpu
    fn paced_listing_can_wait(&mut self) -> bool {
        if self.cpu_pacing.is_none() {
            return false;
        }
        let Ok(count) = self.tasks.count() else {
            self.listed_as = None;
            return false;
        };
        let same = self.listed_as == Some((count, None));
        // Read before the listing: a thread that comes or goes while it
        // runs shows at the next check.
        self.listed_as = Some((count, None));
        let recent = self
            .listed_at
            .is_some_and(|at| at.elapsed() < COUNT_RELIST_INTERVAL);
        let young = self
            .cpu_pacing
            .as_ref()
            .and_then(|p| p.last_birth)
            .is_some_and(|at| at.elapsed() < YOUNG);
        let period = self.period_ns;
        let mut stopped = 0;
        for tid in &self.active {
            let Some(s) = self.threads.get(tid) else {
                continue;
            };
            if s.blocked.is_some() {
                return false;
            }
            let moved = match (s.read_ns, s.paced.listing_cpu_ns) {
                (Some(now), Some(then)) => now >= then + IDLE_SLACK_NS,
                _ => false,
            };
            stopped += usize::from(!moved && !s.pending && s.paced.debt.due(period).is_none());
        }
        same && recent && !young && stopped <= (self.threads.len() / 10).max(1)
    }

    /// Registers threads seen for the first time and re-reads names that
    /// are due; a new thread may run on a stack not yet in the snapshot.
    ///
    /// Returns the sampler CPU time spent registering new threads (reading
    /// each one's name), which a listing's spacing leaves out
    /// ([`SamplerLoop::tick`]): it is paid once per thread, not at every
    /// listing.
    pub(super) fn discover_threads(&mut self) -> Duration {
        let listing = self.listing;
        let mut new = Vec::new();
        for i in 0..self.tids.len() {
            let tid = self.tids[i];
            if tid == self.own_tid || exclusions::is_excluded(tid as u64) {
                // A profiler thread (the dump thread) may be listed once
                // before it excludes itself: forget it now, before its CPU
                // time or its blocked signals are counted.
                self.threads.remove(&tid);
                // The process's clock counts btprof's threads too.
                if let (Some(CpuPacing { tails, .. }), true) =
                    (self.cpu_pacing.as_mut(), tid != self.own_tid)
                {
                    if let Some(cpu) = threads::thread_cpu_ns(tid) {
                        tails.saw_excluded(tid, cpu, self.listing > 1);
                    }
                }
                continue;
            }
            let Some(s) = self.threads.get_mut(&tid) else {
                new.push(tid);
                continue;
            };
            s.seen_listing = listing;
            if std::mem::take(&mut s.ring.birth_unread) {
                if let Some(born) = self.ring.events.as_mut() {
                    if born.is_young(tid) {
                        s.judge_born();
                    } else {
                        // Not born under the events: counted as listed
                        // from now, on a timer of its own.
                        let cpu = threads::thread_cpu_ns(tid).unwrap_or(0);
                        born.hand_off(tid, monotonic_ns(), cpu);
                    }
                }
            }
            if s.name_check_listing > listing
                || (s.ring.named && s.on_rings())
                || (s.accounted_ns.is_some() && s.accounted_ns == s.name_read_cpu_ns)
            {
                continue;
            }
            s.name_read_now(tid, listing);
            self.read_name(tid);
        }
        if !new.is_empty() {
            // Threads come and go: not quiet, even where the count held.
            self.steady_since = None;
        }
        let registering = threads::own_cpu_ns();
        self.register(&new, listing > 1 && !self.timers());
        Duration::from_nanos(threads::own_cpu_ns().saturating_sub(registering))
    }

    /// Starts keeping the state of each thread in `new`, seen for the
    /// first time. `born_during_run`: all their CPU time was used while
    /// sampling (sampler-thread clock), so all of it is owed.
    fn register(&mut self, new: &[i32], born_during_run: bool) {
        let listing = self.listing;
        let now = Instant::now();
        for &tid in new {
            // Until the snapshot is read again, handlers read this thread's
            // stack checked (`own_stack`).
            self.regions_stale = true;
            stack_regions::set_covers_listed(false);
            let mut state = ThreadState::new(now, listing);
            if let Some(born) = self.ring.events.as_mut() {
                state.ring.born = born.is_young(tid);
                if state.ring.born {
                    // Its clock counts from its birth, all of it sampled by
                    // the inherited events.
                    state.accounted_ns = Some(0);
                } else {
                    // Not known to be born here yet: its start may still
                    // be in a ring.
                    state.ring.birth_unread = true;
                }
            }
            if born_during_run {
                // All its CPU time so far was used during the run, so it is
                // owed (and counted) from zero, and a short-lived thread is
                // sampled as soon as it used a period (at its first look,
                // if it used one already).
                state.paced.last_cpu_ns = Some(0);
                state.accounted_ns = Some(0);
                state.read_ns = Some(0);
                state.paced.born_during_run = true;
                if let Some(pacing) = self.cpu_pacing.as_mut() {
                    pacing.last_birth = Some(now);
                }
            }
            state.name_read_now(tid, listing);
            self.threads.insert(tid, state);
            self.read_name(tid);
        }
        // A thread whose name could not be read even once (it exited at
        // once) is dropped now rather than sampled under no name.
        self.threads.retain(|_, s| s.key != u32::MAX);
    }

    /// Sampler-thread clock, between listings spaced far apart (thousands
    /// of threads): registers the threads created since the last look
    /// ([`NewThreads`](super::new_threads::NewThreads)) and looks
    /// at them from the next tick on, so a thread born just after a
    /// listing is not left unseen until the next.
    /// At most every [`NEW_THREADS_INTERVAL`], and spaced like listings by
    /// what a look cost: registering a thread reads its name (tens of
    /// microseconds in a VM), and a process that starts thousands of
    /// short-lived threads a second would otherwise have the sampler
    /// register each one.
    pub(super) fn find_new_threads(&mut self) {
        if self.relist_every < 2 * RELIST_INTERVAL
            || self.new_threads_due.is_some_and(|due| Instant::now() < due)
        {
            return;
        }
        let Some(watch) = self
            .cpu_pacing
            .as_mut()
            .and_then(|p| p.new_threads.as_mut())
        else {
            return;
        };
        let cpu_before = threads::own_cpu_ns();
        let mut found = std::mem::take(&mut self.new_tids);
        watch.look(&mut found);
        found.retain(|&tid| {
            tid != self.own_tid
                && !exclusions::is_excluded(tid as u64)
                && !self.threads.contains_key(&tid)
        });
        if !found.is_empty() {
            self.register(&found, true);
            let before = self.active.len();
            let known = found.iter().filter(|&tid| self.threads.contains_key(tid));
            self.active.extend(known);
            self.stats.threads_found_between_listings += (self.active.len() - before) as u64;
        }
        self.new_tids = found;
        let cost = Duration::from_nanos(threads::own_cpu_ns().saturating_sub(cpu_before));
        self.new_threads_due =
            Some(Instant::now() + NEW_THREADS_INTERVAL.max(cost * LISTING_SHARE));
    }

    /// Reads thread `tid`'s name and points its state at that name's key.
    pub(super) fn read_name(&mut self, tid: i32) -> Option<u32> {
        let name = threads::thread_name(tid)?;
        let previous = self
            .threads
            .get(&tid)
            .map(|s| s.key)
            .filter(|&k| k != u32::MAX);
        let key = self.thread_keys.key(tid as u64, name, previous);
        if let Some(state) = self.threads.get_mut(&tid) {
            state.key = key;
        }
        Some(key)
    }

    /// Adds each thread's CPU time since the last reading to the stats.
    /// Unless `every` thread's is wanted (at stop, for a dump), a thread on
    /// the rings still in the latest listing, with no ring sample counted
    /// since its clock was last read, read less than [`IDLE_RING_READ_NS`]
    /// ago, is left for a later reading.
    ///
    /// A clock read is a system call, and reading every thread's at each
    /// listing was a sixth of the sampler thread's time in a pool of 512
    /// threads. A thread with no ring sample since its last reading mostly
    /// did not run since. One that left the listing is always read (from
    /// its events' counts once its clock is gone): its last reading is
    /// what its time and its last part of a period are counted from, and
    /// its last samples may still be held back in the rings.
    pub(super) fn account_cpu(&mut self, every: bool) {
        let mut total = Duration::ZERO;
        let read_at = monotonic_ns();
        let born = self.ring.events.as_ref();
        let (listing, period) = (self.listing, self.period_ns);
        for (&tid, state) in self.threads.iter_mut() {
            if state.ring.birth_unread {
                // Judged at the next listing; at stop or for a dump, now if
                // its birth is in already, so that its time is counted.
                if !(every && born.is_some_and(|b| b.is_young(tid))) {
                    continue;
                }
                state.judge_born();
            }
            let on_rings = state.on_rings();
            if on_rings
                && !every
                && state.seen_listing == listing
                && !state.ring.sampled
                && state.accounted_ns.is_some()
                && read_at.saturating_sub(state.read_at_ns) < IDLE_RING_READ_NS
            {
                continue;
            }
            state.ring.sampled = false;
            let reading = match state.cpu_reading(tid) {
                Some(now) => {
                    state.sampled_since_read = 0;
                    if on_rings {
                        state.read_at_ns = read_at;
                    }
                    Some(now)
                }
                // Its clock's last reading stays the mark its ring samples
                // are counted after: those drained later were taken before
                // now, and allow for more of the count at the next look.
                None => {
                    #[cfg(feature = "test-hooks")]
                    super::HOLD_DRAINS.store(false, Ordering::Relaxed);
                    state.counted_at_exit(tid, born, read_at, period)
                }
            };
            state.paced.listed_cpu_ns = reading;
            if let Some(now) = reading {
                if let Some(before) = state.accounted_ns {
                    let used = Duration::from_nanos(now.saturating_sub(before));
                    self.stats.add_thread_cpu(tid as u64, used);
                }
                // Its name was read at this listing, just before.
                state.name_read_cpu_ns.get_or_insert(now);
                state.accounted_ns = Some(now);
                if let Some(CpuPacing { tails, .. }) = self.cpu_pacing.as_mut() {
                    tails.saw(&mut state.read_ns, now);
                    state.read_at_ns = read_at;
                }
            } else if self.cpu_pacing.is_some() {
                state.gone_at_ns.get_or_insert(read_at);
            }
        }
        for t in &self.stats.thread_cpu {
            total += t.cpu;
        }
        self.progress
            .sampled_cpu_ns
            .store(total.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Forgets threads not in the latest listing (closing their timers)
    /// unless a signal to them is still in flight, or, for a thread on the
    /// rings, until the listing after: its last ring samples may still be
    /// held back ([`BornThreads::drain`]), and are counted under its key
    /// and make its last stack, on which its last part of a period is
    /// counted.
    ///
    /// [`BornThreads::drain`]: super::super::clocks::ring::born_threads::BornThreads::drain
    pub(super) fn forget_exited(&mut self) {
        let listing = self.listing;
        self.departed.clear();
        let departed = &mut self.departed;
        let mut born = self.ring.events.as_mut();
        let born_accounted = &mut self.ring.accounted;
        let (reckon, period, now) = (self.cpu_pacing.is_some(), self.period_ns, monotonic_ns());
        let (exits, stats) = (&mut self.exits, &mut self.stats);
        let mut ring_exits = Vec::new();
        self.threads.retain(|&tid, s| {
            let keep = s.seen_listing == listing
                || s.pending
                || ((s.on_rings() || s.timer.open.is_some()) && s.seen_listing + 1 == listing);
            if !keep {
                departed.insert(tid, s.key);
                if reckon {
                    // Its CPU time read since the last listing, then what it
                    // stands for after its last sample ([`ExitTails`]).
                    if let Some(since) = s.take_read_since_accounted() {
                        stats.add_thread_cpu(tid as u64, since);
                    }
                    // Also a thread never sampled: what it was owed is
                    // reported as stackless samples ([`Self::settle_exits`]).
                    // It takes no share of the unread time (a cap of 0),
                    // which stays in the stats' unsampled CPU time: with
                    // no stack, that share would only move CPU time from
                    // one "not covered" count to another.
                    let walks = std::mem::take(&mut s.paced.recent_walks);
                    let cap_ns = if walks.is_empty() {
                        0
                    } else {
                        s.gone_at_ns.unwrap_or(now).saturating_sub(s.read_at_ns)
                    };
                    exits.push(Exit {
                        tid,
                        key: s.key,
                        walks,
                        tail: ExitTail {
                            owed_ns: s.paced.debt.take_all(period),
                            cap_ns,
                            unread_ns: 0,
                        },
                    });
                }
                if let Some(born) = born.as_mut() {
                    born.forget(tid);
                    if s.ring.born {
                        born_accounted.insert(tid, s.accounted_ns.unwrap_or(0));
                    }
                }
                if s.ring.opened_on {
                    ring_exits.push((tid, s.accounted_ns.unwrap_or(0)));
                }
            }
            keep
        });
        for (tid, cpu_ns) in ring_exits {
            self.count_parent_tail(tid, cpu_ns);
        }
    }

    /// Sampler-thread path, cpu mode: counts on each thread that exited at
    /// this listing, on its last stacks, the CPU time it used after its
    /// last sample: what it was owed at its last reading, and its share of
    /// the `unread_ns` nobody read since the last listing ([`ExitTails`]).
    ///
    /// [`ExitTails`]: super::super::clocks::paced::exit_tails::ExitTails
    pub(super) fn settle_exits(&mut self, unread_ns: u64) {
        let Some(mut pacing) = self.cpu_pacing.take() else {
            return;
        };
        let tails = &mut pacing.tails;
        share_out(unread_ns, &mut self.exits);
        let mut exits = std::mem::take(&mut self.exits);
        for exit in exits.drain(..) {
            let tail = exit.tail;
            let unread = Duration::from_nanos(tail.unread_ns);
            self.stats.add_thread_cpu(exit.tid as u64, unread);
            let samples = tails
                .samples_for(tail.owed_ns + tail.unread_ns, self.period_ns)
                .min(MAX_OWED_PERIODS);
            if exit.walks.is_empty() {
                // It exited before its first sample: no stack to count
                // them on, so they are reported instead.
                self.stats.stackless_samples += samples;
                continue;
            }
            // Each on one of its last stacks, picked at random: the thread's
            // recent samples scaled up to all of its time.
            let mut counts = [0u64; RECENT_WALKS];
            for _ in 0..samples {
                counts[tails.pick(exit.walks.len())] += 1;
            }
            for (walk, &count) in exit.walks.iter().zip(&counts) {
                if count > 0 {
                    self.intern(exit.key, &walk.as_collected(), count);
                }
            }
            self.stats.exit_samples += samples;
        }
        self.exits = exits;
        self.cpu_pacing = Some(pacing);
    }

    /// Sampler-thread path, cpu mode, at stop: counts what every thread
    /// still owes since its last sample as [`Self::settle_exits`] does for
    /// one that exited. Random ticks take a due thread a while after it
    /// falls due, so a thread owes a period or more at any moment, and
    /// dropping that at stop lowered a 4-second run at 100 Hz to 96-97
    /// samples per CPU-second.
    pub(super) fn settle_at_stop(&mut self) {
        if self.cpu_pacing.is_none() {
            return;
        }
        let period = self.period_ns;
        for (&tid, s) in self.threads.iter_mut() {
            // A thread that exited since the last listing (the stop's
            // reading found no clock): its CPU time read at the ticks since
            // then, as when a listing forgets it. With listings put off,
            // that can be 100 ms of each thread of a program that ends.
            if let Some(since) = s.take_read_since_accounted().filter(|d| !d.is_zero()) {
                self.stats.add_thread_cpu(tid as u64, since);
            }
            self.exits.push(Exit {
                tid,
                key: s.key,
                walks: std::mem::take(&mut s.paced.recent_walks),
                tail: ExitTail {
                    owed_ns: s.paced.debt.take_all(period),
                    cap_ns: 0,
                    unread_ns: 0,
                },
            });
        }
        self.settle_exits(0);
    }
}
