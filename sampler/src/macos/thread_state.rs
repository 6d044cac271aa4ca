//! A suspended thread's registers through `thread_get_state`, per
//! architecture.
//!
//! Only the four registers a frame-pointer walk starts from are kept. The
//! values are used as the kernel reports them; pointer-authentication bits
//! on the pc, the link register and return addresses are stripped by the
//! walker (47-bit mask, [`Arch::host`](crate::walker::Arch::host)). A frame
//! pointer that carried such bits would fail the walker's bounds check and
//! end the walk as out of bounds, never be followed.

use mach2::kern_return::{kern_return_t, KERN_SUCCESS};
use mach2::mach_types::thread_act_t;
use mach2::thread_act::thread_get_state;

use crate::walker::Registers;

/// Reads the registers of a suspended thread. No allocation, no locks: it
/// is called while the thread is stopped.
#[cfg(target_arch = "aarch64")]
pub(crate) fn read(thread: thread_act_t) -> Result<Registers, kern_return_t> {
    use mach2::structs::arm_thread_state64_t;
    use mach2::thread_status::ARM_THREAD_STATE64;

    let mut state = arm_thread_state64_t::new();
    let mut count = arm_thread_state64_t::count();
    // SAFETY: `state` is writable for `count` 32-bit words, the size of
    // `ARM_THREAD_STATE64`; the kernel writes at most that many.
    let kr = unsafe {
        thread_get_state(
            thread,
            ARM_THREAD_STATE64,
            (&mut state as *mut arm_thread_state64_t).cast(),
            &mut count,
        )
    };
    if kr != KERN_SUCCESS {
        return Err(kr);
    }
    // arm64e (not a target today): there the kernel signs `sp` and `fp` in
    // the thread state as well as `pc` and `lr` (xnu's
    // `arm_thread_state64_t` accessors, `__darwin_arm_thread_state64_get_*`).
    // An arm64e build must strip all four here (or read them through the
    // `arm_thread_state64_get_{pc,lr,sp,fp}` accessors), not only the code
    // addresses the walker strips: a signed `fp` fails the walker's bounds
    // check and every walk would end at frame 0.
    Ok(Registers {
        pc: state.__pc,
        fp: state.__fp,
        sp: state.__sp,
        lr: state.__lr,
    })
}

/// Reads the registers of a suspended thread. No allocation, no locks: it
/// is called while the thread is stopped.
#[cfg(target_arch = "x86_64")]
pub(crate) fn read(thread: thread_act_t) -> Result<Registers, kern_return_t> {
    use mach2::structs::x86_thread_state64_t;
    use mach2::thread_status::x86_THREAD_STATE64;

    let mut state = x86_thread_state64_t::new();
    let mut count = x86_thread_state64_t::count();
    // SAFETY: `state` is writable for `count` 32-bit words, the size of
    // `x86_THREAD_STATE64`; the kernel writes at most that many.
    let kr = unsafe {
        thread_get_state(
            thread,
            x86_THREAD_STATE64,
            (&mut state as *mut x86_thread_state64_t).cast(),
            &mut count,
        )
    };
    if kr != KERN_SUCCESS {
        return Err(kr);
    }
    Ok(Registers {
        pc: state.__rip,
        fp: state.__rbp,
        sp: state.__rsp,
        lr: 0,
    })
}
