//! Inlined frames and source lines from DWARF, through `addr2line` (gimli).
//!
//! One [`Dwarf`] per module, created on the first address of that module that needs frames, so
//! a module none of whose addresses was sampled costs nothing. Its sections are borrowed from
//! the mapped file ([`FileBytes`], shared through an `Arc`), not copied: only a section stored
//! compressed (`SHF_COMPRESSED`, as in Debian's debug files) is decompressed into memory, and
//! only the sections `addr2line` reads (not location lists, not the accelerator tables).
//!
//! The first stop of a profiler pays for this, so it reads as little as the sampled
//! addresses need (`units`): an `addr2line` context is built over the units that cover an
//! address (by `.debug_aranges`) and the units they refer to, not over every unit of the
//! module, and a compressed `.debug_info` is inflated only as far as those units reach
//! (`inflate`). Within a unit `addr2line` parses functions and lines on first use.

mod inflate;
mod units;

use std::ops::{Deref, Range};
use std::sync::Arc;

use addr2line::gimli;
use hashbrown::HashMap;
use object::{Object, ObjectSection};

use crate::mapped_file::FileBytes;
use inflate::Inflating;
use units::{ArangeIndex, UnitSet, UnitStarts};

/// One DWARF section's bytes: a range of the mapped file, or decompressed into memory.
#[derive(Clone)]
pub(crate) enum SectionBytes {
    /// Stored uncompressed: a range of the file, read in place.
    Mapped {
        file: Arc<FileBytes>,
        range: Range<usize>,
    },
    /// Stored compressed (or absent: empty). A `Vec`, not an `Arc<[u8]>`, so that the
    /// decompressed bytes are not copied once more to be shared.
    Owned(Arc<Vec<u8>>),
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
// alive and never moves or changes; an owned section is an `Arc<Vec<u8>>`, whose heap data
// does not move when the `Arc` does, and which nothing mutates while it is shared.
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

/// The sections every context of a module shares: all that `addr2line` reads but
/// `.debug_info`.
type Sections = gimli::DwarfSections<SectionBytes>;

/// A module's `.debug_info`: in place, or inflated as far as lookups need.
#[derive(Debug)]
enum Info {
    Whole(SectionBytes),
    Inflating(Inflating),
    /// Unreadable (a compression format that cannot be decoded, a corrupt stream).
    Missing,
}

impl Info {
    /// The section from its start to at least `end` (or to its end, if sooner).
    fn up_to(&mut self, end: usize) -> &[u8] {
        match self {
            Info::Whole(bytes) => bytes,
            Info::Inflating(stream) => stream.up_to(end),
            Info::Missing => &[],
        }
    }

    /// The whole section, inflating what is left of it.
    fn whole(&mut self) -> Option<SectionBytes> {
        if let Info::Inflating(stream) = self {
            let stream = std::mem::replace(stream, Inflating::new(empty(), 0));
            *self = match stream.into_whole() {
                Some(bytes) => Info::Whole(SectionBytes::Owned(Arc::new(bytes))),
                None => Info::Missing,
            };
        }
        match self {
            Info::Whole(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }

    /// The section's full length.
    fn len(&self) -> usize {
        match self {
            Info::Whole(bytes) => bytes.len(),
            Info::Inflating(stream) => stream.size(),
            Info::Missing => 0,
        }
    }
}

/// Which `addr2line` context answers for an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scope {
    /// The context over the units `.debug_aranges` says cover the address (context key:
    /// those units' offsets).
    Listed,
    /// An address no arange covers: the context over the units `.debug_aranges` does not
    /// list (which `addr2line` would search by their own ranges).
    Unlisted,
    /// No usable `.debug_aranges`: one context over every unit, as `addr2line` is meant to
    /// be used.
    All,
}

/// The DWARF of one module, ready for lookups by link-time (unrelocated) address.
pub(crate) struct Dwarf {
    endian: gimli::RunTimeEndian,
    sections: Sections,
    info: Info,
    /// `.debug_aranges`, when the module has it.
    aranges: Option<ArangeIndex>,
    /// Unit starts found so far (for references between units, and for the unlisted units).
    starts: UnitStarts,
    /// Contexts by the offsets of the units that cover their addresses (empty: [`Scope`]
    /// `Unlisted` or `All`); `None` when that context could not be built.
    contexts: HashMap<(Scope, Vec<usize>), Option<addr2line::Context<Reader>>>,
    /// File names by path, so that all frames of one file share an allocation.
    files: HashMap<String, Arc<str>>,
    /// Contexts built so far (or attempted): each parsed its units' headers and inflated
    /// what it needed.
    pub(crate) contexts_built: u64,
}

impl std::fmt::Debug for Dwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dwarf")
            .field("info", &self.info)
            .field("contexts", &self.contexts.len())
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

fn empty() -> SectionBytes {
    SectionBytes::Owned(Arc::new(Vec::new()))
}

impl Dwarf {
    /// The DWARF of the file whose bytes are `data` (ELF, or a Mach-O `.dSYM` DWARF file);
    /// `None` when it has no `.debug_info` or the sections do not parse.
    pub(crate) fn load(data: Arc<FileBytes>) -> Option<Dwarf> {
        let file = object::File::parse(&**data).ok()?;
        let info_section = file.section_by_name(".debug_info")?;
        if info_section.size() == 0 {
            return None;
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let info = info_bytes(&data, &info_section);
        let sections = Sections::load(|id| -> Result<SectionBytes, gimli::Error> {
            Ok(match file.section_by_name(id.name()) {
                Some(section) if needed(id) && id != gimli::SectionId::DebugInfo => {
                    section_bytes(&data, &section).unwrap_or_else(empty)
                }
                _ => empty(),
            })
        })
        .ok()?;
        let aranges = ArangeIndex::parse(&sections.debug_aranges.borrow(|s| reader(s, endian)));
        Some(Dwarf {
            endian,
            sections,
            info,
            aranges,
            starts: UnitStarts::default(),
            contexts: HashMap::new(),
            files: HashMap::new(),
            contexts_built: 0,
        })
    }

    /// The inline chain at link-time address `probe`, innermost first (the function whose
    /// code is at `probe` first, the machine function that contains it last). Each frame's
    /// line is where execution is in that function: `probe` itself for the innermost, the
    /// call site of the next-inner frame for the others. Empty when DWARF does not cover
    /// `probe` or cannot be read there.
    pub(crate) fn frames(&mut self, probe: u64) -> Vec<DwarfFrame> {
        let mut out = Vec::new();
        let key = match &self.aranges {
            Some(aranges) => match aranges.covering(probe) {
                units if units.is_empty() => (Scope::Unlisted, units),
                units => (Scope::Listed, units),
            },
            None => (Scope::All, Vec::new()),
        };
        if !self.contexts.contains_key(&key) {
            let context = self.build(key.0, &key.1);
            self.contexts_built += 1;
            self.contexts.insert(key.clone(), context);
        }
        let Some(Some(context)) = self.contexts.get(&key) else {
            return out;
        };
        let Ok(mut iter) = context.find_frames(probe).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let name = raw_function_name(&frame);
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

    /// Builds the context of `scope` (for `Listed`, over `covering` and what it refers to).
    /// A subset that cannot be built falls back to the context over every unit.
    fn build(&mut self, scope: Scope, covering: &[usize]) -> Option<addr2line::Context<Reader>> {
        let subset = match scope {
            Scope::Listed => self.subset(covering.to_vec()),
            Scope::Unlisted => {
                let endian = self.endian;
                let info = self.info.up_to(self.info.len());
                self.starts.walk(info, endian, usize::MAX);
                let aranges = self.aranges.as_ref()?;
                let (abbrev, line) = (
                    (self.sections.debug_abbrev).borrow(|s| gimli::EndianSlice::new(s, endian)),
                    (self.sections.debug_line).borrow(|s| gimli::EndianSlice::new(s, endian)),
                );
                let info = gimli::DebugInfo::new(info, endian);
                let unlisted: Vec<usize> = self
                    .starts
                    .all()
                    .iter()
                    .copied()
                    .filter(|&start| !aranges.lists(start))
                    .filter(|&start| units::may_have_code(&info, &abbrev, &line, start))
                    .collect();
                if unlisted.is_empty() {
                    // What one context over every unit would find: nothing.
                    return None;
                }
                self.subset(unlisted)
            }
            Scope::All => None,
        };
        let info = match subset {
            Some(info) => info,
            None => self.info.whole()?,
        };
        let mut dwarf = self.sections.borrow(|s| reader(s, self.endian));
        dwarf.debug_info = gimli::DebugInfo::from(Reader::new(info, self.endian));
        addr2line::Context::from_dwarf(dwarf).ok()
    }

    /// A `.debug_info` holding the units starting at `wanted` and every unit they refer to,
    /// transitively, each at its own offset; `None` when one of them cannot be read.
    fn subset(&mut self, mut wanted: Vec<usize>) -> Option<SectionBytes> {
        let endian = self.endian;
        let abbrev = self
            .sections
            .debug_abbrev
            .borrow(|s| gimli::EndianSlice::new(s, endian));
        let mut set = UnitSet::default();
        while let Some(start) = wanted.pop() {
            if set.contains(start) {
                continue;
            }
            // Enough for any unit's length field, then the whole unit.
            let field = self.info.up_to(start.saturating_add(12));
            let length = units::unit_length(field, start, endian)?;
            let info = self.info.up_to(start.saturating_add(length));
            for target in set.add(info, &abbrev, endian, start)? {
                // The header of the unit holding `target` is before it.
                let info = self.info.up_to(target.saturating_add(1));
                self.starts.walk(info, endian, target);
                wanted.push(self.starts.containing(target)?);
            }
        }
        let info = self.info.up_to(set.end());
        let subset = units::subset_info(info, &set, self.endian)?;
        let len = subset.len();
        Some(SectionBytes::Mapped {
            file: Arc::new(subset),
            range: 0..len,
        })
    }
}

fn reader(section: &SectionBytes, endian: gimli::RunTimeEndian) -> Reader {
    Reader::new(section.clone(), endian)
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
    if let Some(bytes) = in_place(data, section) {
        return Some(bytes);
    }
    let bytes = section.uncompressed_data().ok()?;
    Some(SectionBytes::Owned(Arc::new(bytes.into_owned())))
}

/// `section`'s bytes as a range of the file, when it is stored uncompressed.
fn in_place(data: &Arc<FileBytes>, section: &object::Section<'_, '_>) -> Option<SectionBytes> {
    let stored = section.compressed_file_range().ok()?;
    if stored.format != object::CompressionFormat::None {
        return None;
    }
    let start = usize::try_from(stored.offset).ok()?;
    let end = start.checked_add(usize::try_from(stored.uncompressed_size).ok()?)?;
    (end <= data.len()).then(|| SectionBytes::Mapped {
        file: Arc::clone(data),
        range: start..end,
    })
}

/// `.debug_info`: in place when stored uncompressed, inflated on demand when zlib-compressed
/// (the common case, and the costly one), decompressed whole otherwise.
fn info_bytes(data: &Arc<FileBytes>, section: &object::Section<'_, '_>) -> Info {
    if let Some(bytes) = in_place(data, section) {
        return Info::Whole(bytes);
    }
    let zlib = section.compressed_file_range().ok().and_then(|stored| {
        let start = usize::try_from(stored.offset).ok()?;
        let end = start.checked_add(usize::try_from(stored.compressed_size).ok()?)?;
        let size = usize::try_from(stored.uncompressed_size).ok()?;
        (stored.format == object::CompressionFormat::Zlib && end <= data.len()).then(|| {
            let input = SectionBytes::Mapped {
                file: Arc::clone(data),
                range: start..end,
            };
            Inflating::new(input, size)
        })
    });
    match zlib {
        Some(stream) => Info::Inflating(stream),
        None => section_bytes(data, section).map_or(Info::Missing, Info::Whole),
    }
}

/// The function name of `frame` as its DWARF has it (mangled), where it has a readable one.
fn raw_function_name<R: gimli::Reader>(frame: &addr2line::Frame<'_, R>) -> Option<String> {
    frame
        .function
        .as_ref()
        .and_then(|f| f.raw_name().ok())
        .map(|n| n.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    type Expected = Vec<(Option<String>, Option<String>, Option<u32>)>;

    /// What one `addr2line` context over every unit of `path` (all sections decompressed
    /// whole: the plain way to use it) gives for each of `probes`.
    fn reference(path: &Path, probes: &[u64]) -> Vec<Expected> {
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let sections = gimli::DwarfSections::load(|id| -> Result<Vec<u8>, gimli::Error> {
            Ok(file
                .section_by_name(id.name())
                .filter(|_| needed(id))
                .and_then(|s| s.uncompressed_data().ok())
                .map_or_else(Vec::new, |d| d.into_owned()))
        })
        .unwrap();
        let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, endian));
        let context = addr2line::Context::from_dwarf(dwarf).unwrap();
        probes
            .iter()
            .map(|&probe| {
                let mut out = Vec::new();
                if let Ok(mut iter) = context.find_frames(probe).skip_all_loads() {
                    while let Ok(Some(frame)) = iter.next() {
                        let location = frame.location.as_ref();
                        out.push((
                            raw_function_name(&frame),
                            location.and_then(|l| l.file).map(str::to_owned),
                            location.and_then(|l| l.line),
                        ));
                    }
                }
                out
            })
            .collect()
    }

    /// Addresses in `path`'s functions (start, middle, last byte) of every `step`-th one.
    fn probes(path: &Path, step: usize) -> Vec<u64> {
        use object::ObjectSymbol;
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let mut functions: Vec<(u64, u64)> = file
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.size()))
            .collect();
        functions.sort_unstable();
        functions.dedup();
        functions
            .iter()
            .step_by(step)
            .flat_map(|&(start, size)| [start, start + size / 2, start + size - 1])
            .collect()
    }

    /// The lookups through per-address unit subsets give what one context over the whole
    /// section gives, for `path` (asked in a scrambled order, so units are reached out of
    /// order and a compressed section is inflated in several steps).
    fn same_as_whole_context(path: &Path, step: usize) {
        let mut probes = probes(path, step);
        assert!(probes.len() > 30, "{}: too few functions", path.display());
        let n = probes.len();
        probes = (0..n).map(|i| probes[(i * 7919) % n]).collect();
        let expected = reference(path, &probes);
        let mut dwarf = Dwarf::load(Arc::new(FileBytes::open(path).unwrap())).unwrap();
        let mut with_frames = 0;
        for (probe, expected) in probes.iter().zip(&expected) {
            // Each address is answered from a subset, not from the fallback over all units.
            let covering = dwarf.aranges.as_ref().unwrap().covering(*probe);
            if !covering.is_empty() {
                assert!(dwarf.subset(covering).is_some(), "no subset at {probe:#x}");
            }
            let got: Expected = dwarf
                .frames(*probe)
                .into_iter()
                .map(|f| (f.name, f.file.map(|f| f.to_string()), f.line))
                .collect();
            assert_eq!(&got, expected, "{} at {probe:#x}", path.display());
            with_frames += usize::from(!got.is_empty());
        }
        assert!(with_frames * 2 > probes.len(), "{with_frames} of {n}");
    }

    #[test]
    fn subsets_agree_with_the_whole_context_on_this_test_binary() {
        same_as_whole_context(&std::env::current_exe().unwrap(), 7);
    }

    /// The system libc's separate debug file (Debian's libc6-dbg: zlib-compressed DWARF),
    /// when it is installed.
    fn libc_debug_file() -> Option<PathBuf> {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
        let data = std::fs::read(libc).ok()?;
        let id = object::File::parse(&*data).ok()?.build_id().ok()??.to_vec();
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let path = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ));
        path.exists().then_some(path)
    }

    #[test]
    fn a_compressed_section_is_inflated_only_as_far_as_the_units_asked_for() {
        let Some(path) = libc_debug_file() else {
            return eprintln!("no separate debug file for libc: skipped");
        };
        let mut dwarf = Dwarf::load(Arc::new(FileBytes::open(&path).unwrap())).unwrap();
        let Info::Inflating(stream) = &mut dwarf.info else {
            return eprintln!("{}: .debug_info is not zlib-compressed", path.display());
        };
        assert_eq!(stream.up_to(0).len(), 0);
        // The unit of the lowest function comes early in libc's `.debug_info`.
        let first = probes(&path, 1)[0];
        assert!(!dwarf.frames(first).is_empty());
        let Info::Inflating(stream) = &mut dwarf.info else {
            panic!("inflated whole");
        };
        let inflated = stream.up_to(0).len();
        assert!(
            inflated < stream.size() / 2,
            "{inflated} of {}",
            stream.size()
        );
    }

    #[test]
    fn subsets_agree_with_the_whole_context_on_libc_debug_file() {
        match libc_debug_file() {
            Some(path) => same_as_whole_context(&path, 5),
            None => eprintln!("no separate debug file for libc: skipped"),
        }
    }
}
