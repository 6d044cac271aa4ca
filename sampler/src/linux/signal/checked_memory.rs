//! Reading the interrupted thread's stack without ever faulting.
//!
//! A mappings snapshot ([`super::stack_regions`]) does not prove memory is mapped when read
//! (coroutine runtimes remap stacks), so reads go through `process_vm_readv` on our own pid,
//! which fails instead of faulting and takes no lock. Each call copies a window, as a call
//! per record would cost more than the walk. Where it is refused ([`probe`]), walks keep only
//! the pc and end [`WalkEnd::Unreadable`].
//!
//! [`WalkEnd::Unreadable`]: crate::walker::WalkEnd::Unreadable

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crate::walker::StackMemory;

/// Words per copy window: one page, enough for most walks.
pub const WINDOW_WORDS: usize = 512;

/// Whether `process_vm_readv` works on our own pid here.
static AVAILABLE: AtomicBool = AtomicBool::new(false);

/// Checks once, outside any handler, whether `process_vm_readv` can read this process.
pub fn probe() -> bool {
    let word = [0x5a5a_5a5a_5a5a_5a5au64; 1];
    let mut out = [0u64; 1];
    // SAFETY: both buffers are valid for 8 bytes.
    let n = unsafe { read_self(word.as_ptr() as u64, out.as_mut_ptr(), 8) };
    let works = n == 8 && out == word;
    AVAILABLE.store(works, Relaxed);
    works
}

/// Copies `[addr, addr + 8 * out.len())` fault-safely; returns the words copied (0 where
/// refused). Async-signal-safe.
pub(crate) fn copy_words(addr: u64, out: &mut [u64]) -> usize {
    if !AVAILABLE.load(Relaxed) || out.is_empty() {
        return 0;
    }
    // SAFETY: `out` is valid for writes of its own length in bytes.
    let bytes = unsafe { read_self(addr, out.as_mut_ptr(), 8 * out.len()) };
    bytes / 8
}

/// Copies the interrupted stack from `base` (sp rounded down) up to `high` into `out`;
/// returns the words copied. Below `own_top`
/// ([`readable_top`](super::own_stack::readable_top)) it reads directly. Async-signal-safe;
/// only on the interrupted thread.
pub(crate) fn copy_stack_top(base: u64, high: u64, own_top: Option<u64>, out: &mut [u64]) -> usize {
    let high = own_top.map_or(high, |top| top.min(high));
    let room = (high.saturating_sub(base) / 8).min(out.len() as u64) as usize;
    if own_top.is_none() {
        return copy_words(base, &mut out[..room]);
    }
    for (i, word) in out[..room].iter_mut().enumerate() {
        // SAFETY: the calling thread's own stack block, mapped while it runs. Volatile: other
        // threads may write it.
        *word = unsafe { (base as *const u64).add(i).read_volatile() };
    }
    room
}

/// [`read_process`] on this process.
///
/// # Safety
/// `out` must be valid for writes of `bytes` bytes.
unsafe fn read_self(addr: u64, out: *mut u64, bytes: usize) -> usize {
    // SAFETY: getpid has no preconditions; the caller's promise for `out`.
    unsafe { read_process(libc::getpid(), addr, out.cast(), bytes) }
}

/// Copies up to `bytes` bytes at `addr` of process `pid` into `out`; returns the bytes copied
/// (up to the first unreadable page, 0 on error). Async-signal-safe.
///
/// # Safety
/// `out` must be valid for writes of `bytes` bytes.
pub(crate) unsafe fn read_process(
    pid: libc::pid_t,
    addr: u64,
    out: *mut u8,
    bytes: usize,
) -> usize {
    let local = libc::iovec {
        iov_base: out.cast(),
        iov_len: bytes,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: bytes,
    };
    // SAFETY: the local iovec is valid for `bytes` (the caller's promise); the kernel checks
    // the remote one. Raw syscall: no libc state.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            pid,
            &local as *const libc::iovec,
            1usize,
            &remote as *const libc::iovec,
            1usize,
            0usize,
        )
    };
    n.max(0) as usize
}

/// A [`StackMemory`] that copies windows of the stack into a slot's buffer. One per walk;
/// async-signal-safe.
pub struct CheckedMemory<'a> {
    window: &'a [Cell<u64>],
    /// Address of `window[0]`.
    base: Cell<u64>,
    /// Words of `window` holding a copy.
    len: Cell<usize>,
    /// The live stack, from the interrupted sp: copies stay inside it.
    low: u64,
    high: u64,
    /// Below this the stack is the thread's own, read directly; `low` when none is.
    own_top: u64,
    /// Copies made, for tests.
    copies: Cell<u32>,
}

impl<'a> CheckedMemory<'a> {
    /// A reader of `[low, high)` copying into `window` (old contents are never read).
    pub fn new(window: &'a mut [u64], low: u64, high: u64) -> CheckedMemory<'a> {
        CheckedMemory {
            window: Cell::from_mut(window).as_slice_of_cells(),
            base: Cell::new(0),
            len: Cell::new(0),
            low,
            high,
            own_top: low,
            copies: Cell::new(0),
        }
    }

    /// Reads records below `top` ([`readable_top`](super::own_stack::readable_top)) directly.
    pub(crate) fn with_own_stack(mut self, top: Option<u64>) -> Self {
        self.own_top = top.map_or(self.low, |top| top.min(self.high));
        self
    }

    pub fn copies(&self) -> u32 {
        self.copies.get()
    }

    fn holds(&self, addr: u64) -> bool {
        let base = self.base.get();
        addr >= base && addr + 16 <= base + 8 * self.len.get() as u64
    }

    /// Copies a window holding the record at `addr`, from sp if that reaches it, else from
    /// the record; never past `high`.
    fn refill(&self, addr: u64) -> bool {
        if !AVAILABLE.load(Relaxed) {
            return false;
        }
        let window_bytes = 8 * self.window.len() as u64;
        let start = if self.low % 8 == 0 && addr + 16 - self.low <= window_bytes {
            self.low
        } else {
            addr
        };
        let end = self.high.min(start.saturating_add(window_bytes));
        let bytes = (end.saturating_sub(start) & !7) as usize;
        if addr + 16 > start + bytes as u64 {
            return false;
        }
        self.copies.set(self.copies.get() + 1);
        // SAFETY: `bytes` fits the window; no reference into it is held.
        let copied = unsafe { read_self(start, self.window.as_ptr() as *mut u64, bytes) };
        self.base.set(start);
        self.len.set(copied / 8);
        self.holds(addr)
    }
}

impl StackMemory for CheckedMemory<'_> {
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        if addr % 8 != 0
            || addr < self.low
            || addr.checked_add(16).is_none_or(|end| end > self.high)
        {
            return None;
        }
        if addr + 16 <= self.own_top {
            let record = addr as *const u64;
            // SAFETY: inside the calling thread's own stack, mapped while it runs; aligned.
            // Volatile: other threads may write it.
            return Some(unsafe { [record.read_volatile(), record.add(1).read_volatile()] });
        }
        if !self.holds(addr) && !self.refill(addr) {
            return None;
        }
        let i = ((addr - self.base.get()) / 8) as usize;
        Some([self.window[i].get(), self.window[i + 1].get()])
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::walker::{walk, Arch, Registers, StackBounds, WalkEnd};

    const PAGE: usize = 4096;

    /// A new private `rw` mapping of `len` bytes; its address.
    pub(in crate::linux::signal) fn map_anonymous(len: usize) -> *mut libc::c_void {
        let (rw, private) = (
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        );
        // SAFETY: an anonymous private mapping anywhere.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), len, rw, private, -1, 0) };
        assert_ne!(at, libc::MAP_FAILED);
        at
    }

    /// A walk across an unmapped page stops there, without a fault.
    #[test]
    fn reads_what_is_mapped_and_stops_where_it_is_not() {
        if crate::emulation::not_checked_under_qemu(
            "reads through process_vm_readv",
            crate::emulation::NO_VM_READV,
        ) {
            return;
        }
        assert!(probe(), "process_vm_readv on our own pid");
        let base = map_anonymous(4 * PAGE) as u64;
        let word = |i: u64| base + 8 * i;
        // Records at words 8 -> 700 -> 1100 (pages 0, 1, 2): [next fp, ret].
        let records = [
            (8u64, word(700), 0x111u64),
            (700, word(1100), 0x222),
            (1100, 0, 0x333),
        ];
        for (at, next, ret) in records {
            // SAFETY: inside our mapping.
            unsafe {
                *(word(at) as *mut u64) = next;
                *(word(at + 1) as *mut u64) = ret;
            }
        }
        let regs = Registers {
            pc: 0x99,
            fp: word(8),
            sp: word(2),
            lr: 0,
        };
        let bounds = StackBounds {
            low: regs.sp,
            high: base + 4 * PAGE as u64,
        };
        let mut window = [0u64; WINDOW_WORDS];
        let mut out = [0u64; 16];
        let mut memory = CheckedMemory::new(&mut window, bounds.low, bounds.high);
        let w = walk(Arch::X86_64, &regs, Some(bounds), &mut memory, &mut out);
        assert_eq!(&out[..w.depth], &[0x99, 0x111, 0x222, 0x333]);
        assert_eq!(w.end, WalkEnd::Complete);
        assert_eq!(memory.copies(), 2, "one window from sp, one for page 2");

        // Unmap page 2 on (the bounds, like a stale snapshot, claim it).
        // SAFETY: our own mapping.
        let rc = unsafe { libc::munmap((base + 2 * PAGE as u64) as *mut _, 2 * PAGE) };
        assert_eq!(rc, 0);
        let mut memory = CheckedMemory::new(&mut window, bounds.low, bounds.high);
        let w = walk(Arch::X86_64, &regs, Some(bounds), &mut memory, &mut out);
        assert_eq!(&out[..w.depth], &[0x99, 0x111, 0x222]);
        assert_eq!(w.end, WalkEnd::Unreadable);
        // SAFETY: our own mapping.
        unsafe { libc::munmap(base as *mut _, 2 * PAGE) };
    }
}
