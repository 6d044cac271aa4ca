//! The part of the interrupted stack the handler may read directly, without a checked read's
//! system call ([`super::checked_memory`]; docs/reliability.md). glibc and musl map each
//! thread one block, its stack under its control block, where the thread pointer points, and
//! unmap it only after the thread exits. So `[sp, thread pointer)` is read directly when the
//! snapshot's mapping holding sp holds the thread pointer too and the snapshot is newer than
//! the thread listing (an older one may merge the block with a coroutine stack now apart).
//! Not covered: a thread without a guard page whose neighbour below, merged with its block in
//! the snapshot, was since replaced by a smaller mapping.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::stack_regions;

/// Whether user code may read the thread pointer ([`probe`]).
static READABLE: AtomicBool = AtomicBool::new(false);

/// Checks once, outside any handler, that the thread pointer can be read without a system
/// call: always on aarch64, on x86_64 with `HWCAP2_FSGSBASE`.
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

/// The calling thread's pointer, if readable. Async-signal-safe.
#[inline]
fn thread_pointer() -> Option<u64> {
    if !READABLE.load(Relaxed) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let fs: u64;
        // SAFETY: `probe` saw HWCAP2_FSGSBASE, so `rdfsbase` runs in user mode; it only reads
        // a register.
        unsafe {
            core::arch::asm!("rdfsbase {}", out(reg) fs, options(nomem, nostack, preserves_flags))
        };
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

/// Where the directly readable part of the interrupted stack ends, or `None` to read it
/// checked. Handler only. Async-signal-safe.
#[inline]
pub(crate) fn readable_top(sp: u64, region: (u64, u64)) -> Option<u64> {
    if !stack_regions::covers_listed() {
        return None;
    }
    top_within(sp, region, thread_pointer()?)
}

/// `[sp, tp)` is the thread's own stack when one mapping holds both.
#[inline]
fn top_within(sp: u64, region: (u64, u64), tp: u64) -> Option<u64> {
    let (start, end) = region;
    (start <= sp && sp < tp && tp <= end).then_some(tp & !7)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's own stack is readable up to its thread pointer; a separate mapping is not.
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
            let containing = |addr: u64| {
                stack_regions::rw_regions_now()
                    .into_iter()
                    .find(|&(start, end)| start <= addr && addr < end)
            };
            let region = containing(sp)
                .or_else(|| unlisted_under_qemu("the thread's stack", own_stack_block()))
                .expect("own stack is mapped rw");
            let tp = thread_pointer().expect("a thread pointer");
            let top = top_within(sp, region, tp).expect("a spawned thread's stack is its own");
            assert!(
                sp < top && top <= region.1,
                "{sp:#x} < {top:#x} <= {:#x}",
                region.1
            );

            let other = super::super::checked_memory::tests::map_anonymous(1 << 16);
            let inside = other as u64 + (1 << 15);
            let extent = (other as u64, other as u64 + (1 << 16));
            let region = containing(inside)
                .or_else(|| unlisted_under_qemu("a new mapping", extent))
                .expect("mapped rw");
            assert_eq!(top_within(inside, region, tp), None, "not its stack");
            // SAFETY: our own mapping.
            unsafe { libc::munmap(other, 1 << 16) };
        })
        .join()
        .expect("thread");
    }

    /// QEMU builds the guest's `/proc/self/maps` from the host's and leaves out a mapping whose
    /// guest pages differ in flags, so under QEMU a missing mapping is taken at its known
    /// extent; natively it fails the test.
    fn unlisted_under_qemu(what: &str, extent: (u64, u64)) -> Option<(u64, u64)> {
        crate::emulation::under_qemu().then(|| {
            println!("under QEMU: {what} is not in /proc/self/maps; its own extent is used");
            extent
        })
    }

    /// The calling thread's whole stack block (stack and control block), from its attributes.
    fn own_stack_block() -> (u64, u64) {
        // SAFETY: `pthread_getattr_np` initialises the attributes before they are read; they
        // are destroyed once.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let mut addr = std::ptr::null_mut();
            let mut size = 0;
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            (addr as u64, addr as u64 + size as u64)
        }
    }
}
