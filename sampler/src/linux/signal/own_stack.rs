//! The part of the interrupted stack the handler may read directly.
//!
//! Reads through [`super::checked_memory`] never fault, but each is a
//! system call: `process_vm_readv` pins the pages it copies, and it can be
//! most of the handler's time. One range is proven mapped
//! without it: the stack block of the thread the handler runs on.
//!
//! The C library (glibc, musl) maps each thread it creates one block
//! that holds the thread's stack and, at its top, the thread's control
//! block, which the thread pointer (x86_64 `fs` base, aarch64
//! `tpidr_el0`) points at. The block is unmapped only after the thread
//! exits, and the handler runs on the interrupted thread itself. So when
//! the snapshot's mapping that holds the interrupted sp also holds the
//! thread pointer, above sp, `[sp, thread pointer)` is that thread's own
//! stack and is read directly, provided the snapshot was read after the
//! sampler listed the thread: the block was mapped then. An older
//! snapshot may show one mapping where the block and a coroutine stack
//! now lie apart, with a hole between them. A thread id reused by a new
//! thread brings a new block and a new thread pointer, so nothing is kept
//! per thread.
//!
//! Everything else stays checked:
//! - a thread on a stack of its own making (a coroutine or fiber stack,
//!   an alternate signal stack mapped apart), whose sp is not in the
//!   mapping of its thread pointer: the stale-mapping case, where a
//!   runtime unmaps such a stack and maps a smaller one in its place;
//! - the main thread, whose control block is not on its stack;
//! - a frame pointer that leaves the range.
//!
//! What this does not prove: a thread created without a guard page
//! whose neighbour below, a stack it switched to, was merged with its
//! block in the snapshot and has since been replaced by a smaller
//! mapping with a hole above it. A stack mapped above the block is
//! never read directly (sp would lie above the thread pointer).

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::stack_regions;

/// Whether user code may read the thread pointer here (decided once at
/// sampler start, [`probe`]).
static READABLE: AtomicBool = AtomicBool::new(false);

/// Checks once, outside any handler, that the thread pointer can be read
/// without a system call: always on aarch64; on x86_64 where the kernel
/// enabled `rdfsbase` for user code (`HWCAP2_FSGSBASE`, Linux 5.9 and
/// later on CPUs that have it). Elsewhere every read stays checked.
pub fn probe() -> bool {
    #[cfg(target_arch = "x86_64")]
    let readable = {
        const HWCAP2_FSGSBASE: libc::c_ulong = 1 << 1;
        // SAFETY: getauxval has no preconditions.
        unsafe { libc::getauxval(libc::AT_HWCAP2) & HWCAP2_FSGSBASE != 0 }
    };
    #[cfg(target_arch = "aarch64")]
    let readable = true;
    READABLE.store(readable, Relaxed);
    readable
}

/// The thread pointer of the calling thread, if it can be read.
/// Async-signal-safe.
#[inline]
fn thread_pointer() -> Option<u64> {
    if !READABLE.load(Relaxed) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `probe` saw HWCAP2_FSGSBASE: the kernel set CR4.FSGSBASE,
        // so `rdfsbase` runs in user mode.
        let fs = unsafe { read_fs_base() };
        (fs != 0).then_some(fs)
    }
    #[cfg(target_arch = "aarch64")]
    {
        let tp: u64;
        // SAFETY: reading TPIDR_EL0 is allowed at EL0 and has no effects.
        unsafe {
            core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags))
        };
        (tp != 0).then_some(tp)
    }
}

/// # Safety
/// The CPU and kernel must allow `rdfsbase` in user mode.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn read_fs_base() -> u64 {
    let fs: u64;
    // SAFETY: the caller's promise; the instruction only reads a register.
    unsafe {
        core::arch::asm!("rdfsbase {}", out(reg) fs, options(nomem, nostack, preserves_flags));
    }
    fs
}

/// Where the directly readable part of the interrupted stack ends: the
/// thread pointer, when `region` (the snapshot's mapping holding `sp`)
/// holds it above `sp` and the snapshot is newer than the threads the
/// sampler listed; `None` when the stack must be read checked.
/// Called only in the handler, on the interrupted thread.
/// Async-signal-safe.
#[inline]
pub(crate) fn readable_top(sp: u64, region: (u64, u64)) -> Option<u64> {
    if !stack_regions::covers_listed() {
        return None;
    }
    top_within(sp, region, thread_pointer()?)
}

/// The rule: `[sp, tp)` is the thread's own stack when one mapping holds
/// both, `sp` below `tp`.
#[inline]
fn top_within(sp: u64, region: (u64, u64), tp: u64) -> Option<u64> {
    let (start, end) = region;
    (start <= sp && sp < tp && tp <= end).then_some(tp & !7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spawned thread's own stack is readable up to its thread pointer;
    /// an address on a separate mapping (a coroutine's stack) is not.
    #[test]
    fn a_threads_own_stack_is_readable_and_a_mapping_of_its_own_is_not() {
        if !probe() {
            eprintln!(
                "NOT CHECKED: this CPU or kernel does not let user code read the thread pointer"
            );
            return;
        }
        std::thread::spawn(|| {
            let local = 0u64;
            let sp = std::hint::black_box(&local) as *const u64 as u64;
            let mut scratch = Vec::new();
            assert!(stack_regions::refresh(&mut scratch), "maps read");
            let region = stack_regions::region_containing(sp).expect("own stack is mapped rw");
            let tp = thread_pointer().expect("a thread pointer");
            let top = top_within(sp, region, tp).expect("a spawned thread's stack is its own");
            assert!(
                sp < top && top <= region.1,
                "{sp:#x} < {top:#x} <= {:#x}",
                region.1
            );

            // SAFETY: an anonymous private mapping anywhere.
            let other = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    1 << 16,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(other, libc::MAP_FAILED);
            let inside = other as u64 + (1 << 15);
            assert!(stack_regions::refresh(&mut scratch), "maps read");
            let region = stack_regions::region_containing(inside).expect("mapped rw");
            assert_eq!(
                top_within(inside, region, tp),
                None,
                "not the thread's stack"
            );
            // SAFETY: our own mapping.
            unsafe { libc::munmap(other, 1 << 16) };
        })
        .join()
        .expect("thread");
    }
}
