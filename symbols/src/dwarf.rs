//! Inlined frames and source lines from DWARF, through `addr2line` (gimli).
//!
//! One [`Dwarf`] per module, created on the first address of that module that needs frames, so
//! a module none of whose addresses was sampled costs nothing. Its sections are borrowed from
//! the mapped file ([`FileBytes`], shared through an `Arc`), not copied: only a section stored
//! compressed (`SHF_COMPRESSED`, as in Debian's debug files) is decompressed into memory, and
//! only the sections `addr2line` reads (not location lists, not the accelerator tables).
//! `addr2line` parses compilation units lazily, on the first address that falls in each, so a
//! profile touching a few functions of a large library parses only their units.

use std::ops::{Deref, Range};
use std::sync::Arc;

use addr2line::gimli;
use hashbrown::HashMap;
use object::{Object, ObjectSection};

use crate::mapped_file::FileBytes;

/// One DWARF section's bytes: a range of the mapped file, or decompressed into memory.
#[derive(Clone)]
pub(crate) enum SectionBytes {
    /// Stored uncompressed: a range of the file, read in place.
    Mapped {
        file: Arc<FileBytes>,
        range: Range<usize>,
    },
    /// Stored compressed (or absent: empty).
    Owned(Arc<[u8]>),
}

impl Deref for SectionBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            SectionBytes::Mapped { file, range } => &file[range.clone()],
            SectionBytes::Owned(bytes) => bytes,
        }
    }
}

impl std::fmt::Debug for SectionBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            SectionBytes::Mapped { .. } => "mapped",
            SectionBytes::Owned(_) => "owned",
        };
        write!(f, "SectionBytes({kind}, {} bytes)", self.len())
    }
}

// SAFETY: `deref` returns the same address for as long as the value lives, and for every
// clone: a mapped range points into the `FileBytes` mapping (or buffer), which the `Arc` keeps
// alive and never moves or changes; an owned section is an `Arc<[u8]>`, whose heap data does
// not move when the `Arc` does.
unsafe impl gimli::StableDeref for SectionBytes {}
// SAFETY: as above: a clone shares the same `Arc`, so it derefs to the same address.
unsafe impl gimli::CloneStableDeref for SectionBytes {}

type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionBytes>;

/// The sections `addr2line` reads for frames and lines. Others (location lists, macro
/// information, name indexes) are left empty rather than loaded: a compressed one would
/// otherwise be inflated for nothing (libc6-dbg's `.debug_loclists` is 0.6 MB of zlib).
fn needed(id: gimli::SectionId) -> bool {
    use gimli::SectionId::*;
    matches!(
        id,
        DebugAbbrev
            | DebugAddr
            | DebugAranges
            | DebugInfo
            | DebugLine
            | DebugLineStr
            | DebugRanges
            | DebugRngLists
            | DebugStr
            | DebugStrOffsets
            | DebugTypes
    )
}

/// One frame of an address's inline chain as DWARF describes it.
#[derive(Debug)]
pub(crate) struct DwarfFrame {
    /// The function's raw (possibly mangled) name; `None` when DWARF names none.
    pub(crate) name: Option<String>,
    /// The source file, with its directory as the compiler recorded it.
    pub(crate) file: Option<Arc<str>>,
    pub(crate) line: Option<u32>,
}

/// The DWARF of one module, ready for lookups by link-time (unrelocated) address.
pub(crate) struct Dwarf {
    context: addr2line::Context<Reader>,
    /// File names by path, so that all frames of one file share an allocation.
    files: HashMap<String, Arc<str>>,
}

impl std::fmt::Debug for Dwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dwarf")
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl Dwarf {
    /// The DWARF of the file whose bytes are `data` (ELF, or a Mach-O `.dSYM` DWARF file);
    /// `None` when it has no `.debug_info` or the sections do not parse.
    pub(crate) fn load(data: Arc<FileBytes>) -> Option<Dwarf> {
        let file = object::File::parse(&**data).ok()?;
        let info = file.section_by_name(".debug_info")?;
        if info.size() == 0 {
            return None;
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let empty = || SectionBytes::Owned(Arc::from(&[][..]));
        let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            let bytes = match file.section_by_name(id.name()) {
                Some(section) if needed(id) => section_bytes(&data, &section).unwrap_or_else(empty),
                _ => empty(),
            };
            Ok(Reader::new(bytes, endian))
        };
        let dwarf = gimli::Dwarf::load(load).ok()?;
        let context = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf {
            context,
            files: HashMap::new(),
        })
    }

    /// The inline chain at link-time address `probe`, innermost first (the function whose
    /// code is at `probe` first, the machine function that contains it last). Each frame's
    /// line is where execution is in that function: `probe` itself for the innermost, the
    /// call site of the next-inner frame for the others. Empty when DWARF does not cover
    /// `probe` or cannot be read there.
    pub(crate) fn frames(&mut self, probe: u64) -> Vec<DwarfFrame> {
        let mut out = Vec::new();
        let Ok(mut iter) = self.context.find_frames(probe).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok())
                .map(|n| n.into_owned());
            let (file, line) = match &frame.location {
                Some(location) => (
                    location.file.map(|f| intern(&mut self.files, f)),
                    location.line,
                ),
                None => (None, None),
            };
            out.push(DwarfFrame { name, file, line });
        }
        out
    }
}

fn intern(files: &mut HashMap<String, Arc<str>>, file: &str) -> Arc<str> {
    if let Some(interned) = files.get(file) {
        return Arc::clone(interned);
    }
    let interned: Arc<str> = Arc::from(file);
    files.insert(file.to_owned(), Arc::clone(&interned));
    interned
}

/// The bytes of `section` of the file `data`: borrowed in place when stored uncompressed,
/// decompressed otherwise; `None` when they cannot be read.
fn section_bytes(data: &Arc<FileBytes>, section: &object::Section<'_, '_>) -> Option<SectionBytes> {
    let compressed = section.compressed_file_range().ok()?;
    if compressed.format == object::CompressionFormat::None {
        let start = usize::try_from(compressed.offset).ok()?;
        let end = start.checked_add(usize::try_from(compressed.uncompressed_size).ok()?)?;
        if end <= data.len() {
            return Some(SectionBytes::Mapped {
                file: Arc::clone(data),
                range: start..end,
            });
        }
        return None;
    }
    let bytes = section.uncompressed_data().ok()?;
    Some(SectionBytes::Owned(Arc::from(&*bytes)))
}
