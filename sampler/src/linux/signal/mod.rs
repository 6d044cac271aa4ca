//! The profiling signal's handler, and everything it touches.
//!
//! Everything in this folder may run inside the handler, on a thread
//! interrupted at an arbitrary instruction: inside `malloc`, holding a
//! lock, in the middle of a `dlclose`, or on a stack with a few KiB left.
//! The rest of the sampler (the engine, the clocks, CFI unwinding) runs on
//! the sampler thread and may allocate; nothing outside this folder runs
//! in the handler, and nothing here imports from the rest of the sampler
//! but plain data types (the walker's), so the rules below can be checked
//! folder by folder. The handler's code path is [`handler::on_signal`].
//!
//! The rules (docs/architecture.md, rules 1, 2, 7 and 8), which every
//! function reachable from the handler keeps:
//!
//! - **No allocation, no locks, no panics, no logging**: the interrupted
//!   thread may hold the allocator's or any other lock. Walks go into
//!   static, preallocated slots ([`slots`]); naming, interning and
//!   unwinding with CFI wait for the sampler thread, after the thread
//!   runs again.
//! - **Async-signal-safe calls only**: `gettid`, `clock_gettime`,
//!   `process_vm_readv`, `sigaction`, atomics. No `dladdr`, no reading of
//!   unwind tables, no `pthread_getattr_np` (stack bounds come from a
//!   snapshot the sampler thread publishes, [`stack_regions`]).
//! - **Fault-safe reads**: every read of the interrupted stack goes
//!   through the kernel's checked copy ([`checked_memory`]), except within
//!   the interrupted thread's own stack block, which is mapped while the
//!   thread runs ([`own_stack`]); a snapshot of the mappings bounds a walk
//!   but proves nothing about the moment of the read. Walks are bounded:
//!   inside the stack, aligned, strictly ascending, capped in depth.
//! - **Small stack**: at most 512 bytes of the interrupted thread's stack
//!   (a thread without an alternate signal stack takes the signal on its
//!   own); buffers are static, never locals.
//! - **errno is saved and restored**; nothing is left pending that could
//!   kill the process after `stop` or `exec` ([`install`]).
//! - **Static state only**: a handler that runs late, after the profiler
//!   stopped, touches memory that still exists.
//!
//! - [`install`]: installing the handler, sending the signal, restoring the
//!   previous action (runs on the sampler thread, and after `fork`).
//! - [`handler`]: the handler itself.
//! - [`slots`]: the slots it leaves its walk in, and the sampler's side.
//! - [`registers`]: the interrupted registers, from the `ucontext_t`.
//! - [`checked_memory`]: fault-safe reads of the stack.
//! - [`own_stack`]: the part of the stack the handler reads directly.
//! - [`stack_regions`]: the snapshot of mappings that bounds a walk.
//! - [`stack_copy`]: the copy of the interrupted registers and stack top
//!   that the sampler thread unwinds with CFI.
//! - [`dump_slot`]: a one-shot capture's slot and the handler's part of it.
//! - [`timer_fds`]: which perf descriptors are btprof's signal timers.
//! - [`timer_values`]: what one-shot CPU timers carry in `si_value`.
//! - [`wake_notices`]: which idle threads' wake timers fired.

pub(crate) mod checked_memory;
pub(crate) mod dump_slot;
pub(crate) mod handler;
pub(crate) mod install;
pub(crate) mod own_stack;
pub(crate) mod registers;
pub(crate) mod slots;
pub(crate) mod stack_copy;
pub(crate) mod stack_regions;
pub(crate) mod timer_fds;
pub(crate) mod timer_values;
pub(crate) mod wake_notices;
