//! The sampling loop of backends that stop threads from outside, written
//! once over a thin platform trait.
//!
//! On macOS the sampler thread stops each thread of its own process
//! (`thread_suspend`), reads its registers, walks its stack and lets it run
//! again (`thread_resume`). Which threads to stop, in what order, what to do
//! when a call fails, and what must never happen while a thread is stopped
//! are the same on every such platform, and they are what can hang or
//! crash the host. So that logic lives here, in [`SamplingLoop`], generic
//! over [`ThreadControl`]: the Mach implementation is a handful of one-line
//! system calls, and the tests drive the very same loop on Linux with a
//! recording fake that proves the rules below.
//!
//! The loop's rules (`docs/architecture.md`, "Rules a sampler must
//! follow"):
//!
//! - The sampler never stops its own thread.
//! - Everything that may lock or allocate (thread id, CPU time, name, stack
//!   bounds) is read *before* a thread is stopped. Ids and names are read
//!   only when the listing differs from the previous one (and names, too,
//!   on every tick of a thread's first 100 ms, when threads name
//!   themselves); CPU time and run state come from one call per thread per
//!   tick.
//! - In cpu mode a thread is sampled when the CPU time it used since its
//!   last sample reaches one period (1/hz), the remainder carried; a
//!   thread whose clock did not move but that the scheduler reports
//!   running is credited a tick's worth (and the credit paid back when its
//!   clock catches up). A thread owed several periods, because the loop
//!   ran late, gets one sample weighted by them. While it is stopped the
//!   loop only reads its registers and walks its stack into a preallocated
//!   buffer; interning into the [`StackTable`](crate::stack_table::StackTable)
//!   happens after it runs again.
//! - Every successful stop is matched by exactly one resume, on every path,
//!   by an RAII guard; a panic while a thread is stopped aborts the process
//!   (see [`install_abort_on_panic_hook`]). A failed stop is never resumed:
//!   that would undo someone else's suspension.
//! - Every thread handle and the list itself are released every tick, after
//!   every thread runs again.
//! - A thread that exits at any point (before it is stopped, while it is
//!   stopped, even when that makes its resume fail) is counted in
//!   [`SamplerStats::exited_threads`](crate::SamplerStats), never a reason
//!   to abort ([`kern_return`] says which Mach codes mean that, and which
//!   must be confirmed with `thread_info` first); any other failure is
//!   counted in `failed_samples`.
//! - A stopped thread's stack is read by copy into a buffer allocated
//!   before sampling ([`StackWindow`](crate::stack_window::StackWindow)), never
//!   by plain loads: it may be unmapped while the thread is suspendable.
//! - Threads whose names mark them as ones that must never be stopped
//!   (Rosetta's runtime, other in-process samplers, crash reporters) are
//!   left alone ([`never_stop`]).

pub mod kern_return;
pub mod never_stop;
mod one_shot;
pub mod rosetta_gate;
mod sampling_loop;
mod stopped;

pub use kern_return::Resumed;
pub use one_shot::{capture_all, capture_all_gated};
pub use sampling_loop::SamplingLoop;
pub use stopped::{holding_a_thread_stopped, install_abort_on_panic_hook};

use crate::walker::{Registers, StackBounds};

/// The hard cap on frames per sample; [`crate::SamplerConfig::max_depth`]
/// may only lower it. The walk buffer is allocated once at this size (or
/// the configured depth) before sampling starts.
pub const MAX_DEPTH: usize = 512;

/// Why a call about one thread failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadError {
    /// The thread exited after it was listed, or is inside its exit (on
    /// Mach: a certain code, [`kern_return::is_gone`], or an ambiguous one
    /// that `thread_info` confirmed, [`kern_return::thread_call`]). Not a
    /// failure: it is skipped and counted as exited.
    Exited,
    /// Anything else, with the platform's error code. Counted as a failed
    /// sample.
    Failed(i32),
}

/// What one look at a thread says about its CPU use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// CPU time the thread has used, in nanoseconds (user and system).
    pub cpu_ns: u64,
    /// The scheduler reports it running (`TH_STATE_RUNNING`). On macOS a
    /// thread spinning in user mode may show the same CPU time for a long
    /// while (another thread's time is brought up to date only at its
    /// kernel entries and context switches), so a running thread counts as
    /// busy even when its clock has not moved.
    pub running: bool,
}

/// The address range of a thread's stack: `[low, high)`, where `high` is
/// the top the stack grows down from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRange {
    /// Lowest address of the stack (its size below the top).
    pub low: u64,
    /// One past the highest address: where the stack starts.
    pub high: u64,
}

impl StackRange {
    /// Lowest stack top taken as real: anything in the first 64 KiB is an
    /// error code returned in place of an address (libpthread returns
    /// `ESRCH` as the stack address of a thread that just exited).
    pub const MIN_TOP: u64 = 0x1_0000;

    /// The range of a stack that starts at `top` (its highest address) and
    /// extends `size` bytes down, or `None` if the values cannot be a
    /// stack.
    ///
    /// An over-estimated `size` (macOS may report the main thread's
    /// `RLIMIT_STACK` rather than what is mapped) is harmless: walks read
    /// only `[sp, top)` (see [`StackRange::live_from`]), the part the
    /// thread is using, so the size only widens the check that `sp` is on
    /// this stack at all.
    pub fn below_top(top: u64, size: u64) -> Option<StackRange> {
        if top < Self::MIN_TOP || size == 0 || size > top {
            return None;
        }
        Some(StackRange {
            low: top - size,
            high: top,
        })
    }

    /// The bounds a walk from stack pointer `sp` may read: the live part
    /// `[sp, high)`. `None` when `sp` is not inside the range: the thread is
    /// running on some other stack (a signal stack, a coroutine), whose
    /// extent is unknown, so nothing beyond the pc may be read.
    pub fn live_from(self, sp: u64) -> Option<StackBounds> {
        (self.low..self.high).contains(&sp).then_some(StackBounds {
            low: sp,
            high: self.high,
        })
    }
}

/// The platform surface a [`SamplingLoop`] drives: list threads, read what
/// is needed about one, stop it, read its registers and memory, resume it,
/// release the handles.
///
/// Methods marked *stopped window* are called between a successful
/// [`stop`](ThreadControl::stop) and the matching
/// [`resume`](ThreadControl::resume), while the target may hold any lock
/// of the process (the allocator's, the dynamic loader's, the pthread
/// list's): they must not allocate, lock, log or panic. Every other method
/// is called while no thread is stopped.
pub trait ThreadControl {
    /// A handle to one thread (a Mach thread port name).
    type Thread: Copy + Eq + core::hash::Hash + core::fmt::Debug;
    /// One listing of the process's threads, released with
    /// [`release_list`](ThreadControl::release_list).
    type List: AsRef<[Self::Thread]>;

    /// The calling (sampler) thread's handle, as it appears in a listing.
    fn current_thread(&self) -> Self::Thread;

    /// Lists the threads of the process. Each handle in the list, and the
    /// list itself, is owned by the caller until released.
    fn list_threads(&mut self) -> Result<Self::List, ThreadError>;

    /// The thread's unique 64-bit id: handles may be reused for another
    /// thread once released, ids are not.
    fn thread_id(&mut self, thread: Self::Thread) -> Result<u64, ThreadError>;

    /// The CPU time the thread has used and whether it is running, from
    /// one call (`THREAD_BASIC_INFO` on Mach): the loop makes at most one
    /// such call per thread per tick.
    fn usage(&mut self, thread: Self::Thread) -> Result<ThreadUsage, ThreadError>;

    /// The thread's name, for display; never empty.
    fn name(&mut self, thread: Self::Thread) -> Result<String, ThreadError>;

    /// The thread's stack range, or `None` if it cannot be known (a thread
    /// not created through pthreads). Read before the thread is stopped.
    fn stack_range(&mut self, thread: Self::Thread) -> Option<StackRange>;

    /// Stops the thread. On success the caller must call
    /// [`resume`](ThreadControl::resume) exactly once.
    fn stop(&mut self, thread: Self::Thread) -> Result<(), ThreadError>;

    /// *Stopped window.* The stopped thread's registers.
    fn registers(&mut self, thread: Self::Thread) -> Result<Registers, ThreadError>;

    /// *Stopped window.* Copies `out.len()` words of the process's memory
    /// from `addr` with a system call (`mach_vm_read_overwrite`), never a
    /// plain load; `false` if any of it is unreadable (an unmapped stack).
    fn copy_memory(&mut self, addr: u64, out: &mut [u64]) -> bool;

    /// *Stopped window.* Lets a stopped thread run again and says what
    /// happened ([`kern_return::resume`] for Mach). The shared loop aborts
    /// the process on [`Resumed::Failed`], rather than leave a live thread
    /// frozen; a thread that is gone or already running is no failure.
    fn resume(&mut self, thread: Self::Thread) -> Resumed;

    /// Releases one thread handle of a listing (`mach_port_deallocate`).
    fn release_thread(&mut self, thread: Self::Thread);

    /// Releases the listing itself (`mach_vm_deallocate` of the array),
    /// after every handle in it was released.
    fn release_list(&mut self, list: Self::List);
}
