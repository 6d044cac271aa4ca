//! The platform layer: which modules are loaded in this process and where their bytes are.
//!
//! Everything here sits *below* the resolver: it produces plain [`LoadedModule`] descriptions
//! (name, load bias, address ranges, [`Source`]) and reads in-memory images, and knows
//! nothing about symbol caches, DWARF or names. The resolver (`crate::resolver`) builds on
//! it; nothing here imports the resolver.
//!
//! - `linux`: `dl_iterate_phdr` and the vDSO;
//! - `macos`: dyld's image list, each image's slide derived from its own header;
//! - [`macho_image`]: a Mach-O image read where dyld mapped it (platform-independent, so it is
//!   tested on Linux with fixtures).

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

#[cfg(target_os = "linux")]
pub(crate) mod linux;
pub(crate) mod macho_image;
#[cfg(target_os = "macos")]
pub(crate) mod macos;

/// Where a module's symbols come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// An object file on disk (for the main executable on Linux: `/proc/self/exe`, which
    /// stays valid even if the file was replaced or deleted after start).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    File(PathBuf),
    /// An image that exists only in this process's memory (the Linux vDSO), as an address
    /// and length of a mapping that stays mapped for the life of the process.
    #[cfg(target_os = "linux")]
    Memory { start: u64, len: u64 },
    /// An image copied out of another process's memory (its vDSO), read
    /// from the copy.
    #[cfg(target_os = "linux")]
    Copied(Arc<[u8]>),
    /// A Mach-O image that dyld mapped in this process (macOS), read in place because system
    /// libraries live only in the dyld shared cache. `header` is its load address; the
    /// module's bias is its slide.
    #[cfg(target_os = "macos")]
    MachImage { header: u64 },
    /// No readable source: the module's table is given, or it resolves as
    /// `module+0xoffset` only.
    None,
}

/// One loaded module (executable, shared library, vDSO) as the platform reports it.
#[derive(Clone, Debug)]
pub(crate) struct LoadedModule {
    /// File name shown in `module+0xoffset` and in `Symbol::module`.
    pub(crate) name: Arc<str>,
    pub(crate) source: Source,
    /// The module's path on disk, when it has one: where separate debug files are looked
    /// for (beside it, in its `.debug/`, a `.dSYM` bundle beside it). For the Linux main
    /// executable this is the target of `/proc/self/exe`, not the link.
    pub(crate) path: Option<PathBuf>,
    /// Mach-O `LC_UUID`, which a `.dSYM` bundle's DWARF file must share.
    pub(crate) uuid: Option<[u8; 16]>,
    /// Load bias: runtime address = link-time address + bias (the slide, on macOS).
    pub(crate) bias: u64,
    /// Where `module+0xoffset` offsets count from. The bias on Linux, where offsets are
    /// link-time addresses as in `nm` output; the load address (header) on macOS, as in
    /// Apple's crash reports, where an executable's link-time addresses start at 4 GiB.
    pub(crate) offset_base: u64,
    /// Runtime address ranges of the module's loadable segments, used to map an address to
    /// its module.
    pub(crate) ranges: Vec<Range<u64>>,
}

impl LoadedModule {
    pub(crate) fn new(name: Arc<str>, source: Source, bias: u64, ranges: Vec<Range<u64>>) -> Self {
        LoadedModule {
            name,
            source,
            path: None,
            uuid: None,
            bias,
            offset_base: bias,
            ranges,
        }
    }

    /// Counts `module+0xoffset` offsets from `base` instead of from the bias.
    pub(crate) fn with_offset_base(self, base: u64) -> Self {
        LoadedModule {
            offset_base: base,
            ..self
        }
    }

    /// Records the module's path on disk (see [`LoadedModule::path`]).
    pub(crate) fn with_path(self, path: Option<PathBuf>) -> Self {
        LoadedModule { path, ..self }
    }

    /// Two snapshots describe the same module when it was loaded from the same source at the
    /// same place; only then may its cached symbols be reused.
    pub(crate) fn same_as(&self, other: &LoadedModule) -> bool {
        self.source == other.source
            && self.bias == other.bias
            && self.offset_base == other.offset_base
            && self.ranges == other.ranges
            && self.path == other.path
    }
}

/// Where `file`'s non-empty segments are mapped when it is loaded at
/// `bias`: the address ranges a module answers for.
pub(crate) fn segment_ranges(file: &object::File<'_>, bias: u64) -> Vec<Range<u64>> {
    use object::{Object, ObjectSegment};
    file.segments()
        .filter(|s| s.size() != 0)
        .map(|s| {
            let at = s.address().wrapping_add(bias);
            at..at.saturating_add(s.size())
        })
        .collect()
}
