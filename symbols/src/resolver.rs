//! The cached address-to-symbol resolver and its module bookkeeping.
//!
//! This part is platform-neutral: it works on a list of [`Module`]s (load bias, mapped
//! address ranges, where to read symbols from). Platform code (`linux.rs`, `macos.rs`) only
//! produces that list and reads in-memory images.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::macho_image::{ImageMemory, MachImage, MachOError};
use crate::{demangle, Symbol, SymbolTable};

/// Where a module's symbols come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// An object file on disk (for the main executable: `/proc/self/exe`, which stays valid
    /// even if the file was replaced or deleted after start). Only Linux discovers file
    /// modules (on macOS images are read in memory), but the variant stays on every platform
    /// because the platform-independent tests use it for a file that cannot be read.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    File(PathBuf),
    /// An image that exists only in this process's memory (the Linux vDSO), as an address
    /// and length of a mapping that stays mapped for the life of the process.
    #[cfg(target_os = "linux")]
    Memory { start: u64, len: u64 },
    /// A Mach-O image that dyld mapped in this process (macOS), read in place because system
    /// libraries live only in the dyld shared cache. `header` is its load address; the
    /// module's bias is its slide.
    #[cfg(target_os = "macos")]
    MachImage { header: u64 },
    /// No known source: the module is resolved as `module+0xoffset` only.
    None,
}

/// One loaded module (executable, shared library, vDSO).
#[derive(Debug)]
pub(crate) struct Module {
    /// File name shown in `module+0xoffset` and in [`Symbol::module`].
    pub(crate) name: Arc<str>,
    pub(crate) source: Source,
    /// Load bias: runtime address = link-time address + bias (the slide, on macOS).
    pub(crate) bias: u64,
    /// Where `module+0xoffset` offsets count from. The bias on Linux, where offsets are
    /// link-time addresses as in `nm` output; the load address (header) on macOS, as in
    /// Apple's crash reports, where an executable's link-time addresses start at 4 GiB.
    offset_base: u64,
    /// Runtime address ranges of the module's loadable segments, used to map an address to
    /// its module.
    pub(crate) ranges: Vec<Range<u64>>,
    /// Symbol table, loaded on first lookup; a module whose file cannot be read or parsed
    /// gets an empty table so that the failure is not retried on every address.
    table: Option<SymbolTable>,
    /// Demangled names by function start, so that all addresses of one function share a
    /// single allocation and demangling runs once per function.
    names: HashMap<u64, Arc<str>>,
}

impl Module {
    pub(crate) fn new(name: Arc<str>, source: Source, bias: u64, ranges: Vec<Range<u64>>) -> Self {
        Module {
            name,
            source,
            bias,
            offset_base: bias,
            ranges,
            table: None,
            names: HashMap::new(),
        }
    }

    /// Counts `module+0xoffset` offsets from `base` instead of from the bias.
    pub(crate) fn with_offset_base(self, base: u64) -> Self {
        Module {
            offset_base: base,
            ..self
        }
    }

    /// Two snapshots describe the same module when it was loaded from the same source at the
    /// same place; only then may its cached table be reused.
    fn same_as(&self, other: &Module) -> bool {
        self.source == other.source
            && self.bias == other.bias
            && self.offset_base == other.offset_base
            && self.ranges == other.ranges
    }

    /// The module's table, loading it if needed (tests of the Linux process inspect real
    /// tables through this).
    #[cfg(all(test, target_os = "linux"))]
    fn table(&mut self) -> &SymbolTable {
        let (source, bias) = (&self.source, self.bias);
        self.table.get_or_insert_with(|| load_table(source, bias))
    }

    /// Resolves `addr`, which lies inside this module.
    fn resolve(&mut self, addr: u64) -> Symbol {
        let (source, bias) = (&self.source, self.bias);
        // Borrow the table and the name cache as separate fields so the raw name can be
        // demangled straight from the table without copying it.
        let table = self.table.get_or_insert_with(|| load_table(source, bias));
        let module = Some(Arc::clone(&self.name));
        match table.lookup(addr) {
            Some((start, raw)) => {
                let name = self
                    .names
                    .entry(start)
                    .or_insert_with(|| Arc::from(demangle(raw)));
                Symbol {
                    name: Arc::clone(name),
                    function_start: Some(start),
                    module,
                }
            }
            None => Symbol {
                name: format!("{}+{:#x}", self.name, addr.wrapping_sub(self.offset_base)).into(),
                function_start: None,
                module,
            },
        }
    }
}

/// Reads a module's symbols. Never fails: an unreadable or unparsable module (missing file,
/// no permission, unknown format) simply has no symbols and resolves as `module+0xoffset`.
fn load_table(source: &Source, bias: u64) -> SymbolTable {
    match source {
        Source::File(path) => match std::fs::read(path) {
            Ok(data) => table_from_image(&data, bias),
            Err(_) => SymbolTable::default(),
        },
        #[cfg(target_os = "linux")]
        Source::Memory { start, len } => {
            crate::linux::with_memory_image(*start, *len, |data| table_from_image(data, bias))
        }
        #[cfg(target_os = "macos")]
        Source::MachImage { header } => crate::macos::symbol_table(*header, bias),
        Source::None => SymbolTable::default(),
    }
}

/// Parses an object image (any format `object` was built with) into a table.
pub(crate) fn table_from_image(data: &[u8], bias: u64) -> SymbolTable {
    match object::File::parse(data) {
        Ok(file) => SymbolTable::from_object(&file, bias),
        Err(_) => SymbolTable::default(),
    }
}

/// Cached resolver for the current process.
///
/// Holds a snapshot of the loaded modules; call [`Resolver::refresh`] after libraries may
/// have been loaded or unloaded. Not thread-safe by design (`&mut self`): it is used by the
/// one thread that turns recorded samples into names.
///
/// Nothing here may run while a sampled thread is stopped: building, refreshing and
/// resolving allocate, and on macOS call into dyld, whose lock the stopped thread may hold.
/// Samplers resolve after every thread has been resumed.
#[derive(Debug)]
pub struct Resolver {
    modules: Vec<Module>,
    /// `(start, end, module index)` for every segment of every module, sorted by start, so
    /// that an address finds its module by binary search.
    ranges: Vec<(u64, u64, usize)>,
    /// Every address resolved so far. Stacks repeat heavily, so most lookups end here.
    cache: HashMap<u64, Symbol>,
    /// Whether the modules are this process's (so [`Resolver::refresh`] re-reads them) or
    /// were given by the caller (so it keeps them).
    of_current_process: bool,
}

impl Resolver {
    /// Builds a resolver over an explicit module list (platform snapshots and tests).
    pub(crate) fn from_modules(modules: Vec<Module>) -> Resolver {
        let mut resolver = Resolver {
            modules,
            ranges: Vec::new(),
            cache: HashMap::new(),
            of_current_process: false,
        };
        resolver.rebuild_ranges();
        resolver
    }

    /// A resolver over this process's modules, which [`Resolver::refresh`] keeps current.
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    fn for_process_modules(modules: Vec<Module>) -> std::io::Result<Resolver> {
        if modules.is_empty() {
            return Err(std::io::Error::other(
                "the dynamic loader reported no modules",
            ));
        }
        Ok(Resolver {
            of_current_process: true,
            ..Resolver::from_modules(modules)
        })
    }

    /// Snapshot of the modules loaded in this process, via `dl_iterate_phdr`.
    ///
    /// The main executable (empty `dlpi_name`) is read through `/proc/self/exe`; the vDSO,
    /// which has no file, is parsed from its in-memory image. Symbol tables are loaded lazily
    /// per module on first lookup (file read once; `.symtab` and `.dynsym` merged and
    /// deduplicated).
    #[cfg(target_os = "linux")]
    pub fn for_current_process() -> std::io::Result<Resolver> {
        Resolver::for_process_modules(crate::linux::current_modules())
    }

    /// Snapshot of the images dyld has loaded in this process (`_dyld_image_count` and
    /// friends).
    ///
    /// Symbol tables are read lazily per image on first lookup, from the image's mapping in
    /// memory (`LC_SYMTAB` through `__LINKEDIT`), which also covers system libraries that
    /// exist only in the dyld shared cache.
    #[cfg(target_os = "macos")]
    pub fn for_current_process() -> std::io::Result<Resolver> {
        Resolver::for_process_modules(crate::macos::current_modules())
    }

    /// Module discovery is implemented for Linux and macOS only.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    pub fn for_current_process() -> std::io::Result<Resolver> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "module discovery is not implemented on this platform",
        ))
    }

    /// A resolver over Mach-O images mapped in `memory` the way dyld maps them (each image
    /// given by a name and its [`MachImage`], parsed from the same memory).
    ///
    /// Modules are built as the macOS backend builds them from dyld's images, except that
    /// symbol tables are read here, while `memory` is borrowed, rather than on first lookup.
    /// An address in an image without function symbols resolves to `name+0xoffset`, counted
    /// from the image's load address. [`Resolver::refresh`] keeps these images. Tests use
    /// this with fixtures on any platform.
    pub fn from_macho_images<'a>(
        memory: &impl ImageMemory,
        images: impl IntoIterator<Item = (&'a str, &'a MachImage)>,
    ) -> Result<Resolver, MachOError> {
        let modules = images
            .into_iter()
            .map(|(name, image)| {
                let mut module = image.module(Arc::from(name), Source::None);
                module.table = Some(image.symbol_table(memory)?);
                Ok(module)
            })
            .collect::<Result<Vec<_>, MachOError>>()?;
        Ok(Resolver::from_modules(modules))
    }

    /// Re-reads the module list if it changed (dlopen/dlclose), keeping the cached tables of
    /// modules that are still present. The address cache is dropped on any change because an
    /// address may now belong to a different module. Does nothing for a resolver built from
    /// given modules.
    #[cfg(target_os = "linux")]
    pub fn refresh(&mut self) {
        if self.of_current_process {
            let fresh = crate::linux::current_modules();
            self.replace_modules(fresh);
        }
    }

    /// Re-reads the image list if it changed (dlopen/dlclose), keeping the cached tables of
    /// images that are still loaded at the same place. The check compares each image's load
    /// address and slide with the snapshot, so an unchanged list costs two dyld calls per
    /// image and reads no load commands. Does nothing for a resolver built from given
    /// modules.
    #[cfg(target_os = "macos")]
    pub fn refresh(&mut self) {
        if self.of_current_process && !crate::macos::same_images(&self.modules) {
            let fresh = crate::macos::current_modules();
            self.replace_modules(fresh);
        }
    }

    /// Module discovery is implemented for Linux and macOS only; nothing to refresh.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    pub fn refresh(&mut self) {}

    /// Installs a new module snapshot, reusing tables of unchanged modules.
    fn replace_modules(&mut self, mut fresh: Vec<Module>) {
        let unchanged = fresh.len() == self.modules.len()
            && fresh.iter().zip(&self.modules).all(|(a, b)| a.same_as(b));
        if unchanged {
            return;
        }
        let mut old = std::mem::take(&mut self.modules);
        for module in &mut fresh {
            if let Some(pos) = old.iter().position(|o| o.same_as(module)) {
                let previous = old.swap_remove(pos);
                module.table = previous.table;
                module.names = previous.names;
            }
        }
        self.modules = fresh;
        self.rebuild_ranges();
        self.cache.clear();
    }

    fn rebuild_ranges(&mut self) {
        self.ranges = self
            .modules
            .iter()
            .enumerate()
            .flat_map(|(index, m)| m.ranges.iter().map(move |r| (r.start, r.end, index)))
            .filter(|&(start, end, _)| start < end)
            .collect();
        self.ranges.sort_unstable_by_key(|&(start, _, _)| start);
    }

    /// Index of the module whose segments contain `addr`.
    fn module_index(&self, addr: u64) -> Option<usize> {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= addr);
        let &(_, end, index) = self.ranges.get(after.checked_sub(1)?)?;
        (addr < end).then_some(index)
    }

    /// Resolves an exact address (callers have already subtracted 1 from return addresses).
    ///
    /// Cached per address, so resolving the same address again is a hash lookup. The result
    /// always has a non-empty name: a symbol, else `module+0xoffset`, else `[unknown]+0xADDR`.
    pub fn resolve(&mut self, addr: u64) -> Symbol {
        if let Some(symbol) = self.cache.get(&addr) {
            return symbol.clone();
        }
        let symbol = match self.module_index(addr) {
            Some(index) => self.modules[index].resolve(addr),
            None => Symbol {
                name: format!("[unknown]+{addr:#x}").into(),
                function_start: None,
                module: None,
            },
        };
        self.cache.insert(addr, symbol.clone());
        symbol
    }

    /// Number of modules in the current snapshot.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// File names of the modules in the current snapshot, in loader order.
    pub fn module_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.modules.iter().map(|m| &*m.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The single segment of the fabricated `libfoo.so`.
    const LIBFOO: Range<u64> = 0x7000_0000..0x7000_2000;

    fn fabricated() -> Resolver {
        let mut lib = Module::new("libfoo.so".into(), Source::None, 0x7000_0000, vec![LIBFOO]);
        lib.table = Some(SymbolTable::from_entries(vec![
            (
                0x7000_1000,
                0x100,
                "_ZN3foo3bar17h0123456789abcdefE".to_owned(),
            ),
            (0x7000_1100, 0, "plain_c".to_owned()),
        ]));
        let missing = Module::new(
            "gone.so".into(),
            Source::File("/nonexistent/btprof/gone.so".into()),
            0x9000_0000,
            vec![0x9000_0000..0x9000_1000, 0x9000_3000..0x9000_4000],
        );
        Resolver::from_modules(vec![lib, missing])
    }

    #[test]
    fn symbol_in_fabricated_table() {
        let mut r = fabricated();
        let s = r.resolve(0x7000_1010);
        assert_eq!(&*s.name, "foo::bar");
        assert_eq!(s.function_start, Some(0x7000_1000));
        assert_eq!(s.module.as_deref(), Some("libfoo.so"));
        let c = r.resolve(0x7000_1fff);
        assert_eq!(&*c.name, "plain_c");
        assert_eq!(c.function_start, Some(0x7000_1100));
    }

    #[test]
    fn uncovered_address_in_module_is_module_plus_offset() {
        let mut r = fabricated();
        let s = r.resolve(0x7000_0abc);
        assert_eq!(&*s.name, "libfoo.so+0xabc");
        assert_eq!(s.function_start, None);
        assert_eq!(s.module.as_deref(), Some("libfoo.so"));
    }

    #[test]
    fn unreadable_module_file_is_module_plus_offset() {
        let mut r = fabricated();
        assert_eq!(&*r.resolve(0x9000_3004).name, "gone.so+0x3004");
        // The gap between the two segments belongs to no module.
        assert_eq!(&*r.resolve(0x9000_2000).name, "[unknown]+0x90002000");
    }

    #[test]
    fn address_outside_modules_has_fallback_name() {
        let mut r = fabricated();
        let s = r.resolve(0x10);
        assert_eq!(&*s.name, "[unknown]+0x10");
        assert_eq!(s.module, None);
        assert_eq!(s.function_start, None);
    }

    #[test]
    fn names_of_one_function_share_an_allocation() {
        let mut r = fabricated();
        let a = r.resolve(0x7000_1000);
        let b = r.resolve(0x7000_1001);
        assert!(Arc::ptr_eq(&a.name, &b.name));
    }

    #[test]
    fn replacing_modules_keeps_tables_of_unchanged_modules_and_clears_cache() {
        let mut r = fabricated();
        assert_eq!(&*r.resolve(0x7000_1010).name, "foo::bar");
        // Same libfoo (whose fabricated table is not loadable from its source), gone.so unloaded.
        let fresh = vec![Module::new(
            "libfoo.so".into(),
            Source::None,
            0x7000_0000,
            vec![LIBFOO],
        )];
        r.replace_modules(fresh);
        assert_eq!(r.module_count(), 1);
        assert_eq!(&*r.resolve(0x7000_1010).name, "foo::bar");
        assert_eq!(&*r.resolve(0x9000_3004).name, "[unknown]+0x90003004");
    }
}

#[cfg(all(test, target_os = "linux"))]
mod process_tests {
    use super::*;

    /// The ELF header at the start of the main executable's first segment is inside the
    /// module but covered by no function symbol.
    #[test]
    fn uncovered_address_in_main_executable_is_module_plus_offset() {
        let mut r = match Resolver::for_current_process() {
            Ok(r) => r,
            Err(e) => panic!("module discovery failed: {e}"),
        };
        let exe = &r.modules[0];
        assert_eq!(exe.source, Source::File("/proc/self/exe".into()));
        let (name, bias) = (Arc::clone(&exe.name), exe.bias);
        let header = exe.ranges[0].start;
        let s = r.resolve(header);
        assert_eq!(&*s.name, format!("{name}+{:#x}", header - bias));
        assert_eq!(s.function_start, None);
        assert_eq!(s.module, Some(name));
    }

    #[test]
    fn vdso_function_resolves_by_name() {
        let Some(ehdr) = crate::linux::vdso_header() else {
            return;
        };
        let mut r = match Resolver::for_current_process() {
            Ok(r) => r,
            Err(e) => panic!("module discovery failed: {e}"),
        };
        let Some(index) = r.module_index(ehdr) else {
            panic!("vDSO not among the modules");
        };
        let Some(start) = r.modules[index].table().starts().next() else {
            panic!("vDSO has no function symbols");
        };
        let s = r.resolve(start + 1);
        assert!(!s.name.contains('+'), "got {s:?}");
        assert_eq!(s.function_start, Some(start));
    }
}
