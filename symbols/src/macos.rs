//! macOS module discovery for the current process: dyld's image list, with each image's
//! symbol table read from its mapping in memory (see [`crate::macho_image`]).
//!
//! Two rules govern everything here:
//!
//! - The dyld functions take dyld's lock, so they must never run while a sampled thread is
//!   stopped (it may hold that lock). The resolver only runs after the sampler has resumed
//!   every thread; this module does not and cannot check that.
//! - Memory is read in place, and only where dyld mapped the image: the header and load
//!   commands at the load address, and `__LINKEDIT`. Both are read-only mappings. An image
//!   that another thread unloads (`dlclose`) while it is being read would be unmapped under
//!   the reader; dyld offers no lock against that, and images in the shared cache, which are
//!   most of them, are never unmapped.

use std::ffi::{CStr, OsStr};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use mach2::dyld::{
    _dyld_get_image_header, _dyld_get_image_name, _dyld_get_image_vmaddr_slide, _dyld_image_count,
};
use mach2::loader::mach_header;
use object::macho::MH_MAGIC_64;

use crate::macho_image::{ImageMemory, MachImage, HEADER_SIZE};
use crate::resolver::{Module, Source};
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

/// Load address and slide of dyld's image `index`, or `None` when there is no such image
/// (the list shrank since it was counted).
fn image_at(index: u32) -> Option<(u64, u64)> {
    // SAFETY: dyld accepts any index and returns null for one that is out of range.
    let header = unsafe { _dyld_get_image_header(index) };
    if header.is_null() {
        return None;
    }
    // SAFETY: as above; an out-of-range index gives 0.
    let slide = unsafe { _dyld_get_image_vmaddr_slide(index) };
    // The slide is signed only in the C prototype; addresses wrap around, as in dyld.
    Some((header as usize as u64, slide as u64))
}

/// Number of images dyld has loaded.
fn image_count() -> u32 {
    // SAFETY: no preconditions; it reads dyld's image list under dyld's lock.
    unsafe { _dyld_image_count() }
}

/// Whether dyld's image list still matches the modules of a snapshot: same count, and each
/// image at the same load address with the same slide. Allocates nothing and reads no
/// image, so an unchanged list is cheap to confirm.
pub(crate) fn same_images(modules: &[Module]) -> bool {
    let count = image_count();
    usize::try_from(count).is_ok_and(|n| n == modules.len())
        && (0..count).zip(modules).all(|(index, module)| {
            image_at(index).is_some_and(|(header, slide)| {
                module.source == (Source::MachImage { header }) && module.bias == slide
            })
        })
}

/// Snapshot of the current process's images, in dyld's order.
///
/// Every image becomes a module, even one whose load commands cannot be read (it then has
/// no address ranges and no symbols), so that [`same_images`] can compare the snapshot
/// with dyld's list one to one.
pub(crate) fn current_modules() -> Vec<Module> {
    (0..image_count())
        .filter_map(|index| {
            let (header, slide) = image_at(index)?;
            let name = image_name(index);
            let source = Source::MachImage { header };
            Some(match parse_image(header, slide) {
                Some(image) => image.module(name, source),
                None => Module::new(name, source, slide, Vec::new()).with_offset_base(header),
            })
        })
        .collect()
}

/// The file name (last path component) of image `index`; dyld reports full paths.
fn image_name(index: u32) -> Arc<str> {
    // SAFETY: dyld accepts any index and returns null for one that is out of range.
    let name = unsafe { _dyld_get_image_name(index) };
    if name.is_null() {
        return Arc::from("[image]");
    }
    // SAFETY: a non-null name is a NUL-terminated C string owned by dyld, valid while the
    // image is loaded; it is copied before anything else happens.
    let path = unsafe { CStr::from_ptr(name) }.to_bytes();
    Path::new(OsStr::from_bytes(path)).file_name().map_or_else(
        || Arc::from("[image]"),
        |n| Arc::from(&*n.to_string_lossy()),
    )
}

/// Reads the header and load commands of the image dyld loaded at `header`.
fn parse_image(header: u64, slide: u64) -> Option<MachImage> {
    let header_ptr = usize::try_from(header).ok()? as *const mach_header;
    // SAFETY: `header` is what `_dyld_get_image_header` returned for a loaded image: a
    // pointer to its Mach-O header, mapped readable (it starts the image's `__TEXT`) and
    // never written after loading.
    let (magic, sizeofcmds) = unsafe { ((*header_ptr).magic, (*header_ptr).sizeofcmds) };
    if magic != MH_MAGIC_64 {
        return None;
    }
    let commands_end = header.checked_add(HEADER_SIZE + u64::from(sizeofcmds))?;
    // SAFETY: the load commands follow the header inside `__TEXT`; dyld read them from
    // this mapping to load the image, and `__TEXT` is mapped read-only.
    let memory = unsafe { OwnMemory::trusting(header..commands_end) };
    MachImage::parse(&memory, header, slide).ok()
}

/// The symbol table of the image dyld loaded at `header` with `slide`, read from its
/// `__LINKEDIT` in memory; empty when it cannot be read.
pub(crate) fn symbol_table(header: u64, slide: u64) -> SymbolTable {
    let Some(image) = parse_image(header, slide) else {
        return SymbolTable::default();
    };
    let Some(linkedit) = image.linkedit_range() else {
        return SymbolTable::default();
    };
    // SAFETY: dyld mapped the `__LINKEDIT` segment of every loaded image at
    // `vmaddr + slide` (for shared-cache images, the cache's shared `__LINKEDIT`), with
    // its file content, the range `linkedit_range` gives, mapped read-only and never
    // written after loading.
    let memory = unsafe { OwnMemory::trusting(linkedit) };
    image.symbol_table(&memory).unwrap_or_default()
}
