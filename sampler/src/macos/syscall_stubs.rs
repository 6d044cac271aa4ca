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
    // SAFETY: the caller guarantees a mapped header.
    let header = unsafe { &*(base as *const libc::mach_header_64) };
    if header.magic != libc::MH_MAGIC_64 {
        return None;
    }
    let mut at = base + std::mem::size_of::<libc::mach_header_64>() as u64;
    let end = at + u64::from(header.sizeofcmds);
    for _ in 0..header.ncmds {
        if at + 8 > end {
            return None;
        }
        // SAFETY: inside the load commands, which are mapped with the
        // header (`sizeofcmds` bytes).
        let command = unsafe { &*(at as *const libc::load_command) };
        if command.cmd == LC_SEGMENT_64
            && at + std::mem::size_of::<libc::segment_command_64>() as u64 <= end
        {
            // SAFETY: a segment command of its full size, checked above.
            let segment = unsafe { &*(at as *const libc::segment_command_64) };
            let name = segment.segname.map(|c| c as u8);
            if name.starts_with(b"__TEXT\0") {
                return Some(base..base + segment.vmsize);
            }
        }
        if command.cmdsize == 0 {
            return None;
        }
        at += u64::from(command.cmdsize);
    }
    None
}
