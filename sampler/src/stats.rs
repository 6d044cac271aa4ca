//! The counters that describe how a profile was taken: every sample
//! that was due is either in the profile or counted here as why not.

use std::time::{Duration, SystemTime};

use crate::config::{Mode, SampleClock, SamplerConfig};
use crate::walker::WalkEnd;

/// CPU time one thread used while it was sampled, from its own CPU clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ThreadCpu {
    /// The OS thread id, as in [`crate::ThreadInfo::tid`].
    pub tid: u64,
    /// CPU time the thread used between sampling's start (or the window's)
    /// and its stop, as far as the sampler saw it (read every few
    /// milliseconds; a thread's last moments before it exits may be
    /// missed).
    pub cpu: Duration,
    /// Samples due for this thread that were not taken because it blocks
    /// the profiling signal (its `SigBlk` mask).
    pub signal_blocked: u64,
}

/// Counters describing how a profile was taken. Nothing is dropped
/// silently: every interrupted, skipped or failed sample is counted here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerStats {
    /// The rate asked for.
    pub requested_hz: u32,
    /// The mode used.
    pub mode: Mode,
    /// What paced the samples.
    pub clock: SampleClock,
    /// When sampling started.
    pub start_time: SystemTime,
    /// Wall time from start to stop, measured (not derived from the rate).
    pub duration: Duration,
    /// Ticks of the sampler thread that ran: with [`SampleClock::Perf`]
    /// the sampler thread only wakes to collect, and this counts those
    /// wake-ups. On the Linux fallback in [`Mode::Cpu`] it wakes at random
    /// moments, not on a fixed period, and at least once a period.
    pub ticks: u64,
    /// Deadlines skipped because the sampler woke too late (on the Linux
    /// fallback in [`Mode::Cpu`], whole periods overslept).
    pub missed_ticks: u64,
    /// Stacks recorded, each counted by the periods it stands for: in cpu
    /// mode, samples per CPU-second are this over the threads' CPU time.
    pub samples: u64,
    /// Stacks recorded, each counted once. Fewer than [`Self::samples`]
    /// where one stack stands for several periods (the sampler-thread path
    /// on a busy machine pays CPU time it could not sample with later
    /// samples): the number of independent observations, which is what a
    /// share's statistical error depends on.
    pub recorded: u64,
    /// Recorded stacks by why their walk ended, indexed by `WalkEnd as usize`.
    pub walk_ends: [u64; WalkEnd::ALL.len()],
    /// Samples that were due but never taken: the signal could not be sent
    /// or the thread did not take it in time.
    pub failed_samples: u64,
    /// Samples not attempted on a tick because the thread's previous one
    /// was still in flight or all slots were busy; on the sampler-thread
    /// path in cpu mode also periods of CPU time beyond the most a thread
    /// may be owed (it kept missing its samples for a long time).
    pub skipped_samples: u64,
    /// Samples not taken because every slot was in flight (more threads
    /// due at once than slots; the next tick starts where this one
    /// stopped, so every thread gets its turn).
    pub slots_full: u64,
    /// Samples not taken because the thread blocks the profiling signal
    /// (found in its `SigBlk` mask): it is not signalled (a blocked signal
    /// would stay queued), and each period it used is counted here. Per
    /// thread in [`ThreadCpu::signal_blocked`].
    pub signal_blocked_samples: u64,
    /// Wall mode: samples of a thread whose CPU clock had not moved since
    /// its previous sample, counted again with that stack without
    /// interrupting it (it has not run, so that is still its stack; a
    /// signal would make its blocking call fail with `EINTR`).
    pub reused_samples: u64,
    /// Sampler-thread path: signals a thread took too late (it was waiting
    /// for a CPU, so the sample would have landed where it was preempted,
    /// not where its CPU time went) or on its way out of a system call
    /// (where threads are preempted far more often than their CPU time
    /// says). Nothing was recorded; the thread was sampled again on a later
    /// tick, for the same CPU time.
    pub late_samples: u64,
    /// Linux, per-thread timers: samples of threads born while sampling,
    /// taken by the events they inherited at birth before they had a timer
    /// of their own (and the periods their last moments stood for); see
    /// `born_threads` in the Linux backend. Included in
    /// [`Self::samples`].
    pub born_samples: u64,
    /// Linux, perf events: samples the kernel took into its ring buffers,
    /// with no signal and no btprof code in the sampled thread (the
    /// threads found at start, up to the descriptor budget, and every
    /// thread born under them); [`Self::born_samples`] among them.
    /// Included in [`Self::samples`].
    pub ring_samples: u64,
    /// Linux, perf events: ring samples the kernel dropped because a ring
    /// was full (`PERF_RECORD_LOST`). The CPU time they stood for is in
    /// the threads' time but has no sample: it lowers the rate.
    pub lost_samples: u64,
    /// Threads sampled through the kernel's ring buffers.
    pub ring_threads: u64,
    /// Threads sampled through a timer of their own that signals them
    /// (a thread beyond the rings' descriptor budget, one deeper than the
    /// kernel's call chains).
    pub timer_threads: u64,
    /// Linux sampler-thread clock, cpu mode: idle threads given a wake
    /// timer, a one-shot CPU timer that tells the sampler when the thread
    /// runs again, so it is looked at before the next listing of threads.
    pub wake_timers: u64,
    /// Times a wake timer told the sampler that its idle thread ran.
    pub wakes: u64,
    /// The most idle threads one listing found that could have no wake
    /// timer (more idle threads than the timers btprof opens: a quarter of
    /// `RLIMIT_SIGPENDING`, at most 8,192), so far in the run. Such a
    /// thread is looked at again only at the next listing.
    pub idle_without_wake_timer: u64,
    /// Linux sampler-thread clock: threads found between two listings of
    /// the threads, by the ids the kernel gave since the last one (listings
    /// come further apart as the threads grow in number).
    pub threads_found_between_listings: u64,
    /// Linux sampler-thread path, cpu mode: samples for the CPU time
    /// threads used after their last sample, counted on their last stacks
    /// when they exited or the profiler stopped, so that a short-lived
    /// thread does not lose the part of its time after its last sample.
    /// Included in [`Self::samples`].
    pub exit_samples: u64,
    /// Linux sampler-thread path, cpu mode: periods of CPU time the
    /// sampler read from threads that exited (or were still running at
    /// stop) before their first sample, so there was no stack to count
    /// them on. A thread that lives about a period is often gone before
    /// the sampler thread comes round, more so beside busy processes that
    /// delay it. Their CPU time is in the threads' time
    /// ([`Self::lost_cpu`]): like lost ring samples they lower the rate,
    /// and are not dropped silently. (What such a thread ran after the
    /// sampler's last reading is in [`Self::unsampled_cpu`].)
    pub stackless_samples: u64,
    /// Samples not taken because the thread had exited after it was
    /// listed (the list is re-read every few milliseconds).
    pub exited_threads: u64,
    /// Distinct (thread, name) pairs seen, whether or not their stacks
    /// were shared by name.
    pub threads_seen: u64,
    /// CPU time the sampler thread itself used.
    pub sampler_cpu: Duration,
    /// CPU time the whole process used while sampled, from its own CPU
    /// clock: every thread's, exited ones and btprof's own included. Zero
    /// where unknown (stats read back from a file). Against
    /// [`Self::sampled_cpu`] it tells how much CPU time no sample could
    /// stand for ([`Self::unsampled_cpu`]).
    pub process_cpu: Duration,
    /// Profiling signals that arrived with nothing to fill (late ones).
    pub stray_signals: u64,
    /// Callers (frames past the leaf) recovered from call frame
    /// information (`.eh_frame`) where following the frame pointer would
    /// have lost or skipped them: a large share means the profiled code
    /// lacks frame pointers.
    pub cfi_frames: u64,
    /// Callers found by following frame pointers (or where CFI agreed with
    /// the frame pointer).
    pub frame_pointer_frames: u64,
    /// CPU time each sampled thread used, by thread id (sorted).
    pub thread_cpu: Vec<ThreadCpu>,
}

impl SamplerStats {
    /// Zeroed counters for `config`.
    pub fn new(config: &SamplerConfig) -> Self {
        SamplerStats {
            requested_hz: config.hz,
            mode: config.mode,
            clock: SampleClock::SamplerThread,
            start_time: SystemTime::now(),
            duration: Duration::ZERO,
            ticks: 0,
            missed_ticks: 0,
            samples: 0,
            recorded: 0,
            walk_ends: [0; WalkEnd::ALL.len()],
            failed_samples: 0,
            skipped_samples: 0,
            slots_full: 0,
            signal_blocked_samples: 0,
            reused_samples: 0,
            late_samples: 0,
            born_samples: 0,
            ring_samples: 0,
            lost_samples: 0,
            ring_threads: 0,
            timer_threads: 0,
            wake_timers: 0,
            wakes: 0,
            idle_without_wake_timer: 0,
            threads_found_between_listings: 0,
            exit_samples: 0,
            stackless_samples: 0,
            exited_threads: 0,
            threads_seen: 0,
            sampler_cpu: Duration::ZERO,
            process_cpu: Duration::ZERO,
            stray_signals: 0,
            cfi_frames: 0,
            frame_pointer_frames: 0,
            thread_cpu: Vec::new(),
        }
    }

    /// The achieved rate in the unit [`SamplerConfig::hz`] asks for, so the
    /// two compare: in [`Mode::Cpu`], samples per CPU-second of the sampled
    /// threads ([`Self::samples_per_cpu_second`]); in [`Mode::Wall`], ticks
    /// per wall-clock second ([`Self::ticks_per_second`]). Both come from
    /// clocks (the threads' CPU clocks, the monotonic clock), never from
    /// the requested rate.
    pub fn achieved_hz(&self) -> f64 {
        match self.mode {
            Mode::Cpu => self.samples_per_cpu_second(),
            Mode::Wall => self.ticks_per_second(),
        }
    }

    /// Sampler-thread ticks per wall-clock second. With
    /// [`SampleClock::Perf`] the sampler thread does not pace
    /// samples and this is its collection rate; on the Linux fallback in
    /// [`Mode::Cpu`] it counts random wakeups and those that look for new
    /// threads (see
    /// [`Self::ticks`]), so it is not the sample rate either.
    pub fn ticks_per_second(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.ticks as f64 / secs
        } else {
            0.0
        }
    }

    /// CPU time the sampled threads used, all together.
    pub fn sampled_cpu(&self) -> Duration {
        self.thread_cpu.iter().map(|t| t.cpu).sum()
    }

    /// CPU time of the sampled threads that no sample stands for, though
    /// it is counted in [`Self::sampled_cpu`], one period for each: ring
    /// samples the kernel dropped from a full ring
    /// ([`Self::lost_samples`]), and the periods of threads that exited
    /// before their first sample ([`Self::stackless_samples`]).
    pub fn lost_cpu(&self) -> Duration {
        if self.requested_hz == 0 {
            return Duration::ZERO;
        }
        let periods = self.lost_samples + self.stackless_samples;
        Duration::from_secs_f64(periods as f64 / f64::from(self.requested_hz))
    }

    /// CPU time of the process that no sampled thread accounts for: threads
    /// that lived and exited between two listings of the threads (a few
    /// milliseconds apart) or ran before their first listing, a thread's
    /// last moments before it exited, and btprof's own threads other than
    /// the sampler (a dump thread). An estimate of what the profile
    /// missed; zero where the process's CPU time is unknown.
    pub fn unsampled_cpu(&self) -> Duration {
        self.process_cpu
            .saturating_sub(self.sampled_cpu())
            .saturating_sub(self.sampler_cpu)
    }

    /// Samples per CPU-second of the sampled threads, all together: in
    /// [`Mode::Cpu`] this should equal the requested rate on a busy machine
    /// as on an idle one. Zero when no CPU time was seen.
    pub fn samples_per_cpu_second(&self) -> f64 {
        self.per_cpu_second(self.samples)
    }

    /// Distinct samples (signals or ring records, each counted once) per
    /// CPU-second of the sampled threads: below
    /// [`Self::samples_per_cpu_second`] where one sample stands for several
    /// periods (the sampler thread's samples that pay periods a thread was
    /// owed). What a share's statistical error depends on.
    pub fn distinct_per_cpu_second(&self) -> f64 {
        self.per_cpu_second(self.recorded)
    }

    /// `n` per CPU-second of the sampled threads; zero when no CPU time
    /// was seen.
    fn per_cpu_second(&self, n: u64) -> f64 {
        let secs = self.sampled_cpu().as_secs_f64();
        if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    }

    /// CPU time thread `tid` used while sampled, if it was seen.
    pub fn cpu_of(&self, tid: u64) -> Option<Duration> {
        self.thread_cpu
            .binary_search_by_key(&tid, |t| t.tid)
            .ok()
            .map(|i| self.thread_cpu[i].cpu)
    }

    /// Counts one interned sample standing for `weight` periods, whose walk
    /// ended so.
    pub(crate) fn count_sample(&mut self, end: crate::walker::WalkEnd, weight: u64) {
        self.count_weight(end, weight);
        self.recorded += 1;
    }

    /// Records `weight` more periods for a stack already sampled (no new
    /// distinct sample).
    pub(crate) fn count_weight(&mut self, end: crate::walker::WalkEnd, weight: u64) {
        self.samples += weight;
        self.walk_ends[end as usize] += weight;
    }

    /// Records that thread `tid` used `cpu` more CPU time.
    pub fn add_thread_cpu(&mut self, tid: u64, cpu: Duration) {
        self.thread_entry(tid).cpu += cpu;
    }

    /// Records `samples` lost because thread `tid` blocks the profiling
    /// signal (also counted in [`Self::signal_blocked_samples`]).
    pub fn add_signal_blocked(&mut self, tid: u64, samples: u64) {
        if samples > 0 {
            self.thread_entry(tid).signal_blocked += samples;
        }
    }

    fn thread_entry(&mut self, tid: u64) -> &mut ThreadCpu {
        let i = match self.thread_cpu.binary_search_by_key(&tid, |t| t.tid) {
            Ok(i) => i,
            Err(i) => {
                self.thread_cpu.insert(
                    i,
                    ThreadCpu {
                        tid,
                        cpu: Duration::ZERO,
                        signal_blocked: 0,
                    },
                );
                i
            }
        };
        &mut self.thread_cpu[i]
    }

    /// The counters accumulated since `earlier`, a copy of these stats
    /// taken before: what one window of a longer run saw. `start_time`,
    /// `duration` and `threads_seen` are the caller's to set.
    pub fn since(&self, earlier: &SamplerStats) -> SamplerStats {
        let mut walk_ends = self.walk_ends;
        for (now, then) in walk_ends.iter_mut().zip(earlier.walk_ends) {
            *now = now.saturating_sub(then);
        }
        let thread_cpu = self
            .thread_cpu
            .iter()
            .map(|t| {
                let before = earlier
                    .thread_cpu
                    .binary_search_by_key(&t.tid, |e| e.tid)
                    .ok()
                    .map(|i| earlier.thread_cpu[i]);
                ThreadCpu {
                    tid: t.tid,
                    cpu: t
                        .cpu
                        .saturating_sub(before.map_or(Duration::ZERO, |b| b.cpu)),
                    signal_blocked: t
                        .signal_blocked
                        .saturating_sub(before.map_or(0, |b| b.signal_blocked)),
                }
            })
            .collect();
        SamplerStats {
            requested_hz: self.requested_hz,
            mode: self.mode,
            clock: self.clock,
            start_time: self.start_time,
            duration: self.duration.saturating_sub(earlier.duration),
            ticks: self.ticks.saturating_sub(earlier.ticks),
            missed_ticks: self.missed_ticks.saturating_sub(earlier.missed_ticks),
            samples: self.samples.saturating_sub(earlier.samples),
            recorded: self.recorded.saturating_sub(earlier.recorded),
            walk_ends,
            failed_samples: self.failed_samples.saturating_sub(earlier.failed_samples),
            skipped_samples: self.skipped_samples.saturating_sub(earlier.skipped_samples),
            slots_full: self.slots_full.saturating_sub(earlier.slots_full),
            signal_blocked_samples: self
                .signal_blocked_samples
                .saturating_sub(earlier.signal_blocked_samples),
            reused_samples: self.reused_samples.saturating_sub(earlier.reused_samples),
            late_samples: self.late_samples.saturating_sub(earlier.late_samples),
            born_samples: self.born_samples.saturating_sub(earlier.born_samples),
            ring_samples: self.ring_samples.saturating_sub(earlier.ring_samples),
            lost_samples: self.lost_samples.saturating_sub(earlier.lost_samples),
            ring_threads: self.ring_threads,
            timer_threads: self.timer_threads,
            wake_timers: self.wake_timers.saturating_sub(earlier.wake_timers),
            wakes: self.wakes.saturating_sub(earlier.wakes),
            idle_without_wake_timer: self.idle_without_wake_timer,
            threads_found_between_listings: self
                .threads_found_between_listings
                .saturating_sub(earlier.threads_found_between_listings),
            exit_samples: self.exit_samples.saturating_sub(earlier.exit_samples),
            stackless_samples: self
                .stackless_samples
                .saturating_sub(earlier.stackless_samples),
            exited_threads: self.exited_threads.saturating_sub(earlier.exited_threads),
            threads_seen: self.threads_seen,
            sampler_cpu: self.sampler_cpu.saturating_sub(earlier.sampler_cpu),
            process_cpu: self.process_cpu.saturating_sub(earlier.process_cpu),
            stray_signals: self.stray_signals.saturating_sub(earlier.stray_signals),
            cfi_frames: self.cfi_frames.saturating_sub(earlier.cfi_frames),
            frame_pointer_frames: self
                .frame_pointer_frames
                .saturating_sub(earlier.frame_pointer_frames),
            thread_cpu,
        }
    }

    /// Adds the counters of `later`, the next window of the same run, so
    /// these stats cover both. The start time stays the earlier one.
    pub fn absorb(&mut self, later: &SamplerStats) {
        self.duration += later.duration;
        self.ticks += later.ticks;
        self.missed_ticks += later.missed_ticks;
        self.samples += later.samples;
        self.recorded += later.recorded;
        for (sum, add) in self.walk_ends.iter_mut().zip(later.walk_ends) {
            *sum += add;
        }
        self.failed_samples += later.failed_samples;
        self.skipped_samples += later.skipped_samples;
        self.slots_full += later.slots_full;
        self.signal_blocked_samples += later.signal_blocked_samples;
        self.reused_samples += later.reused_samples;
        self.late_samples += later.late_samples;
        self.born_samples += later.born_samples;
        self.ring_samples += later.ring_samples;
        self.lost_samples += later.lost_samples;
        self.ring_threads = self.ring_threads.max(later.ring_threads);
        self.timer_threads = self.timer_threads.max(later.timer_threads);
        self.wake_timers += later.wake_timers;
        self.wakes += later.wakes;
        self.idle_without_wake_timer = self
            .idle_without_wake_timer
            .max(later.idle_without_wake_timer);
        self.threads_found_between_listings += later.threads_found_between_listings;
        self.exit_samples += later.exit_samples;
        self.stackless_samples += later.stackless_samples;
        self.exited_threads += later.exited_threads;
        self.threads_seen = self.threads_seen.max(later.threads_seen);
        self.sampler_cpu += later.sampler_cpu;
        self.process_cpu += later.process_cpu;
        self.stray_signals += later.stray_signals;
        self.cfi_frames += later.cfi_frames;
        self.frame_pointer_frames += later.frame_pointer_frames;
        for t in &later.thread_cpu {
            self.add_thread_cpu(t.tid, t.cpu);
            self.add_signal_blocked(t.tid, t.signal_blocked);
        }
    }

    /// Recorded stacks whose raw walk did not reach the end of the frame
    /// chain. Raw: whether a walk reached its thread's entry needs symbols
    /// (the main thread's chain always breaks in the C start code after
    /// `main`, and a zero frame pointer may sit halfway up the stack), so
    /// the profile the root crate builds decides that per stack.
    pub fn truncated(&self) -> u64 {
        WalkEnd::ALL
            .iter()
            .filter(|e| e.is_truncated())
            .map(|&e| self.walk_ends[e as usize])
            .sum()
    }
}
