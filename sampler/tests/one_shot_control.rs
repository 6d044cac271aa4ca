//! The one-shot capture over the shared stop/walk/resume window, driven
//! through the recording fake of the Mach calls: every thread stopped is
//! resumed exactly once, even when `thread_get_state` fails or the thread
//! exits, nothing is stopped twice, the calling thread never, and every
//! handle and the listing are released; and under Rosetta 2 a capture
//! without the opt-in is refused before any thread is listed or stopped.

mod fake_control;

use std::ffi::OsStr;

use btprof_sampler::control::{capture_all, capture_all_gated};
use btprof_sampler::one_shot::{NotTaken, RunState, Taken};
use btprof_sampler::walker::{Arch, WalkEnd};
use btprof_sampler::Error;

use fake_control::{check_protocol, Call, FakeControl, FakeThread, Fault};

const OWN: u32 = 1;

fn count(fake: &FakeControl, call: Call) -> usize {
    fake.count(|c| *c == call)
}

#[test]
fn every_stopped_thread_is_resumed_once_even_when_its_registers_fail() {
    let threads = vec![
        FakeThread::new(10, "fine"),
        FakeThread::new(11, "regs-fail").with_fault(Fault::RegistersFail),
        FakeThread::new(12, "exits-while-stopped").with_fault(Fault::ExitsWhileStopped),
        FakeThread::new(13, "gone-while-stopped").with_fault(Fault::GoneWhileStopped),
        FakeThread::new(14, "stop-fails").with_fault(Fault::StopFails),
        FakeThread::new(15, "idle").idle(),
        FakeThread::new(16, "skipped"),
    ];
    let skipped_id = 1000 + 16;
    let mut fake = FakeControl::new(OWN, threads);
    let captured = capture_all(&mut fake, Arch::X86_64, &[], |id| id == skipped_id).unwrap();

    if let Err(e) = check_protocol(fake.calls(), OWN) {
        panic!("{e}\ncalls: {:#?}", fake.calls());
    }
    fake.assert_clean();
    assert_eq!(fake.own_stops(), 0, "the calling thread was stopped");
    for port in [10, 11, 12, 13, 15] {
        assert_eq!(
            count(&fake, Call::Stop { port, ok: true }),
            1,
            "port {port}"
        );
        assert_eq!(count(&fake, Call::Resume(port)), 1, "port {port}");
    }
    // A failed stop is never resumed; a skipped thread never stopped.
    assert_eq!(count(&fake, Call::Resume(14)), 0);
    assert_eq!(count(&fake, Call::Stop { port: 16, ok: true }), 0);
    for port in [10, 11, 12, 13, 14, 15, 16, OWN] {
        assert_eq!(count(&fake, Call::ReleaseThread(port)), 1, "port {port}");
    }

    let by_name = |name: &str| captured.iter().find(|t| t.name == name);
    let fine = by_name("fine").unwrap();
    assert_eq!(fine.taken, Taken::Interrupted);
    assert_eq!(fine.state, RunState::Running);
    assert_eq!(fine.frames, fake.thread(10).expected_frames());
    assert_eq!(fine.end, WalkEnd::Complete);
    assert!(fine.held_ns.is_some());
    let regs_fail = by_name("regs-fail").unwrap();
    assert_eq!(regs_fail.taken, Taken::NotTaken(NotTaken::Unreadable));
    assert!(regs_fail.frames.is_empty());
    for name in ["exits-while-stopped", "gone-while-stopped"] {
        assert_eq!(by_name(name).unwrap().state, RunState::Gone, "{name}");
    }
    assert_eq!(
        by_name("stop-fails").unwrap().taken,
        Taken::NotTaken(NotTaken::Unreadable)
    );
    assert_eq!(by_name("idle").unwrap().state, RunState::Blocked);
    assert!(by_name("skipped").is_none());
}

#[test]
fn a_thread_gone_before_its_stop_is_reported_gone_and_never_resumed() {
    let threads = vec![
        FakeThread::new(10, "exits-before-stop").with_fault(Fault::ExitsBeforeStop),
        FakeThread::new(11, "fine"),
    ];
    let mut fake = FakeControl::new(OWN, threads);
    let captured = capture_all(&mut fake, Arch::X86_64, &[], |_| false).unwrap();
    if let Err(e) = check_protocol(fake.calls(), OWN) {
        panic!("{e}");
    }
    fake.assert_clean();
    assert_eq!(count(&fake, Call::Resume(10)), 0);
    assert_eq!(count(&fake, Call::Resume(11)), 1);
    let gone = captured
        .iter()
        .find(|t| t.name == "exits-before-stop")
        .unwrap();
    assert_eq!(gone.state, RunState::Gone);
}

fn two_threads() -> Vec<FakeThread> {
    vec![
        FakeThread::new(10, "worker"),
        FakeThread::new(11, "idle").idle(),
    ]
}

#[test]
fn a_capture_refused_under_rosetta_stops_no_thread() {
    for env in [None, Some(OsStr::new("0")), Some(OsStr::new(""))] {
        let mut fake = FakeControl::new(OWN, two_threads());
        let refused = capture_all_gated(&mut fake, true, env, Arch::X86_64, &[], |_| false);
        match refused {
            // The sampler's refusal, word for word.
            Err(e @ Error::Rosetta) => {
                assert_eq!(e.to_string(), Error::Rosetta.to_string());
                assert!(e.to_string().contains("arm64 build"), "{e}");
                assert!(e.to_string().contains("BTPROF_ALLOW_ROSETTA=1"), "{e}");
            }
            other => panic!("{env:?}: expected the Rosetta refusal, got {other:?}"),
        }
        assert!(
            fake.calls().is_empty(),
            "{env:?}: a refused capture called the platform: {:#?}",
            fake.calls()
        );
        fake.assert_clean();
    }
}

#[test]
fn a_capture_under_rosetta_with_the_opt_in_or_a_native_one_runs() {
    for (translated, env) in [(true, Some(OsStr::new("1"))), (false, None)] {
        let mut fake = FakeControl::new(OWN, two_threads());
        let captured = capture_all_gated(&mut fake, translated, env, Arch::X86_64, &[], |_| false)
            .unwrap_or_else(|e| panic!("translated {translated}, {env:?}: {e}"));
        if let Err(e) = check_protocol(fake.calls(), OWN) {
            panic!("{e}");
        }
        fake.assert_clean();
        assert_eq!(captured.len(), 2);
        for port in [10, 11] {
            assert_eq!(
                count(&fake, Call::Stop { port, ok: true }),
                1,
                "port {port}"
            );
            assert_eq!(count(&fake, Call::Resume(port)), 1, "port {port}");
        }
    }
}
