//! The interrupted registers, read from the `ucontext_t` the kernel hands
//! an `SA_SIGINFO` handler: pc, frame pointer, stack pointer and (arm64)
//! link register, the walk's starting point. A plain field read:
//! async-signal-safe.

use crate::walker::Registers;

/// The registers `uc` saved at the interruption.
#[cfg(target_arch = "x86_64")]
pub(crate) fn registers(uc: &libc::ucontext_t) -> Registers {
    let g = &uc.uc_mcontext.gregs;
    Registers {
        pc: g[libc::REG_RIP as usize] as u64,
        fp: g[libc::REG_RBP as usize] as u64,
        sp: g[libc::REG_RSP as usize] as u64,
        lr: 0,
    }
}

/// The registers `uc` saved at the interruption.
#[cfg(target_arch = "aarch64")]
pub(crate) fn registers(uc: &libc::ucontext_t) -> Registers {
    let m = &uc.uc_mcontext;
    Registers {
        pc: m.pc,
        fp: m.regs[29],
        sp: m.sp,
        lr: m.regs[30],
    }
}
