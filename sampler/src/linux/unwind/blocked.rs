//! The frame pointer of a thread blocked in a system call, which `/proc/self/task/TID/syscall`
//! does not report. The C library's syscall wrappers have CFI and keep the caller's frame
//! pointer, so the first frame that needs it finds it at its own frame record: the lowest
//! address above that frame's sp in the copy that holds a plausible chain of records.

use framehop::{FrameAddress, Unwinder};

use crate::walker::Arch;

use super::super::signal::stack_copy::CopiedStack;
use super::{initial_regs, sp_fp, CfiWalker};

/// Frames unwound with CFI before the frame pointer is needed.
const MAX_CFI_FRAMES: usize = 16;
/// Frame records checked above a candidate before it is believed.
const CHAIN_CHECK: usize = 2;
/// The frame pointer CFI starts with: not zero (a chain's end) and never in a copy, so a frame
/// that needs it fails to read.
const UNKNOWN_FP: u64 = 0x10;

impl CfiWalker {
    /// The registers of a thread blocked at `sp` and `pc`, its stack from `base` in `words`;
    /// fp from the copy, or 0.
    pub(crate) fn registers_at_syscall(
        &mut self,
        pc: u64,
        sp: u64,
        base: u64,
        words: &[u64],
    ) -> crate::walker::Registers {
        let regs = crate::walker::Registers {
            pc,
            sp,
            ..Default::default()
        };
        let fp = self.frame_pointer_at_syscall(&CopiedStack::from_parts(regs, base, words));
        crate::walker::Registers {
            fp: fp.unwrap_or(0),
            ..regs
        }
    }

    /// The frame pointer at a system call of the thread whose stack `copy` holds, or `None`
    /// where CFI needs none.
    pub(crate) fn frame_pointer_at_syscall(&mut self, copy: &CopiedStack<'_>) -> Option<u64> {
        let arch = Arch::host();
        let mut regs = initial_regs(&crate::walker::Registers {
            fp: UNKNOWN_FP,
            ..copy.regs
        });
        let mut address = FrameAddress::from_instruction_pointer(copy.regs.pc);
        let mut read = |addr: u64| copy.read(addr).ok_or(());
        for _ in 0..MAX_CFI_FRAMES {
            let (sp, fp) = sp_fp(&regs);
            if fp != UNKNOWN_FP {
                // CFI restored the frame pointer: its start value is moot.
                return None;
            }
            match self.modules.unwinder().unwind_frame(
                address,
                &mut regs,
                &mut self.cache,
                &mut read,
            ) {
                Ok(Some(ret)) => {
                    let stripped = arch.strip_code_address(ret);
                    address = FrameAddress::from_return_address(stripped)?;
                }
                Ok(None) => return None,
                // This frame needs the frame pointer: find its record.
                Err(_) => return self.lowest_frame_record(copy, sp),
            }
        }
        None
    }

    /// The lowest aligned address at or above `sp` holding a record whose chain holds for
    /// [`CHAIN_CHECK`] records; failing that, the lowest ending early with a zero (a last
    /// resort: zero-then-stale-return pairs are common among locals).
    fn lowest_frame_record(&self, copy: &CopiedStack<'_>, sp: u64) -> Option<u64> {
        let arch = Arch::host();
        let mut candidate = sp.next_multiple_of(8);
        let mut shorter = None;
        while candidate + 16 <= copy.end() {
            match self.chain_length(copy, candidate, arch) {
                Some(CHAIN_CHECK) => return Some(candidate),
                Some(_) => {
                    shorter.get_or_insert(candidate);
                }
                None => {}
            }
            candidate += 8;
        }
        shorter
    }

    /// How many records from `start` hold (return address in known code, next record above or
    /// zero), at most [`CHAIN_CHECK`]; `None` if one does not. Leaving the copy after the
    /// first counts as full.
    fn chain_length(&self, copy: &CopiedStack<'_>, start: u64, arch: Arch) -> Option<usize> {
        let mut record = start;
        for checked in 0..CHAIN_CHECK {
            let (Some(next), Some(ret)) = (copy.read(record), copy.read(record + 8)) else {
                // Beyond the copy: believed as far as it was checked.
                return (record != start).then_some(CHAIN_CHECK);
            };
            if !self
                .modules
                .covers(arch.strip_code_address(ret).wrapping_sub(1))
            {
                return None;
            }
            if next == 0 {
                return Some(checked + 1);
            }
            if next <= record || next % 8 != 0 || next - record > 1 << 20 {
                return None;
            }
            record = next;
        }
        Some(CHAIN_CHECK)
    }
}
