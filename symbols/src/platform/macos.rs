//! macOS module discovery for the current process: dyld's image list, with each image's
//! symbol table read from its mapping in memory (see [`super::macho_image`]).
//!
//! Two rules govern everything here:
//!
//! - The dyld functions take dyld's lock, so they must never run while a sampled thread is
//!   stopped (it may hold that lock). The resolver only runs after the sampler has resumed
//!   every thread; this module does not and cannot check that.
//! - Memory is read only where dyld mapped the image: the header and load commands at the
//!   load address, and `__LINKEDIT`. An image that another thread unloads (`dlclose`) while
//!   it is being read would be unmapped under the reader, and dyld offers no lock against
//!   that. So the header and load commands of every listed image are copied with
//!   `mach_vm_read_overwrite` (an unmapped page is an error code, not a crash), and a lazily
//!   loaded symbol table is read in place only while the image is pinned with
//!   `dlopen(RTLD_NOLOAD)` and confirmed to be still loaded at the same address. An image
//!   that cannot be pinned (no path, or `dlopen` refuses it: the main executable under some
//!   launch paths, or an image being unloaded right now) has its symbol and string tables
//!   copied with `mach_vm_read_overwrite` too, since nothing keeps it mapped between the
//!   check that it is loaded and the read. Images in the shared cache, which are most of
//!   them, are never unmapped.

use std::ffi::{c_void, CStr, CString, OsStr};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mach2::dyld::{_dyld_get_image_header, _dyld_image_count};

use super::macho_image::{ImageMemory, MachImage};
use super::{LoadedModule, Source};
use crate::SymbolTable;

/// This process's memory, restricted to one range the caller vouched for.
struct OwnMemory {
    range: Range<u64>,
}

impl OwnMemory {
    /// # Safety
    ///
    /// Every byte of `range` must be mapped readable and must not change for as long as the
    /// returned value exists.
    unsafe fn trusting(range: Range<u64>) -> OwnMemory {
        OwnMemory { range }
    }
}

impl ImageMemory for OwnMemory {
    fn read(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let end = addr.checked_add(len)?;
        if addr < self.range.start || end > self.range.end {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let ptr = usize::try_from(addr).ok()? as *const u8;
        if ptr.is_null() || isize::try_from(len).is_err() {
            return None;
        }
        // SAFETY: `addr..addr + len` lies inside the range that `trusting`'s caller
        // guaranteed to be mapped readable and unchanging while `self` exists, and the
        // returned slice borrows `self`. The pointer is non-null, a `u8` slice needs no
        // alignment, and `len` fits in `isize`.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// Load address of dyld's image `index`, or `None` when there is no such image (the list
/// shrank since it was counted).
///
/// Only the header is taken from dyld's indexed list. The slide is derived from the header
/// itself ([`MachImage::parse_at`]) and the path from `dladdr` on the header, because three
/// separate indexed calls (`_dyld_get_image_header`, `_dyld_get_image_vmaddr_slide`,
/// `_dyld_get_image_name`) can pair one image's header with another's slide or name when a
/// `dlclose` on another thread shifts the list between them.
fn image_header(index: u32) -> Option<u64> {
    // SAFETY: dyld accepts any index and returns null for one that is out of range.
    let header = unsafe { _dyld_get_image_header(index) };
    (!header.is_null()).then_some(header as usize as u64)
}

/// Number of images dyld has loaded.
fn image_count() -> u32 {
    // SAFETY: no preconditions; it reads dyld's image list under dyld's lock.
    unsafe { _dyld_image_count() }
}

/// Whether dyld's image list still matches the modules of a snapshot: same count, and each
/// image at the same load address. Allocates nothing and reads no image, so an unchanged
/// list is cheap to confirm. (An image's slide follows from its header, so equal headers
/// mean equal slides.)
pub(crate) fn same_images(modules: &[LoadedModule]) -> bool {
    let count = image_count();
    usize::try_from(count).is_ok_and(|n| n == modules.len())
        && (0..count).zip(modules).all(|(index, module)| {
            image_header(index)
                .is_some_and(|header| module.source == (Source::MachImage { header }))
        })
}

/// Whether `header` is still the load address of one of dyld's images.
fn still_loaded(header: u64) -> bool {
    (0..image_count()).any(|index| image_header(index) == Some(header))
}

/// Snapshot of the current process's images, in dyld's order.
///
/// Every image becomes a module, even one whose load commands cannot be read (it then has
/// no address ranges and no symbols), so that [`same_images`] can compare the snapshot
/// with dyld's list one to one.
pub(crate) fn current_modules() -> Vec<LoadedModule> {
    (0..image_count())
        .filter_map(|index| {
            let header = image_header(index)?;
            let path = image_path(header);
            let name = path.as_deref().and_then(Path::file_name).map_or_else(
                || Arc::from("[image]"),
                |n| Arc::from(&*n.to_string_lossy()),
            );
            let source = Source::MachImage { header };
            let module = match parse_image(header) {
                Some(image) => image.module(name, source),
                None => LoadedModule::new(name, source, 0, Vec::new()).with_offset_base(header),
            };
            Some(module.with_path(path))
        })
        .collect()
}

/// The path of the image whose header is at `header`, from `dladdr` (which finds the image
/// by address, so the path cannot belong to another image); `None` when no image contains
/// that address any more.
fn image_path(header: u64) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: `dladdr` only inspects the address and fills `info`; it returns 0 when no
    // image contains the address.
    let found = unsafe { libc::dladdr(header as usize as *const c_void, info.as_mut_ptr()) };
    if found == 0 {
        return None;
    }
    // SAFETY: `dladdr` succeeded, so it initialised `info` (it was zeroed before anyway).
    let info = unsafe { info.assume_init() };
    if info.dli_fbase as usize as u64 != header || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-null `dli_fname` is a NUL-terminated path owned by dyld, valid while the
    // image is loaded; it is copied at once.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    Some(PathBuf::from(OsStr::from_bytes(path)))
}

/// Reads the header and load commands of the image dyld loaded at `header`, deriving the
/// slide from the header.
///
/// The image may be unloaded by a `dlclose` on another thread at any moment (it is not
/// pinned here: listing every image must not take a reference to each), so its memory is
/// only ever copied with `mach_vm_read_overwrite`, which returns an error for an unmapped
/// page where a plain load would crash the process ([`MachImage::parse_copied`]).
fn parse_image(header: u64) -> Option<MachImage> {
    MachImage::parse_copied(copy_own_memory, header).ok()
}

/// Copies `out.len()` bytes of this process's memory at `addr` into `out`; `false` when any
/// of it is not mapped readable. A system call, never a plain load, so an address that was
/// just unmapped is an error code, not a crash.
fn copy_own_memory(addr: u64, out: &mut [u8]) -> bool {
    let size = out.len() as u64;
    let mut copied = 0;
    // SAFETY: `out` is writable for `size` bytes; the kernel copies this task's
    // `[addr, addr + size)` into it, or fails without touching it through a load.
    let kr = unsafe {
        mach2::vm::mach_vm_read_overwrite(
            mach2::traps::mach_task_self(),
            addr,
            size,
            out.as_mut_ptr() as u64,
            &mut copied,
        )
    };
    kr == mach2::kern_return::KERN_SUCCESS && copied == size
}

/// Keeps an image loaded while its `__LINKEDIT` is read: `dlopen(path, RTLD_NOLOAD)` takes a
/// reference only if the image is loaded, and `dlclose` gives it back.
struct Pin(*mut c_void);

impl Pin {
    fn new(path: &Path) -> Option<Pin> {
        let path = CString::new(path.as_os_str().as_bytes()).ok()?;
        // SAFETY: `path` is a valid C string; with `RTLD_NOLOAD` dyld loads nothing and runs
        // no initialiser, it only returns (and references) an image that is already loaded.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        (!handle.is_null()).then_some(Pin(handle))
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a handle `dlopen` returned and that is closed only here.
        unsafe { libc::dlclose(self.0) };
    }
}

/// The symbol table of the image dyld loaded at `header` (at `path`), read from its
/// `__LINKEDIT` in memory; empty when it cannot be read or the image is no longer loaded.
///
/// Tables are loaded lazily, possibly long after the snapshot was taken, so the image is
/// first pinned (see [`Pin`]) and confirmed to still be at `header`: an image unloaded since
/// the snapshot is never read. A pinned image's `__LINKEDIT` is read in place. One that
/// cannot be pinned (no path, or `dlopen(RTLD_NOLOAD)` refused it) may be unloaded between
/// that check and the read, so its tables are copied with `mach_vm_read_overwrite`
/// ([`MachImage::symbol_table_copied`]): unmapped meanwhile, it gets an empty table, and the
/// process does not crash.
pub(crate) fn symbol_table(header: u64, path: Option<&Path>) -> SymbolTable {
    let pin = path.and_then(Pin::new);
    if !still_loaded(header) || path.is_some_and(|p| image_path(header).as_deref() != Some(p)) {
        return SymbolTable::default();
    }
    let Some(image) = parse_image(header) else {
        return SymbolTable::default();
    };
    if pin.is_none() {
        return image
            .symbol_table_copied(copy_own_memory)
            .unwrap_or_default();
    }
    let Some(linkedit) = image.linkedit_range() else {
        return SymbolTable::default();
    };
    // SAFETY: dyld mapped the `__LINKEDIT` segment of every loaded image at
    // `vmaddr + slide` (for shared-cache images, the cache's shared `__LINKEDIT`), with
    // its file content, the range `linkedit_range` gives, mapped read-only and never
    // written after loading. The image was confirmed loaded above and `pin` holds a
    // reference to it until this function returns, so dyld cannot unmap it while it is
    // read.
    let memory = unsafe { OwnMemory::trusting(linkedit) };
    let table = image.symbol_table(&memory).unwrap_or_default();
    drop(pin);
    table
}
