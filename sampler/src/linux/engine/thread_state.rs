//! What the sampler keeps per thread between wakeups: what every clock
//! uses, each clock's own part, and the bookkeeping of threads that block
//! the signal and of armed slots.

use std::time::{Duration, Instant};

use crate::thread_keys::ThreadKeys;

use super::super::clocks::ring::born_threads::BornThreads;
use super::super::kernel::threads;
use super::pacing::PacedThread;
use super::ring_clock::RingThread;
use super::signal_timers::TimerThread;
use super::YOUNG;

/// What the sampler knows about one thread between ticks: what every
/// clock uses here, and what only one clock's code reads in that clock's
/// part ([`PacedThread`], [`TimerThread`], [`RingThread`]), left at its
/// default on the other clocks.
pub(super) struct ThreadState {
    /// Index into `RawProfile::threads` for the thread's current name.
    pub(super) key: u32,
    /// The last reading of the thread's CPU time (its CPU clock, from its
    /// timer's opening where it has one) added to
    /// [`SamplerStats::thread_cpu`](crate::SamplerStats::thread_cpu).
    pub(super) accounted_ns: Option<u64>,
    /// Periods its timer's or the rings' samples stood for since
    /// `accounted_ns` was last read: once it exits, the kernel's count for
    /// its time after its clock's last reading is believed no further than
    /// they stand for ([`SamplerLoop::account_cpu`](super::SamplerLoop::account_cpu)), and two periods more
    /// the first time (`exit_counted` then).
    pub(super) sampled_since_read: u64,
    pub(super) exit_counted: bool,
    /// A signal is in flight: don't send another.
    pub(super) pending: bool,
    /// The listing the thread was last seen in, to forget exited threads.
    pub(super) seen_listing: u64,
    /// When the sampler first saw the thread.
    pub(super) first_seen: Instant,
    /// The collection pass that last re-read the name of this young thread.
    pub(super) name_pass: u64,
    /// The listing at which to re-read the name: besides young threads'
    /// names, names are re-read at growing intervals (renames later in life).
    pub(super) name_check_listing: u64,
    pub(super) name_check_interval: u64,
    /// `accounted_ns` when the name was last read: a thread whose CPU time
    /// has not moved since cannot have renamed itself, and another thread
    /// rarely renames it, so its due re-read waits until it runs.
    pub(super) name_read_cpu_ns: Option<u64>,
    /// The thread blocks the profiling signal: its timer is closed (so no
    /// signals queue up on it), the sampler thread does not signal it, and
    /// its due samples are counted in `signal_blocked_samples` until it
    /// unblocks.
    pub(super) blocked: Option<BlockedSince>,
    /// Its signal mask was looked at before its first signal or its timer
    /// (a thread that blocks the signal from the start, as daemons and
    /// `sigwait` loops do, is never signalled and gets no timer: the signal
    /// would stay queued, or be taken by its `sigwait` as if it were its
    /// own).
    pub(super) mask_checked: bool,
    /// Cpu mode, on the sampler-thread clock and the rings: the latest
    /// reading of its CPU clock ([`ExitTails::saw`]), when it was taken
    /// (monotonic ns), and when a reading first failed because it had
    /// exited.
    ///
    /// [`ExitTails::saw`]: crate::linux::clocks::paced::exit_tails::ExitTails::saw
    pub(super) read_ns: Option<u64>,
    pub(super) read_at_ns: u64,
    pub(super) gone_at_ns: Option<u64>,
    /// A `/proc` file that tells whether it runs, kept open: read before
    /// each signal the sampler thread sends it (on the sampler-thread
    /// clock). Its stat file
    /// while it is young, which gives its name too, then the cheaper
    /// `syscall` file where the kernel shows it ([`ThreadState::run_state`]).
    pub(super) state_file: Option<threads::StateFile>,
    /// Its `syscall` file was tried: where it could not be opened, the
    /// stat file stays, not opened again at each read.
    pub(super) syscall_file_tried: bool,
    /// Sampler-thread clock: its pacing ([`super::pacing`]).
    pub(super) paced: PacedThread,
    /// Kernel-paced clocks: its signal timer ([`super::signal_timers`]).
    pub(super) timer: TimerThread,
    /// Ring clock: whether the rings sample it, and how their walks went
    /// ([`super::ring_clock`]).
    pub(super) ring: RingThread,
}

/// A thread found blocking the profiling signal.
pub(super) struct BlockedSince {
    /// Its CPU clock when last counted.
    pub(super) cpu_ns: u64,
    /// CPU time not yet counted as a whole failed period.
    pub(super) owed_ns: u64,
    /// The listing at which to look at its signal mask again.
    pub(super) recheck_listing: u64,
    /// Sampler-thread path: the earliest moment (monotonic ns) a tick
    /// that finds the thread due looks at its mask again, whatever the
    /// listings ([`ThreadState::look_again`]).
    pub(super) look_at_ns: u64,
    /// Whether a second look agreed. A single look at `SigBlk` cannot tell
    /// a thread that blocks the signal from one that is starting (glibc's
    /// `pthread_create` runs a new thread's first instructions with every
    /// signal blocked) or entering btprof's handler: until a second look
    /// agrees (at the next listing, or on the sampler-thread clock at the
    /// next tick that finds the thread due, if sooner), its failed periods
    /// are held in `owed_ns`, not counted, and owed again if the thread
    /// turns out to take signals.
    pub(super) confirmed: bool,
}

/// Which thread an armed slot belongs to.
#[derive(Clone, Copy)]
pub(super) struct SlotUse {
    pub(super) tid: i32,
    pub(super) key: u32,
    /// The periods of CPU time this sample stands for (1 in wall mode).
    pub(super) weight: u64,
    pub(super) armed_at: Instant,
    /// Asked for with a one-shot CPU timer: it stands for the ticks that
    /// found the thread running until it lands
    /// ([`PacedThread::running_ticks`]).
    pub(super) by_request: bool,
}

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
    pub(super) fn take_read_since_accounted(&mut self) -> Option<Duration> {
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
    pub(super) fn name_read_now(&mut self, tid: i32, listing: u64) {
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
    pub(super) fn counted_at_exit(
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
