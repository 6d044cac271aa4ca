//! The frame-pointer walker shared by every platform and architecture.
//!
//! x86_64 and aarch64 lay out a frame record the same way: at the frame
//! pointer sits the caller's frame pointer, and 8 bytes above it the return
//! address into the caller. The walker follows that chain from the
//! interrupted registers, and because it runs while the target thread is
//! stopped (inside a signal handler on Linux, between `thread_suspend` and
//! `thread_resume` on macOS) it never allocates, locks or panics: it writes
//! into a caller-provided buffer and reads memory only through a
//! [`StackMemory`] after checking the address against the thread's stack.
//! On Linux that is the handler's own stack ([`DirectMemory`]); on macOS a
//! copy of the stopped thread's stack
//! ([`StackWindow`](crate::stack_window::StackWindow)), never plain loads.

/// The frame-record flavour and code-address encoding of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// x86_64: `rbp` chain, no link register, no pointer authentication.
    X86_64,
    /// aarch64: `x29` chain, the link register `x30` may hold the caller of
    /// a leaf that has not pushed its frame record yet, and code addresses
    /// may carry pointer-authentication bits above `code_mask`.
    Aarch64 {
        /// Bits that make up a user code address; everything above is a
        /// PAC signature. macOS uses 47 bits, Linux 48.
        code_mask: u64,
    },
}

impl Arch {
    /// aarch64 Linux. The mask is a conservative one, not the kernel's:
    /// the low 48 bits, the user address space Linux gives a process
    /// unless it asks `mmap` for addresses above 2^48 (52-bit kernels do
    /// so only on request, and code is never put there). Return addresses
    /// are signed in the bits above the virtual address size: bits 48 to
    /// 54 and 56 to 63 with 48-bit addresses, the `insn_mask` of
    /// 0xff7f_0000_0000_0000 the kernel reports in `NT_ARM_PAC_MASK`.
    /// Clearing every bit from 48 up also clears bit 55, which selects the
    /// kernel half and is 0 in every user address, and the top byte, which
    /// user code addresses never use. Reading the kernel's mask would need
    /// `ptrace` of another thread; the fixed mask costs nothing and differs
    /// from it only for a process that maps code above 2^48.
    pub const AARCH64_LINUX: Arch = Arch::Aarch64 {
        code_mask: (1 << 48) - 1,
    };

    /// aarch64 macOS (arm64 and arm64e): user addresses have 47 bits.
    pub const AARCH64_MACOS: Arch = Arch::Aarch64 {
        code_mask: (1 << 47) - 1,
    };

    /// The architecture this crate was compiled for, with the platform's
    /// user address mask.
    pub const fn host() -> Arch {
        #[cfg(target_arch = "aarch64")]
        {
            #[cfg(target_vendor = "apple")]
            let arch = Arch::AARCH64_MACOS;
            #[cfg(not(target_vendor = "apple"))]
            let arch = Arch::AARCH64_LINUX;
            arch
        }
        #[cfg(not(target_arch = "aarch64"))]
        {
            Arch::X86_64
        }
    }

    /// Removes pointer-authentication bits from a code address.
    #[inline]
    pub const fn strip_code_address(self, addr: u64) -> u64 {
        match self {
            Arch::X86_64 => addr,
            Arch::Aarch64 { code_mask } => addr & code_mask,
        }
    }
}

/// The registers a walk starts from, captured from the stopped thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    /// The interrupted instruction: frame 0, used as is (never minus one).
    pub pc: u64,
    /// The frame pointer (`rbp` / `x29`).
    pub fp: u64,
    /// The stack pointer: nothing below it belongs to a live frame.
    pub sp: u64,
    /// The link register (`x30`) on aarch64; 0 on x86_64.
    pub lr: u64,
}

impl Registers {
    /// The link register as a code address: pointer-authentication bits
    /// stripped on aarch64, where a return address in it is signed as one
    /// saved on the stack is; 0 on x86_64, which has none. What every
    /// walk records beside its frames, whichever way the registers came
    /// (a signal frame, a perf sample, `ptrace`).
    #[inline]
    pub const fn link_register(&self, arch: Arch) -> u64 {
        match arch {
            Arch::X86_64 => 0,
            Arch::Aarch64 { .. } => arch.strip_code_address(self.lr),
        }
    }
}

/// The readable part of a thread's stack that live frames may occupy:
/// `[low, high)`, with `low` no lower than the interrupted stack pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBounds {
    /// Lowest address a frame record may start at.
    pub low: u64,
    /// One past the highest readable byte.
    pub high: u64,
}

impl StackBounds {
    /// Whether the 16-byte frame record at `addr` lies wholly inside.
    #[inline]
    fn holds_record(&self, addr: u64) -> bool {
        addr >= self.low && addr.checked_add(16).is_some_and(|end| end <= self.high)
    }
}

/// Reads frame records. Implementations must be async-signal-safe.
///
/// `&mut self`: a reader may keep state between reads of one walk (the
/// copy window of [`StackWindow`](crate::stack_window::StackWindow)).
pub trait StackMemory {
    /// Returns `[saved frame pointer, return address]` stored at `addr`, or
    /// `None` if the memory cannot be read. The walker only asks for
    /// addresses that passed its bounds and alignment checks.
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]>;
}

/// Reads frame records straight from this process's memory.
///
/// Used only where the walking thread is the walked one: the Linux signal
/// handler walks the stack it runs on, within the live mapping that
/// contains its stack pointer, which cannot be unmapped under it. A thread
/// stopped from outside (macOS) is read by copy instead: its stack can be
/// unmapped while it is still suspendable.
pub struct DirectMemory;

impl StackMemory for DirectMemory {
    #[inline]
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        // SAFETY: the walker checked that `[addr, addr + 16)` lies inside
        // `StackBounds`, which the backend took from the readable mapping
        // holding the stopped thread's stack, and that `addr` is 8-aligned.
        // The thread is stopped, so the frame is not being rewritten under us
        // (a racing write could only produce a bad value, which the walk's
        // checks reject, never an invalid read).
        unsafe { Some(core::ptr::read_volatile(addr as *const [u64; 2])) }
    }
}

/// Why a walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum WalkEnd {
    /// The chain ended: a zero frame pointer or return address, which the
    /// ABIs use to mark the outermost frame. Whether that frame really is
    /// the thread's entry (and not code without frame pointers that left 0
    /// in the register) is decided once symbols are known.
    Complete = 0,
    /// The output buffer (the depth cap) was full.
    DepthCap = 1,
    /// The next frame pointer was not above the previous one (a cycle or a
    /// pointer going down the stack).
    NotIncreasing = 2,
    /// The next frame pointer was not 8-byte aligned.
    Misaligned = 3,
    /// The next frame record lay outside the thread's stack.
    OutOfBounds = 4,
    /// The memory could not be read.
    Unreadable = 5,
    /// No stack bounds were known for the thread, so only frame 0 was kept.
    NoBounds = 6,
    /// Wall mode: the thread was off CPU (blocked in the kernel, or
    /// waiting for a CPU) when it was due, and was not interrupted, because
    /// a signal would make its blocking call fail with `EINTR`. The frames
    /// are the stack it is blocked on, read from outside, or else its last
    /// known stack (or only the blocked system call's pc); the profile
    /// shows them under `[btprof: off-cpu]`.
    Blocked = 7,
}

impl WalkEnd {
    /// Every variant, for iterating counters.
    pub const ALL: [WalkEnd; 8] = [
        WalkEnd::Complete,
        WalkEnd::DepthCap,
        WalkEnd::NotIncreasing,
        WalkEnd::Misaligned,
        WalkEnd::OutOfBounds,
        WalkEnd::Unreadable,
        WalkEnd::NoBounds,
        WalkEnd::Blocked,
    ];

    /// Whether frames may be missing at the root side of the stack.
    #[inline]
    pub const fn is_truncated(self) -> bool {
        !matches!(self, WalkEnd::Complete | WalkEnd::Blocked)
    }

    /// Decodes the `repr(u8)` value; unknown values map to `Unreadable`.
    pub const fn from_u8(v: u8) -> WalkEnd {
        match v {
            0 => WalkEnd::Complete,
            1 => WalkEnd::DepthCap,
            2 => WalkEnd::NotIncreasing,
            3 => WalkEnd::Misaligned,
            4 => WalkEnd::OutOfBounds,
            6 => WalkEnd::NoBounds,
            7 => WalkEnd::Blocked,
            _ => WalkEnd::Unreadable,
        }
    }
}

/// The result of one walk; the addresses themselves are in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Number of addresses written: `out[0]` is the pc, `out[1..depth]`
    /// are return addresses, innermost first, PAC bits stripped.
    pub depth: usize,
    /// The link register (stripped) on aarch64, 0 otherwise. Whether it is
    /// a real caller can only be decided once symbols are known
    /// (`docs/architecture.md`, rule 3), so it is recorded beside the walk rather than in it.
    pub lr: u64,
    /// Why the walk stopped.
    pub end: WalkEnd,
}

/// Walks the frame-pointer chain starting at `regs` into `out`.
///
/// `out[0]` is always the interrupted pc. A frame pointer is followed only
/// if its record lies inside `bounds`, it is 8-byte aligned and it is
/// strictly above the previous one; the walk stops at the first violation
/// and says which in [`Walk::end`]. `None` for `bounds` keeps only frame 0.
///
/// Never allocates, locks or panics: safe to call from a signal handler.
#[inline]
pub fn walk<M: StackMemory>(
    arch: Arch,
    regs: &Registers,
    bounds: Option<StackBounds>,
    memory: &mut M,
    out: &mut [u64],
) -> Walk {
    let lr = regs.link_register(arch);
    let Some(first) = out.first_mut() else {
        return Walk {
            depth: 0,
            lr,
            end: WalkEnd::DepthCap,
        };
    };
    *first = arch.strip_code_address(regs.pc);
    let Some(bounds) = bounds else {
        return Walk {
            depth: 1,
            lr,
            end: WalkEnd::NoBounds,
        };
    };

    let mut depth = 1;
    let mut fp = regs.fp;
    // The first record may sit exactly at the stack pointer.
    let mut floor = bounds.low;
    let end = loop {
        if fp == 0 {
            break WalkEnd::Complete;
        }
        if fp % 8 != 0 {
            break WalkEnd::Misaligned;
        }
        if fp < floor {
            break if fp < bounds.low {
                WalkEnd::OutOfBounds
            } else {
                WalkEnd::NotIncreasing
            };
        }
        if !bounds.holds_record(fp) {
            break WalkEnd::OutOfBounds;
        }
        let Some([next_fp, ret]) = memory.read_record(fp) else {
            break WalkEnd::Unreadable;
        };
        let ret = arch.strip_code_address(ret);
        if ret == 0 {
            break WalkEnd::Complete;
        }
        if depth == out.len() {
            break WalkEnd::DepthCap;
        }
        out[depth] = ret;
        depth += 1;
        // Strictly above: the next record must start past this one.
        floor = fp + 1;
        fp = next_fp;
    };
    Walk { depth, lr, end }
}

/// Walks the calling thread's own frame-pointer chain up to `stack_high`,
/// the top of the thread's stack.
///
/// A thread cannot be stopped from outside by itself (Mach's
/// `thread_suspend` of the calling thread would suspend it for good), and
/// it needs no stopping: the frames above this call do not change while
/// it walks them, and they lie on its own mapped stack, so they are read
/// directly, within `[its stack pointer, stack_high)`.
///
/// The chain starts at the frame the frame pointer holds here: this
/// function's, or its caller's where the compiler sets this function's
/// frame up later, only on the path that needs it (shrink-wrapping). So
/// `out[0]` is the return address into the caller, or into the caller's
/// caller; every frame above is walked either way.
#[inline(never)]
pub fn walk_calling_thread(stack_high: u64, out: &mut [u64]) -> Walk {
    let (fp, sp): (u64, u64);
    // SAFETY: copies the frame pointer and the stack pointer into locals;
    // no memory is touched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {fp}, rbp",
            "mov {sp}, rsp",
            fp = out(reg) fp,
            sp = out(reg) sp,
            options(nomem, nostack, preserves_flags)
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "mov {fp}, x29",
            "mov {sp}, sp",
            fp = out(reg) fp,
            sp = out(reg) sp,
            options(nomem, nostack, preserves_flags)
        );
    }
    let arch = Arch::host();
    let bounds = StackBounds {
        low: sp,
        high: stack_high,
    };
    let mut memory = DirectMemory;
    // The first frame record: the next frame pointer and the return
    // address into the function that made this frame's call.
    let record = (fp % 8 == 0 && bounds.holds_record(fp))
        .then(|| memory.read_record(fp))
        .flatten();
    let Some([caller_fp, ret]) = record else {
        return Walk {
            depth: 0,
            lr: 0,
            end: WalkEnd::OutOfBounds,
        };
    };
    let regs = Registers {
        pc: ret,
        fp: caller_fp,
        sp: fp + 16,
        lr: 0,
    };
    walk(arch, &regs, Some(bounds), &mut memory, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic stack: a byte buffer standing at a chosen address.
    struct FakeStack {
        base: u64,
        words: Vec<u64>,
    }

    impl FakeStack {
        fn new(base: u64, len_words: usize) -> Self {
            FakeStack {
                base,
                words: vec![0; len_words],
            }
        }
        fn addr(&self, word: usize) -> u64 {
            self.base + 8 * word as u64
        }
        /// Writes a frame record at word index `at`.
        fn record(&mut self, at: usize, next_fp: u64, ret: u64) {
            self.words[at] = next_fp;
            self.words[at + 1] = ret;
        }
        fn bounds_from(&self, sp: u64) -> StackBounds {
            StackBounds {
                low: sp,
                high: self.base + 8 * self.words.len() as u64,
            }
        }
    }

    impl StackMemory for &FakeStack {
        fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
            assert_eq!(addr % 8, 0, "walker asked for a misaligned read");
            let i = usize::try_from((addr - self.base) / 8).ok()?;
            Some([*self.words.get(i)?, *self.words.get(i + 1)?])
        }
    }

    const BASE: u64 = 0x7fff_0000_0000;

    /// leaf pc, then three frames: word 4 -> word 10 -> word 20 -> end.
    fn three_frames() -> (FakeStack, Registers) {
        let mut s = FakeStack::new(BASE, 64);
        let (f1, f2, f3) = (s.addr(4), s.addr(10), s.addr(20));
        s.record(4, f2, 0x1111);
        s.record(10, f3, 0x2222);
        s.record(20, 0, 0x3333);
        let regs = Registers {
            pc: 0x1000,
            fp: f1,
            sp: s.addr(2),
            lr: 0,
        };
        (s, regs)
    }

    fn run(arch: Arch, s: &FakeStack, regs: &Registers, cap: usize) -> (Vec<u64>, Walk) {
        let mut out = vec![0; cap];
        let w = walk(arch, regs, Some(s.bounds_from(regs.sp)), &mut &*s, &mut out);
        out.truncate(w.depth);
        (out, w)
    }

    #[test]
    fn valid_chain_is_complete_with_pc_first() {
        let (s, regs) = three_frames();
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
        assert_eq!(w.end, WalkEnd::Complete);
        assert!(!w.end.is_truncated());
        assert_eq!(w.lr, 0);
    }

    #[test]
    fn cycle_stops_as_not_increasing() {
        let (mut s, regs) = three_frames();
        let f1 = s.addr(4);
        s.record(20, f1, 0x3333); // top frame points back to the first
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
        assert_eq!(w.end, WalkEnd::NotIncreasing);
        assert!(w.end.is_truncated());
    }

    /// [`three_frames`] with the third record linking to `link(stack)`:
    /// the walk keeps the three frames and ends with `end`.
    fn third_link_stops(link: impl Fn(&FakeStack) -> u64, end: WalkEnd) {
        let (mut s, regs) = three_frames();
        let next = link(&s);
        s.record(10, next, 0x2222);
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222]);
        assert_eq!(w.end, end);
    }

    #[test]
    fn self_loop_stops() {
        third_link_stops(|s| s.addr(10), WalkEnd::NotIncreasing);
    }

    #[test]
    fn pointer_going_down_stops() {
        // Above sp but below the current record at 10.
        third_link_stops(|s| s.addr(6), WalkEnd::NotIncreasing);
    }

    #[test]
    fn misaligned_pointer_stops() {
        third_link_stops(|s| s.addr(20) + 4, WalkEnd::Misaligned);
    }

    #[test]
    fn pointer_outside_stack_stops_without_reading() {
        // Far above the stack.
        third_link_stops(|_| BASE + 0x10_0000, WalkEnd::OutOfBounds);

        // A first frame pointer below sp is outside the live stack too.
        let (s, mut regs) = three_frames();
        regs.fp = s.addr(0);
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000]);
        assert_eq!(w.end, WalkEnd::OutOfBounds);
    }

    #[test]
    fn record_straddling_the_top_is_out_of_bounds() {
        let (mut s, regs) = three_frames();
        let last = s.addr(63); // record would need words 63 and 64
        s.record(20, last, 0x3333);
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
        assert_eq!(w.end, WalkEnd::OutOfBounds);
    }

    #[test]
    fn depth_cap_marks_truncation() {
        let (s, regs) = three_frames();
        let (frames, w) = run(Arch::X86_64, &s, &regs, 2);
        assert_eq!(frames, vec![0x1000, 0x1111]);
        assert_eq!(w.end, WalkEnd::DepthCap);
        assert!(w.end.is_truncated());

        // Exactly enough room is not truncation.
        let (frames, w) = run(Arch::X86_64, &s, &regs, 4);
        assert_eq!(frames.len(), 4);
        assert_eq!(w.end, WalkEnd::Complete);
    }

    #[test]
    fn zero_return_address_ends_the_chain() {
        let (mut s, regs) = three_frames();
        let f3 = s.addr(20);
        s.record(10, f3, 0); // a runtime's outermost frame
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111]);
        assert_eq!(w.end, WalkEnd::Complete);
    }

    #[test]
    fn no_bounds_keeps_only_the_pc() {
        let (s, regs) = three_frames();
        let mut out = [0u64; 8];
        let w = walk(Arch::X86_64, &regs, None, &mut &s, &mut out);
        assert_eq!((w.depth, out[0], w.end), (1, 0x1000, WalkEnd::NoBounds));
    }

    #[test]
    fn zero_frame_pointer_is_a_complete_leaf() {
        let (s, mut regs) = three_frames();
        regs.fp = 0;
        let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000]);
        assert_eq!(w.end, WalkEnd::Complete);
    }

    const MAC_ARM: Arch = Arch::Aarch64 {
        code_mask: (1 << 47) - 1,
    };
    /// A plausible PAC signature in the bits above the 47-bit address.
    const PAC: u64 = 0x002d_8000_0000_0000;

    #[test]
    fn aarch64_strips_pac_from_pc_lr_and_return_addresses() {
        let (mut s, mut regs) = three_frames();
        let (f2, f3) = (s.addr(10), s.addr(20));
        s.record(4, f2, 0x1111 | PAC);
        s.record(10, f3, 0x2222 | PAC);
        s.record(20, 0, 0x3333 | (PAC << 1));
        regs.pc = 0x1000 | PAC;
        regs.lr = 0x1111 | PAC;
        let (frames, w) = run(MAC_ARM, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
        assert_eq!(w.lr, 0x1111);
        assert_eq!(w.end, WalkEnd::Complete);
    }

    /// Linux signs return addresses in bits 48 to 54 and 56 to 63 (with
    /// 48-bit addresses): every one of them is stripped, from the pc, the
    /// link register and the saved return addresses.
    #[test]
    fn aarch64_linux_strips_every_signature_bit() {
        let (mut s, mut regs) = three_frames();
        let (f2, f3) = (s.addr(10), s.addr(20));
        let all_signature_bits = 0xff7f_0000_0000_0000u64;
        s.record(4, f2, 0x1111 | all_signature_bits);
        s.record(10, f3, 0x2222 | 0x3a17_0000_0000_0000);
        s.record(20, 0, 0x3333 | 0x0001_0000_0000_0000);
        regs.pc = 0x1000;
        regs.lr = 0x4444 | 0x8000_0000_0000_0000;
        let (frames, w) = run(Arch::AARCH64_LINUX, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
        assert_eq!(w.lr, 0x4444);
        assert_eq!(regs.link_register(Arch::AARCH64_LINUX), 0x4444);
        assert_eq!(regs.link_register(Arch::X86_64), 0);
        // The highest user code address keeps all its bits.
        let top = (1u64 << 48) - 4;
        assert_eq!(Arch::AARCH64_LINUX.strip_code_address(top | PAC), top);
    }

    #[test]
    fn aarch64_pac_only_return_address_counts_as_zero() {
        let (mut s, regs) = three_frames();
        let f3 = s.addr(20);
        s.record(10, f3, PAC); // signed null: end of chain
        let (frames, w) = run(MAC_ARM, &s, &regs, 32);
        assert_eq!(frames, vec![0x1000, 0x1111]);
        assert_eq!(w.end, WalkEnd::Complete);
    }

    #[test]
    fn aarch64_cycle_and_bounds_rules_match_x86_64() {
        let (mut s, regs) = three_frames();
        let f1 = s.addr(4);
        s.record(20, f1, 0x3333);
        let (_, w) = run(MAC_ARM, &s, &regs, 32);
        assert_eq!(w.end, WalkEnd::NotIncreasing);
        s.record(20, BASE - 16, 0x3333); // below sp: outside the live stack
        let (_, w) = run(MAC_ARM, &s, &regs, 32);
        assert_eq!(w.end, WalkEnd::OutOfBounds);
    }

    #[test]
    fn x86_64_does_not_touch_high_bits() {
        assert_eq!(Arch::X86_64.strip_code_address(PAC | 5), PAC | 5);
    }

    #[test]
    fn empty_buffer_is_a_depth_cap() {
        let (s, regs) = three_frames();
        let w = walk(Arch::X86_64, &regs, None, &mut &s, &mut []);
        assert_eq!((w.depth, w.end), (0, WalkEnd::DepthCap));
    }

    #[test]
    fn walk_end_round_trips_through_u8() {
        for end in WalkEnd::ALL {
            assert_eq!(WalkEnd::from_u8(end as u8), end);
        }
    }

    /// The top of the calling thread's stack.
    #[cfg(target_vendor = "apple")]
    fn own_stack_top() -> u64 {
        // SAFETY: the calling thread's own pthread; on macOS the stack
        // address is the stack's highest address.
        unsafe { libc::pthread_get_stackaddr_np(libc::pthread_self()) as u64 }
    }

    /// The top of the calling thread's stack.
    #[cfg(target_os = "linux")]
    fn own_stack_top() -> u64 {
        // SAFETY: an attribute object filled in for the calling thread,
        // read and destroyed.
        unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let (mut addr, mut size) = (std::ptr::null_mut(), 0);
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            addr as u64 + size as u64
        }
    }

    // Each does something after its call, so that the call is not made a
    // tail call: the caller's frame must still be there to be walked.
    #[inline(never)]
    fn calls_the_walk(top: u64, out: &mut [u64]) -> Walk {
        let walk = walk_calling_thread(top, out);
        std::hint::black_box(out.as_ptr());
        walk
    }

    #[inline(never)]
    fn one_frame_up(top: u64, out: &mut [u64]) -> Walk {
        let walk = calls_the_walk(top, out);
        std::hint::black_box(out.as_ptr());
        walk
    }

    #[test]
    fn the_calling_thread_walks_its_own_callers() {
        let mut out = [0u64; 64];
        let walk = one_frame_up(own_stack_top(), &mut out);
        // Frame 0 returns into calls_the_walk (or, where the walk's own
        // frame was not set up yet, into one_frame_up); one_frame_up's
        // caller, this test, comes next, and the chain goes on up to the
        // thread's start.
        let starts = [
            (calls_the_walk as *const () as u64, "calls_the_walk"),
            (one_frame_up as *const () as u64, "one_frame_up"),
            (
                the_calling_thread_walks_its_own_callers as *const () as u64,
                "test",
            ),
        ];
        // The function an address returns into: the known start nearest
        // below it (these are small, and the test's call is near its top).
        let owner = |addr: u64| {
            starts
                .iter()
                .filter(|&&(start, _)| start < addr && addr - start < 4096)
                .max_by_key(|&&(start, _)| start)
                .map_or("?", |&(_, name)| name)
        };
        let frames = &out[..walk.depth];
        let names: Vec<&str> = frames.iter().map(|&a| owner(a)).collect();
        let report = format!("{frames:#x?} {names:?} {starts:#x?}");
        let from = usize::from(names.first() == Some(&"calls_the_walk"));
        assert_eq!(
            names.get(from..from + 2),
            Some(&["one_frame_up", "test"][..]),
            "{report}"
        );
        assert!(walk.depth >= from + 3, "{report}");
    }
}
