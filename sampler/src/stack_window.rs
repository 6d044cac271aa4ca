//! Reading a stopped thread's stack by copy, never by plain loads.
//!
//! On macOS a thread can be suspended, and its registers read, after its
//! stack was unmapped: `__bsdthread_terminate` unmaps it before the thread
//! stops being active. A plain load from that stack faults in the sampler
//! (Sentry's frame-pointer walker crashed in production this way, though it
//! checked the stack bounds). So the walker reads the stack through a
//! copy: one kernel copy (`mach_vm_read_overwrite`: no malloc, no user
//! lock, so it is allowed while a thread is stopped) of
//! `[sp, min(top, sp + window))` (8 KiB by default) into a buffer
//! allocated before sampling starts, and frame records are read from that
//! buffer. A copy that fails
//! (`KERN_INVALID_ADDRESS`: the stack is gone) ends the walk as unreadable.
//! A frame record beyond the window is read with another bounded copy
//! starting at it; after [`StackWindow::MAX_COPIES`] copies the walk ends as
//! unreadable, marked truncated.
//!
//! The platform supplies only [`CopyMemory`]; the windowing here is shared
//! code, tested on every host.
//!
//! Not to be confused with the Linux handler's stack copy
//! (`linux/unwind/stack_copy.rs`): that one is a static, per-slot snapshot
//! of the interrupted registers and the top of the stack, taken in one go
//! by the signal handler inside the interrupted thread and unwound later
//! with CFI. This one is a buffer the sampler thread allocates before
//! sampling and reuses for every walk, refilled window by window from
//! outside a stopped thread as the walk goes deeper: a different owner,
//! lifetime and purpose, hence the different name.

use crate::walker::{StackBounds, StackMemory};

/// Copies memory of the process a stopped thread belongs to, with a
/// system call (never a plain load). Called while a thread is stopped: no
/// allocation, no lock, no panic.
pub trait CopyMemory {
    /// Copies `out.len()` words starting at `addr` (8-aligned). `false`
    /// if any of it could not be read; `out` is then unspecified.
    fn copy_words(&mut self, addr: u64, out: &mut [u64]) -> bool;
}

/// The preallocated buffer a stopped thread's stack is copied into, and
/// where the copy currently stands.
pub struct StackWindow {
    words: Box<[u64]>,
    /// Address of `words[0]` in the target.
    base: u64,
    /// Words of `words` holding a copy of `[base, base + 8 * len)`.
    len: usize,
    /// Copies made for the current walk.
    copies: u32,
}

impl StackWindow {
    /// The default window: 8 KiB covers the live stack of most threads
    /// with one copy (only `[sp, top)` is ever copied, often much less).
    /// xnu copies a request of at most two pages (`msg_ool_size_small`:
    /// 8 KiB with x86_64's 4 KiB pages, 32 KiB on arm64) through a kernel
    /// buffer; larger ones go through a copy-on-write mapping of whole
    /// pages, with page-table work on each call. 8 KiB stays on the buffer
    /// path on both.
    pub const DEFAULT_WINDOW_BYTES: usize = 8 * 1024;

    /// Copies one walk may make before it ends as unreadable (so a walk
    /// through a deep stack costs a bounded number of kernel calls).
    pub const MAX_COPIES: u32 = 16;

    /// A buffer of `window_bytes` (at least one 16-byte frame record),
    /// allocated now, before any thread is stopped.
    pub fn new(window_bytes: usize) -> StackWindow {
        let words = (window_bytes / 8).max(2);
        StackWindow {
            words: vec![0; words].into_boxed_slice(),
            base: 0,
            len: 0,
            copies: 0,
        }
    }

    /// The window's size in bytes.
    pub fn window_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Copies the last walk made.
    pub fn copies(&self) -> u32 {
        self.copies
    }

    /// Frame-record reads for one walk within `bounds` (the live stack
    /// `[sp, top)`), copied from `source`. Forgets any earlier copy: the
    /// thread ran in between.
    pub fn reader<'a, C: CopyMemory>(
        &'a mut self,
        source: &'a mut C,
        bounds: StackBounds,
    ) -> WindowReader<'a, C> {
        self.len = 0;
        self.copies = 0;
        WindowReader {
            copy: self,
            source,
            bounds,
        }
    }
}

/// A [`StackMemory`] reading one stopped thread's stack from copies.
pub struct WindowReader<'a, C: CopyMemory> {
    copy: &'a mut StackWindow,
    source: &'a mut C,
    bounds: StackBounds,
}

impl<C: CopyMemory> WindowReader<'_, C> {
    /// Whether the record at `addr` lies in the current copy.
    fn holds(&self, addr: u64) -> bool {
        let c = &*self.copy;
        addr >= c.base && addr.saturating_add(16) <= c.base + 8 * c.len as u64
    }

    /// Copies a window holding the record at `addr`: from the stack
    /// pointer on the first copy when the window reaches that far (the
    /// live stack in one call), else from `addr`; never past the top.
    fn refill(&mut self, addr: u64) -> bool {
        if self.copy.copies >= StackWindow::MAX_COPIES {
            return false;
        }
        let window = self.copy.window_bytes() as u64;
        let low = self.bounds.low;
        let start = if self.copy.copies == 0 && low % 8 == 0 && addr + 16 - low <= window {
            low
        } else {
            addr
        };
        let end = self.bounds.high.min(start.saturating_add(window));
        let words = ((end.saturating_sub(start)) / 8) as usize;
        if addr + 16 > start + 8 * words as u64 {
            return false;
        }
        self.copy.copies += 1;
        self.copy.len = 0;
        let out = &mut self.copy.words[..words];
        if !self.source.copy_words(start, out) {
            return false;
        }
        self.copy.base = start;
        self.copy.len = words;
        true
    }
}

impl<C: CopyMemory> StackMemory for WindowReader<'_, C> {
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        // The walker checked bounds and alignment; check again, cheaply,
        // so a copy never reaches outside the live stack.
        if addr % 8 != 0
            || addr < self.bounds.low
            || addr
                .checked_add(16)
                .is_none_or(|end| end > self.bounds.high)
        {
            return None;
        }
        if !self.holds(addr) && !self.refill(addr) {
            return None;
        }
        let i = ((addr - self.copy.base) / 8) as usize;
        Some([self.copy.words[i], self.copy.words[i + 1]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walker::{walk, Arch, Registers, WalkEnd};

    /// A target address space: one mapped stack, every copy logged.
    struct Target {
        base: u64,
        words: Vec<u64>,
        mapped: bool,
        copies: Vec<(u64, usize)>,
    }

    impl CopyMemory for Target {
        fn copy_words(&mut self, addr: u64, out: &mut [u64]) -> bool {
            self.copies.push((addr, out.len()));
            let end = self.base + 8 * self.words.len() as u64;
            if !self.mapped || addr < self.base || addr + 8 * out.len() as u64 > end {
                return false;
            }
            let i = ((addr - self.base) / 8) as usize;
            out.copy_from_slice(&self.words[i..i + out.len()]);
            true
        }
    }

    const BASE: u64 = 0x7000_0000_0000;

    /// A stack of `words` words with a frame record every `spacing` words
    /// from word 4, `frames` of them, the last ending the chain.
    fn target(words: usize, spacing: usize, frames: usize) -> (Target, Registers) {
        let mut w = vec![0; words];
        for k in 0..frames {
            let at = 4 + spacing * k;
            w[at] = if k + 1 == frames {
                0
            } else {
                BASE + 8 * (at + spacing) as u64
            };
            w[at + 1] = 0x1000 + k as u64;
        }
        let regs = Registers {
            pc: 0x99,
            fp: BASE + 32,
            sp: BASE + 16,
            lr: 0,
        };
        let t = Target {
            base: BASE,
            words: w,
            mapped: true,
            copies: Vec::new(),
        };
        (t, regs)
    }

    fn walk_copied(
        t: &mut Target,
        regs: &Registers,
        copy: &mut StackWindow,
    ) -> (Vec<u64>, WalkEnd) {
        let bounds = StackBounds {
            low: regs.sp,
            high: t.base + 8 * t.words.len() as u64,
        };
        let mut out = [0u64; 64];
        let mut memory = copy.reader(t, bounds);
        let w = walk(Arch::X86_64, regs, Some(bounds), &mut memory, &mut out);
        (out[..w.depth].to_vec(), w.end)
    }

    #[test]
    fn a_shallow_stack_is_walked_from_one_copy_of_sp_to_top() {
        let (mut t, regs) = target(128, 8, 5);
        let mut copy = StackWindow::new(StackWindow::DEFAULT_WINDOW_BYTES);
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!(frames, vec![0x99, 0x1000, 0x1001, 0x1002, 0x1003, 0x1004]);
        assert_eq!(end, WalkEnd::Complete);
        // One copy, from sp to the top of the stack, not a byte beyond.
        assert_eq!(t.copies, vec![(regs.sp, 126)]);
        assert_eq!(copy.copies(), 1);
    }

    #[test]
    fn frames_beyond_the_window_are_read_with_further_bounded_copies() {
        // 20 frames 32 words (256 bytes) apart, a 1 KiB window.
        let (mut t, regs) = target(1024, 32, 20);
        let mut copy = StackWindow::new(1024);
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!(frames.len(), 21);
        assert_eq!(end, WalkEnd::Complete);
        assert!(t.copies.len() > 1 && t.copies.len() <= 6, "{:?}", t.copies);
        assert_eq!(t.copies[0], (regs.sp, 128));
        for &(addr, words) in &t.copies {
            assert!(words <= 128, "a copy larger than the window: {words}");
            assert!(addr + 8 * words as u64 <= BASE + 8 * 1024);
        }
    }

    #[test]
    fn a_deep_stack_ends_unreadable_after_the_copy_budget() {
        // 100 frames 64 words apart with a 256-byte window: one copy per
        // frame or so, far over the budget.
        let (mut t, regs) = target(7000, 64, 100);
        let mut copy = StackWindow::new(256);
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!(end, WalkEnd::Unreadable);
        assert!(end.is_truncated());
        assert_eq!(t.copies.len(), StackWindow::MAX_COPIES as usize);
        assert_eq!(frames.len(), 1 + StackWindow::MAX_COPIES as usize);
    }

    #[test]
    fn an_unmapped_stack_keeps_the_pc_and_ends_unreadable() {
        let (mut t, regs) = target(128, 8, 5);
        t.mapped = false;
        let mut copy = StackWindow::new(StackWindow::DEFAULT_WINDOW_BYTES);
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!((frames, end), (vec![0x99], WalkEnd::Unreadable));
        assert_eq!(t.copies.len(), 1, "one failed copy, no retries");
    }

    #[test]
    fn a_copy_left_from_an_earlier_walk_is_never_read() {
        let (mut t, regs) = target(128, 8, 5);
        let mut copy = StackWindow::new(StackWindow::DEFAULT_WINDOW_BYTES);
        walk_copied(&mut t, &regs, &mut copy);
        // The same thread's stack is gone on the next stop: the old copy
        // must not stand in for it.
        t.mapped = false;
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!((frames, end), (vec![0x99], WalkEnd::Unreadable));
    }

    #[test]
    fn a_leaf_frame_far_above_sp_is_copied_from_the_record() {
        // fp sits 2 KiB above sp (a large local array): the first copy
        // starts at the record instead of at sp.
        let (mut t, mut regs) = target(1024, 8, 3);
        regs.sp = BASE + 16;
        let far = BASE + 8 * 300;
        t.words[300] = 0;
        t.words[301] = 0x2000;
        regs.fp = far;
        let mut copy = StackWindow::new(1024);
        let (frames, end) = walk_copied(&mut t, &regs, &mut copy);
        assert_eq!((frames, end), (vec![0x99, 0x2000], WalkEnd::Complete));
        assert_eq!(t.copies, vec![(far, 128)]);
    }
}
