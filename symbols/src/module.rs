//! One module's symbols as the resolver holds them: the platform's description of the module,
//! its function table (loaded on the first lookup), its DWARF (loaded on the first lookup
//! that asks for inline frames) and the demangled names handed out so far.

use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::debug_files::{self, DebugSearch};
use crate::demangle::Demangler;
use crate::dwarf::Dwarf;
use crate::elf_symbols;
use crate::platform::{LoadedModule, Source};
use crate::table::SymbolTable;
use crate::{Frame, Symbol};

/// Where a module's DWARF is, once its table is loaded.
#[derive(Clone, Debug)]
pub(crate) enum DwarfFile {
    /// An ELF file (the binary or its verified separate debug file).
    Elf(PathBuf),
    /// A `.dSYM` bundle's DWARF file beside a Mach-O image, used only if its `LC_UUID` is
    /// this one.
    Dsym { binary: PathBuf, uuid: [u8; 16] },
}

/// One module and its lazily loaded symbols.
#[derive(Debug)]
pub(crate) struct Module {
    pub(crate) loaded: LoadedModule,
    /// Function table, loaded on first lookup; a module whose bytes cannot be read or parsed
    /// gets an empty table so that the failure is not retried on every address.
    pub(crate) table: Option<SymbolTable>,
    /// Where the DWARF is, decided when the table is loaded.
    pub(crate) dwarf_file: Option<DwarfFile>,
    /// The DWARF, loaded on the first inline lookup (`Some(None)`: there is none).
    dwarf: Option<Option<Dwarf>>,
    /// Demangled names by function start (symbol table) and by raw name (DWARF), so that all
    /// addresses of one function share a single allocation and demangling runs once.
    pub(crate) names: HashMap<u64, Arc<str>>,
    inline_names: HashMap<String, Arc<str>>,
}

impl Module {
    pub(crate) fn new(loaded: LoadedModule) -> Module {
        Module {
            loaded,
            table: None,
            dwarf_file: None,
            dwarf: None,
            names: HashMap::new(),
            inline_names: HashMap::new(),
        }
    }

    /// Keeps what `previous` (the same module in an older snapshot) already loaded.
    pub(crate) fn adopt(&mut self, previous: Module) {
        self.table = previous.table;
        self.dwarf_file = previous.dwarf_file;
        self.dwarf = previous.dwarf;
        self.names = previous.names;
        self.inline_names = previous.inline_names;
    }

    /// The module's table, loading it if needed.
    pub(crate) fn table(&mut self, search: &DebugSearch) -> &SymbolTable {
        if self.table.is_none() {
            let (table, dwarf_file) = load(&self.loaded, search);
            self.dwarf_file = dwarf_file;
            self.table = Some(table);
        }
        self.table.get_or_insert_with(SymbolTable::default)
    }

    /// Resolves `addr`, which lies inside this module. The flag says whether a symbol named
    /// the function (rather than `module+0x<start>` or `module+0x<addr>`).
    pub(crate) fn resolve(
        &mut self,
        addr: u64,
        search: &DebugSearch,
        demangler: &Demangler,
    ) -> (Symbol, bool) {
        self.table(search);
        let Module {
            loaded,
            table,
            names,
            ..
        } = self;
        let table = table.get_or_insert_with(SymbolTable::default);
        let module = Some(Arc::clone(&loaded.name));
        let offset_name = |at: u64| -> Arc<str> {
            format!("{}+{:#x}", loaded.name, at.wrapping_sub(loaded.offset_base)).into()
        };
        match table.lookup(addr) {
            Some((start, raw)) => {
                let name = names.entry(start).or_insert_with(|| match raw {
                    Some(raw) => Arc::from(demangler.demangle(raw)),
                    None => offset_name(start),
                });
                let symbol = Symbol {
                    name: Arc::clone(name),
                    function_start: Some(start),
                    module,
                };
                (symbol, raw.is_some())
            }
            None => {
                let symbol = Symbol {
                    name: offset_name(addr),
                    function_start: None,
                    module,
                };
                (symbol, false)
            }
        }
    }

    /// The inline chain at `addr`, outermost first, given the symbol `resolve` found for it.
    pub(crate) fn frames(
        &mut self,
        addr: u64,
        symbol: Symbol,
        named: bool,
        demangler: &Demangler,
    ) -> Vec<Frame> {
        let probe = addr.wrapping_sub(self.loaded.bias);
        let raw = match self.dwarf() {
            Some(dwarf) => dwarf.frames(probe),
            None => Vec::new(),
        };
        if raw.is_empty() {
            return vec![Frame::from_symbol(symbol)];
        }
        raw.into_iter()
            .rev()
            .enumerate()
            .map(|(depth, frame)| {
                let outermost = depth == 0;
                // The table's name wins for the machine function, so that `resolve` and
                // `resolve_frames` agree on it; DWARF names the inlined ones (and the machine
                // function when no symbol does).
                let name = match &frame.name {
                    _ if outermost && named => Arc::clone(&symbol.name),
                    Some(raw) => self.inline_name(raw, frame.file.as_deref(), demangler),
                    None if outermost => Arc::clone(&symbol.name),
                    None => Arc::from("[inlined]"),
                };
                Frame {
                    name,
                    function_start: symbol.function_start,
                    module: symbol.module.clone(),
                    file: frame.file,
                    line: frame.line,
                    inlined: !outermost,
                }
            })
            .collect()
    }

    /// The demangled name of an inlined function; a short name (no `::` path, as DWARF
    /// without linkage names gives) from Rust's standard library gets its module from its
    /// `file` ([`crate::demangle::rust_library_module`]).
    fn inline_name(&mut self, raw: &str, file: Option<&str>, demangler: &Demangler) -> Arc<str> {
        let name = match self.inline_names.get(raw) {
            Some(name) => Arc::clone(name),
            None => {
                let name: Arc<str> = Arc::from(demangler.demangle(raw));
                self.inline_names.insert(raw.to_owned(), Arc::clone(&name));
                name
            }
        };
        // Already a path: `a::b<T>`, `<T as Trait>::f`. A short name's
        // generic arguments may hold paths (`catch_unwind<core::…>`).
        let head = name.split('<').next().unwrap_or_default();
        if name.starts_with('<') || head.contains("::") {
            return name;
        }
        let Some(module) = file.and_then(crate::demangle::rust_library_module) else {
            return name;
        };
        let qualified = format!("{module}::{name}");
        if let Some(interned) = self.inline_names.get(&qualified) {
            return Arc::clone(interned);
        }
        let interned: Arc<str> = Arc::from(qualified.as_str());
        self.inline_names.insert(qualified, Arc::clone(&interned));
        interned
    }

    /// How much DWARF loading this module did: 1 for reading its DWARF sections (also when
    /// it turned out to have none), plus 1 per `addr2line` context built. Never decreases.
    pub(crate) fn dwarf_loads(&self) -> u64 {
        match &self.dwarf {
            None => 0,
            Some(None) => 1,
            Some(Some(dwarf)) => 1 + dwarf.contexts_built,
        }
    }

    /// The module's DWARF, loading it on first use.
    fn dwarf(&mut self) -> Option<&mut Dwarf> {
        if self.dwarf.is_none() {
            let dwarf = self.dwarf_file.as_ref().and_then(load_dwarf);
            self.dwarf = Some(dwarf);
        }
        self.dwarf.as_mut().and_then(Option::as_mut)
    }
}

/// Reads a module's table and decides where its DWARF is. Never fails: an unreadable or
/// unparsable module (missing file, no permission, unknown format) simply has no symbols and
/// resolves as `module+0xoffset`.
fn load(loaded: &LoadedModule, search: &DebugSearch) -> (SymbolTable, Option<DwarfFile>) {
    let dsym = || {
        Some(DwarfFile::Dsym {
            binary: loaded.path.clone()?,
            uuid: loaded.uuid?,
        })
    };
    match &loaded.source {
        Source::File(read_path) => {
            let symbols = elf_symbols::load(read_path, loaded.path.as_deref(), loaded.bias, search);
            let dwarf = symbols.dwarf_file.map(DwarfFile::Elf).or_else(dsym);
            (symbols.table, dwarf)
        }
        #[cfg(target_os = "linux")]
        Source::Memory { start, len } => {
            let table = crate::platform::linux::with_memory_image(*start, *len, |data| {
                elf_symbols::table_from_image(data, loaded.bias)
            });
            (table, None)
        }
        #[cfg(target_os = "linux")]
        Source::Copied(data) => (elf_symbols::table_from_image(data, loaded.bias), None),
        #[cfg(target_os = "macos")]
        Source::MachImage { header } => (
            crate::platform::macos::symbol_table(*header, loaded.path.as_deref()),
            dsym(),
        ),
        Source::None => (SymbolTable::default(), dsym()),
    }
}

fn load_dwarf(file: &DwarfFile) -> Option<Dwarf> {
    match file {
        DwarfFile::Elf(path) => {
            let data = crate::mapped_file::FileBytes::open(path).ok()?;
            Dwarf::load(Arc::new(data))
        }
        DwarfFile::Dsym { binary, uuid } => {
            // `find_dsym` keeps the file only when its UUID is `uuid`.
            let found = debug_files::find_dsym(binary, *uuid)?;
            Dwarf::load(Arc::new(found.data))
        }
    }
}
