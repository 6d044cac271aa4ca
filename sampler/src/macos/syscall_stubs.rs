//! Where x86_64's frameless system-call stubs are: the `__TEXT` segment of
//! `libsystem_kernel.dylib`, which holds `mach_msg_trap`,
//! `__psynch_cvwait` and every other trap stub. A thread blocked in one is
//! the common case in wall mode; the sampling loop takes its caller from
//! `[sp]` there (see
//! [`SamplingLoop::with_frameless_stubs`](crate::control::SamplingLoop::with_frameless_stubs)),
//! and only right after a `syscall` instruction, so the framed functions
//! that share the library are walked as usual.

use std::ops::Range;

/// `LC_SEGMENT_64`.
const LC_SEGMENT_64: u32 = 0x19;
/// `MH_MAGIC_64`.
const MH_MAGIC_64: u32 = 0xfeed_facf;
/// `sizeof(struct mach_header_64)`; `ncmds` is at offset 16, `sizeofcmds` at 20.
const HEADER_SIZE: u64 = 32;
/// `sizeof(struct segment_command_64)`: `cmd`, `cmdsize`, `segname[16]` at 8, `vmaddr` at
/// 24, `vmsize` at 32, ...
const SEGMENT_SIZE: u64 = 72;

/// The `__TEXT` range of the library `getpid` lives in
/// (`libsystem_kernel.dylib`), or nothing if it cannot be found. Read
/// once, before sampling, with no thread stopped.
pub(crate) fn ranges() -> Vec<Range<u64>> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let getpid: unsafe extern "C" fn() -> libc::pid_t = libc::getpid;
    // SAFETY: any address may be asked about; `info` is writable.
    if unsafe { libc::dladdr(getpid as *const libc::c_void, info.as_mut_ptr()) } == 0 {
        return Vec::new();
    }
    // SAFETY: `dladdr` succeeded, so it filled `info`.
    let base = unsafe { info.assume_init() }.dli_fbase as u64;
    if base == 0 {
        return Vec::new();
    }
    // SAFETY: `base` is the Mach-O header of a library in the dyld shared
    // cache, which is never unloaded; its load commands follow the header
    // and are mapped read-only with it.
    unsafe { text_of(base) }.map_or_else(Vec::new, |r| vec![r])
}

/// The `[base, base + vmsize)` of the `__TEXT` segment of the 64-bit
/// Mach-O image whose header is at `base`.
///
/// # Safety
///
/// `base` must be the header of a loaded image that stays loaded.
unsafe fn text_of(base: u64) -> Option<Range<u64>> {
    // SAFETY: the caller guarantees the header is mapped; the reads below stay inside it.
    let (magic, ncmds, sizeofcmds) =
        unsafe { (read_u32(base), read_u32(base + 16), read_u32(base + 20)) };
    if magic != MH_MAGIC_64 {
        return None;
    }
    let mut at = base + HEADER_SIZE;
    let end = at + u64::from(sizeofcmds);
    for _ in 0..ncmds {
        if at + 8 > end {
            return None;
        }
        // SAFETY: inside the load commands, which are mapped with the header
        // (`sizeofcmds` bytes after it), checked above.
        let (cmd, cmdsize) = unsafe { (read_u32(at), read_u32(at + 4)) };
        if cmd == LC_SEGMENT_64 && at + SEGMENT_SIZE <= end {
            // SAFETY: a segment command of its full size, checked above.
            let (name, vmsize) = unsafe { (read_bytes::<16>(at + 8), read_u64(at + 32)) };
            if name.starts_with(b"__TEXT\0") {
                return Some(base..base + vmsize);
            }
        }
        if cmdsize == 0 {
            return None;
        }
        at += u64::from(cmdsize);
    }
    None
}

/// # Safety
///
/// `addr..addr + N` must be mapped readable.
unsafe fn read_bytes<const N: usize>(addr: u64) -> [u8; N] {
    // SAFETY: the caller guarantees the bytes are readable; any alignment is fine.
    unsafe { std::ptr::read_unaligned(addr as usize as *const [u8; N]) }
}

/// # Safety
///
/// As [`read_bytes`], for 4 bytes.
unsafe fn read_u32(addr: u64) -> u32 {
    // SAFETY: the caller's guarantee.
    u32::from_le_bytes(unsafe { read_bytes(addr) })
}

/// # Safety
///
/// As [`read_bytes`], for 8 bytes.
unsafe fn read_u64(addr: u64) -> u64 {
    // SAFETY: the caller's guarantee.
    u64::from_le_bytes(unsafe { read_bytes(addr) })
}
