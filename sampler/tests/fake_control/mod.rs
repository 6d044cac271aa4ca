//! A recording fake of [`ThreadControl`]: threads with synthetic stacks
//! and scripted faults, and a log of every call the sampling loop makes.
//!
//! It runs the very loop the Mach sampler runs, on any host. It records
//! into a preallocated log and keeps its bookkeeping in preallocated
//! vectors, so it allocates nothing itself while a thread is "stopped",
//! and it measures what the loop allocates in that window with the
//! counting allocator. [`check_protocol`] reads the log back and checks
//! the rules the loop must follow.

// Shared by two test binaries, each using part of it.
#![allow(dead_code)]

pub mod counting_alloc;
pub mod driving;
mod protocol;

// Not every test binary that shares the fake checks a call log.
#[allow(unused_imports)]
pub use protocol::check_protocol;

use btprof_sampler::control::kern_return::{
    self, Resumed, KERN_FAILURE, KERN_INVALID_ARGUMENT, KERN_SUCCESS,
};
use btprof_sampler::control::{
    holding_a_thread_stopped, StackRange, ThreadControl, ThreadError, ThreadUsage,
};
use btprof_sampler::walker::Registers;

use counting_alloc::allocator_calls_on_this_thread;

/// A fake thread port name.
pub type Port = u32;

/// Most threads in one listing (a fixed array, like the log).
pub const MAX_THREADS: usize = 16;
/// Calls the log holds; a test that makes more fails [`FakeControl::assert_clean`].
const LOG_CAPACITY: usize = 1 << 17;
/// Words in each fake thread's stack.
const STACK_WORDS: usize = 64;

/// One call the loop made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A listing with its id and the ports in it, in order.
    List {
        id: u32,
        ports: [Port; MAX_THREADS],
        len: usize,
    },
    ThreadId(Port),
    CpuTime(Port),
    Name(Port),
    StackRange(Port),
    /// A stop, and whether it succeeded (only then may it be resumed).
    Stop {
        port: Port,
        ok: bool,
    },
    Registers(Port),
    /// A copy of `words` words of memory from `addr`.
    CopyMemory {
        addr: u64,
        words: usize,
    },
    Resume(Port),
    ReleaseThread(Port),
    ReleaseList(u32),
}

impl Call {
    /// The thread a call is about, if any.
    pub fn port(&self) -> Option<Port> {
        match *self {
            Call::List { .. } | Call::ReleaseList(_) | Call::CopyMemory { .. } => None,
            Call::ThreadId(p)
            | Call::CpuTime(p)
            | Call::Name(p)
            | Call::StackRange(p)
            | Call::Registers(p)
            | Call::Resume(p)
            | Call::ReleaseThread(p) => Some(p),
            Call::Stop { port, .. } => Some(port),
        }
    }
}

/// What goes wrong with a fake thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// Exits before its id is read (`thread_info` reports it gone).
    ExitsBeforeInfo,
    /// Exits between listing and stopping (`thread_suspend` reports it gone).
    ExitsBeforeStop,
    /// `thread_suspend` fails for another reason.
    StopFails,
    /// `thread_get_state` fails.
    RegistersFail,
    /// Exits while stopped (`thread_get_state` reports it gone).
    ExitsWhileStopped,
    /// Gone while stopped the way xnu does it: suspended, then its port's
    /// thread object is disabled inside `pthread_exit`, so
    /// `thread_get_state` and `thread_resume` both fail with
    /// `KERN_INVALID_ARGUMENT`.
    GoneWhileStopped,
    /// Its stack is walked, then it exits before the resume, which fails
    /// with `KERN_INVALID_ARGUMENT`.
    GoneBeforeResume,
    /// Someone else resumed it while the sampler held it: `thread_resume`
    /// fails with `KERN_FAILURE` (suspend count already zero).
    ResumedBySomeoneElse,
    /// `thread_resume` fails with a code that says nothing about the
    /// thread being gone (`KERN_INVALID_RIGHT`): it may still be frozen.
    ResumeFails,
    /// Its frame chain leads into memory that cannot be read.
    UnreadableStack,
    /// The fake allocates inside `registers` (to prove the counter works).
    AllocatesWhileStopped,
    /// The fake panics inside `registers`.
    PanicsWhileStopped,
    /// `thread_suspend` fails with `KERN_FAILURE` on a live thread
    /// (`thread_info` succeeds): a failure, not an exit.
    AmbiguousStopLive,
    /// `thread_suspend` fails with `KERN_INVALID_ARGUMENT` on a thread
    /// inside its exit (`thread_info` fails the same way): an exit.
    AmbiguousStopGone,
    /// `thread_get_state` fails with `KERN_FAILURE` on a live, suspended
    /// thread (`thread_info` succeeds): a failure, and the thread must
    /// still be resumed.
    AmbiguousRegistersLive,
}

impl Fault {
    /// Every fault a run can go on after: all but the ones that end the
    /// process by design (a panic in the window, a resume that fails).
    pub const SURVIVABLE: [Fault; 14] = [
        Fault::None,
        Fault::ExitsBeforeInfo,
        Fault::ExitsBeforeStop,
        Fault::StopFails,
        Fault::RegistersFail,
        Fault::ExitsWhileStopped,
        Fault::GoneWhileStopped,
        Fault::GoneBeforeResume,
        Fault::ResumedBySomeoneElse,
        Fault::UnreadableStack,
        Fault::AllocatesWhileStopped,
        Fault::AmbiguousStopLive,
        Fault::AmbiguousStopGone,
        Fault::AmbiguousRegistersLive,
    ];
}

/// A fake thread: a port, an id, a name, a CPU clock and a synthetic stack.
#[derive(Clone, Debug)]
pub struct FakeThread {
    pub port: Port,
    pub id: u64,
    pub name: String,
    pub cpu_ns: u64,
    /// CPU time the thread gains before each listing.
    pub cpu_step_ns: u64,
    /// The CPU time its clock shows: as on macOS, the clock of a thread
    /// spinning in user mode is brought up to date only every
    /// `clock_lag` listings (1: always current).
    pub shown_cpu_ns: u64,
    pub clock_lag: u32,
    /// Whether the scheduler reports it running (`TH_STATE_RUNNING`).
    pub running: bool,
    /// Return addresses in its frame chain, below the pc.
    pub depth: usize,
    /// Words between two frame records (at least 2).
    pub frame_words: usize,
    pub fault: Fault,
    /// Stopped just after the `syscall` of a frameless stub: the code
    /// before its pc is `0f 05`, the stub's caller's return address is at
    /// `[sp]`, and `rbp` still points at the caller's frame record.
    pub in_syscall_stub: bool,
    suspended: u32,
    refs: u32,
}

impl FakeThread {
    /// A busy thread with a three-frame chain and id `1000 + port`.
    pub fn new(port: Port, name: &str) -> FakeThread {
        FakeThread {
            port,
            id: 1000 + u64::from(port),
            name: name.to_owned(),
            cpu_ns: 0,
            cpu_step_ns: 1_000_000,
            shown_cpu_ns: 0,
            clock_lag: 1,
            running: true,
            depth: 3,
            frame_words: 4,
            fault: Fault::None,
            in_syscall_stub: false,
            suspended: 0,
            refs: 0,
        }
    }

    pub fn with_fault(mut self, fault: Fault) -> FakeThread {
        self.fault = fault;
        self
    }

    /// A chain of `depth` frames, `frame_words` words apart.
    pub fn with_frames(mut self, depth: usize, frame_words: usize) -> FakeThread {
        assert!(frame_words >= 2 && 4 + frame_words * depth < STACK_WORDS);
        self.depth = depth;
        self.frame_words = frame_words;
        self
    }

    /// Stopped inside a frameless system-call stub (see
    /// [`FakeThread::in_syscall_stub`]).
    pub fn in_syscall_stub(mut self) -> FakeThread {
        self.in_syscall_stub = true;
        self
    }

    /// The return address into the stub's caller, at `[sp]`.
    pub fn stub_caller(&self) -> u64 {
        0x6000_0000 + u64::from(self.port) * 0x1000 + 0x42
    }

    pub fn with_id(mut self, id: u64) -> FakeThread {
        self.id = id;
        self
    }

    /// A thread whose CPU clock never advances (blocked).
    pub fn idle(mut self) -> FakeThread {
        self.cpu_step_ns = 0;
        self.running = false;
        self
    }

    /// A thread that gains `ns` of CPU time per listing (a share of a CPU)
    /// and is not seen running at the moment it is looked at.
    pub fn using(mut self, ns: u64) -> FakeThread {
        self.cpu_step_ns = ns;
        self.running = false;
        self
    }

    /// Sets whether the scheduler reports the thread running.
    pub fn with_running(mut self, running: bool) -> FakeThread {
        self.running = running;
        self
    }

    /// A thread spinning in user mode whose clock, as macOS shows another
    /// thread's, catches up only every `lag` listings, while the scheduler
    /// reports it running throughout.
    pub fn spinning_with_lagging_clock(mut self, lag: u32) -> FakeThread {
        self.clock_lag = lag.max(1);
        self.running = true;
        self
    }

    pub fn pc(&self) -> u64 {
        0x4000_0000 + u64::from(self.port) * 0x1000
    }

    fn return_address(&self, k: usize) -> u64 {
        0x5000_0000 + u64::from(self.port) * 0x1000 + k as u64 * 0x10
    }

    fn stack_base(&self) -> u64 {
        0x7f00_0000_0000 + u64::from(self.port) * 0x10_0000
    }

    /// The stack a complete walk of this thread records: pc first (then
    /// the stub's caller, for a thread in a stub).
    pub fn expected_frames(&self) -> Vec<u64> {
        std::iter::once(self.pc())
            .chain(self.in_syscall_stub.then(|| self.stub_caller()))
            .chain((0..self.depth).map(|k| self.return_address(k)))
            .collect()
    }

    fn registers(&self) -> Registers {
        let base = self.stack_base();
        Registers {
            pc: self.pc(),
            fp: base + 4 * 8,
            sp: base + 2 * 8,
            lr: 0,
        }
    }

    /// The stack's words: frame records at words 4, 4 + n, 4 + 2n, ...
    /// (n = `frame_words`), each pointing at the next, the last one ending
    /// the chain.
    fn stack_words(&self) -> Vec<u64> {
        let mut words = vec![0; STACK_WORDS];
        let base = self.stack_base();
        let n = self.frame_words;
        for k in 0..self.depth {
            let at = 4 + n * k;
            let next = if k + 1 == self.depth {
                0
            } else {
                base + 8 * (at + n) as u64
            };
            words[at] = next;
            words[at + 1] = self.return_address(k);
        }
        if self.in_syscall_stub {
            words[2] = self.stub_caller();
        }
        words
    }
}

/// The fake's address space: one region per thread stack.
pub struct FakeMemory {
    regions: Vec<Region>,
}

struct Region {
    base: u64,
    words: Vec<u64>,
    readable: bool,
}

impl FakeMemory {
    /// Copies `out.len()` words from `addr` if one readable stack holds
    /// all of them, as `mach_vm_read_overwrite` copies all or nothing.
    /// `None` when the range is in no stack at all.
    fn copy(&self, addr: u64, out: &mut [u64]) -> Option<bool> {
        let end = addr.checked_add(8 * out.len() as u64)?;
        let region = self
            .regions
            .iter()
            .find(|r| addr >= r.base && end <= r.base + 8 * r.words.len() as u64)?;
        if !region.readable || addr % 8 != 0 {
            return Some(false);
        }
        let i = ((addr - region.base) / 8) as usize;
        out.copy_from_slice(&region.words[i..i + out.len()]);
        Some(true)
    }
}

/// One listing handed to the loop: a fixed array, no allocation.
pub struct FakeList {
    id: u32,
    ports: [Port; MAX_THREADS],
    len: usize,
}

impl AsRef<[Port]> for FakeList {
    fn as_ref(&self) -> &[Port] {
        &self.ports[..self.len]
    }
}

/// The recording fake.
pub struct FakeControl {
    own: Port,
    own_refs: u32,
    own_stops: u32,
    threads: Vec<FakeThread>,
    memory: FakeMemory,
    log: Box<[Call]>,
    log_len: usize,
    log_overflowed: bool,
    next_list: u32,
    lists_outstanding: u32,
    over_releases: u32,
    resumes_without_stop: u32,
    stopped_now: u32,
    allocs_at_stop: u64,
    /// Memory copies of ranges that lie in no thread's stack.
    pub copies_outside_stacks: u64,
    /// Makes the next listings fail.
    pub list_fails: bool,
    /// Successful stops so far.
    pub windows: u64,
    /// Allocator calls made on the sampling thread between a stop and its
    /// resume, summed over every window.
    pub allocator_calls_in_windows: u64,
    /// `registers` calls made while the loop had not marked the stopped
    /// window for the panic hook.
    pub unmarked_windows: u64,
}

impl FakeControl {
    /// A fake whose sampler thread is `own`, with `threads` besides it.
    pub fn new(own: Port, threads: Vec<FakeThread>) -> FakeControl {
        assert!(threads.len() < MAX_THREADS);
        let mut fake = FakeControl {
            own,
            own_refs: 0,
            own_stops: 0,
            threads,
            memory: FakeMemory {
                regions: Vec::new(),
            },
            log: vec![Call::ReleaseList(u32::MAX); LOG_CAPACITY].into_boxed_slice(),
            log_len: 0,
            log_overflowed: false,
            next_list: 0,
            lists_outstanding: 0,
            over_releases: 0,
            resumes_without_stop: 0,
            stopped_now: 0,
            allocs_at_stop: 0,
            copies_outside_stacks: 0,
            list_fails: false,
            windows: 0,
            allocator_calls_in_windows: 0,
            unmarked_windows: 0,
        };
        fake.rebuild_memory();
        fake
    }

    fn rebuild_memory(&mut self) {
        self.memory.regions = self
            .threads
            .iter()
            .map(|t| Region {
                base: t.stack_base(),
                words: t.stack_words(),
                readable: t.fault != Fault::UnreadableStack,
            })
            .collect();
        // The code around a stub thread's pc: `syscall` (0f 05) just
        // before it, `ret` (c3) at it.
        for t in self.threads.iter().filter(|t| t.in_syscall_stub) {
            let before = u64::from_le_bytes([0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x0f, 0x05]);
            self.memory.regions.push(Region {
                base: t.pc() - 8,
                words: vec![before, 0xc3],
                readable: true,
            });
        }
    }

    /// A thread starts (between ticks).
    pub fn add_thread(&mut self, thread: FakeThread) {
        assert!(self.threads.len() + 1 < MAX_THREADS);
        assert!(self.threads.iter().all(|t| t.port != thread.port));
        self.threads.push(thread);
        self.rebuild_memory();
    }

    /// A thread exits (between ticks). Panics if the loop still holds it
    /// stopped or holds a reference to its port.
    pub fn remove_thread(&mut self, port: Port) -> FakeThread {
        let i = self.threads.iter().position(|t| t.port == port).unwrap();
        let t = self.threads.remove(i);
        assert_eq!(t.suspended, 0, "thread {port} exited while still suspended");
        assert_eq!(t.refs, 0, "thread {port} exited with its port still held");
        self.rebuild_memory();
        t
    }

    /// Renames a thread (between ticks).
    pub fn rename(&mut self, port: Port, name: &str) {
        self.thread_mut(port).unwrap().name = name.to_owned();
    }

    pub fn thread(&self, port: Port) -> &FakeThread {
        self.threads.iter().find(|t| t.port == port).unwrap()
    }

    fn thread_mut(&mut self, port: Port) -> Option<&mut FakeThread> {
        self.threads.iter_mut().find(|t| t.port == port)
    }

    /// What `thread_info` answers about `port`, with which an ambiguous
    /// code is confirmed: a thread inside its exit has its port disabled
    /// (`KERN_INVALID_ARGUMENT`), any other answers.
    fn info_code(&self, port: Port) -> i32 {
        match self.fault_of(port) {
            Fault::GoneWhileStopped | Fault::GoneBeforeResume | Fault::AmbiguousStopGone => {
                KERN_INVALID_ARGUMENT
            }
            _ => KERN_SUCCESS,
        }
    }

    fn fault_of(&self, port: Port) -> Fault {
        self.threads
            .iter()
            .find(|t| t.port == port)
            .map_or(Fault::None, |t| t.fault)
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> &[Call] {
        &self.log[..self.log_len]
    }

    /// How many logged calls match `pred`.
    pub fn count(&self, pred: impl Fn(&Call) -> bool) -> usize {
        self.calls().iter().filter(|c| pred(c)).count()
    }

    /// Stops the loop made of its own thread.
    pub fn own_stops(&self) -> u32 {
        self.own_stops
    }

    /// Asserts the fake's state after a run: nothing stopped, no port or
    /// listing held, nothing released twice, no resume without a stop,
    /// and the log complete.
    pub fn assert_clean(&self) {
        assert!(!self.log_overflowed, "the call log overflowed");
        assert_eq!(self.stopped_now, 0, "a thread is still stopped");
        for t in &self.threads {
            assert_eq!(t.suspended, 0, "thread {} left suspended", t.port);
            assert_eq!(t.refs, 0, "port {} never released", t.port);
        }
        assert_eq!(self.own_refs, 0, "the sampler's own port never released");
        assert_eq!(self.lists_outstanding, 0, "a listing was never released");
        assert_eq!(self.over_releases, 0, "a port was released twice");
        assert_eq!(
            self.resumes_without_stop, 0,
            "a thread was resumed without a stop"
        );
        assert_eq!(self.own_stops, 0, "the sampler stopped its own thread");
    }

    fn record(&mut self, call: Call) {
        if self.log_len == self.log.len() {
            self.log_overflowed = true;
            return;
        }
        self.log[self.log_len] = call;
        self.log_len += 1;
    }
}

impl ThreadControl for FakeControl {
    type Thread = Port;
    type List = FakeList;

    fn current_thread(&self) -> Port {
        self.own
    }

    fn list_threads(&mut self) -> Result<FakeList, ThreadError> {
        if self.list_fails {
            return Err(ThreadError::Failed(5));
        }
        let id = self.next_list;
        self.next_list += 1;
        // The sampler's own thread appears at a different place each time.
        let own_at = id as usize % (self.threads.len() + 1);
        let mut list = FakeList {
            id,
            ports: [0; MAX_THREADS],
            len: 0,
        };
        for t in &mut self.threads {
            t.cpu_ns += t.cpu_step_ns;
            if id % t.clock_lag == 0 {
                t.shown_cpu_ns = t.cpu_ns;
            }
            t.refs += 1;
        }
        self.own_refs += 1;
        let ports = self.threads.iter().map(|t| t.port);
        for port in ports
            .clone()
            .take(own_at)
            .chain(std::iter::once(self.own))
            .chain(ports.skip(own_at))
        {
            list.ports[list.len] = port;
            list.len += 1;
        }
        self.lists_outstanding += 1;
        self.record(Call::List {
            id,
            ports: list.ports,
            len: list.len,
        });
        Ok(list)
    }

    fn thread_id(&mut self, thread: Port) -> Result<u64, ThreadError> {
        self.record(Call::ThreadId(thread));
        if thread == self.own {
            return Ok(1);
        }
        match self.thread_mut(thread) {
            Some(t) if t.fault == Fault::ExitsBeforeInfo => Err(ThreadError::Exited),
            Some(t) => Ok(t.id),
            None => Err(ThreadError::Failed(-1)),
        }
    }

    fn usage(&mut self, thread: Port) -> Result<ThreadUsage, ThreadError> {
        self.record(Call::CpuTime(thread));
        if thread == self.own {
            return Ok(ThreadUsage {
                cpu_ns: 42_000,
                running: true,
            });
        }
        self.thread_mut(thread)
            .map(|t| ThreadUsage {
                cpu_ns: t.shown_cpu_ns,
                running: t.running,
            })
            .ok_or(ThreadError::Failed(-1))
    }

    fn name(&mut self, thread: Port) -> Result<String, ThreadError> {
        self.record(Call::Name(thread));
        self.thread_mut(thread)
            .map(|t| t.name.clone())
            .ok_or(ThreadError::Failed(-1))
    }

    fn stack_range(&mut self, thread: Port) -> Option<StackRange> {
        self.record(Call::StackRange(thread));
        let t = self.thread_mut(thread)?;
        let base = t.stack_base();
        Some(StackRange {
            low: base,
            high: base + 8 * STACK_WORDS as u64,
        })
    }

    fn stop(&mut self, thread: Port) -> Result<(), ThreadError> {
        let result = if thread == self.own {
            // On a real system this would freeze the sampler for good.
            self.own_stops += 1;
            Ok(())
        } else {
            let info = self.info_code(thread);
            match self.fault_of(thread) {
                Fault::ExitsBeforeStop => Err(ThreadError::Exited),
                Fault::StopFails => Err(ThreadError::Failed(14)),
                Fault::AmbiguousStopLive => kern_return::thread_call(KERN_FAILURE, || info),
                Fault::AmbiguousStopGone => {
                    kern_return::thread_call(KERN_INVALID_ARGUMENT, || info)
                }
                _ => match self.thread_mut(thread) {
                    Some(t) => {
                        t.suspended += 1;
                        Ok(())
                    }
                    None => Err(ThreadError::Failed(-1)),
                },
            }
        };
        self.record(Call::Stop {
            port: thread,
            ok: result.is_ok(),
        });
        if result.is_ok() {
            self.stopped_now += 1;
            self.windows += 1;
            // Last, so the fake's own work is not counted.
            self.allocs_at_stop = allocator_calls_on_this_thread();
        }
        result
    }

    fn registers(&mut self, thread: Port) -> Result<Registers, ThreadError> {
        self.record(Call::Registers(thread));
        if !holding_a_thread_stopped() {
            self.unmarked_windows += 1;
        }
        let info = self.info_code(thread);
        match self.fault_of(thread) {
            Fault::RegistersFail => Err(ThreadError::Failed(14)),
            Fault::ExitsWhileStopped => Err(ThreadError::Exited),
            Fault::GoneWhileStopped => {
                Err(kern_return::thread_call(KERN_INVALID_ARGUMENT, || info).unwrap_err())
            }
            Fault::AmbiguousRegistersLive => {
                Err(kern_return::thread_call(KERN_FAILURE, || info).unwrap_err())
            }
            Fault::AllocatesWhileStopped => {
                std::hint::black_box(Box::new(7u64));
                Ok(self.thread(thread).registers())
            }
            Fault::PanicsWhileStopped => panic!("fake thread_get_state panicked"),
            _ => match self.threads.iter().find(|t| t.port == thread) {
                Some(t) => Ok(t.registers()),
                None => Err(ThreadError::Failed(-1)),
            },
        }
    }

    fn copy_memory(&mut self, addr: u64, out: &mut [u64]) -> bool {
        self.record(Call::CopyMemory {
            addr,
            words: out.len(),
        });
        match self.memory.copy(addr, out) {
            Some(copied) => copied,
            None => {
                self.copies_outside_stacks += 1;
                false
            }
        }
    }

    fn resume(&mut self, thread: Port) -> Resumed {
        // First, so the fake's own work is not counted.
        let allocs = allocator_calls_on_this_thread();
        self.allocator_calls_in_windows += allocs - self.allocs_at_stop;
        self.record(Call::Resume(thread));
        if thread == self.own {
            self.stopped_now -= 1;
            return Resumed::Running;
        }
        let fault = self.fault_of(thread);
        let info = self.info_code(thread);
        match self.thread_mut(thread) {
            Some(t) if t.suspended > 0 => {
                // Gone or resumed by someone else, it is not frozen either way.
                t.suspended -= 1;
                self.stopped_now -= 1;
            }
            _ => {
                self.resumes_without_stop += 1;
                return kern_return::resume(KERN_FAILURE, || info);
            }
        }
        match fault {
            Fault::GoneWhileStopped | Fault::GoneBeforeResume => {
                kern_return::resume(KERN_INVALID_ARGUMENT, || info)
            }
            Fault::ResumedBySomeoneElse => kern_return::resume(KERN_FAILURE, || info),
            Fault::ResumeFails => kern_return::resume(17, || info),
            _ => Resumed::Running,
        }
    }

    fn release_thread(&mut self, thread: Port) {
        self.record(Call::ReleaseThread(thread));
        let refs = if thread == self.own {
            &mut self.own_refs
        } else {
            match self.threads.iter_mut().find(|t| t.port == thread) {
                Some(t) => &mut t.refs,
                None => {
                    self.over_releases += 1;
                    return;
                }
            }
        };
        if *refs == 0 {
            self.over_releases += 1;
        } else {
            *refs -= 1;
        }
    }

    fn release_list(&mut self, list: FakeList) {
        self.record(Call::ReleaseList(list.id));
        self.lists_outstanding -= 1;
    }
}
