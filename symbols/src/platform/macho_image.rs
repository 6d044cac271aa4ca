//! Function symbols of a 64-bit Mach-O image, read from the image *as dyld mapped it*.
//!
//! On macOS most system libraries exist only inside the dyld shared cache, not as files, so
//! the resolver cannot read them from disk the way it reads ELF files on Linux. Every loaded
//! image is, however, mapped in the process with its load commands and its `__LINKEDIT`
//! segment, and that is enough to find its symbol table:
//!
//! - the load commands follow the Mach-O header at the image's load address;
//! - each segment is mapped at `vmaddr + slide`;
//! - `LC_SYMTAB`'s `symoff` and `stroff` are *file* offsets into `__LINKEDIT`, so the symbol
//!   table is at `slide + linkedit.vmaddr + (symoff - linkedit.fileoff)`. In an ordinary
//!   image that equals `load address + symoff`, but in the shared cache the segments of one
//!   image are far apart and `__LINKEDIT` is shared by all images, so only this formula
//!   works.
//!
//! Mach-O symbols carry no size, and shared-cache images keep only their exported symbols in
//! memory (local ones are in a separate, unmapped file), so the symbol before an address is
//! not necessarily its function. `LC_FUNCTION_STARTS`, which lists every function, named or
//! not, bounds each symbol at the next function start, and every start without a symbol
//! becomes an unnamed function of its own: all addresses in it resolve to one
//! `image+0x<start>` frame with a function start, instead of to the named function before
//! it or to one frame per address.
//!
//! This module is platform-independent: it reads through [`ImageMemory`], which the macOS
//! backend implements over the process's own memory and tests implement over a buffer in
//! which a fixture is laid out the way dyld maps it ([`MappedBuffer`]). Structures are
//! parsed with `object`'s Mach-O types.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use object::macho::{
    LinkeditDataCommand, MachHeader64, Nlist64, UuidCommand, LC_FUNCTION_STARTS, LC_UUID, N_SECT,
    S_ATTR_PURE_INSTRUCTIONS, S_ATTR_SOME_INSTRUCTIONS, VM_PROT_READ,
};
use object::read::macho::{MachHeader, Nlist, Section, Segment};
use object::Endianness;

use super::{LoadedModule, Source};
use crate::SymbolTable;

/// Read access to the memory an image is mapped in, addressed by runtime addresses.
pub trait ImageMemory {
    /// The `len` bytes at runtime address `addr`, or `None` when any of them lies outside the
    /// memory this reader may access. Must never read anything else: on macOS an unmapped
    /// address is a crash, not an error.
    fn read(&self, addr: u64, len: u64) -> Option<&[u8]>;
}

/// Memory given as a byte buffer whose first byte is at runtime address `base`.
///
/// Tests copy an image file's segments into such a buffer at `vmaddr + slide - base`, which
/// is how dyld maps them, and read the image from there.
#[derive(Clone, Copy, Debug)]
pub struct MappedBuffer<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl<'a> MappedBuffer<'a> {
    /// `bytes` as the memory starting at runtime address `base`.
    pub fn new(base: u64, bytes: &'a [u8]) -> MappedBuffer<'a> {
        MappedBuffer { base, bytes }
    }
}

impl ImageMemory for MappedBuffer<'_> {
    fn read(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.bytes.get(start..end)
    }
}

/// Why an image could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MachOError {
    /// The reader needed `len` bytes at runtime address `addr`, which the memory does not
    /// provide.
    Unreadable {
        /// The runtime address of the first byte needed.
        addr: u64,
        /// How many bytes were needed.
        len: u64,
    },
    /// The header or a load command is not what a loaded 64-bit Mach-O image contains.
    Malformed(&'static str),
}

impl fmt::Display for MachOError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachOError::Unreadable { addr, len } => {
                write!(f, "cannot read {len} bytes of the image at {addr:#x}")
            }
            MachOError::Malformed(what) => write!(f, "malformed Mach-O image: {what}"),
        }
    }
}

impl std::error::Error for MachOError {}

/// One `LC_SEGMENT_64`, with link-time (unslid) addresses.
#[derive(Clone, Debug)]
struct SegmentInfo {
    name: [u8; 16],
    vmaddr: u64,
    vmsize: u64,
    fileoff: u64,
    filesize: u64,
    readable: bool,
}

impl SegmentInfo {
    fn is_named(&self, name: &str) -> bool {
        let len = self.name.iter().position(|&b| b == 0).unwrap_or(16);
        &self.name[..len] == name.as_bytes()
    }
}

/// One section, in load-command order (its index + 1 is the `n_sect` ordinal symbols use).
#[derive(Clone, Debug)]
struct SectionInfo {
    /// Link-time address range.
    range: Range<u64>,
    /// Whether the section holds machine code (`__TEXT,__text`, stubs), i.e. whether its
    /// symbols are functions.
    code: bool,
}

/// A `LinkeditDataCommand`: file offset and size of its data in `__LINKEDIT`.
#[derive(Clone, Copy, Debug)]
struct LinkeditData {
    offset: u64,
    size: u64,
}

/// The `LC_SYMTAB` command: file offsets and sizes.
#[derive(Clone, Copy, Debug)]
struct SymtabInfo {
    symoff: u64,
    nsyms: u64,
    stroff: u64,
    strsize: u64,
}

/// A loaded 64-bit Mach-O image: where it is and what its load commands say.
///
/// Parsing reads only the header and the load commands; [`MachImage::symbol_table`] reads
/// the symbol and string tables from `__LINKEDIT` when they are needed.
#[derive(Clone, Debug)]
pub struct MachImage {
    load_address: u64,
    slide: u64,
    endian: Endianness,
    segments: Vec<SegmentInfo>,
    sections: Vec<SectionInfo>,
    symtab: Option<SymtabInfo>,
    function_starts: Option<LinkeditData>,
    uuid: Option<[u8; 16]>,
}

/// Size of `mach_header_64`.
pub(crate) const HEADER_SIZE: u64 = std::mem::size_of::<MachHeader64<Endianness>>() as u64;
/// Size of `nlist_64`.
const NLIST_SIZE: u64 = std::mem::size_of::<Nlist64<Endianness>>() as u64;

impl MachImage {
    /// Reads the header and load commands of the image whose Mach-O header is at runtime
    /// address `load_address` and whose segments are mapped at `vmaddr + slide`.
    ///
    /// Reads `memory` only at `load_address .. load_address + header + sizeofcmds`.
    ///
    /// Fails when `slide` is not `load_address - __TEXT.vmaddr`: a header and a slide that do
    /// not belong together (see [`MachImage::parse_at`], which derives the slide instead).
    pub fn parse(
        memory: &impl ImageMemory,
        load_address: u64,
        slide: u64,
    ) -> Result<MachImage, MachOError> {
        let image = Self::parse_commands(memory, load_address, slide)?;
        if image.slide_from_header() != Some(slide) {
            // A header paired with another image's slide (dyld's indexed calls raced with a
            // `dlclose`) would send every later read to the wrong place.
            return Err(MachOError::Malformed(
                "the slide does not match the header's address and __TEXT's vmaddr",
            ));
        }
        Ok(image)
    }

    /// Reads the header and load commands, trusting `slide`.
    fn parse_commands(
        memory: &impl ImageMemory,
        load_address: u64,
        slide: u64,
    ) -> Result<MachImage, MachOError> {
        let head = read(memory, load_address, HEADER_SIZE)?;
        let header = MachHeader64::<Endianness>::parse(head, 0)
            .map_err(|_| MachOError::Malformed("no 64-bit Mach-O header at the load address"))?;
        let endian = header
            .endian()
            .map_err(|_| MachOError::Malformed("unknown byte order"))?;
        let commands_len = HEADER_SIZE + u64::from(header.sizeofcmds(endian));
        let data = read(memory, load_address, commands_len)?;
        let mut commands = header
            .load_commands(endian, data, 0)
            .map_err(|_| MachOError::Malformed("load commands exceed sizeofcmds"))?;

        let mut image = MachImage {
            load_address,
            slide,
            endian,
            segments: Vec::new(),
            sections: Vec::new(),
            symtab: None,
            function_starts: None,
            uuid: None,
        };
        while let Some(command) = commands
            .next()
            .map_err(|_| MachOError::Malformed("truncated load command"))?
        {
            let malformed = |_| MachOError::Malformed("truncated load command");
            if let Some((segment, section_data)) = command.segment_64().map_err(malformed)? {
                image.add_segment(segment, section_data)?;
            } else if let Some(symtab) = command.symtab().map_err(malformed)? {
                image.symtab = Some(SymtabInfo {
                    symoff: symtab.symoff.get(endian).into(),
                    nsyms: symtab.nsyms.get(endian).into(),
                    stroff: symtab.stroff.get(endian).into(),
                    strsize: symtab.strsize.get(endian).into(),
                });
            } else if command.cmd() == LC_UUID {
                let uuid = command
                    .data::<UuidCommand<Endianness>>()
                    .map_err(malformed)?;
                image.uuid = Some(uuid.uuid);
            } else if command.cmd() == LC_FUNCTION_STARTS {
                let starts = command
                    .data::<LinkeditDataCommand<Endianness>>()
                    .map_err(malformed)?;
                image.function_starts = Some(LinkeditData {
                    offset: starts.dataoff.get(endian).into(),
                    size: starts.datasize.get(endian).into(),
                });
            }
        }
        Ok(image)
    }

    /// Reads the image whose Mach-O header is at runtime address `load_address`, deriving its
    /// slide from the header itself: `load_address - __TEXT.vmaddr` (the header starts
    /// `__TEXT`, at file offset 0).
    ///
    /// This is how the macOS backend reads dyld's images: dyld's header, slide and name come
    /// from three separate indexed calls, and a `dlclose` between them can pair one image's
    /// header with another's slide. A slide derived from the header cannot disagree with it.
    pub fn parse_at(memory: &impl ImageMemory, load_address: u64) -> Result<MachImage, MachOError> {
        // Parse once with a placeholder slide to read the segments, then derive the real one.
        let mut image = Self::parse_commands(memory, load_address, 0)?;
        image.slide = image
            .slide_from_header()
            .ok_or(MachOError::Malformed("no __TEXT segment"))?;
        Ok(image)
    }

    /// [`MachImage::parse_at`] over memory that is only ever *copied* by `copy(addr, out)`,
    /// which fills `out` from runtime address `addr` or returns `false`: first the header,
    /// then the header with its load commands, into buffers this owns.
    ///
    /// On macOS `copy` is `mach_vm_read_overwrite`, which fails with an error code on an
    /// unmapped page instead of faulting: an image listed by dyld can be unmapped by a
    /// `dlclose` on another thread before it is read, and a plain load from it would crash
    /// the profiled process. A failed copy is [`MachOError::Unreadable`].
    pub fn parse_copied(
        mut copy: impl FnMut(u64, &mut [u8]) -> bool,
        load_address: u64,
    ) -> Result<MachImage, MachOError> {
        /// Load commands larger than this are taken as garbage, not copied.
        const MAX_COMMANDS: u64 = 1 << 20;
        let unreadable = |len| MachOError::Unreadable {
            addr: load_address,
            len,
        };
        let mut head = vec![0u8; HEADER_SIZE as usize];
        if !copy(load_address, &mut head) {
            return Err(unreadable(HEADER_SIZE));
        }
        let header = MachHeader64::<Endianness>::parse(&head[..], 0)
            .map_err(|_| MachOError::Malformed("no 64-bit Mach-O header at the load address"))?;
        let endian = header
            .endian()
            .map_err(|_| MachOError::Malformed("unknown byte order"))?;
        let sizeofcmds = u64::from(header.sizeofcmds(endian));
        if sizeofcmds > MAX_COMMANDS {
            return Err(MachOError::Malformed("load commands too large"));
        }
        let len = HEADER_SIZE + sizeofcmds;
        let mut commands = vec![0u8; len as usize];
        if !copy(load_address, &mut commands) {
            return Err(unreadable(len));
        }
        Self::parse_at(&MappedBuffer::new(load_address, &commands), load_address)
    }

    /// `load_address - __TEXT.vmaddr`: the header is the first thing in `__TEXT`, in an
    /// image file and in the shared cache alike (where `__TEXT`'s file offset is the image's
    /// place in the cache, not 0). dyld computes the slide the same way
    /// (`MachOLoaded::getSlide`).
    fn slide_from_header(&self) -> Option<u64> {
        let text = self.segments.iter().find(|s| s.is_named("__TEXT"))?;
        Some(self.load_address.wrapping_sub(text.vmaddr))
    }

    /// The image's `LC_UUID`, which its `.dSYM` bundle's DWARF file shares.
    pub fn uuid(&self) -> Option<[u8; 16]> {
        self.uuid
    }

    fn add_segment(
        &mut self,
        segment: &object::macho::SegmentCommand64<Endianness>,
        section_data: &[u8],
    ) -> Result<(), MachOError> {
        let endian = self.endian;
        self.segments.push(SegmentInfo {
            name: *segment.segname(),
            vmaddr: segment.vmaddr(endian),
            vmsize: segment.vmsize(endian),
            fileoff: segment.fileoff(endian),
            filesize: segment.filesize(endian),
            readable: segment.initprot(endian).contains(VM_PROT_READ),
        });
        let sections = segment
            .sections(endian, section_data)
            .map_err(|_| MachOError::Malformed("section headers exceed their segment command"))?;
        let code = S_ATTR_PURE_INSTRUCTIONS | S_ATTR_SOME_INSTRUCTIONS;
        self.sections
            .extend(sections.iter().map(|section| SectionInfo {
                range: section.addr(endian)
                    ..section.addr(endian).saturating_add(section.size(endian)),
                code: section.flags(endian).intersects(code),
            }));
        Ok(())
    }

    /// Runtime address of the Mach-O header: `image+0xoffset` fallback names count from here.
    pub fn load_address(&self) -> u64 {
        self.load_address
    }

    /// What dyld added to every link-time address of the image.
    pub fn slide(&self) -> u64 {
        self.slide
    }

    /// Runtime ranges of the image's own segments: those that are mapped readable, except
    /// `__LINKEDIT` (no code lives there, and in the shared cache one `__LINKEDIT` is shared
    /// by every image, so it would map addresses to the wrong image) and empty ones
    /// (`__PAGEZERO` is neither readable nor part of the image).
    pub fn ranges(&self) -> Vec<Range<u64>> {
        self.segments
            .iter()
            .filter(|s| s.readable && s.vmsize != 0 && !s.is_named("__LINKEDIT"))
            .map(|s| {
                let start = s.vmaddr.wrapping_add(self.slide);
                start..start.saturating_add(s.vmsize)
            })
            .collect()
    }

    /// Runtime range of `__LINKEDIT`'s content (its file part, as far as it is mapped), the
    /// only memory [`MachImage::symbol_table`] reads. The macOS backend trusts exactly this
    /// range, because dyld mapped it to load the image.
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    pub(crate) fn linkedit_range(&self) -> Option<Range<u64>> {
        let linkedit = self.linkedit()?;
        let start = linkedit.vmaddr.wrapping_add(self.slide);
        Some(start..start.checked_add(linkedit.filesize.min(linkedit.vmsize))?)
    }

    fn linkedit(&self) -> Option<&SegmentInfo> {
        self.segments.iter().find(|s| s.is_named("__LINKEDIT"))
    }

    /// The image's function symbols with runtime addresses, read from `LC_SYMTAB` through
    /// `__LINKEDIT` in `memory`.
    ///
    /// Keeps defined symbols (`N_SECT`, no debug `N_STAB` entries) in code sections whose
    /// address lies inside their section; that also drops `__mh_execute_header`, which
    /// claims the first section but points at the header. Mach-O records no sizes, so a
    /// function ends at the next function start (a symbol, or an entry of
    /// `LC_FUNCTION_STARTS`, which also lists unnamed functions), or at its section's end. The
    /// leading underscore Mach-O adds to every C-level name is removed (`_main` → `main`,
    /// `__ZN…E` → `_ZN…E`), so names demangle as on Linux. Starts listed in
    /// `LC_FUNCTION_STARTS` that no symbol names are added as unnamed functions.
    ///
    /// An image without `LC_SYMTAB` (or with an empty one) gives a table of its unnamed
    /// function starts only (empty without `LC_FUNCTION_STARTS`); an error
    /// means the symbol table is not where the load commands say or cannot be read.
    pub fn symbol_table(&self, memory: &impl ImageMemory) -> Result<SymbolTable, MachOError> {
        let symtab = self.symtab.filter(|s| s.nsyms != 0);
        let Some(linkedit) = self.linkedit() else {
            return match symtab {
                Some(_) => Err(MachOError::Malformed(
                    "LC_SYMTAB without a __LINKEDIT segment",
                )),
                None => Ok(SymbolTable::default()),
            };
        };
        let functions: Vec<Function<'_>> = match symtab {
            Some(symtab) => {
                let nlist_len = symtab
                    .nsyms
                    .checked_mul(NLIST_SIZE)
                    .ok_or(MachOError::Malformed("symbol count overflows"))?;
                let symbols =
                    read_linkedit(memory, linkedit, self.slide, symtab.symoff, nlist_len)?;
                let strings =
                    read_linkedit(memory, linkedit, self.slide, symtab.stroff, symtab.strsize)?;
                let nlists = object::pod::slice_from_all_bytes::<Nlist64<Endianness>>(symbols)
                    .map_err(|_| MachOError::Malformed("symbol table size"))?;
                nlists
                    .iter()
                    .filter_map(|nlist| self.function(nlist, strings))
                    .collect()
            }
            None => Vec::new(),
        };
        let listed = self.function_starts(memory, linkedit);
        let mut starts = listed.clone();
        starts.extend(functions.iter().map(|f| f.start));
        starts.sort_unstable();
        starts.dedup();
        let named = functions
            .iter()
            .map(|f| {
                let end = function_end(f.start, f.section_end, &starts);
                (
                    f.start.wrapping_add(self.slide),
                    end - f.start,
                    f.name.to_owned(),
                )
            })
            .collect();
        // Every listed start becomes a function of its own, named `image+0x<start>` by the
        // resolver when no symbol names it, so that all addresses of an unnamed function
        // share one frame and one function start.
        let unnamed: Vec<(u64, u64)> = listed
            .iter()
            .filter_map(|&start| {
                let section = self
                    .sections
                    .iter()
                    .find(|s| s.code && s.range.contains(&start))?;
                let end = function_end(start, section.range.end, &starts);
                Some((start.wrapping_add(self.slide), end - start))
            })
            .collect();
        Ok(SymbolTable::from_functions(named, &unnamed))
    }

    /// [`MachImage::symbol_table`] over `__LINKEDIT` that is only ever *copied* by
    /// `copy(addr, out)`, which fills `out` from runtime address `addr` or returns `false`:
    /// the symbol table, the string table and the function starts are each copied into a
    /// buffer this owns, then read from there.
    ///
    /// On macOS `copy` is `mach_vm_read_overwrite`: an image that cannot be pinned while its
    /// table is read may be unloaded by a `dlclose` on another thread at any moment, and a
    /// plain load from its unmapped `__LINKEDIT` would crash the profiled process. A failed
    /// copy of the symbol or string table is [`MachOError::Unreadable`]; one of the function
    /// starts loses only them, as in [`MachImage::symbol_table`].
    pub fn symbol_table_copied(
        &self,
        mut copy: impl FnMut(u64, &mut [u8]) -> bool,
    ) -> Result<SymbolTable, MachOError> {
        let mut copied = CopiedPieces::default();
        if let Some(linkedit) = self.linkedit() {
            if let Some(symtab) = self.symtab.filter(|s| s.nsyms != 0) {
                let nlist_len = symtab
                    .nsyms
                    .checked_mul(NLIST_SIZE)
                    .ok_or(MachOError::Malformed("symbol count overflows"))?;
                for (offset, len) in [(symtab.symoff, nlist_len), (symtab.stroff, symtab.strsize)] {
                    let addr = linkedit_address(linkedit, self.slide, offset, len)?;
                    copied.copy(&mut copy, addr, len)?;
                }
            }
            if let Some(data) = self.function_starts {
                if let Ok(addr) = linkedit_address(linkedit, self.slide, data.offset, data.size) {
                    // Missing starts only cost the unnamed functions.
                    let _ = copied.copy(&mut copy, addr, data.size);
                }
            }
        }
        self.symbol_table(&copied)
    }

    /// Link-time addresses from `LC_FUNCTION_STARTS`, ascending; empty when the image has
    /// none or they cannot be read. They only add to symbols, so a problem with them is no
    /// reason to lose the symbols.
    fn function_starts(&self, memory: &impl ImageMemory, linkedit: &SegmentInfo) -> Vec<u64> {
        let (Some(data), Some(text)) = (
            self.function_starts,
            self.segments.iter().find(|s| s.is_named("__TEXT")),
        ) else {
            return Vec::new();
        };
        match read_linkedit(memory, linkedit, self.slide, data.offset, data.size) {
            Ok(bytes) => decode_function_starts(bytes, text.vmaddr),
            Err(_) => Vec::new(),
        }
    }

    /// The function a symbol-table entry defines, if it defines one.
    fn function<'s>(&self, nlist: &Nlist64<Endianness>, strings: &'s [u8]) -> Option<Function<'s>> {
        let flags = nlist.n_type();
        if flags.is_stab() || flags.typ() != N_SECT {
            return None;
        }
        let section = self
            .sections
            .get(usize::from(nlist.n_sect()).checked_sub(1)?)?;
        let start = nlist.n_value(self.endian);
        if !section.code || !section.range.contains(&start) {
            return None;
        }
        let name = c_string_at(strings, nlist.n_strx(self.endian))?;
        let name = name.strip_prefix('_').unwrap_or(name);
        (!name.is_empty()).then_some(Function {
            start,
            section_end: section.range.end,
            name,
        })
    }

    /// The resolver's module for this image: segments from [`MachImage::ranges`], symbol
    /// values slid by the image's slide, fallback offsets counted from the load address.
    pub(crate) fn module(&self, name: Arc<str>, source: Source) -> LoadedModule {
        let mut module = LoadedModule::new(name, source, self.slide, self.ranges())
            .with_offset_base(self.load_address);
        module.uuid = self.uuid;
        module
    }
}

/// A function symbol before sizes are known: link-time start, end of its section, name
/// without the Mach-O underscore.
struct Function<'s> {
    start: u64,
    section_end: u64,
    name: &'s str,
}

/// Where the function starting at `start` ends: at the first of `starts` (every known
/// function start, sorted) after it, but no later than its section's end.
fn function_end(start: u64, section_end: u64, starts: &[u64]) -> u64 {
    let next = starts.partition_point(|&s| s <= start);
    starts
        .get(next)
        .map_or(section_end, |&n| n.min(section_end))
}

/// Decodes `LC_FUNCTION_STARTS` data: ULEB128 deltas, the first from the start of `__TEXT`
/// (`text_vmaddr`), ended by a zero delta or the end of the data. Stops at the first
/// malformed delta, keeping what came before.
fn decode_function_starts(data: &[u8], text_vmaddr: u64) -> Vec<u64> {
    let mut bytes = object::Bytes(data);
    let mut addr = text_vmaddr;
    let mut starts = Vec::new();
    while let Ok(delta) = bytes.read_uleb128() {
        match addr.checked_add(delta) {
            Some(next) if delta != 0 => {
                addr = next;
                starts.push(addr);
            }
            _ => break,
        }
    }
    starts
}

/// Reads `len` bytes at file offset `offset` of `__LINKEDIT` (see [`linkedit_address`]).
fn read_linkedit<'m>(
    memory: &'m impl ImageMemory,
    linkedit: &SegmentInfo,
    slide: u64,
    offset: u64,
    len: u64,
) -> Result<&'m [u8], MachOError> {
    let addr = linkedit_address(linkedit, slide, offset, len)?;
    read(memory, addr, len)
}

/// The runtime address of file offset `offset` of `__LINKEDIT`, which is mapped at
/// `slide + vmaddr` with its file content starting at `fileoff`. The `len` bytes from there
/// must lie inside the segment's file content.
fn linkedit_address(
    linkedit: &SegmentInfo,
    slide: u64,
    offset: u64,
    len: u64,
) -> Result<u64, MachOError> {
    let inside = offset
        .checked_sub(linkedit.fileoff)
        .filter(|&rel| {
            rel.checked_add(len)
                .is_some_and(|end| end <= linkedit.filesize.min(linkedit.vmsize))
        })
        .ok_or(MachOError::Malformed("symbol table outside __LINKEDIT"))?;
    Ok(slide.wrapping_add(linkedit.vmaddr).wrapping_add(inside))
}

/// Pieces of `__LINKEDIT` copied into buffers of their own, read as the memory at their
/// runtime addresses ([`MachImage::symbol_table_copied`]).
#[derive(Default)]
struct CopiedPieces {
    pieces: Vec<(u64, Vec<u8>)>,
}

impl CopiedPieces {
    /// Copies `len` bytes from runtime address `addr` with `copy`.
    fn copy(
        &mut self,
        copy: &mut impl FnMut(u64, &mut [u8]) -> bool,
        addr: u64,
        len: u64,
    ) -> Result<(), MachOError> {
        /// Tables larger than this are taken as garbage, not copied.
        const MAX_COPY: u64 = 1 << 30;
        if len > MAX_COPY {
            return Err(MachOError::Malformed("symbol table too large"));
        }
        let mut bytes = vec![0u8; len as usize];
        if len != 0 && !copy(addr, &mut bytes) {
            return Err(MachOError::Unreadable { addr, len });
        }
        self.pieces.push((addr, bytes));
        Ok(())
    }
}

impl ImageMemory for CopiedPieces {
    fn read(&self, addr: u64, len: u64) -> Option<&[u8]> {
        self.pieces.iter().find_map(|(base, bytes)| {
            let start = usize::try_from(addr.checked_sub(*base)?).ok()?;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            bytes.get(start..end)
        })
    }
}

fn read(memory: &impl ImageMemory, addr: u64, len: u64) -> Result<&[u8], MachOError> {
    memory
        .read(addr, len)
        .ok_or(MachOError::Unreadable { addr, len })
}

/// The NUL-terminated UTF-8 string at `offset` in a string table.
fn c_string_at(strings: &[u8], offset: u32) -> Option<&str> {
    let tail = strings.get(usize::try_from(offset).ok()?..)?;
    let len = tail.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&tail[..len]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_buffer_reads_only_inside_the_buffer() {
        let bytes = [1u8, 2, 3, 4];
        let memory = MappedBuffer::new(0x1000, &bytes);
        assert_eq!(memory.read(0x1000, 4), Some(&bytes[..]));
        assert_eq!(memory.read(0x1002, 2), Some(&bytes[2..]));
        assert_eq!(memory.read(0x1003, 2), None);
        assert_eq!(memory.read(0xfff, 1), None);
        assert_eq!(memory.read(u64::MAX, 2), None);
    }

    #[test]
    fn garbage_is_not_an_image() {
        let bytes = [0u8; 64];
        let memory = MappedBuffer::new(0x1000, &bytes);
        assert!(matches!(
            MachImage::parse(&memory, 0x1000, 0),
            Err(MachOError::Malformed(_))
        ));
        assert_eq!(
            MachImage::parse(&memory, 0x2000, 0).unwrap_err(),
            MachOError::Unreadable {
                addr: 0x2000,
                len: HEADER_SIZE
            }
        );
    }

    #[test]
    fn function_starts_decode_as_deltas_from_text() {
        // 0x1000 from __TEXT, then +0x20, then +0x200 (two ULEB128 bytes), then the end.
        let data = [0x80, 0x20, 0x20, 0x80, 0x04, 0x00, 0x7f];
        assert_eq!(
            decode_function_starts(&data, 0x1_0000_0000),
            [0x1_0000_1000, 0x1_0000_1020, 0x1_0000_1220]
        );
        // Without the terminating zero the data simply ends; a truncated ULEB128 ends it too.
        assert_eq!(decode_function_starts(&[0x10, 0x10], 0), [0x10, 0x20]);
        assert_eq!(decode_function_starts(&[0x10, 0x80], 0), [0x10]);
        assert!(decode_function_starts(&[], 0).is_empty());
    }

    #[test]
    fn a_function_ends_at_the_next_start_or_its_section_end() {
        let starts = [0x100, 0x140, 0x180];
        assert_eq!(function_end(0x100, 0x200, &starts), 0x140);
        // An unnamed function at 0x140 ends the named one before it.
        assert_eq!(function_end(0x120, 0x200, &starts), 0x140);
        assert_eq!(function_end(0x180, 0x200, &starts), 0x200);
        // The next start lies in a later section.
        assert_eq!(function_end(0x100, 0x130, &starts), 0x130);
        assert_eq!(function_end(0x100, 0x200, &[]), 0x200);
    }

    #[test]
    fn string_table_lookup() {
        let strings = b"\0_main\0_bad\xff\0unterminated";
        assert_eq!(c_string_at(strings, 1), Some("_main"));
        assert_eq!(c_string_at(strings, 0), Some(""));
        assert_eq!(c_string_at(strings, 7), None, "not UTF-8");
        assert_eq!(c_string_at(strings, 13), None, "no NUL before the end");
        assert_eq!(c_string_at(strings, 1000), None);
    }
}
