//! The handler's half of CFI unwinding: a copy of the interrupted
//! registers and of the top of the stack, left in the sample's slot.
//!
//! The handler copies `[sp, sp + 16 KiB)` (cut at the stack's end) into
//! the slot's static buffer, directly within the thread's own stack
//! ([`super::own_stack`]) and with the fault-safe read of
//! [`super::super::checked_memory`] elsewhere, and walks its frame-pointer chain through that copy
//! first ([`CopyThenChecked`]), so the copy costs no second read. The
//! sampler thread later unwinds the copy with the modules' CFI
//! ([`super::super::unwind::CfiWalker`]) and joins the handler's frame-pointer walk for
//! what lies beyond it.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::walker::{Registers, StackMemory};

use super::checked_memory::{self, CheckedMemory};

/// Words of stack copied per sample, at most: 16 KiB, and never past the
/// stack's end, so a thread whose live stack is shallower (most: the
/// self-check's deepest stack, 25 frames, uses about 1.5 KiB; glibc's
/// `qsort` with its callback about 0.5 KiB more) copies only that.
/// Frames without frame pointers sit at the top of the stack (the leaf
/// and its C callers), and CFI unwinding can only get past one whose
/// return address lies inside the copy; frames beyond it come from the
/// frame-pointer walk. 8 KiB was too short for a common case: a frame
/// holding an 8 KiB buffer (`std::io::copy`'s, inlined into
/// `std::fs::copy`; stdio's `BUFSIZ`) put its caller out of reach, and
/// the walk ended there.
pub(crate) const COPY_WORDS: usize = 2048;

/// Whether handlers copy the stack for CFI unwinding (set at sampler
/// start from the configuration; off means frame pointers only).
pub(crate) static CAPTURE: AtomicBool = AtomicBool::new(false);

/// One slot's copy: written only by the handler that owns the slot in
/// `Writing`, read only by the sampler after it saw `Done` (the slot's
/// state machine orders both, as for its frame buffer).
pub(crate) struct StackCopy {
    pc: AtomicU64,
    sp: AtomicU64,
    fp: AtomicU64,
    lr: AtomicU64,
    /// Address of `words[0]` (the stack pointer, 8-aligned down).
    base: AtomicU64,
    /// Words of `words` holding the copy; 0: no copy.
    len: AtomicU32,
    words: UnsafeCell<[u64; COPY_WORDS]>,
}

// SAFETY: `words` is written only by the handler that claimed the slot and
// read only by the sampler after an `Acquire` load of the slot's `Done`,
// which that handler stored with `Release` (see `slots`).
unsafe impl Sync for StackCopy {}

/// A finished copy, as the sampler thread reads it.
pub(crate) struct CopiedStack<'a> {
    /// The interrupted registers, as captured (pointer-authentication
    /// bits not stripped).
    pub regs: Registers,
    base: u64,
    words: &'a [u64],
}

impl<'a> CopiedStack<'a> {
    /// A copy taken elsewhere (by the kernel, for a perf ring sample):
    /// `words` from `base` (8-aligned) up, taken at `regs`.
    pub fn from_parts(regs: Registers, base: u64, words: &'a [u64]) -> Self {
        CopiedStack { regs, base, words }
    }

    /// The word at `addr`, if the copy holds it.
    #[inline]
    pub fn read(&self, addr: u64) -> Option<u64> {
        if addr % 8 != 0 || addr < self.base {
            return None;
        }
        let i = usize::try_from((addr - self.base) / 8).ok()?;
        self.words.get(i).copied()
    }

    /// One past the highest copied address.
    pub fn end(&self) -> u64 {
        self.base + 8 * self.words.len() as u64
    }
}

impl StackCopy {
    pub const fn new() -> Self {
        StackCopy {
            pc: AtomicU64::new(0),
            sp: AtomicU64::new(0),
            fp: AtomicU64::new(0),
            lr: AtomicU64::new(0),
            base: AtomicU64::new(0),
            len: AtomicU32::new(0),
            words: UnsafeCell::new([0; COPY_WORDS]),
        }
    }

    /// Handler side: records `regs` and copies the stack from `regs.sp` up
    /// to `high` (at most [`COPY_WORDS`]) when capturing is on; returns
    /// the walker's memory, which reads the copy first. Below `own_top`
    /// (the thread's own stack) reads are direct. Async-signal-safe.
    ///
    /// # Safety
    /// The caller owns the slot this copy belongs to (it won `Writing`),
    /// and `window` is that slot's window buffer.
    pub unsafe fn capture<'a>(
        &'a self,
        regs: &Registers,
        high: u64,
        own_top: Option<u64>,
        window: &'a mut [u64],
    ) -> CopyThenChecked<'a> {
        self.pc.store(regs.pc, Relaxed);
        self.sp.store(regs.sp, Relaxed);
        self.fp.store(regs.fp, Relaxed);
        self.lr.store(regs.lr, Relaxed);
        let base = regs.sp & !7;
        // SAFETY: the caller owns the slot, so nobody else touches `words`.
        let words = unsafe { &mut *self.words.get() };
        let len = if CAPTURE.load(Relaxed) {
            checked_memory::copy_stack_top(base, high, own_top, words)
        } else {
            0
        };
        self.base.store(base, Relaxed);
        self.len.store(len as u32, Relaxed);
        CopyThenChecked::new(
            base,
            &words[..len],
            CheckedMemory::new(window, regs.sp, high).with_own_stack(own_top),
        )
    }

    /// Sampler side: the copy, or `None` if the handler made none.
    ///
    /// # Safety
    /// The slot is `Done` (seen with `Acquire`) and stays so while the
    /// result is used: no handler can write the copy meanwhile.
    pub unsafe fn view(&self) -> Option<CopiedStack<'_>> {
        let len = (self.len.load(Relaxed) as usize).min(COPY_WORDS);
        if len == 0 {
            return None;
        }
        // SAFETY: the caller's promise: the writer finished and none runs.
        let words = unsafe { &(&*self.words.get())[..len] };
        Some(CopiedStack {
            regs: Registers {
                pc: self.pc.load(Relaxed),
                fp: self.fp.load(Relaxed),
                sp: self.sp.load(Relaxed),
                lr: self.lr.load(Relaxed),
            },
            base: self.base.load(Relaxed),
            words,
        })
    }
}

/// The handler's [`StackMemory`]: frame records inside the stack copy are
/// read from it, the rest through [`CheckedMemory`] (fault-safe).
pub(crate) struct CopyThenChecked<'a> {
    base: u64,
    words: &'a [u64],
    rest: CheckedMemory<'a>,
}

impl<'a> CopyThenChecked<'a> {
    /// Reads records from `words` (copied from `base` up) first, the rest
    /// through `rest`: one-shot captures reuse it for their own copies.
    pub(crate) fn new(base: u64, words: &'a [u64], rest: CheckedMemory<'a>) -> Self {
        CopyThenChecked { base, words, rest }
    }
}

impl StackMemory for CopyThenChecked<'_> {
    #[inline]
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        if addr % 8 == 0 && addr >= self.base {
            let i = ((addr - self.base) / 8) as usize;
            if let (Some(&a), Some(&b)) = (self.words.get(i), self.words.get(i + 1)) {
                return Some([a, b]);
            }
        }
        self.rest.read_record(addr)
    }
}
