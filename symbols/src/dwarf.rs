//! Inlined frames and source lines from DWARF, through `addr2line` (gimli).
//!
//! One [`Dwarf`] per module, created on the first address of that module that needs frames.
//! Only the DWARF sections are kept (copied out of the file, decompressed where needed);
//! `addr2line` parses compilation units lazily, on the first address that falls in each, so
//! a profile touching a few functions of a large library parses only their units.

use std::sync::Arc;

use addr2line::gimli;
use hashbrown::HashMap;
use object::{Object, ObjectSection};

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

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
    /// The DWARF of `file` (ELF, or a Mach-O `.dSYM` DWARF file); `None` when it has no
    /// `.debug_info` or the sections do not parse.
    pub(crate) fn load(file: &object::File<'_>) -> Option<Dwarf> {
        let info = file.section_by_name(".debug_info")?;
        if info.size() == 0 {
            return None;
        }
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            let data = file
                .section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .map(|d| Arc::<[u8]>::from(&*d))
                .unwrap_or_else(|| Arc::from(&[][..]));
            Ok(Reader::new(data, endian))
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
