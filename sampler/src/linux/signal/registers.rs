//! The interrupted registers from an `SA_SIGINFO` handler's `ucontext_t` (plain reads,
//! async-signal-safe), at the kernel's byte offsets for either architecture so the aarch64
//! layout is tested on x86_64 too; compile-time checks tie the offsets to libc's struct.

use crate::walker::{Arch, Registers};

/// Byte offsets of the walk's registers in one architecture's `ucontext_t`.
struct UcontextLayout {
    pc: usize,
    fp: usize,
    sp: usize,
    /// `None`: no link register.
    lr: Option<usize>,
}

/// The kernel's layouts (`asm/ucontext.h`): on x86_64 `uc_mcontext.gregs` starts at byte 40,
/// with `rbp` at word 10, `rsp` 15, `rip` 16; on aarch64 `uc_mcontext` starts at 176, with
/// `fault_address` then `regs[31]` (`x29` word 29, `x30` 30), `sp`, `pc`.
const fn ucontext_layout(arch: Arch) -> UcontextLayout {
    match arch {
        Arch::X86_64 => {
            const GREGS: usize = 40;
            UcontextLayout {
                pc: GREGS + 16 * 8,
                fp: GREGS + 10 * 8,
                sp: GREGS + 15 * 8,
                lr: None,
            }
        }
        Arch::Aarch64 { .. } => {
            const REGS: usize = 176 + 8;
            UcontextLayout {
                pc: REGS + 32 * 8,
                fp: REGS + 29 * 8,
                sp: REGS + 31 * 8,
                lr: Some(REGS + 30 * 8),
            }
        }
    }
}

/// The registers in `uc`, the bytes of a `ucontext_t` of `arch`; `None` if too short. Raw:
/// the walk strips pointer authentication.
fn ucontext_registers(arch: Arch, uc: &[u8]) -> Option<Registers> {
    let word = |at: usize| -> Option<u64> {
        let bytes = uc.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    };
    let layout = ucontext_layout(arch);
    Some(Registers {
        pc: word(layout.pc)?,
        fp: word(layout.fp)?,
        sp: word(layout.sp)?,
        lr: layout.lr.map_or(Some(0), word)?,
    })
}

/// The registers `uc` saved at the interruption.
pub(crate) fn registers(uc: &libc::ucontext_t) -> Registers {
    // SAFETY: the kernel-initialised `ucontext_t`, read only.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (uc as *const libc::ucontext_t).cast::<u8>(),
            std::mem::size_of::<libc::ucontext_t>(),
        )
    };
    // Never `None`: the checks below keep every offset inside.
    ucontext_registers(Arch::host(), bytes).unwrap_or_default()
}

// libc's `ucontext_t` agrees with the layout above.
#[cfg(target_arch = "x86_64")]
const _: () = {
    use std::mem::offset_of;
    let gregs = offset_of!(libc::ucontext_t, uc_mcontext) + offset_of!(libc::mcontext_t, gregs);
    let layout = ucontext_layout(Arch::X86_64);
    assert!(layout.pc == gregs + libc::REG_RIP as usize * 8);
    assert!(layout.fp == gregs + libc::REG_RBP as usize * 8);
    assert!(layout.sp == gregs + libc::REG_RSP as usize * 8);
};
#[cfg(target_arch = "aarch64")]
const _: () = {
    use std::mem::offset_of;
    let m = offset_of!(libc::ucontext_t, uc_mcontext);
    let layout = ucontext_layout(Arch::AARCH64_LINUX);
    assert!(layout.pc == m + offset_of!(libc::mcontext_t, pc));
    assert!(layout.sp == m + offset_of!(libc::mcontext_t, sp));
    assert!(layout.fp == m + offset_of!(libc::mcontext_t, regs) + 29 * 8);
    assert!(matches!(layout.lr, Some(lr) if lr == m + offset_of!(libc::mcontext_t, regs) + 30 * 8));
};

#[cfg(test)]
mod tests {
    use super::*;

    /// An aarch64 signal frame's `ucontext_t`: `words` at their offsets, 0xa5 elsewhere.
    fn aarch64_ucontext(words: &[(usize, u64)]) -> Vec<u8> {
        // Through pstate, then part of __reserved.
        let mut uc = vec![0xa5u8; 176 + 8 + 34 * 8 + 64];
        for &(at, value) in words {
            uc[at..at + 8].copy_from_slice(&value.to_ne_bytes());
        }
        uc
    }

    #[test]
    fn an_aarch64_signal_frame_gives_pc_fp_sp_and_lr() {
        const REGS: usize = 184; // uc_mcontext.regs
        let (sp, pc) = (0xffff_f7ff_e000u64, 0xaaaa_c000_1234u64);
        let fp = sp + 0x40;
        // A signed return address, kept as it is.
        let lr = 0x0035_aaaa_c000_0f00u64;
        // Distinct neighbours, so an offset one word off fails.
        let uc = aarch64_ucontext(&[
            (176, 0xdead), // fault_address
            (REGS + 28 * 8, 0x2828),
            (REGS + 29 * 8, fp),
            (REGS + 30 * 8, lr),
            (REGS + 31 * 8, sp),
            (REGS + 32 * 8, pc),
            (REGS + 33 * 8, 0x6000_0000), // pstate
        ]);
        assert_eq!(
            ucontext_registers(Arch::AARCH64_LINUX, &uc),
            Some(Registers { pc, fp, sp, lr })
        );
        // Cut before pc: refused.
        assert_eq!(
            ucontext_registers(Arch::AARCH64_LINUX, &uc[..REGS + 32 * 8]),
            None
        );
    }

    #[test]
    fn an_x86_64_signal_frame_gives_pc_fp_and_sp() {
        let mut uc = vec![0xa5u8; 40 + 23 * 8];
        for (word, value) in [(10, 0x7ffc_0040u64), (15, 0x7ffc_0000), (16, 0x5555_1234)] {
            uc[40 + word * 8..48 + word * 8].copy_from_slice(&u64::to_ne_bytes(value));
        }
        assert_eq!(
            ucontext_registers(Arch::X86_64, &uc),
            Some(Registers {
                pc: 0x5555_1234,
                fp: 0x7ffc_0040,
                sp: 0x7ffc_0000,
                lr: 0,
            })
        );
    }

    /// A real signal frame (this thread signals itself) reads plausibly; under QEMU this
    /// checks the emulator's frame.
    #[test]
    fn a_real_signal_frame_reads_plausibly() {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        static SEEN: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
        extern "C" fn handler(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
            // SAFETY: an SA_SIGINFO handler's third argument.
            let r = registers(unsafe { &*(uc as *const libc::ucontext_t) });
            for (to, from) in SEEN.iter().zip([r.pc, r.fp, r.sp, r.lr]) {
                to.store(from, Relaxed);
            }
        }
        // SAFETY: a SIGURG handler (nothing else sends it here), restored.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGURG, &action, &mut old), 0);
            assert_eq!(libc::pthread_kill(libc::pthread_self(), libc::SIGURG), 0);
            assert_eq!(libc::sigaction(libc::SIGURG, &old, std::ptr::null_mut()), 0);
        }
        let [pc, fp, sp, lr] = SEEN.each_ref().map(|v| v.load(Relaxed));
        let here = &pc as *const u64 as u64;
        assert!(
            sp != 0 && sp.abs_diff(here) < 1 << 20,
            "sp {sp:#x}, a local at {here:#x}"
        );
        assert!(fp >= sp, "fp {fp:#x} below sp {sp:#x}");
        // The pc is in `tgkill`'s code, which the loader knows.
        let pc = Arch::host().strip_code_address(pc);
        // SAFETY: dladdr reads the loader's tables into `info`.
        let known = unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            libc::dladdr(pc as *const libc::c_void, &mut info) != 0
        };
        assert!(known, "pc {pc:#x} is in no loaded object");
        if matches!(Arch::host(), Arch::X86_64) {
            assert_eq!(lr, 0);
        } else {
            assert_ne!(lr, 0);
        }
    }
}
