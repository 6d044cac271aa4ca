//! Loaded-module discovery, symbol tables, DWARF inline frames and a cached
//! address-to-name resolver for btprof.
//!
//! The pieces, from the bottom up (each layer imports only the ones below it):
//!
//! - `platform` — which modules are loaded and where their bytes are: `dl_iterate_phdr` and
//!   the vDSO on Linux, dyld's image list on macOS, and [`MachImage`], a 64-bit Mach-O image
//!   read where dyld mapped it through an [`ImageMemory`] (platform-independent, tested on
//!   Linux with fixtures laid out in a [`MappedBuffer`]).
//! - [`SymbolTable`] — a format-independent sorted array of one module's functions, named
//!   or known only by their extent, searched by binary search.
//! - `eh_frame` — function extents from `.eh_frame` FDEs, for code no symbol names.
//! - `debug_files` — separate debug files: build-id directories, `.gnu_debuglink`,
//!   debuginfod's local cache, MiniDebugInfo, `.dSYM` bundles ([`DebugSearch`]).
//! - `dwarf` — inline chains and file:line through `addr2line`, loaded lazily.
//! - [`demangle()`] — Rust (without the hash), C++ (`cpp_demangle`), and Swift through the
//!   runtime's `swift_demangle` when `libswiftCore` is loaded.
//! - [`Resolver`] — the modules of a snapshot, each module's symbols loaded on first use,
//!   and per-address caches: [`Resolver::resolve`] gives one [`Symbol`] per address,
//!   [`Resolver::resolve_frames`] its inline chain as [`Frame`]s.
//!
//! Nothing here is meant to run while a sampled thread is stopped: resolving allocates,
//! reads files and takes the dynamic loader's lock. Samplers record raw addresses and
//! resolve them afterwards.

// On other platforms the process-module sources (ELF files, the vDSO, dyld images) are
// never constructed; the format-independent parts still build (and are tested) everywhere.
#![cfg_attr(not(any(target_os = "linux", target_os = "macos")), allow(dead_code))]

use std::sync::Arc;

mod debug_files;
mod demangle;
mod dwarf;
mod eh_frame;
mod elf_symbols;
mod mapped_file;
mod module;
mod platform;
mod resolver;
mod table;

pub use debug_files::DebugSearch;
pub use demangle::demangle;
pub use platform::macho_image::{ImageMemory, MachImage, MachOError, MappedBuffer};
pub use resolver::Resolver;
pub use table::{Hit, SymbolTable};

/// One resolved code address: the machine function that contains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Demangled function name (Rust without the hash suffix, C++ with its parameters), or
    /// `module+0x<function start>` for a function without a name whose extent is known
    /// (`.eh_frame`, `LC_FUNCTION_STARTS`), or `module+0x<address>` when not even that is
    /// known (module = file name, e.g. `libc.so.6+0x1234`), or `[unknown]+0x<address>` when
    /// no module contains the address. Never empty.
    pub name: Arc<str>,
    /// Start address (runtime, i.e. after load bias) of the function containing the address,
    /// when known. Used by callers to decide whether two addresses are in the same function.
    pub function_start: Option<u64>,
    /// File name of the module (last path component), when known.
    pub module: Option<Arc<str>>,
}

/// One frame of an address's inline chain ([`Resolver::resolve_frames`]).
///
/// ```
/// use btprof_symbols::Frame;
///
/// // What a chain for an address in `hot_loop`, where `helper` was inlined, looks like.
/// let chain = [
///     Frame { name: "hot_loop".into(), function_start: Some(0x1000), module: Some("app".into()),
///             file: Some("src/main.rs".into()), line: Some(12), inlined: false },
///     Frame { name: "helper".into(), function_start: Some(0x1000), module: Some("app".into()),
///             file: Some("src/main.rs".into()), line: Some(40), inlined: true },
/// ];
/// // Folded: `...;hot_loop;helper`: outermost first, like the rest of a stack.
/// let folded: Vec<&str> = chain.iter().map(|f| &*f.name).collect();
/// assert_eq!(folded.join(";"), "hot_loop;helper");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function's name, as for [`Symbol::name`]; for an inlined frame, the name DWARF
    /// gives the inlined function (demangled), or `[inlined]` when it gives none.
    pub name: Arc<str>,
    /// Start of the machine function the code belongs to: the same for every frame of one
    /// chain (an inlined function has no start of its own), equal to
    /// [`Symbol::function_start`] of the address.
    pub function_start: Option<u64>,
    /// File name of the module, when known.
    pub module: Option<Arc<str>>,
    /// Source file, as the compiler recorded it (usually absolute), when DWARF covers the
    /// address.
    pub file: Option<Arc<str>>,
    /// Source line in `file`: for the innermost frame the line of the address, for an outer
    /// frame the line of the call that was inlined. `None` when unknown.
    pub line: Option<u32>,
    /// Whether this function was inlined into the frame before it (`false` only for the
    /// first, outermost frame of a chain).
    pub inlined: bool,
}

impl Frame {
    /// The single frame of an address without DWARF: the symbol, no file or line.
    pub fn from_symbol(symbol: Symbol) -> Frame {
        Frame {
            name: symbol.name,
            function_start: symbol.function_start,
            module: symbol.module,
            file: None,
            line: None,
            inlined: false,
        }
    }
}
