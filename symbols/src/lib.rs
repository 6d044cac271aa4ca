//! Loaded-module discovery, symbol tables and a cached address-to-name resolver for btprof.
//!
//! The pieces, from the bottom up:
//!
//! - [`demangle()`]: Rust-aware demangling (without the per-build hash).
//! - [`SymbolTable`]: a format-independent sorted array of function symbols of one module,
//!   built from an `object::File` (ELF files) or from plain entries, searched by binary
//!   search.
//! - [`MachImage`]: a 64-bit Mach-O image read where dyld mapped it, through an
//!   [`ImageMemory`]; platform-independent, so it is tested on Linux with fixtures laid out
//!   in a [`MappedBuffer`].
//! - [`Resolver`]: the modules of the current process (on Linux from `dl_iterate_phdr`, on
//!   macOS from dyld's image list), their symbol tables loaded lazily on first use, and a
//!   per-address cache.
//!
//! Nothing here is meant to run while a sampled thread is stopped: resolving allocates,
//! reads files and takes the dynamic loader's lock. Samplers record raw addresses and
//! resolve them afterwards.

// On other platforms the process-module sources (ELF files, the vDSO, dyld images) are
// never constructed; the format-independent parts still build (and are tested) everywhere.
#![cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]

use std::sync::Arc;

mod demangle;
#[cfg(target_os = "linux")]
mod linux;
mod macho_image;
#[cfg(target_os = "macos")]
mod macos;
mod resolver;
mod table;

pub use demangle::demangle;
pub use macho_image::{ImageMemory, MachImage, MachOError, MappedBuffer};
pub use resolver::Resolver;
pub use table::SymbolTable;

/// One resolved code address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Demangled function name without the Rust hash suffix (rustc_demangle, `{:#}`),
    /// or `module+0xoffset` (module = file name, e.g. `libc.so.6+0x1234`) when no symbol
    /// covers the address, or `[unknown]+0xADDR` when not even a module does. Never empty.
    pub name: Arc<str>,
    /// Start address (runtime, i.e. after load bias) of the function containing the address,
    /// when known. Used by callers to decide whether two addresses are in the same function.
    pub function_start: Option<u64>,
    /// File name of the module (last path component), when known.
    pub module: Option<Arc<str>>,
}
