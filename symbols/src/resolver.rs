//! The cached address-to-symbol resolver: the module list of a snapshot, the per-address
//! caches, and the public entry points.
//!
//! This part is platform-neutral: it works on the [`LoadedModule`]s the platform layer
//! (`crate::platform`) reports and never reaches into platform code except to ask for a
//! fresh snapshot.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::debug_files::DebugSearch;
use crate::demangle::Demangler;
use crate::module::{DwarfFile, Module};
use crate::platform::macho_image::{ImageMemory, MachImage, MachOError};
use crate::platform::{LoadedModule, Source};
use crate::{Frame, Symbol};

/// Cached resolver for the current process (or for given modules).
///
/// Holds a snapshot of the loaded modules; call [`Resolver::refresh`] after libraries may
/// have been loaded or unloaded. Not thread-safe by design (`&mut self`): it is used by the
/// one thread that turns recorded samples into names.
///
/// Two lookups, both cached per address:
///
/// - [`Resolver::resolve`]: the function containing an address, from symbol tables (one
///   [`Symbol`]); cheap, no DWARF.
/// - [`Resolver::resolve_frames`]: the inline chain at an address, outermost first, with
///   file and line ([`Frame`]s), from DWARF where the module has any.
///
/// ```
/// # #[cfg(any(target_os = "linux", target_os = "macos"))] {
/// use btprof_symbols::Resolver;
///
/// let mut resolver = Resolver::for_current_process().expect("module discovery");
/// let here = Resolver::for_current_process as fn() -> _ as usize as u64;
/// // One name per address: the machine function.
/// let symbol = resolver.resolve(here);
/// assert!(symbol.name.contains("for_current_process"));
/// // The inline chain: outermost (the machine function) first, innermost last.
/// let frames = resolver.resolve_frames(here);
/// assert!(!frames[0].inlined);
/// assert_eq!(frames.iter().filter(|f| !f.inlined).count(), 1);
/// assert_eq!(frames[0].function_start, symbol.function_start);
/// # }
/// ```
///
/// Nothing here may run while a sampled thread is stopped: building, refreshing and
/// resolving allocate, read files, and on macOS call into dyld, whose lock the stopped
/// thread may hold. Samplers resolve after every thread has been resumed.
#[derive(Debug)]
pub struct Resolver {
    modules: Vec<Module>,
    /// `(start, end, module index)` for every segment of every module, sorted by start, so
    /// that an address finds its module by binary search.
    ranges: Vec<(u64, u64, usize)>,
    /// Every address resolved so far. Stacks repeat heavily, so most lookups end here.
    cache: HashMap<u64, (Symbol, bool)>,
    /// Every inline chain resolved so far.
    frames: HashMap<u64, Arc<[Frame]>>,
    /// DWARF loads so far ([`Resolver::dwarf_loads`]).
    dwarf_loads: u64,
    /// Whether the modules are this process's (so [`Resolver::refresh`] re-reads them) or
    /// were given by the caller (so it keeps them).
    of_current_process: bool,
    search: DebugSearch,
    demangler: Demangler,
    /// The dynamic loader's generation when the modules were listed (Linux; see
    /// `platform::linux::loader_generation`): while it stays the same, a refresh has
    /// nothing to re-read.
    #[cfg(target_os = "linux")]
    loader_generation: Option<(u64, u64)>,
}

impl Resolver {
    /// Builds a resolver over an explicit module list (platform snapshots and tests).
    pub(crate) fn from_modules(modules: Vec<LoadedModule>) -> Resolver {
        let mut resolver = Resolver {
            modules: modules.into_iter().map(Module::new).collect(),
            ranges: Vec::new(),
            cache: HashMap::new(),
            frames: HashMap::new(),
            dwarf_loads: 0,
            of_current_process: false,
            search: DebugSearch::default(),
            demangler: Demangler::default(),
            #[cfg(target_os = "linux")]
            loader_generation: None,
        };
        resolver.rebuild_ranges();
        resolver
    }

    /// A resolver over this process's modules, which [`Resolver::refresh`] keeps current.
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    fn for_process_modules(modules: Vec<LoadedModule>) -> io::Result<Resolver> {
        if modules.is_empty() {
            return Err(io::Error::other("the dynamic loader reported no modules"));
        }
        Ok(Resolver {
            of_current_process: true,
            demangler: Demangler::for_current_process(),
            ..Resolver::from_modules(modules)
        })
    }

    /// Snapshot of the modules loaded in this process, via `dl_iterate_phdr`.
    ///
    /// The main executable (empty `dlpi_name`) is read through `/proc/self/exe`; the vDSO,
    /// which has no file, is parsed from its in-memory image. Symbol tables are loaded lazily
    /// per module on first lookup (file read once; `.symtab`, `.dynsym`, a separate debug
    /// file or MiniDebugInfo, and `.eh_frame` function extents merged), DWARF on the first
    /// [`Resolver::resolve_frames`] in the module.
    #[cfg(target_os = "linux")]
    pub fn for_current_process() -> io::Result<Resolver> {
        // Read before listing: a library loaded in between is then seen by the next refresh.
        let generation = crate::platform::linux::loader_generation();
        let mut resolver =
            Resolver::for_process_modules(crate::platform::linux::current_modules())?;
        resolver.loader_generation = generation;
        Ok(resolver)
    }

    /// Snapshot of the modules mapped in another process, `pid`, from its
    /// `/proc/PID/maps`: each file mapped from offset 0 that is an ELF
    /// object (read from disk, the executable through `/proc/PID/exe`,
    /// with its load bias from where its first segment is mapped), and the
    /// process's vDSO, copied out of its memory. Symbols, separate debug
    /// files and DWARF load lazily as for the current process;
    /// [`Resolver::refresh`] keeps the snapshot. Fails when the mappings
    /// cannot be read (no such process, or no permission).
    #[cfg(target_os = "linux")]
    pub fn for_process(pid: u32) -> io::Result<Resolver> {
        Ok(Resolver::from_modules(
            crate::platform::linux::process_modules(pid)?,
        ))
    }

    /// Snapshot of the images dyld has loaded in this process (`_dyld_image_count` and
    /// `_dyld_get_image_header`; each slide derived from the image's own header).
    ///
    /// Symbol tables are read lazily per image on first lookup, from the image's mapping in
    /// memory (`LC_SYMTAB` and `LC_FUNCTION_STARTS` through `__LINKEDIT`), which also covers
    /// system libraries that exist only in the dyld shared cache. DWARF comes from a `.dSYM`
    /// bundle beside the image's file, when its UUID matches.
    #[cfg(target_os = "macos")]
    pub fn for_current_process() -> io::Result<Resolver> {
        Resolver::for_process_modules(crate::platform::macos::current_modules())
    }

    /// Module discovery is implemented for Linux and macOS only.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    pub fn for_current_process() -> io::Result<Resolver> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "module discovery is not implemented on this platform",
        ))
    }

    /// A resolver over object files (ELF on any platform) as if each were loaded with load
    /// bias `bias` (runtime address = link-time address + bias): for symbolising another
    /// machine's or process's addresses offline, for tests and for benchmarks.
    ///
    /// Each file's segments are read now (to map addresses to files); symbols, debug files
    /// and DWARF load lazily as for the current process. Fails when a file cannot be read or
    /// parsed, naming it.
    pub fn from_object_files(
        files: impl IntoIterator<Item = (PathBuf, u64)>,
    ) -> io::Result<Resolver> {
        let modules = files
            .into_iter()
            .map(|(path, bias)| {
                let data = crate::mapped_file::FileBytes::open(&path)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
                let file = object::File::parse(&*data).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: not an object file: {e}", path.display()),
                    )
                })?;
                let ranges = crate::platform::segment_ranges(&file, bias);
                let name: Arc<str> = path
                    .file_name()
                    .map_or_else(|| Arc::from("[file]"), |n| Arc::from(&*n.to_string_lossy()));
                Ok(
                    LoadedModule::new(name, Source::File(path.clone()), bias, ranges)
                        .with_path(Some(path)),
                )
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Resolver::from_modules(modules))
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
        Self::from_macho_images_at(
            memory,
            images
                .into_iter()
                .map(|(name, image)| (std::path::Path::new(name), image)),
        )
    }

    /// Like [`Resolver::from_macho_images`], with each image given by the path of its file
    /// (the module name is the path's last component). Inline frames and lines then come
    /// from a `.dSYM` bundle beside that path (`<path>.dSYM/Contents/Resources/DWARF/<name>`)
    /// whose `LC_UUID` matches the image's, as for the images of the current process on
    /// macOS.
    pub fn from_macho_images_at<'a>(
        memory: &impl ImageMemory,
        images: impl IntoIterator<Item = (&'a std::path::Path, &'a MachImage)>,
    ) -> Result<Resolver, MachOError> {
        let modules = images
            .into_iter()
            .map(|(path, image)| {
                let name = path.file_name().map_or_else(
                    || Arc::from("[image]"),
                    |n| Arc::from(&*n.to_string_lossy()),
                );
                let mut module = Module::new(
                    image
                        .module(name, Source::None)
                        .with_path(Some(path.to_owned())),
                );
                module.table = Some(image.symbol_table(memory)?);
                module.dwarf_file = image.uuid().map(|uuid| DwarfFile::Dsym {
                    binary: path.to_owned(),
                    uuid,
                });
                Ok(module)
            })
            .collect::<Result<Vec<_>, MachOError>>()?;
        let mut resolver = Resolver::from_modules(Vec::new());
        resolver.modules = modules;
        resolver.rebuild_ranges();
        Ok(resolver)
    }

    /// Uses `search` to find separate debug files (build-id directories, debuginfod's
    /// cache) instead of the system's [`DebugSearch::default`]. Symbols already loaded are
    /// dropped, so the new search applies to every module.
    pub fn with_debug_search(mut self, search: DebugSearch) -> Resolver {
        self.search = search;
        let modules = std::mem::take(&mut self.modules);
        self.modules = modules.into_iter().map(|m| Module::new(m.loaded)).collect();
        self.cache.clear();
        self.frames.clear();
        self
    }

    /// Re-reads the module list if it changed (dlopen/dlclose), keeping the cached tables of
    /// modules that are still present. The address caches are dropped on any change because
    /// an address may now belong to a different module. Does nothing for a resolver built
    /// from given modules.
    ///
    /// The loader's counts of objects added and removed decide whether anything changed,
    /// so an unchanged process costs one `dl_iterate_phdr` step, not a rescan: profilers
    /// refresh before every window they symbolise. Where the loader has no such counts,
    /// every refresh rescans.
    #[cfg(target_os = "linux")]
    pub fn refresh(&mut self) {
        if self.of_current_process {
            let generation = crate::platform::linux::loader_generation();
            if generation.is_some() && generation == self.loader_generation {
                return;
            }
            let fresh = crate::platform::linux::current_modules();
            self.replace_modules(fresh);
            self.demangler = Demangler::for_current_process();
            self.loader_generation = generation;
        }
    }

    /// Re-reads the image list if it changed (dlopen/dlclose), keeping the cached tables of
    /// images that are still loaded at the same place. The check compares each image's load
    /// address with the snapshot, so an unchanged list costs one dyld call per image and
    /// reads no load commands. Does nothing for a resolver built from given modules.
    #[cfg(target_os = "macos")]
    pub fn refresh(&mut self) {
        if self.of_current_process {
            let loaded: Vec<LoadedModule> = self.modules.iter().map(|m| m.loaded.clone()).collect();
            if !crate::platform::macos::same_images(&loaded) {
                let fresh = crate::platform::macos::current_modules();
                self.replace_modules(fresh);
            }
            self.demangler = Demangler::for_current_process();
        }
    }

    /// Module discovery is implemented for Linux and macOS only; nothing to refresh.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    pub fn refresh(&mut self) {}

    /// Installs a new module snapshot, reusing what unchanged modules already loaded.
    fn replace_modules(&mut self, fresh: Vec<LoadedModule>) {
        let unchanged = fresh.len() == self.modules.len()
            && fresh
                .iter()
                .zip(&self.modules)
                .all(|(a, b)| a.same_as(&b.loaded));
        if unchanged {
            return;
        }
        let mut old = std::mem::take(&mut self.modules);
        self.modules = fresh
            .into_iter()
            .map(|loaded| {
                let mut module = Module::new(loaded);
                if let Some(pos) = old.iter().position(|o| o.loaded.same_as(&module.loaded)) {
                    module.adopt(old.swap_remove(pos));
                }
                module
            })
            .collect();
        self.rebuild_ranges();
        self.cache.clear();
        self.frames.clear();
    }

    fn rebuild_ranges(&mut self) {
        self.ranges = self
            .modules
            .iter()
            .enumerate()
            .flat_map(|(index, m)| m.loaded.ranges.iter().map(move |r| (r.start, r.end, index)))
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

    /// Resolves an exact address (callers have already subtracted 1 from return addresses)
    /// to the machine function containing it.
    ///
    /// Cached per address, so resolving the same address again is a hash lookup. The result
    /// always has a non-empty name: a demangled symbol; else, in a function known only by
    /// its extent (`.eh_frame` on Linux, `LC_FUNCTION_STARTS` on macOS),
    /// `module+0x<function start>` with `function_start` set, the same for every address of
    /// the function; else `module+0x<address>`; else `[unknown]+0x<address>`.
    pub fn resolve(&mut self, addr: u64) -> Symbol {
        self.resolve_named(addr).0
    }

    /// [`Resolver::resolve`], with whether a symbol named the function.
    fn resolve_named(&mut self, addr: u64) -> (Symbol, bool) {
        if let Some(hit) = self.cache.get(&addr) {
            return hit.clone();
        }
        let hit = match self.module_index(addr) {
            Some(index) => self.modules[index].resolve(addr, &self.search, &self.demangler),
            None => (
                Symbol {
                    name: format!("[unknown]+{addr:#x}").into(),
                    function_start: None,
                    module: None,
                },
                false,
            ),
        };
        self.cache.insert(addr, hit.clone());
        hit
    }

    /// Resolves an exact address into its inline chain: **outermost first**, so the first
    /// frame is the machine function (the one [`Resolver::resolve`] names, `inlined: false`)
    /// and each later frame was inlined into the one before it (`inlined: true`); the last
    /// is the code actually at `addr`. Append the frames in this order below the caller's
    /// frames to get a stack with inlined functions as ordinary frames.
    ///
    /// Every frame carries the module, the machine function's start (`function_start` is the
    /// same for the whole chain: it identifies the code that is running, which is what the
    /// link-register rule and per-function tables compare) and, where DWARF says, the source
    /// file and line: for the innermost frame the line of `addr` itself, for each outer
    /// frame the line of the call that was inlined.
    ///
    /// Without DWARF for the address the chain is the single frame of
    /// [`Resolver::resolve`], with no file or line. DWARF is loaded on the first call for
    /// each module (its units parsed on first use); results are cached per address.
    pub fn resolve_frames(&mut self, addr: u64) -> Arc<[Frame]> {
        if let Some(frames) = self.frames.get(&addr) {
            return Arc::clone(frames);
        }
        let (symbol, named) = self.resolve_named(addr);
        let frames: Arc<[Frame]> = match self.module_index(addr) {
            Some(index) => {
                let module = &mut self.modules[index];
                let before = module.dwarf_loads();
                let frames = module.frames(addr, symbol, named, &self.demangler);
                self.dwarf_loads += module.dwarf_loads() - before;
                frames.into()
            }
            None => Arc::from([Frame::from_symbol(symbol)]),
        };
        self.frames.insert(addr, Arc::clone(&frames));
        frames
    }

    /// How many times this resolver loaded DWARF so far: a module's DWARF sections read (the
    /// first [`Resolver::resolve_frames`] in it, also when it has none), or an `addr2line`
    /// context built over the units covering an address (parsing their headers, and
    /// inflating a compressed `.debug_info` as far as they reach). These are what make a
    /// first inline lookup slow; an address whose units are already loaded adds nothing.
    /// Never decreases, also across [`Resolver::refresh`]. For tests and diagnostics.
    pub fn dwarf_loads(&self) -> u64 {
        self.dwarf_loads
    }

    /// How many distinct addresses are cached ([`Resolver::resolve`]; every
    /// [`Resolver::resolve_frames`] resolves its address too). Dropped with the caches when
    /// the module list changes.
    pub fn cached_addresses(&self) -> usize {
        self.cache.len()
    }

    /// Number of modules in the current snapshot.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// File names of the modules in the current snapshot, in loader order.
    pub fn module_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.modules.iter().map(|m| &*m.loaded.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SymbolTable;
    use std::ops::Range;

    /// The single segment of the fabricated `libfoo.so`.
    const LIBFOO: Range<u64> = 0x7000_0000..0x7000_2000;

    fn fabricated() -> Resolver {
        let lib = LoadedModule::new("libfoo.so".into(), Source::None, 0x7000_0000, vec![LIBFOO]);
        let table = Some(SymbolTable::from_entries(vec![
            (
                0x7000_1000,
                0x100,
                "_ZN3foo3bar17h0123456789abcdefE".to_owned(),
            ),
            (0x7000_1100, 0, "plain_c".to_owned()),
        ]));
        let missing = LoadedModule::new(
            "gone.so".into(),
            Source::File("/nonexistent/btprof/gone.so".into()),
            0x9000_0000,
            vec![0x9000_0000..0x9000_1000, 0x9000_3000..0x9000_4000],
        );
        let mut r = Resolver::from_modules(vec![lib, missing]);
        r.modules[0].table = table;
        r
    }

    /// Asserts what `s` says: its name, its function's start and its module.
    fn assert_symbol(s: &Symbol, name: &str, start: Option<u64>, module: Option<&str>) {
        let got = (&*s.name, s.function_start, s.module.as_deref());
        assert_eq!(got, (name, start, module));
    }

    #[test]
    fn symbol_in_fabricated_table() {
        let mut r = fabricated();
        let s = r.resolve(0x7000_1010);
        assert_symbol(&s, "foo::bar", Some(0x7000_1000), Some("libfoo.so"));
        let c = r.resolve(0x7000_1fff);
        assert_eq!(&*c.name, "plain_c");
        assert_eq!(c.function_start, Some(0x7000_1100));
    }

    #[test]
    fn uncovered_address_in_module_is_module_plus_offset() {
        let mut r = fabricated();
        let s = r.resolve(0x7000_0abc);
        assert_symbol(&s, "libfoo.so+0xabc", None, Some("libfoo.so"));
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
        assert_symbol(&s, "[unknown]+0x10", None, None);
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
        let fresh = vec![LoadedModule::new(
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
        let exe = &r.modules[0].loaded;
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
        let Some(ehdr) = crate::platform::linux::vdso_header() else {
            return;
        };
        let mut r = match Resolver::for_current_process() {
            Ok(r) => r,
            Err(e) => panic!("module discovery failed: {e}"),
        };
        let Some(index) = r.module_index(ehdr) else {
            panic!("vDSO not among the modules");
        };
        let search = DebugSearch::default();
        let Some(start) = r.modules[index].table(&search).named_starts().next() else {
            panic!("vDSO has no function symbols");
        };
        let s = r.resolve(start + 1);
        assert!(!s.name.contains('+'), "got {s:?}");
        assert_eq!(s.function_start, Some(start));
    }
}
