//! What the sampler keeps per thread between wakeups: what every clock
//! uses, each clock's own part, blocked-signal bookkeeping and armed slots.

use std::time::{Duration, Instant};

use crate::thread_keys::ThreadKeys;

use super::super::clocks::ring::born_threads::BornThreads;
use super::super::kernel::threads;
use super::pacing::PacedThread;
use super::ring_clock::RingThread;
use super::signal_timers::TimerThread;
use super::YOUNG;

/// One thread's state between ticks: what every clock uses, plus each
/// clock's part ([`PacedThread`], [`TimerThread`], [`RingThread`]), left
/// at its default on the other clocks.
pub(super) struct ThreadState {
    /// Index into `RawProfile::threads` for the thread's current name.
    pub(super) key: u32,
    /// The last CPU time reading (ns; its timer's count where it has one)
    /// added to [`SamplerStats::thread_cpu`](crate::SamplerStats::thread_cpu).
    pub(super) accounted_ns: Option<u64>,
    /// Periods its samples stood for since `accounted_ns` was read. At exit
    /// the kernel's count is believed no further than these, plus two more
    /// the first time (`exit_counted`), since that count includes stolen time
    /// ([`SamplerLoop::account_cpu`](super::SamplerLoop::account_cpu)).
    pub(super) sampled_since_read: u64,
    pub(super) exit_counted: bool,
    /// A signal is in flight: don't send another.
    pub(super) pending: bool,
    /// The listing the thread was last seen in, to forget exited threads.
    pub(super) seen_listing: u64,
    pub(super) first_seen: Instant,
    /// The collection pass that last re-read this young thread's name.
    pub(super) name_pass: u64,
    /// The listing at which to re-read the name (growing intervals).
    pub(super) name_check_listing: u64,
    pub(super) name_check_interval: u64,
    /// `accounted_ns` at the last name read: a thread whose CPU time has not
    /// moved rarely renamed, so its re-read waits until it runs.
    pub(super) name_read_cpu_ns: Option<u64>,
    /// It blocks the profiling signal: its timer is closed (so no signals
    /// queue), it is not signalled, and its due samples are counted in
    /// `signal_blocked_samples` until it unblocks.
    pub(super) blocked: Option<BlockedSince>,
    /// Its mask was checked before its first signal or timer: a thread that
    /// blocks the signal from the start (daemons, `sigwait` loops) must never
    /// get one, or it stays queued or is taken by `sigwait` as its own.
    pub(super) mask_checked: bool,
    /// Cpu mode, sampler-thread clock and rings: the latest CPU clock
    /// reading ([`ExitTails::saw`]), its monotonic time (ns), and when a
    /// read first failed because it exited.
    ///
    /// [`ExitTails::saw`]: crate::linux::clocks::paced::exit_tails::ExitTails::saw
    pub(super) read_ns: Option<u64>,
    pub(super) read_at_ns: u64,
    pub(super) gone_at_ns: Option<u64>,
    /// Sampler-thread clock: a `/proc` file kept open to tell whether it runs
    /// ([`ThreadState::run_state`]).
    pub(super) state_file: Option<threads::StateFile>,
    /// Its `syscall` file was tried; where it failed, the stat file stays.
    pub(super) syscall_file_tried: bool,
    /// Sampler-thread clock ([`super::pacing`]).
    pub(super) paced: PacedThread,
    /// Kernel-paced clocks ([`super::signal_timers`]).
    pub(super) timer: TimerThread,
    /// Ring clock ([`super::ring_clock`]).
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
    /// Sampler-thread path: earliest monotonic time (ns) a tick finding it
    /// due looks at its mask again ([`ThreadState::look_again`]).
    pub(super) look_at_ns: u64,
    /// Whether a second look agreed. One look at `SigBlk` cannot tell a
    /// blocking thread from one starting (`pthread_create` runs with every
    /// signal blocked) or inside btprof's handler; until confirmed, its
    /// failed periods are held in `owed_ns` and owed again if it unblocks.
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
    /// Asked for with a one-shot timer: stands for the ticks that found the
    /// thread running until it lands ([`PacedThread::running_ticks`]).
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

    /// Born while sampling less than [`YOUNG`] ago: it may live only a
    /// period or two, so it is sampled at any wakeup and keeps its last stacks.
    pub(super) fn young_born(&self) -> bool {
        self.paced.born_during_run && self.first_seen.elapsed() < YOUNG
    }

    /// A thread whose birth was unread at its first listing was born under
    /// the inherited events: counted from zero, renames read from records.
    pub(super) fn judge_born(&mut self) {
        self.ring.birth_unread = false;
        self.ring.born = true;
        self.accounted_ns = Some(0);
        self.ring.named = true;
    }

    /// CPU time read at ticks beyond what was counted (exited since the
    /// last listing), now counted too.
    pub(super) fn take_read_since_accounted(&mut self) -> Option<Duration> {
        let (read, accounted) = (self.read_ns?, self.accounted_ns?);
        self.accounted_ns = Some(read.max(accounted));
        Some(Duration::from_nanos(read.saturating_sub(accounted)))
    }

    /// Whether the rings sample it: born under the inherited events or one
    /// they were opened on, and not handed to a timer.
    pub(super) fn on_rings(&self) -> bool {
        (self.ring.opened_on || self.ring.born) && self.timer.open.is_none()
    }

    /// Its name is read now, at `listing`: the next read comes at a growing
    /// interval, offset by its id so a pool's names are spread over listings.
    pub(super) fn name_read_now(&mut self, tid: i32, listing: u64) {
        let interval = self.name_check_interval;
        let spread = (tid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        self.name_check_listing = listing + interval + ((spread * (interval + 1)) >> 32);
        self.name_check_interval = (interval * 2).min(1024);
        self.name_read_cpu_ns = self.accounted_ns;
        // Read before its events opened, a rename may fall between: read once more.
        self.ring.named = self.on_rings();
    }

    /// Whether the thread is running or blocked, through a state file kept
    /// open ([`threads::StateFile`]). A [`YOUNG`] thread's is its stat file,
    /// which also gives its name, since young threads name themselves and
    /// may be gone before it can be read again; an older one's is the
    /// cheaper `syscall` file where the kernel has it.
    pub(super) fn run_state(
        &mut self,
        tid: i32,
        keys: &mut ThreadKeys,
    ) -> Option<threads::RunState> {
        let young = self.first_seen.elapsed() < YOUNG;
        let grown_up = !young && !self.syscall_file_tried;
        if self.state_file.is_none() || grown_up {
            // Closed first: the open-file budget counts it.
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

    /// CPU time as the sampler accounts it: its timer's count if it has one
    /// (a timer starts at zero), else its clock.
    pub(super) fn cpu_reading(&self, tid: i32) -> Option<u64> {
        match &self.timer.open {
            Some(timer) => timer.cpu_ns(),
            None => threads::thread_cpu_ns(tid),
        }
    }

    /// For an exited thread: its CPU time from `born`'s or its timer's
    /// count, taken at `read_at` (monotonic ns).
    ///
    /// Those counts include time the host stole, which the CPU clock leaves
    /// out, so the count may add to the last reading no more than the wall
    /// time since, nor than the periods its samples stood for plus two (the
    /// last partial period, and one ending in kernel code, bring no sample).
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
        // The two extra periods are allowed once.
        let periods = self.sampled_since_read + 2 * u64::from(!self.exit_counted);
        self.sampled_since_read = 0;
        self.exit_counted = true;
        let most = wall.min(periods.saturating_mul(period_ns));
        Some(count.clamp(before, before.saturating_add(most)))
    }
}
