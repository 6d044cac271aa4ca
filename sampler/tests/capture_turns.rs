//! Two threads capturing each other at once both finish.
//!
//! Mach's `thread_suspend` returns once its target is off the CPU, and a
//! thread waiting inside its own `thread_suspend` is off the CPU. So if A
//! suspends B while B suspends A, both calls return, and each thread then
//! stays suspended by the other for good. Captures take turns to prevent
//! it.
//!
//! The fake here models just that, over two real threads: a suspended
//! thread stops at its next call into the fake until it is resumed; a
//! stop returns once its target is stopped or outside the fake (blocked
//! elsewhere, as on a lock); and a thread waiting inside a stop counts as
//! stopped once it is suspended itself. A deadlock is noticed at a
//! deadline, so the test fails instead of hanging.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btprof_sampler::control::kern_return::Resumed;
use btprof_sampler::control::{capture_all, StackRange, ThreadControl, ThreadError, ThreadUsage};
use btprof_sampler::one_shot::RunState;
use btprof_sampler::walker::{Arch, Registers};

/// Captures each thread makes of the other.
const ROUNDS: usize = 1000;
/// Far longer than 2,000 captures take on any machine that runs tests.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long a stop waits for the other thread to be stopping too, so
/// that the two stops meet whenever they can, not only when the
/// scheduler happens to line them up.
const RENDEZVOUS: Duration = Duration::from_millis(1);

/// One modelled thread's scheduling state.
#[derive(Default)]
struct Sched {
    /// Held by another thread's stop.
    suspended: AtomicBool,
    /// Inside a call into the fake: on the CPU, as far as a stop can see.
    in_fake: AtomicBool,
    /// Off the CPU because suspended.
    parked: AtomicBool,
    /// Inside a stop.
    stopping: AtomicBool,
}

struct Shared {
    threads: [Sched; 2],
    deadline: Instant,
    /// Set when a thread waited past the deadline: the captures froze
    /// each other.
    deadlocked: AtomicBool,
}

impl Shared {
    /// Waits until `done`, or sets `deadlocked` at the deadline.
    fn wait(&self, mut done: impl FnMut() -> bool) {
        while !done() {
            if Instant::now() > self.deadline {
                self.deadlocked.store(true, SeqCst);
                return;
            }
            std::thread::yield_now();
        }
    }
}

/// The control one of the two threads captures through.
struct TurnControl {
    own: u32,
    shared: Arc<Shared>,
}

impl TurnControl {
    fn me(&self) -> &Sched {
        &self.shared.threads[self.own as usize]
    }

    /// Entering the fake: a suspended thread goes no further until it is
    /// resumed.
    fn enter(&self) {
        let me = self.me();
        me.in_fake.store(true, SeqCst);
        if me.suspended.load(SeqCst) {
            me.parked.store(true, SeqCst);
            self.shared.wait(|| !me.suspended.load(SeqCst));
            me.parked.store(false, SeqCst);
        }
    }

    fn leave(&self) {
        self.me().in_fake.store(false, SeqCst);
    }

    /// `call` as one call into the fake.
    fn call<T>(&self, call: impl FnOnce() -> T) -> T {
        self.enter();
        let out = call();
        self.leave();
        out
    }
}

impl ThreadControl for TurnControl {
    type Thread = u32;
    type List = Vec<u32>;

    fn current_thread(&self) -> u32 {
        self.own
    }

    fn list_threads(&mut self) -> Result<Vec<u32>, ThreadError> {
        Ok(self.call(|| vec![0, 1]))
    }

    fn thread_id(&mut self, thread: u32) -> Result<u64, ThreadError> {
        Ok(self.call(|| 100 + u64::from(thread)))
    }

    fn usage(&mut self, _thread: u32) -> Result<ThreadUsage, ThreadError> {
        Ok(self.call(|| ThreadUsage {
            cpu_ns: 0,
            running: true,
        }))
    }

    fn name(&mut self, thread: u32) -> Result<String, ThreadError> {
        Ok(self.call(|| format!("capturer-{thread}")))
    }

    fn stack_range(&mut self, _thread: u32) -> Option<StackRange> {
        self.call(|| None)
    }

    /// Mach's `thread_suspend`: marks the target, then waits until it is
    /// off the CPU, which the caller itself is while it waits here.
    fn stop(&mut self, thread: u32) -> Result<(), ThreadError> {
        self.enter();
        let target = &self.shared.threads[thread as usize];
        let me = self.me();
        me.stopping.store(true, SeqCst);
        let meet = Instant::now() + RENDEZVOUS;
        while !target.stopping.load(SeqCst) && Instant::now() < meet {
            std::thread::yield_now();
        }
        target.suspended.store(true, SeqCst);
        self.shared.wait(|| {
            if me.suspended.load(SeqCst) {
                me.parked.store(true, SeqCst);
            }
            target.parked.load(SeqCst) || !target.in_fake.load(SeqCst)
        });
        me.parked.store(false, SeqCst);
        me.stopping.store(false, SeqCst);
        self.leave();
        Ok(())
    }

    fn registers(&mut self, _thread: u32) -> Result<Registers, ThreadError> {
        Ok(self.call(|| Registers {
            pc: 0x1000,
            fp: 0,
            sp: 0,
            lr: 0,
        }))
    }

    fn copy_memory(&mut self, _addr: u64, _out: &mut [u64]) -> bool {
        self.call(|| false)
    }

    fn resume(&mut self, thread: u32) -> Resumed {
        self.call(|| {
            self.shared.threads[thread as usize]
                .suspended
                .store(false, SeqCst);
            Resumed::Running
        })
    }

    fn release_thread(&mut self, _thread: u32) {}

    fn release_list(&mut self, _list: Vec<u32>) {}
}

#[test]
fn two_threads_capturing_each_other_both_finish() {
    let shared = Arc::new(Shared {
        threads: Default::default(),
        deadline: Instant::now() + DEADLINE,
        deadlocked: AtomicBool::new(false),
    });
    let capturers: Vec<_> = (0..2u32)
        .map(|own| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let other = 100 + u64::from(1 - own);
                let mut control = TurnControl { own, shared };
                let mut taken = 0;
                for _ in 0..ROUNDS {
                    if control.shared.deadlocked.load(SeqCst) {
                        break;
                    }
                    let captured =
                        capture_all(&mut control, Arch::X86_64, &[], |id| id != other).unwrap();
                    assert_eq!(captured.len(), 1, "{captured:?}");
                    taken += usize::from(captured[0].state == RunState::Running);
                }
                taken
            })
        })
        .collect();
    let taken: Vec<usize> = capturers.into_iter().map(|t| t.join().unwrap()).collect();
    // Not random: without turns the two stops meet (each waits a moment
    // for the other) and freeze both threads for good in the first round
    // in which both run; with turns a stop never finds the other stopping.
    assert!(
        !shared.deadlocked.load(SeqCst),
        "the two captures froze each other (captures so far: {taken:?})"
    );
    assert_eq!(taken, [ROUNDS, ROUNDS]);
}
