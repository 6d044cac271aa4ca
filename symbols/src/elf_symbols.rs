//! Everything an object file on disk yields for a module: its function table (symbols of the
//! binary, of its separate debug file or of its MiniDebugInfo, and `.eh_frame` extents for
//! the functions none of them names) and which file holds its DWARF.

use std::path::{Path, PathBuf};

use object::Object;

use crate::debug_files::{self, DebugSearch};
use crate::eh_frame;
use crate::mapped_file::FileBytes;
use crate::table::SymbolTable;

/// The symbols of one module read from disk.
pub(crate) struct FileSymbols {
    pub(crate) table: SymbolTable,
    /// The file whose DWARF describes the module: its separate debug file, or the binary
    /// itself; `None` when neither has `.debug_info`.
    pub(crate) dwarf_file: Option<PathBuf>,
}

/// Reads the module whose bytes are at `read_path` (for the Linux main executable
/// `/proc/self/exe`), whose real path is `path` (where its debug files are looked for) and
/// whose load bias is `bias`. Never fails: an unreadable file gives an empty table.
pub(crate) fn load(
    read_path: &Path,
    path: Option<&Path>,
    bias: u64,
    search: &DebugSearch,
) -> FileSymbols {
    let empty = FileSymbols {
        table: SymbolTable::default(),
        dwarf_file: None,
    };
    let Ok(data) = FileBytes::open(read_path) else {
        return empty;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return empty;
    };
    let mut candidates = SymbolTable::candidates(&file, bias);
    let mut has_symtab = file.section_by_name(".symtab").is_some();
    let mut dwarf_file = has_debug_info(&file).then(|| read_path.to_owned());

    let debug = if file.format() == object::BinaryFormat::Elf {
        debug_files::find(path.or(Some(read_path)), &file, search)
    } else {
        None
    };
    if let Some(debug) = &debug {
        if let Ok(debug_file) = object::File::parse(&*debug.data) {
            candidates.extend(SymbolTable::candidates(&debug_file, bias));
            has_symtab |= debug_file.section_by_name(".symtab").is_some();
            if has_debug_info(&debug_file) {
                dwarf_file = Some(debug.path.clone());
            }
        }
    }
    if !has_symtab {
        if let Some(mini) = debug_files::mini_debuginfo(&file) {
            if let Ok(mini_file) = object::File::parse(&*mini) {
                candidates.extend(SymbolTable::candidates(&mini_file, bias));
            }
        }
    }
    candidates.extend(
        eh_frame::function_ranges(&file, bias)
            .into_iter()
            .map(|(start, len)| crate::table::Candidate::unnamed(start, len)),
    );
    FileSymbols {
        table: SymbolTable::build(candidates),
        dwarf_file,
    }
}

/// The function table of an object image in memory (the Linux vDSO): its own symbols and
/// `.eh_frame` extents, no debug files.
#[cfg(target_os = "linux")]
pub(crate) fn table_from_image(data: &[u8], bias: u64) -> SymbolTable {
    match object::File::parse(data) {
        Ok(file) => {
            let mut candidates = SymbolTable::candidates(&file, bias);
            candidates.extend(
                eh_frame::function_ranges(&file, bias)
                    .into_iter()
                    .map(|(start, len)| crate::table::Candidate::unnamed(start, len)),
            );
            SymbolTable::build(candidates)
        }
        Err(_) => SymbolTable::default(),
    }
}

fn has_debug_info(file: &object::File<'_>) -> bool {
    use object::ObjectSection;
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() != 0 && s.kind() != object::SectionKind::UninitializedData)
}
