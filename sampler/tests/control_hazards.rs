//! The shared sampling loop (the one the Mach sampler runs), driven by the
//! recording fake, on the paths that can hang a Mac host: error codes that
//! may or may not mean a thread exited, and Rosetta 2's translator threads
//! that must never be stopped.

mod fake_control;

use btprof_sampler::Mode;

use fake_control::driving::{
    assert_followed_the_rules, assert_tallies, checked_run, count_of, renamed_between_ticks,
    sampling, stacks_of, stops_of, ticks, OWN,
};
use fake_control::{Call, FakeControl, FakeThread, Fault};

/// Ticks a thread counts as young at 1000 Hz (its first 100 ms).
const YOUNG_TICKS: usize = 100;

/// Under Rosetta (the loop sparing young threads), a translator thread
/// that names itself a few ticks after it appears is never stopped, in
/// wall mode too, where the loop otherwise stops a thread on its first
/// look; an ordinary thread is sampled once it is no longer young.
#[test]
fn under_rosetta_a_new_thread_is_not_stopped_before_it_could_name_itself() {
    for mode in [Mode::Wall, Mode::Cpu] {
        let threads = vec![
            FakeThread::new(10, "starting"),
            FakeThread::new(11, "worker"),
        ];
        let mut lp = sampling(FakeControl::new(OWN, threads), mode).sparing_young_threads(true);
        ticks(&mut lp, 3);
        lp.control_mut()
            .rename(10, "com.apple.rosetta.exceptionserver");
        ticks(&mut lp, YOUNG_TICKS + 20);
        assert_followed_the_rules(&lp);
        assert_eq!(
            stops_of(&lp, 10),
            0,
            "{mode:?}: the translator's thread was stopped"
        );
        // Stopped on every tick after its young ones, and only then.
        assert_eq!(stops_of(&lp, 11), 3 + 20, "{mode:?}");
    }
    // Without sparing, wall mode stops the unnamed thread on the first look:
    // what the option exists to prevent.
    let lp = renamed_between_ticks("starting", 3, "com.apple.rosetta.exceptionserver", 5);
    assert_eq!(stops_of(&lp, 10), 3);
}

/// Whatever goes wrong with a thread, at whatever step, a successful stop
/// is matched by exactly one resume and a failed one by none, and the
/// ports and listings are all released.
#[test]
fn every_error_path_resumes_each_successful_stop_exactly_once() {
    for fault in Fault::SURVIVABLE {
        for mode in [Mode::Wall, Mode::Cpu] {
            let threads = vec![
                FakeThread::new(10, "faulty").with_fault(fault),
                FakeThread::new(11, "fine"),
            ];
            let lp = checked_run(threads, mode, 8);
            for port in [10, 11] {
                let stopped = count_of(&lp, Call::Stop { port, ok: true });
                let resumed = count_of(&lp, Call::Resume(port));
                assert_eq!(stopped, resumed, "{fault:?} {mode:?} port {port}");
            }
            // The fine thread is sampled whatever its neighbour does.
            assert!(count_of(&lp, Call::Resume(11)) >= 7, "{fault:?} {mode:?}");
        }
    }
}

/// `KERN_FAILURE` or `KERN_INVALID_ARGUMENT` from `thread_suspend` or
/// `thread_get_state` is an exit only when `thread_info` confirms it: a
/// live thread that answers them is a failed sample, and one that was
/// suspended is resumed. On the code before this, all three counted as
/// exits.
#[test]
fn ambiguous_codes_count_as_exits_only_when_thread_info_confirms() {
    let threads = vec![
        FakeThread::new(10, "stop-live").with_fault(Fault::AmbiguousStopLive),
        FakeThread::new(11, "stop-gone").with_fault(Fault::AmbiguousStopGone),
        FakeThread::new(12, "registers-live").with_fault(Fault::AmbiguousRegistersLive),
        FakeThread::new(13, "gone-while-stopped").with_fault(Fault::GoneWhileStopped),
        FakeThread::new(14, "fine"),
    ];
    let lp = checked_run(threads, Mode::Wall, 5);
    // Ports 10 and 11: never stopped, never resumed.
    for port in [10, 11] {
        assert_eq!(
            count_of(&lp, Call::Stop { port, ok: false }),
            5,
            "port {port}"
        );
        assert_eq!(count_of(&lp, Call::Resume(port)), 0, "port {port}");
    }
    for port in [12, 13, 14] {
        assert_eq!(count_of(&lp, Call::Resume(port)), 5, "port {port}");
    }
    // A failure each tick for 10 and 12; an exit each tick for 11 and 13.
    assert_tallies(&lp, 5, 10, 10);
}

/// x86_64: a thread stopped inside a frameless system-call stub has its
/// stub's caller at `[sp]`, not in the `rbp` chain; inside the stub ranges
/// the loop takes it as frame 1, elsewhere it does not (a framed function
/// keeps other things at `[sp]`), nor where the code before the pc is not
/// a `syscall`.
#[test]
fn a_thread_stopped_in_a_frameless_syscall_stub_keeps_its_caller() {
    let stub = FakeThread::new(10, "in-stub").in_syscall_stub();
    let framed = FakeThread::new(11, "framed");
    let (with_caller, stub_pc) = (stub.expected_frames(), stub.pc());
    let (framed_frames, framed_pc) = (framed.expected_frames(), framed.pc());
    assert_eq!(with_caller[1], stub.stub_caller());
    let fake = FakeControl::new(OWN, vec![stub, framed]);
    // Both pcs are in "stub code"; only port 10's is after a syscall.
    let mut lp = sampling(fake, Mode::Wall)
        .with_frameless_stubs(vec![stub_pc..stub_pc + 16, framed_pc..framed_pc + 16]);
    ticks(&mut lp, 2);
    assert_followed_the_rules(&lp);
    let raw = lp.finish();
    let stacks = |name: &str| -> Vec<Vec<u64>> {
        stacks_of(&raw, name)
            .into_iter()
            .map(|(frames, _, _)| frames)
            .collect()
    };
    assert_eq!(stacks("in-stub"), vec![with_caller.clone()]);
    assert_eq!(stacks("framed"), vec![framed_frames]);

    // Outside the stub ranges the same thread loses its caller: what the
    // walk did before.
    let stub = FakeThread::new(10, "in-stub").in_syscall_stub();
    let mut lp = sampling(FakeControl::new(OWN, vec![stub]), Mode::Wall);
    ticks(&mut lp, 1);
    let raw = lp.finish();
    let (k, _) = raw.table.iter().next().unwrap();
    let mut without = with_caller;
    without.remove(1);
    assert_eq!(k.frames.to_vec(), without);
}
