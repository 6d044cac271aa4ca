//! The shared sampling loop (the one the Mach sampler runs) driven by a
//! recording fake on any host: it never stops itself, resumes every
//! stopped thread exactly once on every path, releases every port and
//! listing every tick, counts threads that exit under it, allocates
//! nothing while a thread is stopped, and ticks on absolute deadlines.

mod fake_control;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use btprof_sampler::clock::Clock;
use btprof_sampler::control::{holding_a_thread_stopped, StackRange};
use btprof_sampler::walker::{StackBounds, WalkEnd};
use btprof_sampler::{Error, Mode, RawProfile};

use fake_control::counting_alloc::allocator_calls_on_this_thread;
use fake_control::driving::{
    assert_followed_the_rules, assert_tallies, checked_run, count_of, one_thread,
    renamed_between_ticks, sampling, stacks_of, stops_of, ticks, OWN,
};
use fake_control::{Call, FakeControl, FakeThread, Fault};

#[test]
fn a_tick_stops_walks_and_resumes_every_other_thread_once() {
    let threads = vec![
        FakeThread::new(10, "alpha"),
        FakeThread::new(11, "beta"),
        FakeThread::new(12, "gamma"),
    ];
    let expected: Vec<_> = threads
        .iter()
        .map(|t| (t.name.clone(), t.expected_frames()))
        .collect();
    let lp = checked_run(threads, Mode::Wall, 1);
    for port in [10, 11, 12] {
        assert_eq!(count_of(&lp, Call::Stop { port, ok: true }), 1);
        assert_eq!(count_of(&lp, Call::Registers(port)), 1);
        assert_eq!(count_of(&lp, Call::Resume(port)), 1);
        assert_eq!(count_of(&lp, Call::ReleaseThread(port)), 1);
    }
    assert_eq!(count_of(&lp, Call::ReleaseThread(OWN)), 1);
    assert_eq!(count_of(&lp, Call::ReleaseList(0)), 1);

    let raw = lp.finish();
    assert_eq!(raw.stats.samples, 3);
    assert_eq!(raw.stats.walk_ends[WalkEnd::Complete as usize], 3);
    assert_eq!((raw.stats.failed_samples, raw.stats.exited_threads), (0, 0));
    for (name, frames) in expected {
        assert_eq!(stacks_of(&raw, &name), vec![(frames, WalkEnd::Complete, 1)]);
    }
    let mut tids: Vec<u64> = raw.threads.iter().map(|t| t.tid).collect();
    tids.sort();
    assert_eq!(tids, vec![1010, 1011, 1012]);
}

#[test]
fn the_sampler_never_stops_its_own_thread_wherever_it_is_listed() {
    // The fake lists its own thread at a different position each tick.
    let threads = (10..15).map(|p| FakeThread::new(p, "w")).collect();
    let lp = checked_run(threads, Mode::Wall, 60);
    assert_eq!(lp.control().own_stops(), 0);
    // Only released, once per tick: never asked about, never stopped.
    let about_own = lp.control().count(|c| c.port() == Some(OWN));
    assert_eq!(about_own, 60);
    assert_eq!(count_of(&lp, Call::ReleaseThread(OWN)), 60);
    assert_eq!(lp.stats().samples, 5 * 60);
}

#[test]
fn a_failing_thread_get_state_still_resumes_the_thread_once() {
    let threads = vec![
        FakeThread::new(10, "fails").with_fault(Fault::RegistersFail),
        FakeThread::new(11, "exits-while-stopped").with_fault(Fault::ExitsWhileStopped),
        FakeThread::new(12, "fine"),
    ];
    let lp = checked_run(threads, Mode::Wall, 5);
    for port in [10, 11, 12] {
        assert_eq!(count_of(&lp, Call::Stop { port, ok: true }), 5);
        assert_eq!(count_of(&lp, Call::Resume(port)), 5, "port {port}");
    }
    assert_tallies(&lp, 5, 5, 5);
}

#[test]
fn a_walk_into_unreadable_memory_resumes_the_thread_and_is_marked_truncated() {
    let bad = FakeThread::new(10, "bad-stack").with_fault(Fault::UnreadableStack);
    let pc = bad.pc();
    let lp = checked_run(vec![bad], Mode::Wall, 3);
    assert_eq!(count_of(&lp, Call::Resume(10)), 3);
    let raw = lp.finish();
    assert_eq!(raw.stats.truncated(), 3);
    assert_eq!(raw.stats.walk_ends[WalkEnd::Unreadable as usize], 3);
    assert_eq!(
        stacks_of(&raw, "bad-stack"),
        vec![(vec![pc], WalkEnd::Unreadable, 3)]
    );
}

/// A thread caught inside `pthread_exit` (xnu disables its port before
/// terminating it): `thread_get_state` and `thread_resume` fail with
/// `KERN_INVALID_ARGUMENT`. It is counted as exited and the run goes on; a
/// walk taken before the thread vanished is kept, and a thread someone else
/// resumed meanwhile (`KERN_FAILURE`) is no failure either. On the code
/// before this, the Mach resume aborted the process on both codes.
#[test]
fn a_thread_gone_while_stopped_is_counted_as_exited_and_never_aborts() {
    let threads = vec![
        FakeThread::new(10, "gone-while-stopped").with_fault(Fault::GoneWhileStopped),
        FakeThread::new(11, "gone-before-resume").with_fault(Fault::GoneBeforeResume),
        FakeThread::new(12, "resumed-elsewhere").with_fault(Fault::ResumedBySomeoneElse),
        FakeThread::new(13, "fine"),
    ];
    let walked = threads[1].expected_frames();
    let lp = checked_run(threads, Mode::Wall, 6);
    for port in [10, 11, 12, 13] {
        assert_eq!(
            count_of(&lp, Call::Stop { port, ok: true }),
            6,
            "port {port}"
        );
        assert_eq!(count_of(&lp, Call::Resume(port)), 6, "port {port}");
    }
    assert_tallies(&lp, 18, 0, 12);
    let raw = lp.finish();
    assert!(stacks_of(&raw, "gone-while-stopped").is_empty());
    assert_eq!(
        stacks_of(&raw, "gone-before-resume"),
        vec![(walked, WalkEnd::Complete, 6)]
    );
}

/// A stopped thread's stack is read only by copies, inside the stopped
/// window, within `[sp, top)` of its own stack: one copy when the live
/// stack fits the window, further bounded copies for deeper frames.
#[test]
fn a_stopped_threads_stack_is_read_only_by_bounded_copies() {
    let shallow = FakeThread::new(10, "shallow");
    let deep = FakeThread::new(11, "deep").with_frames(12, 4);
    let (shallow_frames, deep_frames) = (shallow.expected_frames(), deep.expected_frames());
    let mut lp = sampling(FakeControl::new(OWN, vec![shallow, deep]), Mode::Wall)
        .with_stack_copy_window(128);
    ticks(&mut lp, 3);
    // check_protocol fails any copy outside a stopped window.
    assert_followed_the_rules(&lp);
    let fake = lp.control();
    assert_eq!(fake.copies_outside_stacks, 0);
    let copies: Vec<(u64, usize)> = fake
        .calls()
        .iter()
        .filter_map(|c| match *c {
            Call::CopyMemory { addr, words } => Some((addr, words)),
            _ => None,
        })
        .collect();
    assert!(copies.iter().all(|&(_, words)| words <= 16), "{copies:?}");
    // The shallow thread's 3 frames fit one 128-byte copy from sp; the deep
    // one's 12 frames, 32 bytes apart, take several.
    assert!(copies.len() > 2 * 3, "{copies:?}");
    let raw = lp.finish();
    assert_eq!(
        stacks_of(&raw, "shallow"),
        vec![(shallow_frames, WalkEnd::Complete, 3)]
    );
    assert_eq!(
        stacks_of(&raw, "deep"),
        vec![(deep_frames, WalkEnd::Complete, 3)]
    );

    // With the default window, one copy of the live stack per sample.
    let t = FakeThread::new(10, "one-copy");
    let lp = checked_run(vec![t], Mode::Wall, 2);
    let copies = lp.control().count(|c| matches!(c, Call::CopyMemory { .. }));
    assert_eq!(copies, 2);
}

/// Threads whose names mark them as Rosetta's runtime, another sampler or
/// a crash reporter's handler are never stopped, also once a thread takes
/// such a name after it was first seen.
#[test]
fn threads_named_as_never_to_stop_are_never_stopped() {
    let threads = vec![
        FakeThread::new(10, "com.apple.rosetta.exceptionserver"),
        FakeThread::new(11, "io.sentry.SamplingProfiler"),
        FakeThread::new(12, "KSCrash Exception Handler (Primary)"),
        FakeThread::new(13, "worker"),
        FakeThread::new(14, "starting"),
    ];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    ticks(&mut lp, 1);
    lp.control_mut().rename(14, "com.apple.rosetta.debugserver");
    ticks(&mut lp, 9);
    assert_followed_the_rules(&lp);
    for port in [10, 11, 12] {
        let stops = stops_of(&lp, port);
        assert_eq!(stops, 0, "port {port} was stopped");
    }
    assert_eq!(count_of(&lp, Call::Stop { port: 13, ok: true }), 10);
    // Stopped on the first tick, before it named itself, then never again.
    assert_eq!(count_of(&lp, Call::Stop { port: 14, ok: true }), 1);
    assert_eq!(lp.stats().samples, 11);
}

#[test]
fn a_thread_that_exits_between_listing_and_stopping_is_skipped_counted_and_released() {
    let threads = vec![
        FakeThread::new(10, "exits-before-stop").with_fault(Fault::ExitsBeforeStop),
        FakeThread::new(11, "exits-before-info").with_fault(Fault::ExitsBeforeInfo),
        FakeThread::new(12, "stop-fails").with_fault(Fault::StopFails),
        FakeThread::new(13, "fine"),
    ];
    let lp = checked_run(threads, Mode::Wall, 4);
    // A failed stop is never resumed: that would undo someone else's
    // suspension of a live thread.
    for port in [10, 12] {
        assert_eq!(count_of(&lp, Call::Stop { port, ok: false }), 4);
        assert_eq!(count_of(&lp, Call::Registers(port)), 0);
        assert_eq!(count_of(&lp, Call::Resume(port)), 0);
    }
    // Gone before its id could be read: never stopped at all.
    assert_eq!(stops_of(&lp, 11), 0);
    for port in [10, 11, 12, 13] {
        assert_eq!(count_of(&lp, Call::ReleaseThread(port)), 4, "port {port}");
    }
    assert_tallies(&lp, 4, 4, 8);
}

#[test]
fn many_ticks_release_every_port_and_listing_and_match_every_stop_with_one_resume() {
    let threads = vec![
        FakeThread::new(10, "steady"),
        FakeThread::new(11, "regs-fail").with_fault(Fault::RegistersFail),
        FakeThread::new(12, "bad-stack").with_fault(Fault::UnreadableStack),
        FakeThread::new(13, "exits").with_fault(Fault::ExitsBeforeStop),
        FakeThread::new(14, "idle").idle(),
    ];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Cpu);
    let mut next_id = 5000;
    for round in 0..30u32 {
        ticks(&mut lp, 10);
        // Between ticks a short-lived thread exits and a new one takes its
        // port name's slot, as Mach reuses a released name's index for
        // another thread (with the next generation in the name's low
        // bits, so the name itself differs).
        let fake = lp.control_mut();
        if round > 0 {
            fake.remove_thread(20 + ((round - 1) << 8));
        }
        next_id += 1;
        fake.add_thread(FakeThread::new(20 + (round << 8), "short-lived").with_id(next_id));
    }
    assert_followed_the_rules(&lp);
    let fake = lp.control();
    assert_eq!(fake.count(|c| matches!(c, Call::List { .. })), 300);
    assert_eq!(fake.count(|c| matches!(c, Call::ReleaseList(_))), 300);
    let stops = fake.count(|c| matches!(c, Call::Stop { ok: true, .. }));
    let resumes = fake.count(|c| matches!(c, Call::Resume(_)));
    assert_eq!(stops, resumes);
    assert_eq!(stops as u64, fake.windows);
    let raw = lp.finish();
    // Each short-lived thread is its own thread in the profile, by id,
    // though all of them had port 20.
    let short: Vec<u64> = raw
        .threads
        .iter()
        .filter(|t| t.name == "short-lived")
        .map(|t| t.tid)
        .collect();
    assert_eq!(short.len(), 29, "{short:?}");
}

#[test]
fn nothing_allocates_between_stop_and_resume() {
    // Renames and new threads make the loop allocate around the windows
    // (names, thread keys, new stacks interned), so the counter is live.
    let threads = (10..16).map(|p| FakeThread::new(p, "w")).collect();
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    let before = allocator_calls_on_this_thread();
    for round in 0..20u32 {
        ticks(&mut lp, 10);
        let fake = lp.control_mut();
        fake.rename(10 + round % 6, &format!("w{round}"));
        if round % 2 == 0 {
            fake.add_thread(FakeThread::new(30, "new"));
        } else {
            fake.remove_thread(30);
        }
    }
    let around = allocator_calls_on_this_thread() - before;
    assert_followed_the_rules(&lp);
    let fake = lp.control();
    assert!(fake.windows >= 200 * 6, "{} windows", fake.windows);
    assert!(around > 0, "the counter saw no allocation at all");
    assert_eq!(
        fake.allocator_calls_in_windows, 0,
        "the loop called the allocator while a thread was stopped"
    );
}

#[test]
fn the_allocation_counter_catches_an_allocation_while_stopped() {
    // The zero above means something only if an allocation in the window
    // would be seen: here the fake itself allocates there.
    let threads = vec![FakeThread::new(10, "allocates").with_fault(Fault::AllocatesWhileStopped)];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    ticks(&mut lp, 3);
    assert!(lp.control().allocator_calls_in_windows >= 3);
}

#[test]
fn the_stopped_window_is_marked_for_the_abort_on_panic_hook() {
    let threads = vec![
        FakeThread::new(10, "a"),
        FakeThread::new(11, "b").with_fault(Fault::RegistersFail),
    ];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    assert!(!holding_a_thread_stopped());
    ticks(&mut lp, 5);
    assert_eq!(lp.control().unmarked_windows, 0);
    assert!(!holding_a_thread_stopped(), "still marked after the tick");
    // A failed stop leaves nothing marked either.
    let threads = vec![FakeThread::new(10, "x").with_fault(Fault::StopFails)];
    let mut lp = sampling(FakeControl::new(OWN, threads), Mode::Wall);
    ticks(&mut lp, 1);
    assert!(!holding_a_thread_stopped());
}

#[test]
fn cpu_mode_stops_only_threads_whose_cpu_time_advanced() {
    let threads = || {
        vec![
            FakeThread::new(10, "busy"),
            FakeThread::new(11, "idle").idle(),
        ]
    };
    let cpu = checked_run(threads(), Mode::Cpu, 10);
    // The first look only reads the clock; then one period per tick.
    assert_eq!(count_of(&cpu, Call::Stop { port: 10, ok: true }), 9);
    // The idle thread is never disturbed.
    assert_eq!(count_of(&cpu, Call::Stop { port: 11, ok: true }), 0);
    // One look at CPU time and run state per thread per tick.
    assert_eq!(count_of(&cpu, Call::CpuTime(10)), 10);

    let mut wall = sampling(FakeControl::new(OWN, threads()), Mode::Wall);
    ticks(&mut wall, 10);
    assert_eq!(count_of(&wall, Call::Stop { port: 11, ok: true }), 10);
    // Wall mode reads CPU times only for the stats, once per thread per tick.
    assert_eq!(count_of(&wall, Call::CpuTime(11)), 10);
}

#[test]
fn names_and_stack_bounds_are_read_before_stopping_and_not_every_tick() {
    // A thread names itself right after it starts: the next sample
    // already carries the new name.
    let lp = renamed_between_ticks("starting", 1, "named-later", 299);
    assert_followed_the_rules(&lp);
    let fake = lp.control();
    // The stack range is cached per thread id.
    assert_eq!(count_of(&lp, Call::StackRange(10)), 1);
    // The id is read once while the listing stays the same.
    assert_eq!(count_of(&lp, Call::ThreadId(10)), 1);
    // The name is read on every tick of the thread's first 100 ms (100
    // ticks at 1000 Hz), then no more while the listing stays the same.
    assert_eq!(count_of(&lp, Call::Name(10)), 100);
    // Both reads come before the thread's first stop.
    let first_stop = fake
        .calls()
        .iter()
        .position(|c| matches!(c, Call::Stop { port: 10, .. }))
        .unwrap();
    let first_range = fake
        .calls()
        .iter()
        .position(|c| *c == Call::StackRange(10))
        .unwrap();
    assert!(first_range < first_stop);
    let raw = lp.finish();
    let names: Vec<(&str, u64)> = raw
        .threads
        .iter()
        .map(|t| (t.name.as_str(), t.tid))
        .collect();
    assert_eq!(names, vec![("starting", 1010), ("named-later", 1010)]);
    assert_eq!(stacks_of(&raw, "starting")[0].2, 1);
    assert_eq!(stacks_of(&raw, "named-later")[0].2, 299);
}

#[test]
fn a_changed_listing_reads_ids_and_names_again() {
    // Renamed late in life: not seen while the listing is unchanged...
    let mut lp = renamed_between_ticks("old", 200, "renamed", 10);
    assert_eq!(count_of(&lp, Call::ThreadId(10)), 1);
    assert_eq!(count_of(&lp, Call::Name(10)), 100);
    // ...but a thread starting changes it: ids and names are read again.
    lp.control_mut().add_thread(FakeThread::new(11, "new"));
    ticks(&mut lp, 1);
    assert_eq!(count_of(&lp, Call::ThreadId(10)), 2);
    assert_eq!(count_of(&lp, Call::Name(10)), 101);
    ticks(&mut lp, 10);
    assert_eq!(count_of(&lp, Call::ThreadId(10)), 2);
    assert_followed_the_rules(&lp);
    let raw = lp.finish();
    assert_eq!(stacks_of(&raw, "old")[0].2, 210);
    assert_eq!(stacks_of(&raw, "renamed")[0].2, 11);
}

/// Samples of `raw` on the thread named `name`, all stacks.
fn samples_named(raw: &RawProfile, name: &str) -> u64 {
    stacks_of(raw, name).iter().map(|s| s.2).sum()
}

#[test]
fn cpu_mode_samples_each_thread_by_the_cpu_time_it_used() {
    // At 1000 Hz a period is 1 ms. A thread on 30% of a CPU gains 0.3 ms
    // per tick and is sampled every 3-4 ticks, the remainder carried.
    let mut lp = sampling(
        FakeControl::new(
            OWN,
            vec![
                FakeThread::new(10, "full"),
                FakeThread::new(11, "thirty").using(300_000),
                FakeThread::new(12, "trickle").using(20_000),
            ],
        ),
        Mode::Cpu,
    );
    ticks(&mut lp, 1001);
    assert_followed_the_rules(&lp);
    let raw = lp.finish();
    // CPU time after the first look: 1000 ms, 300 ms and 20 ms.
    assert_eq!(samples_named(&raw, "full"), 1000);
    assert_eq!(samples_named(&raw, "thirty"), 300);
    assert_eq!(samples_named(&raw, "trickle"), 20);
    // Samples per CPU-second equal the rate, overall and per thread.
    assert_eq!(raw.stats.sampled_cpu(), Duration::from_millis(1320));
    assert!((raw.stats.samples_per_cpu_second() - 1000.0).abs() < 1e-9);
    assert_eq!(raw.stats.cpu_of(1011), Some(Duration::from_millis(300)));
}

#[test]
fn a_late_tick_takes_one_sample_weighted_by_the_periods_owed() {
    // 3.5 ms of CPU per tick (the loop ran late): one stop per tick, each
    // sample standing for the periods owed, the half carried.
    let mut lp = sampling(
        FakeControl::new(OWN, vec![FakeThread::new(10, "w").using(3_500_000)]),
        Mode::Cpu,
    );
    ticks(&mut lp, 11);
    assert_eq!(count_of(&lp, Call::Stop { port: 10, ok: true }), 10);
    let raw = lp.finish();
    assert_eq!(samples_named(&raw, "w"), 35);
}

#[test]
fn a_running_thread_whose_clock_lags_is_sampled_as_busy() {
    // As on macOS: the thread spins in user mode and its clock catches up
    // only every 10 ticks, while the scheduler reports it running.
    let mut running = sampling(
        FakeControl::new(
            OWN,
            vec![FakeThread::new(10, "spinner").spinning_with_lagging_clock(10)],
        ),
        Mode::Cpu,
    );
    ticks(&mut running, 201);
    assert_followed_the_rules(&running);
    // Sampled on every tick, where the CPU time goes, not in bursts when
    // the clock catches up...
    let stops = count_of(&running, Call::Stop { port: 10, ok: true });
    assert!(stops >= 195, "{stops} stops in 200 ticks");
    // ...and the credit is paid back by the clock: one sample per period
    // of CPU time all the same (200 ms; at most the outstanding credit
    // more).
    let raw = running.finish();
    let samples = samples_named(&raw, "spinner");
    assert!((200..=220).contains(&samples), "{samples} samples");

    // Without the run state, the same thread is only seen busy when its
    // clock moves: a few heavy samples instead of one per tick.
    let mut blind = sampling(
        FakeControl::new(
            OWN,
            vec![FakeThread::new(10, "spinner")
                .spinning_with_lagging_clock(10)
                .with_running(false)],
        ),
        Mode::Cpu,
    );
    ticks(&mut blind, 201);
    assert_eq!(count_of(&blind, Call::Stop { port: 10, ok: true }), 20);
    assert_eq!(samples_named(&blind.finish(), "spinner"), 200);
}

#[test]
fn a_runnable_thread_that_gets_no_cpu_is_not_over_sampled() {
    // The run state also says "running" for a thread waiting for a CPU;
    // its credit is capped, so a thread that never runs costs at most a
    // few samples, not one per tick.
    let mut lp = sampling(
        FakeControl::new(
            OWN,
            vec![FakeThread::new(10, "waiting").idle().with_running(true)],
        ),
        Mode::Cpu,
    );
    ticks(&mut lp, 1000);
    let raw = lp.finish();
    let samples = samples_named(&raw, "waiting");
    assert!(
        samples <= 20,
        "{samples} samples of a thread that never ran"
    );
}

#[test]
fn a_listing_failure_ends_the_tick_with_an_error_and_holds_nothing() {
    let mut lp = one_thread("a");
    ticks(&mut lp, 2);
    lp.control_mut().list_fails = true;
    let err = lp.tick().expect_err("a failed listing must fail the tick");
    assert!(matches!(err, Error::Io(_)), "{err:?}");
    assert!(
        err.to_string().contains("could not list the threads"),
        "{err}"
    );
    assert_followed_the_rules(&lp);
}

#[test]
fn the_live_part_of_a_stack_is_from_sp_to_its_top() {
    let range = StackRange::below_top(0x7000_0010_0000, 0x8_0000).unwrap();
    assert_eq!(range.low, 0x7000_0008_0000);
    assert_eq!(
        range.live_from(0x7000_000f_0000),
        Some(StackBounds {
            low: 0x7000_000f_0000,
            high: 0x7000_0010_0000
        })
    );
    // A stack pointer off this stack (a signal stack, a coroutine): unknown.
    assert_eq!(range.live_from(0x7000_0010_0000), None);
    assert_eq!(range.live_from(0x7000_0007_fff0), None);
    // libpthread's ESRCH-as-address, zero sizes and wrap-arounds are no stack.
    assert_eq!(StackRange::below_top(3, 0x8_0000), None);
    assert_eq!(StackRange::below_top(0x7000_0000_0000, 0), None);
    assert_eq!(StackRange::below_top(0x2_0000, 0x3_0000), None);
}

/// A clock that jumps to each deadline (plus a little), wakes very late
/// once, and sets the stop flag after a number of sleeps.
struct FakeClock<'a> {
    now: Cell<u64>,
    deadlines: RefCell<Vec<u64>>,
    late_on_sleep: usize,
    late_by: u64,
    stop_after_sleeps: usize,
    stop: &'a AtomicBool,
}

impl Clock for FakeClock<'_> {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }

    fn sleep_until(&self, deadline_ns: u64) {
        let mut deadlines = self.deadlines.borrow_mut();
        deadlines.push(deadline_ns);
        let n = deadlines.len();
        let lateness = if n == self.late_on_sleep {
            self.late_by
        } else {
            20_000
        };
        self.now.set(deadline_ns.max(self.now.get()) + lateness);
        if n > self.stop_after_sleeps {
            self.stop.store(true, Ordering::Release);
        }
    }
}

#[test]
fn run_ticks_on_absolute_deadlines_skips_missed_ones_and_measures_time() {
    const START: u64 = 7_000_000_000;
    const PERIOD: u64 = 1_000_000; // 1000 Hz
    let stop = AtomicBool::new(false);
    let clock = FakeClock {
        now: Cell::new(START),
        deadlines: RefCell::new(Vec::new()),
        late_on_sleep: 10,
        late_by: 3_500_000,
        stop_after_sleeps: 100,
        stop: &stop,
    };
    let mut lp = one_thread("w");
    lp.run(&clock, &stop).expect("run");
    assert_followed_the_rules(&lp);
    let stats = lp.stats().clone();
    assert_eq!(stats.ticks, 100);
    // Woke 3.5 periods late once: three deadlines skipped, not made up.
    assert_eq!(stats.missed_ticks, 3);
    assert_eq!(stats.samples, 100);
    // Deadlines are start + k periods: no drift from the 20 µs lateness.
    let deadlines = clock.deadlines.borrow();
    for (i, &d) in deadlines.iter().enumerate() {
        assert_eq!((d - START) % PERIOD, 0, "deadline {i} drifted: {d}");
    }
    assert!(deadlines.windows(2).all(|w| w[1] > w[0]));
    assert_eq!(*deadlines.last().unwrap(), START + PERIOD * 104);
    // Time comes from the clock, not from ticks times the period.
    assert_eq!(stats.duration.as_nanos() as u64, clock.now_ns() - START);
    let raw = lp.finish();
    assert_eq!(raw.stats.sampler_cpu.as_nanos(), 42_000);
    assert_eq!(raw.stats.threads_seen, 1);
}
