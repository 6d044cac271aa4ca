//! The Mach-O reader against real arm64 and x86_64 images, on any platform.
//!
//! The fixtures in `tests/fixtures/macho/` are built from `hello.c` by
//! `scripts/build-macho-fixtures` and committed. Each test lays an image out in a buffer the
//! way dyld maps it (every segment at `vmaddr + slide`, `__PAGEZERO` left out, holes filled
//! with a garbage byte), reads it back with [`MachImage`] and resolves addresses through a
//! [`Resolver`]. Expected addresses come from the fixture file itself, parsed independently
//! by `object`'s own Mach-O file reader.

use std::ops::Range;

use btprof_symbols::{MachImage, MachOError, MappedBuffer, Resolver, SymbolTable};
use object::macho::{MachHeader64, LC_FUNCTION_STARTS, LC_SEGMENT_64};
use object::read::macho::MachHeader;
use object::{Architecture, Endianness, Object, ObjectSection, ObjectSegment, ObjectSymbol};

/// The functions of `hello.c`: the name in the image and the name the resolver must give.
const FUNCTIONS: [(&str, &str); 5] = [
    ("_btprof_fixture_alpha", "btprof_fixture_alpha"),
    ("_btprof_fixture_beta", "btprof_fixture_beta"),
    ("_fixture_local_helper", "fixture_local_helper"),
    ("__ZN7fixture5hello17h0123456789abcdefE", "fixture::hello"),
    ("_main", "main"),
];

/// The images with symbols: the executable (`__TEXT` at 4 GiB) and the dylib (at 0).
const SYMBOLISED: [&str; 4] = [
    "hello-arm64",
    "hello-x86_64",
    "libhello-arm64.dylib",
    "libhello-x86_64.dylib",
];

const STRIPPED: [&str; 2] = ["hello-arm64-stripped", "hello-x86_64-stripped"];

/// A slide that is page-aligned on both architectures (16 KiB pages on arm64).
const SLIDE: u64 = 0x10_0000;

/// Byte that stands for "not mapped" in the holes between segments.
const HOLE: u8 = 0xAA;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/macho/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {path}: {e}"))
}

fn parse(file: &[u8]) -> object::File<'_> {
    object::File::parse(file).unwrap_or_else(|e| panic!("object cannot parse the fixture: {e}"))
}

/// One `LC_SEGMENT_64` of a fixture file.
struct FileSegment {
    name: String,
    vmaddr: u64,
    vmsize: u64,
    file_range: Range<usize>,
    /// Offset of the load command from the header, to patch it in the mapped copy.
    command_offset: usize,
}

/// Offset of a load command's field from the header: `vmaddr` and `filesize` of
/// `segment_command_64`, `dataoff` and `datasize` of `linkedit_data_command`.
const SEGMENT_VMADDR: usize = 24;
const SEGMENT_FILESIZE: usize = 48;
const LINKEDIT_DATAOFF: usize = 8;
const LINKEDIT_DATASIZE: usize = 12;

fn file_segments(file: &[u8]) -> Vec<FileSegment> {
    let header = MachHeader64::<Endianness>::parse(file, 0).expect("64-bit Mach-O header");
    let endian = header.endian().expect("byte order");
    let mut commands = header
        .load_commands(endian, file, 0)
        .expect("load commands");
    let mut segments = Vec::new();
    while let Some(command) = commands.next().expect("load command") {
        if command.cmd() != LC_SEGMENT_64 {
            continue;
        }
        let (segment, _) = command
            .segment_64()
            .expect("segment")
            .expect("LC_SEGMENT_64");
        let name_len = segment.segname.iter().position(|&b| b == 0).unwrap_or(16);
        let fileoff = segment.fileoff.get(endian) as usize;
        segments.push(FileSegment {
            name: String::from_utf8_lossy(&segment.segname[..name_len]).into_owned(),
            vmaddr: segment.vmaddr.get(endian),
            vmsize: segment.vmsize.get(endian),
            file_range: fileoff..fileoff + segment.filesize.get(endian) as usize,
            command_offset: command.offset() as usize,
        });
    }
    segments
}

/// An image mapped into a buffer.
struct Mapped {
    base: u64,
    bytes: Vec<u8>,
    /// Runtime address of the Mach-O header.
    load_address: u64,
}

impl Mapped {
    fn memory(&self) -> MappedBuffer<'_> {
        MappedBuffer::new(self.base, &self.bytes)
    }

    fn image(&self, slide: u64) -> MachImage {
        MachImage::parse(&self.memory(), self.load_address, slide)
            .unwrap_or_else(|e| panic!("MachImage::parse: {e}"))
    }

    fn resolver(&self, name: &str, slide: u64) -> Resolver {
        let image = self.image(slide);
        Resolver::from_macho_images(&self.memory(), [(name, &image)])
            .unwrap_or_else(|e| panic!("Resolver::from_macho_images: {e}"))
    }

    /// The bytes at a runtime address.
    fn at(&self, addr: u64, len: usize) -> &[u8] {
        let start = (addr - self.base) as usize;
        &self.bytes[start..start + len]
    }

    fn at_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        let start = (addr - self.base) as usize;
        &mut self.bytes[start..start + len]
    }

    /// Gives the mapped image `LC_FUNCTION_STARTS` data listing `starts` (link-time
    /// addresses), as Apple's linker writes it and zig's (which built the fixtures) does not:
    /// ULEB128 deltas from `__TEXT`, appended to `__LINKEDIT`'s file content, with the
    /// segment's `filesize` and the command's `dataoff`/`datasize` patched to match.
    fn add_function_starts(&mut self, file: &[u8], slide: u64, starts: &[u64]) {
        let segments = file_segments(file);
        let text = segments
            .iter()
            .find(|s| s.name == "__TEXT")
            .expect("__TEXT");
        let linkedit = segments
            .iter()
            .find(|s| s.name == "__LINKEDIT")
            .expect("__LINKEDIT");
        let mut data = Vec::new();
        let mut previous = text.vmaddr;
        for &start in starts {
            uleb128(&mut data, start - previous);
            previous = start;
        }
        data.push(0);
        let dataoff = (linkedit.file_range.end + 7) & !7;
        let filesize = dataoff + data.len() - linkedit.file_range.start;
        assert!(filesize as u64 <= linkedit.vmsize, "no room in __LINKEDIT");
        let linkedit_at = linkedit.vmaddr + slide;
        let relative = (dataoff - linkedit.file_range.start) as u64;
        self.at_mut(linkedit_at + relative, data.len())
            .copy_from_slice(&data);

        let header = self.load_address;
        let field = header + (linkedit.command_offset + SEGMENT_FILESIZE) as u64;
        self.at_mut(field, 8)
            .copy_from_slice(&(filesize as u64).to_le_bytes());
        let command = function_starts_command(file);
        let field = header + (command + LINKEDIT_DATAOFF) as u64;
        self.at_mut(field, 4)
            .copy_from_slice(&(dataoff as u32).to_le_bytes());
        let field = header + (command + LINKEDIT_DATASIZE) as u64;
        self.at_mut(field, 4)
            .copy_from_slice(&(data.len() as u32).to_le_bytes());
    }
}

/// Offset from the header of the fixture's `LC_FUNCTION_STARTS` command.
fn function_starts_command(file: &[u8]) -> usize {
    let header = MachHeader64::<Endianness>::parse(file, 0).expect("64-bit Mach-O header");
    let endian = header.endian().expect("byte order");
    let mut commands = header
        .load_commands(endian, file, 0)
        .expect("load commands");
    while let Some(command) = commands.next().expect("load command") {
        if command.cmd() == LC_FUNCTION_STARTS {
            return command.offset() as usize;
        }
    }
    panic!("fixture has no LC_FUNCTION_STARTS command")
}

fn uleb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Lays `file` out as dyld maps it: each segment's file content at `vmaddr + slide`.
/// `move_linkedit` moves `__LINKEDIT` (content and load command) that far up, the way the
/// shared-cache builder places one image's segments far apart and away from their file
/// offsets.
fn map_like_dyld(file: &[u8], slide: u64, move_linkedit: u64) -> Mapped {
    let mut segments: Vec<FileSegment> = file_segments(file)
        .into_iter()
        .filter(|s| s.name != "__PAGEZERO")
        .collect();
    for segment in &mut segments {
        if segment.name == "__LINKEDIT" {
            segment.vmaddr += move_linkedit;
        }
    }
    let low = segments.iter().map(|s| s.vmaddr).min().expect("segments");
    let high = segments
        .iter()
        .map(|s| s.vmaddr + s.vmsize)
        .max()
        .expect("segments");
    let mut bytes = vec![HOLE; (high - low) as usize];
    for segment in &segments {
        let at = (segment.vmaddr - low) as usize;
        // Zero-fill what the file does not provide, as the kernel does.
        bytes[at..at + segment.vmsize as usize].fill(0);
        bytes[at..at + segment.file_range.len()].copy_from_slice(&file[segment.file_range.clone()]);
    }
    let text = segments
        .iter()
        .find(|s| s.name == "__TEXT")
        .expect("__TEXT segment");
    assert_eq!(text.file_range.start, 0, "the header starts __TEXT");
    let header_at = (text.vmaddr - low) as usize;
    for segment in &segments {
        // vmaddr follows cmd, cmdsize and segname in segment_command_64.
        let field = header_at + segment.command_offset + SEGMENT_VMADDR;
        bytes[field..field + 8].copy_from_slice(&segment.vmaddr.to_le_bytes());
    }
    Mapped {
        base: low + slide,
        bytes,
        load_address: text.vmaddr + slide,
    }
}

/// A function of the fixture as `object` sees it: link-time start and end (the next
/// function's start, or the end of `__text`).
struct Expected {
    raw: &'static str,
    name: &'static str,
    start: u64,
    end: u64,
}

fn expected_functions(file: &[u8]) -> Vec<Expected> {
    let object = parse(file);
    let text = object.section_by_name("__text").expect("__text section");
    let text_end = text.address() + text.size();
    let mut starts: Vec<u64> = FUNCTIONS
        .iter()
        .map(|(raw, _)| symbol_address(&object, raw))
        .collect();
    starts.sort_unstable();
    FUNCTIONS
        .iter()
        .map(|&(raw, name)| {
            let start = symbol_address(&object, raw);
            let end = starts
                .iter()
                .copied()
                .find(|&s| s > start)
                .unwrap_or(text_end);
            Expected {
                raw,
                name,
                start,
                end,
            }
        })
        .collect()
}

fn symbol_address(object: &object::File<'_>, raw: &str) -> u64 {
    object
        .symbols()
        .find(|s| s.name() == Ok(raw))
        .unwrap_or_else(|| panic!("fixture has no symbol {raw}"))
        .address()
}

fn architecture(name: &str) -> Architecture {
    parse(&fixture(name)).architecture()
}

#[test]
fn fixtures_cover_both_architectures() {
    for name in SYMBOLISED.iter().chain(&STRIPPED) {
        let expected = if name.contains("arm64") {
            Architecture::Aarch64
        } else {
            Architecture::X86_64
        };
        assert_eq!(architecture(name), expected, "{name}");
    }
}

#[test]
fn resolves_every_function_with_and_without_slide() {
    for name in SYMBOLISED {
        let file = fixture(name);
        let functions = expected_functions(&file);
        for slide in [0, SLIDE] {
            let mapped = map_like_dyld(&file, slide, 0);
            let mut resolver = mapped.resolver(name, slide);
            for f in &functions {
                let start = f.start + slide;
                let last = f.end - 1 + slide;
                let middle = start + (f.end - f.start) / 2;
                for addr in [start, middle, last] {
                    let symbol = resolver.resolve(addr);
                    assert_eq!(
                        &*symbol.name, f.name,
                        "{name}, slide {slide:#x}: {} at {addr:#x}",
                        f.raw
                    );
                    assert_eq!(symbol.function_start, Some(start), "{name} {}", f.raw);
                    assert_eq!(symbol.module.as_deref(), Some(name));
                }
            }
        }
    }
}

#[test]
fn table_holds_exactly_the_functions() {
    // The fixtures also hold debug-map (N_STAB) entries, `__mh_execute_header` (which
    // claims `__text` but points at the header) and data symbols; none is a function.
    for name in SYMBOLISED {
        let file = fixture(name);
        let mapped = map_like_dyld(&file, SLIDE, 0);
        let table = mapped
            .image(SLIDE)
            .symbol_table(&mapped.memory())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(table.len(), FUNCTIONS.len(), "{name}");
        for f in expected_functions(&file) {
            let (start, raw) = table.lookup(f.start + SLIDE).expect("covered");
            assert_eq!(start, f.start + SLIDE);
            // One Mach-O underscore removed, the rest kept for the demangler.
            assert_eq!(raw, Some(&f.raw[1..]), "{name}");
        }
        // Past the last function's end is `__text`'s end: nothing covers it.
        let text_end = expected_functions(&file)
            .iter()
            .map(|f| f.end)
            .max()
            .unwrap();
        assert_eq!(table.lookup(text_end + SLIDE), None, "{name}");
    }
}

/// A resolver over fixture `name` mapped as dyld would at `SLIDE`, and the
/// fixture's first function as its file gives it (unslid).
fn slid_resolver(name: &str) -> (Resolver, Expected) {
    let file = fixture(name);
    let first = expected_functions(&file)
        .into_iter()
        .next()
        .expect("a function");
    (map_like_dyld(&file, SLIDE, 0).resolver(name, SLIDE), first)
}

#[test]
fn slide_moves_every_symbol() {
    let name = "hello-arm64";
    let (mut resolver, alpha) = slid_resolver(name);
    assert_eq!(
        &*resolver.resolve(alpha.start).name,
        format!("[unknown]+{:#x}", alpha.start),
        "the unslid address is outside the slid image"
    );
    assert_eq!(&*resolver.resolve(alpha.start + SLIDE).name, alpha.name);
}

#[test]
fn addresses_without_a_function_count_from_the_load_address() {
    for name in SYMBOLISED {
        let file = fixture(name);
        for slide in [0, SLIDE] {
            let mapped = map_like_dyld(&file, slide, 0);
            let load = mapped.load_address;
            let mut resolver = mapped.resolver(name, slide);
            // The header: `__mh_execute_header` is there in an executable, but it is not a
            // function.
            for offset in [0, 0x10] {
                let symbol = resolver.resolve(load + offset);
                assert_eq!(&*symbol.name, format!("{name}+{offset:#x}"));
                assert_eq!(symbol.function_start, None);
                assert_eq!(symbol.module.as_deref(), Some(name));
            }
            // `___dso_handle` is a data symbol in `__DATA`.
            let dso = symbol_address(&parse(&file), "___dso_handle") + slide;
            assert_eq!(
                &*resolver.resolve(dso).name,
                format!("{name}+{:#x}", dso - load)
            );
        }
    }
}

#[test]
fn symbol_table_is_found_through_linkedit_when_segments_move() {
    // In the shared cache an image's segments are far apart and `__LINKEDIT` is not where
    // its file offset would put it relative to the header: the table must be found at
    // `slide + linkedit.vmaddr + (symoff - linkedit.fileoff)`.
    const MOVE: u64 = 0x20_0000;
    for name in SYMBOLISED {
        let file = fixture(name);
        let symoff = match parse(&file) {
            object::File::MachO64(macho) => {
                macho.macho_symbol_table().symbols().as_ptr() as usize - file.as_ptr() as usize
            }
            _ => panic!("{name} is not a 64-bit Mach-O file"),
        };
        let mapped = map_like_dyld(&file, SLIDE, MOVE);
        // What a reader that adds `symoff` to the load address would find: not the table.
        assert_eq!(
            mapped.at(mapped.load_address + symoff as u64, 16),
            [HOLE; 16],
            "{name}: the layout does not separate __LINKEDIT from its file position"
        );
        let mut resolver = mapped.resolver(name, SLIDE);
        for f in expected_functions(&file) {
            assert_eq!(
                &*resolver.resolve(f.start + SLIDE + 1).name,
                f.name,
                "{name}"
            );
        }
    }
}

#[test]
fn function_starts_end_a_symbol_at_an_unnamed_function() {
    // Shared-cache images keep only exported symbols in memory. A local function between
    // two of them is still listed in LC_FUNCTION_STARTS and must not be attributed to the
    // exported function before it. Here `btprof_fixture_alpha`'s second half stands for
    // such a function.
    for name in SYMBOLISED {
        let file = fixture(name);
        let functions = expected_functions(&file);
        let alpha = &functions[0];
        // 4-aligned: an instruction boundary on arm64 too.
        let unnamed = alpha.start + (((alpha.end - alpha.start) / 2) & !3);
        let mut starts: Vec<u64> = functions.iter().map(|f| f.start).collect();
        starts.push(unnamed);
        starts.sort_unstable();

        let mut mapped = map_like_dyld(&file, SLIDE, 0);
        mapped.add_function_starts(&file, SLIDE, &starts);
        let mut resolver = mapped.resolver(name, SLIDE);
        assert_eq!(&*resolver.resolve(alpha.start + SLIDE).name, alpha.name);
        assert_eq!(&*resolver.resolve(unnamed - 1 + SLIDE).name, alpha.name);
        // The unnamed function is one frame: every address in it has the same name, counted
        // from its start, and the same function start.
        let expected = format!("{name}+{:#x}", unnamed + SLIDE - mapped.load_address);
        for addr in [unnamed, unnamed + 4, alpha.end - 1] {
            let symbol = resolver.resolve(addr + SLIDE);
            assert_eq!(&*symbol.name, expected, "{name} at {addr:#x}");
            assert_eq!(symbol.function_start, Some(unnamed + SLIDE), "{name}");
            assert_eq!(symbol.module.as_deref(), Some(name));
        }
        for f in &functions[1..] {
            assert_eq!(&*resolver.resolve(f.start + SLIDE).name, f.name, "{name}");
            assert_eq!(&*resolver.resolve(f.end - 1 + SLIDE).name, f.name, "{name}");
        }
    }
}

#[test]
fn stripped_image_resolves_to_image_plus_offset() {
    for name in STRIPPED {
        let file = fixture(name);
        let object = parse(&file);
        // The symbol table is not empty: `__mh_execute_header` claims `__text`.
        assert!(
            object
                .symbols()
                .any(|s| s.name() == Ok("__mh_execute_header")),
            "{name}"
        );
        let text = object.section_by_name("__text").expect("__text");
        let text = text.address()..text.address() + text.size();
        for slide in [0, SLIDE] {
            let mapped = map_like_dyld(&file, slide, 0);
            let image = mapped.image(slide);
            let table = image.symbol_table(&mapped.memory()).expect("symbol table");
            assert!(table.is_empty(), "{name}: {} symbols", table.len());
            let mut resolver = mapped.resolver(name, slide);
            let middle = text.start + (text.end - text.start) / 2;
            for addr in [text.start + slide, middle + slide, text.end - 1 + slide] {
                let symbol = resolver.resolve(addr);
                assert_eq!(
                    &*symbol.name,
                    format!("{name}+{:#x}", addr - mapped.load_address)
                );
                assert_eq!(symbol.function_start, None);
                assert_eq!(symbol.module.as_deref(), Some(name));
            }
        }
    }
}

#[test]
fn ranges_are_the_mapped_segments_without_pagezero_and_linkedit() {
    let name = "hello-x86_64";
    let file = fixture(name);
    let mapped = map_like_dyld(&file, SLIDE, 0);
    let image = mapped.image(SLIDE);
    assert_eq!(image.load_address(), mapped.load_address);
    assert_eq!(image.slide(), SLIDE);
    let expected: Vec<Range<u64>> = parse(&file)
        .segments()
        .filter(|s| !matches!(s.name(), Ok(Some("__PAGEZERO" | "__LINKEDIT"))))
        .map(|s| s.address() + SLIDE..s.address() + s.size() + SLIDE)
        .collect();
    assert_eq!(expected.len(), 3, "__TEXT, __DATA_CONST, __DATA");
    assert_eq!(image.ranges(), expected);
}

#[test]
fn refresh_keeps_given_images() {
    let name = "libhello-x86_64.dylib";
    let (mut resolver, alpha) = slid_resolver(name);
    resolver.refresh();
    assert_eq!(resolver.module_count(), 1);
    assert_eq!(resolver.module_names().collect::<Vec<_>>(), [name]);
    assert_eq!(&*resolver.resolve(alpha.start + SLIDE).name, alpha.name);
}

#[test]
fn unreadable_symbol_table_is_an_error() {
    let name = "hello-arm64";
    let file = fixture(name);
    let mut mapped = map_like_dyld(&file, 0, 0);
    let linkedit = file_segments(&file)
        .into_iter()
        .find(|s| s.name == "__LINKEDIT")
        .expect("__LINKEDIT");
    // Unmap `__LINKEDIT`: the load commands still describe it, the memory ends before it.
    mapped
        .bytes
        .truncate((linkedit.vmaddr - mapped.base) as usize);
    let image = mapped.image(0);
    assert!(matches!(
        image.symbol_table(&mapped.memory()),
        Err(MachOError::Unreadable { .. })
    ));
    assert!(Resolver::from_macho_images(&mapped.memory(), [(name, &image)]).is_err());
}

#[test]
fn only_64_bit_images_are_read() {
    // The arm64 fixture's header with the 32-bit magic: a 64-bit process loads no such image.
    let mut file = fixture("hello-arm64");
    file[..4].copy_from_slice(&object::macho::MH_MAGIC.to_le_bytes());
    let memory = MappedBuffer::new(0x1000, &file);
    match MachImage::parse(&memory, 0x1000, 0) {
        Err(MachOError::Malformed(_)) => {}
        other => panic!("expected a malformed-image error, got {other:?}"),
    }
}

#[test]
fn stripped_image_with_function_starts_gives_one_frame_per_function() {
    // A stripped executable (no function symbols at all) whose LC_FUNCTION_STARTS lists its
    // functions, as Apple's linker writes it: each address resolves to its function's start,
    // never to a frame of its own.
    for name in STRIPPED {
        let file = fixture(name);
        let object = parse(&file);
        let text = object.section_by_name("__text").expect("__text");
        let (text_start, text_end) = (text.address(), text.address() + text.size());
        // Three functions: the start of __text, a quarter in and half-way (4-aligned).
        let quarter = text_start + (((text_end - text_start) / 4) & !3);
        let half = text_start + (((text_end - text_start) / 2) & !3);
        let starts = [text_start, quarter, half];
        let mut mapped = map_like_dyld(&file, SLIDE, 0);
        mapped.add_function_starts(&file, SLIDE, &starts);
        let mut resolver = mapped.resolver(name, SLIDE);
        let load = mapped.load_address;
        for (index, &start) in starts.iter().enumerate() {
            let end = starts.get(index + 1).copied().unwrap_or(text_end);
            let first = resolver.resolve(start + SLIDE);
            let second = resolver.resolve(start + SLIDE + (end - start) / 2);
            let last = resolver.resolve(end - 1 + SLIDE);
            let expected = format!("{name}+{:#x}", start + SLIDE - load);
            for symbol in [&first, &second, &last] {
                assert_eq!(&*symbol.name, expected, "{name}");
                assert_eq!(symbol.function_start, Some(start + SLIDE), "{name}");
            }
        }
        // The header is in no function.
        assert_eq!(resolver.resolve(load).function_start, None);
    }
}

#[test]
fn slide_is_derived_from_the_header() {
    // dyld's header, slide and name come from separate indexed calls that a dlclose can
    // interleave; the backend derives the slide from the header instead. The derivation must
    // give the slide the image was mapped with, for executables (__TEXT at 4 GiB) and dylibs
    // (__TEXT at 0), also when __LINKEDIT sits far away as in the shared cache.
    for name in SYMBOLISED.iter().chain(&STRIPPED) {
        let file = fixture(name);
        for slide in [0, SLIDE, 0x7_1234_0000] {
            for moved in [0, 0x20_0000] {
                let mapped = map_like_dyld(&file, slide, moved);
                let image = MachImage::parse_at(&mapped.memory(), mapped.load_address)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(image.slide(), slide, "{name}");
                assert_eq!(image.load_address(), mapped.load_address);
                assert_eq!(image.ranges(), mapped.image(slide).ranges(), "{name}");
            }
        }
    }
}

/// A copy function over a dyld-like mapping that fails from call `vanish_at` on, as memory
/// that a `dlclose` unmaps mid-read; it counts its calls in `calls`.
fn vanishing<'a>(
    mapped: &'a Mapped,
    vanish_at: usize,
    calls: &'a mut usize,
) -> impl FnMut(u64, &mut [u8]) -> bool + 'a {
    move |addr, out: &mut [u8]| {
        *calls += 1;
        let len = out.len();
        (*calls < vanish_at)
            .then(|| out.copy_from_slice(mapped.at(addr, len)))
            .is_some()
    }
}

/// Parses an image from a dyld-like mapping by copies, failing from call `vanish_at` on.
/// Returns the image, or the error, and the calls made.
fn parse_copied(mapped: &Mapped, vanish_at: usize) -> (Result<MachImage, MachOError>, usize) {
    let mut calls = 0;
    let image = MachImage::parse_copied(
        vanishing(mapped, vanish_at, &mut calls),
        mapped.load_address,
    );
    (image, calls)
}

/// The symbol table of `image` read from a dyld-like mapping by copies only, failing from
/// call `vanish_at` on, as `__LINKEDIT` that a `dlclose` unmaps mid-read. Returns the table,
/// or the error, and the calls made.
fn symbol_table_copied(
    mapped: &Mapped,
    image: &MachImage,
    vanish_at: usize,
) -> (Result<SymbolTable, MachOError>, usize) {
    let mut calls = 0;
    let table = image.symbol_table_copied(vanishing(mapped, vanish_at, &mut calls));
    (table, calls)
}

/// Fixture `name`'s symbol table read by copies with nothing vanishing,
/// checked equal to the table read in place; with the number of copies.
fn copied_as_in_place(name: &str, mapped: &Mapped, image: &MachImage) -> (SymbolTable, usize) {
    let in_place = image
        .symbol_table(&mapped.memory())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let (table, calls) = symbol_table_copied(mapped, image, usize::MAX);
    let table = table.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(format!("{table:?}"), format!("{in_place:?}"), "{name}");
    (table, calls)
}

#[test]
fn an_image_read_by_copies_that_disappears_mid_read_is_an_error_not_a_crash() {
    for name in SYMBOLISED.iter().chain(&STRIPPED) {
        let mapped = map_like_dyld(&fixture(name), SLIDE, 0);
        let (copied, calls) = parse_copied(&mapped, usize::MAX);
        let copied = copied.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(calls, 2, "{name}: the header, then header and commands");
        assert_eq!(copied.ranges(), mapped.image(SLIDE).ranges(), "{name}");
        assert_eq!(copied.slide(), SLIDE, "{name}");
        // Unmapped before the first copy, and between the two.
        for vanish_at in [1, 2] {
            let (result, _) = parse_copied(&mapped, vanish_at);
            let gone = matches!(result, Err(MachOError::Unreadable { .. }));
            assert!(gone, "{name}, gone at copy {vanish_at}: {result:?}");
        }
    }
}

#[test]
fn a_symbol_table_read_by_copies_that_disappears_mid_read_is_an_error_not_a_crash() {
    for name in SYMBOLISED {
        let file = fixture(name);
        let functions = expected_functions(&file);
        let mut mapped = map_like_dyld(&file, SLIDE, 0);
        let starts: Vec<u64> = functions.iter().map(|f| f.start).collect();
        mapped.add_function_starts(&file, SLIDE, &starts);
        let image = mapped.image(SLIDE);

        // Nothing vanishes: the same table as read in place, from three copies.
        let (table, calls) = copied_as_in_place(name, &mapped, &image);
        assert_eq!(
            calls, 3,
            "{name}: the symbol table, the string table, the function starts"
        );
        assert_eq!(table.len(), FUNCTIONS.len(), "{name}");

        // Unmapped before the symbol table is copied, or between it and the strings: an
        // error, no table, no crash.
        for vanish_at in [1, 2] {
            let (result, calls) = symbol_table_copied(&mapped, &image, vanish_at);
            let gone = matches!(result, Err(MachOError::Unreadable { .. }));
            assert!(gone, "{name}, gone at copy {vanish_at}: {result:?}");
            assert_eq!(calls, vanish_at, "{name}: no copy after the failed one");
        }
        // Unmapped before the function starts: the named functions are all there.
        let (result, _) = symbol_table_copied(&mapped, &image, 3);
        let table = result.unwrap_or_else(|e| panic!("{name}, gone at the starts: {e}"));
        for f in &functions {
            let (start, raw) = table.lookup(f.start + SLIDE).expect("covered");
            assert_eq!(start, f.start + SLIDE, "{name}");
            assert_eq!(raw, Some(&f.raw[1..]), "{name}");
        }
    }
    // A stripped image keeps a few symbols (its imports), read the same way.
    for name in STRIPPED {
        let mapped = map_like_dyld(&fixture(name), SLIDE, 0);
        let image = mapped.image(SLIDE);
        let (_, calls) = copied_as_in_place(name, &mapped, &image);
        for vanish_at in 1..=calls {
            let (result, _) = symbol_table_copied(&mapped, &image, vanish_at);
            let gone = matches!(result, Err(MachOError::Unreadable { .. }));
            assert!(gone, "{name}, gone at copy {vanish_at}: {result:?}");
        }
    }
}

#[test]
fn a_slide_that_does_not_match_the_header_is_refused() {
    // The race's outcome: image A's header paired with image B's slide. Reading on with it
    // would compute every __LINKEDIT address wrong.
    let name = "libhello-arm64.dylib";
    let file = fixture(name);
    let mapped = map_like_dyld(&file, SLIDE, 0);
    match MachImage::parse(&mapped.memory(), mapped.load_address, SLIDE + 0x4000) {
        Err(MachOError::Malformed(what)) => assert!(what.contains("slide"), "{what}"),
        other => panic!("expected a slide mismatch, got {other:?}"),
    }
}

fn fixture_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/macho")
        .join(name)
}

/// The line of `dsym.c` holding `marker`.
fn dsym_line(marker: &str) -> u32 {
    let source = std::fs::read_to_string(fixture_path("dsym.c")).expect("dsym.c");
    let index = source
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker in dsym.c");
    u32::try_from(index + 1).unwrap()
}

/// Link-time extent of `dsym_outer` (up to the next function symbol).
fn dsym_outer(file: &[u8]) -> Range<u64> {
    let object = parse(file);
    let start = symbol_address(&object, "_dsym_outer");
    let end = object
        .symbols()
        .map(|s| s.address())
        .filter(|&a| a > start)
        .min()
        .expect("a function after dsym_outer");
    start..end
}

/// Inline chains of every instruction-aligned address of `dsym_outer` in the image at
/// `path` (a copy of a fixture, so its `.dSYM` may be beside it or not).
fn dsym_chains(path: &std::path::Path, arch: &str) -> Vec<Vec<btprof_symbols::Frame>> {
    let file = std::fs::read(path).expect("read image");
    let mapped = map_like_dyld(&file, SLIDE, 0);
    let image = mapped.image(SLIDE);
    assert!(image.uuid().is_some(), "{arch}: the image has an LC_UUID");
    let mut resolver = Resolver::from_macho_images_at(&mapped.memory(), [(path, &image)])
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
    let step = if arch == "arm64" { 4 } else { 1 };
    dsym_outer(&file)
        .step_by(step)
        .map(|addr| resolver.resolve_frames(addr + SLIDE).to_vec())
        .collect()
}

#[test]
fn dsym_beside_the_binary_gives_inline_frames_and_lines() {
    let (body, call_site) = (dsym_line("DSYM_INLINED_BODY"), dsym_line("DSYM_CALL_SITE"));
    for arch in ["arm64", "x86_64"] {
        let path = fixture_path(&format!("hello-dsym-{arch}"));
        let start = dsym_outer(&fixture(&format!("hello-dsym-{arch}"))).start + SLIDE;
        let chains = dsym_chains(&path, arch);
        let (mut expanded, mut with_lines) = (0, 0);
        for chain in &chains {
            assert_eq!(&*chain[0].name, "dsym_outer", "{arch}: {chain:?}");
            assert!(!chain[0].inlined);
            // Alignment padding after the function is covered by the symbol but not by
            // DWARF: a lone frame without a file there.
            match chain[0].file.as_deref() {
                Some(file) => {
                    assert!(file.ends_with("dsym.c"), "{arch}: {chain:?}");
                    with_lines += 1;
                }
                None => assert_eq!(chain.len(), 1, "{arch}: {chain:?}"),
            }
            for frame in chain {
                assert_eq!(frame.function_start, Some(start), "{arch}");
            }
            if let [outer, inner] = &chain[..] {
                assert_eq!(&*inner.name, "dsym_inlined_step", "{arch}");
                assert!(inner.inlined);
                assert_eq!(outer.line, Some(call_site), "{arch}: {chain:?}");
                // Line 0 (no line: compiler-generated code) is `None`; any real line is
                // in the inlined body.
                if let Some(l) = inner.line {
                    assert!(l == body || l == body + 1, "{arch}: {chain:?}");
                    expanded += 1;
                }
            }
        }
        assert!(
            expanded > 0,
            "{arch}: no address expanded into the inlined step"
        );
        assert!(
            with_lines * 4 > chains.len() * 3,
            "{arch}: {with_lines} of {} addresses have a line",
            chains.len()
        );
    }
}

#[test]
fn dsym_of_another_build_or_none_gives_no_lines() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("btprof-dsym-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for arch in ["arm64", "x86_64"] {
        let name = format!("hello-dsym-{arch}");
        let binary = dir.join(&name);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        std::fs::copy(fixture_path(&name), &binary).expect("copy image");
        // No bundle beside the copy: symbols only.
        for chain in dsym_chains(&binary, arch) {
            assert_eq!(chain.len(), 1, "{arch}");
            assert_eq!(&*chain[0].name, "dsym_outer");
            assert_eq!(chain[0].file, None);
        }
        // The other architecture's bundle under this image's name: its UUID differs.
        let other = if arch == "arm64" { "x86_64" } else { "arm64" };
        let dwarf_dir = dir.join(format!("{name}.dSYM/Contents/Resources/DWARF"));
        std::fs::create_dir_all(&dwarf_dir).expect("bundle");
        std::fs::copy(
            fixture_path(&format!(
                "hello-dsym-{other}.dSYM/Contents/Resources/DWARF/hello-dsym-{other}"
            )),
            dwarf_dir.join(&name),
        )
        .expect("copy other bundle");
        for chain in dsym_chains(&binary, arch) {
            assert_eq!(chain.len(), 1, "{arch}: a foreign .dSYM was used");
            assert_eq!(chain[0].line, None);
        }
    }
}
