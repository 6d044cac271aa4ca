//! The profiling signal's handler, and everything it touches.
//!
//! Everything here may run inside the handler ([`handler::on_signal`]), on a thread interrupted
//! anywhere (inside `malloc`, holding a lock, on a nearly full stack). Nothing else runs there,
//! and nothing here imports more than plain data types from the sampler. Every function
//! reachable from the handler keeps these rules (docs/architecture.md, rules 1, 2, 7 and 8):
//!
//! - **No allocation, locks, panics or logging**: the interrupted thread may hold any lock.
//!   Walks go into static slots ([`slots`]); naming and CFI wait for the sampler thread.
//! - **Async-signal-safe calls only**: `gettid`, `clock_gettime`, `process_vm_readv`,
//!   `sigaction`, atomics; no `dladdr` or `pthread_getattr_np` (see [`stack_regions`]).
//! - **Fault-safe reads**: the interrupted stack is read through the kernel's checked copy
//!   ([`checked_memory`]), except the thread's own stack block ([`own_stack`]); a mappings
//!   snapshot bounds a walk but proves nothing at the moment of the read. Walks stay inside
//!   the stack, aligned, strictly ascending, capped in depth.
//! - **Small stack**: at most 512 bytes of the interrupted stack; buffers are static.
//! - **errno is saved and restored**; nothing is left pending that could kill the process
//!   after `stop` or `exec` ([`install`]).
//! - **Static state only**, so a late handler touches memory that exists.

pub(crate) mod checked_memory;
pub(crate) mod dump_slot;
pub(crate) mod handler;
pub(crate) mod install;
pub(crate) mod own_stack;
pub(crate) mod registers;
pub(crate) mod safe_calls;
pub(crate) mod slots;
pub(crate) mod stack_bounds;
pub(crate) mod stack_copy;
pub(crate) mod stack_regions;
pub(crate) mod timer_fds;
pub(crate) mod timer_values;
pub(crate) mod wake_notices;
