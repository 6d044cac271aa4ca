//! The frame pointer of a thread blocked in a system call, which the
//! kernel does not report.
//!
//! `/proc/self/task/TID/syscall` gives a blocked thread's stack pointer and
//! pc, not its frame pointer, and a thread of our own process cannot be
//! asked for more without interrupting it. The system call wrappers of the
//! C library have call frame information and no frame pointer of their
//! own, so CFI unwinds them from sp and pc alone; the first caller whose
//! canonical frame address is computed from the frame pointer (code built
//! with frame pointers) needs the register, which the wrappers left as it
//! was: its value is the address of that caller's frame record. That record
//! is found in the copied stack as the lowest address above the caller's
//! stack pointer holding a frame record (a saved frame pointer above it in
//! the stack, then a return address into a known module) whose chain goes on.

use framehop::{FrameAddress, Unwinder};

use crate::walker::Arch;

use super::super::signal::stack_copy::CopiedStack;
use super::{initial_regs, sp_fp, CfiWalker};

/// Frames unwound with CFI before the frame pointer is first needed: the
/// wrappers are one to three frames deep.
const MAX_CFI_FRAMES: usize = 16;
/// Frame records checked above a candidate before it is believed.
const CHAIN_CHECK: usize = 2;
/// The frame pointer CFI starts with: not zero (which unwinders take for
/// the end of the chain), and never inside a stack copy, so a frame that
/// computes its frame address from it fails to read and says it needs it.
const UNKNOWN_FP: u64 = 0x10;

impl CfiWalker {
    /// The registers of a thread blocked in a system call at `sp` and
    /// `pc`, whose stack from `base` up is copied in `words`: the frame
    /// pointer recovered from the copy ([`Self::frame_pointer_at_syscall`]),
    /// 0 where it cannot be.
    pub(crate) fn registers_at_syscall(
        &mut self,
        pc: u64,
        sp: u64,
        base: u64,
        words: &[u64],
    ) -> crate::walker::Registers {
        let mut regs = crate::walker::Registers {
            pc,
            fp: 0,
            sp,
            lr: 0,
        };
        let guess = CopiedStack::from_parts(regs, base, words);
        regs.fp = self.frame_pointer_at_syscall(&guess).unwrap_or(0);
        regs
    }

    /// The frame pointer of the thread whose stack `copy` holds, taken at
    /// a system call (`copy.regs.fp` is ignored), or `None` where the copy
    /// holds no frame record CFI unwinding needs.
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
                // CFI restored the frame pointer from the stack: it is
                // known from here on, so the starting value does not matter.
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
                Err(_) => {
                    // This frame needs the frame pointer: find its record.
                    return self.lowest_frame_record(copy, sp);
                }
            }
        }
        None
    }

    /// The lowest 8-aligned address at or above `sp` in `copy` that holds
    /// a frame record whose chain continues for [`CHAIN_CHECK`] records
    /// through return addresses in known code; failing that, the lowest
    /// whose chain ends sooner with a zero frame pointer.
    ///
    /// A zero saved frame pointer marks the outermost frame, but a zero
    /// word followed by a stale return address is common in a frame's
    /// locals (left by an earlier, deeper call): taken first, it ended the
    /// walk two frames in, with the frame needing the pointer repeated. A
    /// chain that ends at once is believed only where no longer one is
    /// found.
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

    /// How many frame records from `start` were checked and hold (a
    /// return address into known code, then a saved frame pointer above
    /// the record, or zero), at most [`CHAIN_CHECK`]; `None` where one
    /// does not. A chain that leaves the copy after its first record is
    /// believed, as if checked in full.
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
