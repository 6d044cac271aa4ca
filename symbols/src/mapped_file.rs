//! Read-only file contents for the symbol readers: mapped rather than read, where possible.
//! Also large zero-filled buffers that are mostly never written ([`FileBytes::zeroed`]).
//!
//! A module's file is often far larger than what the resolver needs from it (a debug build's
//! executable is tens of megabytes of DWARF around a symbol table of a few hundred
//! kilobytes). Reading it whole costs its full size in time and memory at the first dump;
//! mapping it costs only the pages the parsers touch. Where mapping fails the file is read.

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::Path;

/// The bytes of a file, mapped (`MAP_PRIVATE`, read-only) or read into memory; or of an
/// anonymous mapping filled once and read-only after.
pub(crate) enum FileBytes {
    #[cfg(unix)]
    Mapped {
        ptr: *const u8,
        len: usize,
    },
    Read(Vec<u8>),
}

// SAFETY: the mapping is read-only (an anonymous one is written only by `zeroed`, before this
// value exists) and private to this value, which frees it exactly once (in
// `Drop`); sharing or sending the pointer is like sharing or sending a `&[u8]`.
unsafe impl Send for FileBytes {}
// SAFETY: as above: only shared reads happen through the pointer.
unsafe impl Sync for FileBytes {}

impl FileBytes {
    /// Opens `path` and maps it; reads it when it is empty or cannot be mapped.
    ///
    /// A mapped file that another process truncates while it is mapped would fault on the
    /// next access to the lost pages, as in every symboliser that maps files (perf, gdb,
    /// samply). Executables and libraries are replaced by rename, not rewritten in place,
    /// which keeps the mapped (old) file intact.
    pub(crate) fn open(path: &Path) -> io::Result<FileBytes> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len()).map_err(io::Error::other)?;
        #[cfg(unix)]
        if len != 0 {
            use std::os::fd::AsRawFd;
            // A private read-only mapping of the file we opened for reading.
            let mapped = map(len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd());
            if let Some(ptr) = mapped {
                return Ok(FileBytes::Mapped {
                    ptr: ptr.cast_const(),
                    len,
                });
            }
        }
        std::fs::read(path).map(FileBytes::Read)
    }

    /// `len` bytes, zero except where `fill` writes, in fresh anonymous memory: pages `fill`
    /// does not touch are never materialised, so a large buffer with a few things written
    /// into it costs those few pages (a `.debug_info` rebuilt with only some of its units).
    /// Where mapping fails the zeros are allocated.
    pub(crate) fn zeroed(len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<FileBytes> {
        #[cfg(unix)]
        if len != 0 {
            // A private anonymous mapping: zeros, written only here.
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let mapped = map(len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1);
            if let Some(ptr) = mapped {
                // SAFETY: `ptr..ptr + len` is the readable and writable mapping just made,
                // zero-filled by the kernel, and nothing else refers to it yet.
                fill(unsafe { std::slice::from_raw_parts_mut(ptr, len) });
                return Ok(FileBytes::Mapped {
                    ptr: ptr.cast_const(),
                    len,
                });
            }
        }
        let mut bytes = vec![0; len];
        fill(&mut bytes);
        Ok(FileBytes::Read(bytes))
    }
}

/// A fresh mapping of `len` bytes at an address the kernel picks, as
/// `prot`, `flags` and `fd` (from its start) ask; `None` where the kernel
/// refuses it. Both kinds of [`FileBytes::Mapped`] are made here.
#[cfg(unix)]
fn map(len: usize, prot: libc::c_int, flags: libc::c_int, fd: libc::c_int) -> Option<*mut u8> {
    // SAFETY: without MAP_FIXED the kernel picks an address no other memory uses, so the
    // mapping replaces nothing; the result is checked against MAP_FAILED.
    let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    (ptr != libc::MAP_FAILED).then(|| ptr.cast::<u8>())
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            #[cfg(unix)]
            // SAFETY: `ptr..ptr + len` is the live mapping made in `open` or `zeroed`, readable and unmapped
            // only in `Drop`, so it outlives this borrow of `self`.
            FileBytes::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            FileBytes::Read(bytes) => bytes,
        }
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let FileBytes::Mapped { ptr, len } = *self {
            // SAFETY: the mapping made in `open` or `zeroed`, unmapped once, after its last borrow ended.
            unsafe { libc::munmap(ptr.cast_mut().cast(), len) };
        }
    }
}
