//! The handler's half of CFI unwinding: a copy of the registers and stack top in the sample's
//! slot, which the handler's frame-pointer walk reads first ([`CopyThenChecked`]) and the
//! sampler thread later unwinds with CFI ([`super::super::unwind::CfiWalker`]).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::walker::{Registers, StackMemory};

use super::checked_memory::{self, CheckedMemory};

/// Stack words copied per sample, at most: CFI gets past a frame only if its return address is
/// in the copy, so it must exceed a frame holding a common 8 KiB buffer (`BUFSIZ`).
pub(crate) const COPY_WORDS: usize = 2048;

/// Whether handlers copy the stack (off: frame pointers only).
pub(crate) static CAPTURE: AtomicBool = AtomicBool::new(false);

/// One slot's copy of `N` words, owned like the slot's frames (see `slots`).
pub(crate) struct StackCopy<const N: usize = COPY_WORDS> {
    regs: [AtomicU64; 4],
    /// Address of `words[0]` (sp, 8-aligned down).
    base: AtomicU64,
    /// Words holding the copy; 0: none.
    len: AtomicU32,
    words: UnsafeCell<[u64; N]>,
}

// SAFETY: `words` is written by the handler that claimed the slot and read
// by the sampler after an `Acquire` load of `Done` (see `slots`).
unsafe impl<const N: usize> Sync for StackCopy<N> {}

/// A finished copy, as the sampler thread reads it.
#[derive(Clone, Copy)]
pub(crate) struct CopiedStack<'a> {
    /// The interrupted registers, pointer authentication not stripped.
    pub regs: Registers,
    base: u64,
    words: &'a [u64],
}

impl<'a> CopiedStack<'a> {
    /// A copy taken elsewhere (the kernel's, for a ring sample).
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

/// A frame-pointer walk over the copy alone.
impl StackMemory for CopiedStack<'_> {
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        Some([self.read(addr)?, self.read(addr.checked_add(8)?)?])
    }
}

impl<const N: usize> StackCopy<N> {
    pub const fn new() -> Self {
        StackCopy {
            regs: [const { AtomicU64::new(0) }; 4],
            base: AtomicU64::new(0),
            len: AtomicU32::new(0),
            words: UnsafeCell::new([0; N]),
        }
    }

    /// Handler side: records `regs` and, if `copy`, the stack up to `high`; returns the
    /// walker's memory. Async-signal-safe.
    ///
    /// # Safety
    /// The caller won `Writing` on this copy's slot; `window` is the slot's.
    pub unsafe fn capture<'a>(
        &'a self,
        regs: &Registers,
        high: u64,
        own_top: Option<u64>,
        window: &'a mut [u64],
        copy: bool,
    ) -> CopyThenChecked<'a> {
        for (to, from) in self.regs.iter().zip([regs.pc, regs.sp, regs.fp, regs.lr]) {
            to.store(from, Relaxed);
        }
        let base = regs.sp & !7;
        // SAFETY: the caller owns the slot.
        let words = unsafe { &mut *self.words.get() };
        let len = match copy {
            true => checked_memory::copy_stack_top(base, high, own_top, words),
            false => 0,
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
    /// The slot is `Done` (seen with `Acquire`) while the result is used.
    pub unsafe fn view(&self) -> Option<CopiedStack<'_>> {
        // SAFETY: the caller's promise.
        let copy = unsafe { self.view_any() };
        (!copy.words.is_empty()).then_some(copy)
    }

    /// As [`Self::view`], an empty copy too.
    ///
    /// # Safety
    /// As for [`Self::view`].
    pub unsafe fn view_any(&self) -> CopiedStack<'_> {
        let len = (self.len.load(Relaxed) as usize).min(N);
        let [pc, sp, fp, lr] = self.regs.each_ref().map(|r| r.load(Relaxed));
        CopiedStack {
            regs: Registers { pc, fp, sp, lr },
            base: self.base.load(Relaxed),
            // SAFETY: the caller's promise: no writer runs.
            words: unsafe { &(&*self.words.get())[..len] },
        }
    }
}

/// The handler's [`StackMemory`]: the copy first, then [`CheckedMemory`].
pub(crate) struct CopyThenChecked<'a> {
    base: u64,
    words: &'a [u64],
    rest: CheckedMemory<'a>,
}

impl<'a> CopyThenChecked<'a> {
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
