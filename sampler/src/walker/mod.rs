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
mod tests;
