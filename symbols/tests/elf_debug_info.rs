//! Names from what a Linux distribution ships: stripped libraries (function starts from
//! `.eh_frame`), separate debug files (`.gnu_debuglink`, build-id directories), MiniDebugInfo,
//! inline frames and lines from DWARF, and C++ names.
//!
//! Every library is built here, by the system's `cc`/`c++`, `strip`, `objcopy` and `xz`
//! (Debian: gcc, g++, binutils, xz-utils), into cargo's per-test temporary directory, and
//! resolved through [`Resolver::from_object_files`] at a made-up load bias, with the debug
//! file search pointed at the test's own directories. A missing tool fails the test with a
//! message naming it: these tests prove the feature and must not pass without running.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use btprof_symbols::{DebugSearch, Resolver};
use object::{Object, ObjectSymbol};

/// Where the libraries are pretended to be loaded.
const BIAS: u64 = 0x5555_0000_0000;

const C_SOURCE: &str = r#"
#define KEEP __attribute__((noinline))

static inline __attribute__((always_inline)) int btprof_inlined_step(int x) {
    int y = x * 31 + 7; /* INLINED_BODY */
    return y ^ (y >> 3);
}

KEEP static int btprof_hidden_a(int n) {
    int acc = 0;
    for (int i = 0; i < n; i++) {
        acc += btprof_inlined_step(acc + i); /* CALL_SITE */
    }
    return acc;
}

KEEP static int btprof_hidden_b(int n) {
    int acc = 1;
    for (int i = 0; i < n; i++) {
        acc = acc * 17 + (acc >> 5) + i;
        if (acc & 0x100) acc ^= 0x5a5a;
    }
    return acc;
}

typedef int (*btprof_fn)(int);

btprof_fn btprof_lib_function(int which) {
    return which ? btprof_hidden_b : btprof_hidden_a;
}
"#;

const CPP_SOURCE: &str = r#"
namespace btprof_ns {
struct Widget {
    __attribute__((noinline)) int spin(int n);
};
int Widget::spin(int n) {
    int acc = 0;
    for (int i = 0; i < n; i++) acc = acc * 3 + i;
    return acc;
}
template <typename T> __attribute__((noinline)) T twice(T x) { return x + x; }
template int twice<int>(int);
}
extern "C" int btprof_cpp_entry(int n) { btprof_ns::Widget w; return w.spin(n); }
"#;

/// The libraries all tests use, built once per test process.
struct Built {
    dir: PathBuf,
    /// Unstripped, with DWARF: where expected addresses come from.
    full: PathBuf,
    /// `strip --strip-all`: only `.dynsym` (one exported function) and `.eh_frame` left.
    stripped: PathBuf,
    /// Stripped, symbols and DWARF moved to `debuglink/libbtprof_dl.so.debug` beside it.
    debuglink: PathBuf,
    /// Stripped with no debuglink; the debug file is under `<root>/.build-id/`.
    build_id: PathBuf,
    build_id_root: PathBuf,
    /// Stripped, with a `.gnu_debugdata` MiniDebugInfo section.
    mini: PathBuf,
    /// A C++ library with DWARF.
    cpp: PathBuf,
}

fn run(program: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let mut command = Command::new(program);
    for arg in args {
        command.arg(arg);
    }
    let output = command.output().unwrap_or_else(|e| {
        panic!("cannot run `{program}` ({e}): this test needs gcc, g++, binutils and xz-utils")
    });
    assert!(
        output.status.success(),
        "`{program} {:?}` failed: {}",
        command.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Writes `source` (file name, text) into `dir` and builds it with
/// `compiler` and `flags` into the shared library `out` there, with debug
/// info; returns the library's path.
fn shared_library(
    dir: &Path,
    compiler: &str,
    (name, text): (&str, &str),
    flags: &[&str],
    out: &str,
) -> PathBuf {
    let source = dir.join(name);
    std::fs::write(&source, text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    let library = dir.join(out);
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"-shared", &"-fPIC", &"-g"];
    args.extend(flags.iter().map(|f| f as &dyn AsRef<std::ffi::OsStr>));
    args.extend([&"-o" as &dyn AsRef<std::ffi::OsStr>, &library, &source]);
    run(compiler, &args);
    library
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("btprof-elf-debug-info-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        let full = shared_library(
            &dir,
            "cc",
            ("btprof_lib.c", C_SOURCE),
            &["-O2", "-Wl,--build-id"],
            "libbtprof_full.so",
        );

        let stripped = dir.join("libbtprof_stripped.so");
        run("strip", &[&"--strip-all", &"-o", &stripped, &full]);

        // Debuglink: debug file in a directory of its own, next to the stripped library.
        let dl_dir = dir.join("debuglink");
        std::fs::create_dir_all(&dl_dir).expect("debuglink directory");
        let dl_debug = dl_dir.join("libbtprof_dl.so.debug");
        let debuglink = dl_dir.join("libbtprof_dl.so");
        run("objcopy", &[&"--only-keep-debug", &full, &dl_debug]);
        run("strip", &[&"--strip-all", &"-o", &debuglink, &full]);
        run(
            "objcopy",
            &[
                &format!("--add-gnu-debuglink={}", dl_debug.display()),
                &debuglink,
            ],
        );

        // Build id: the debug file under <root>/.build-id/xx/yyyy.debug, no debuglink.
        let build_id = dir.join("libbtprof_bid.so");
        run("strip", &[&"--strip-all", &"-o", &build_id, &full]);
        let hex = build_id_hex(&full);
        let build_id_root = dir.join("debug-root");
        let bid_dir = build_id_root.join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&bid_dir).expect("build-id directory");
        run(
            "objcopy",
            &[
                &"--only-keep-debug",
                &full,
                &bid_dir.join(format!("{}.debug", &hex[2..])),
            ],
        );

        // MiniDebugInfo, as Fedora builds it (gdb manual, "MiniDebugInfo"): the function
        // symbols that are not in .dynsym, in an xz-compressed ELF in `.gnu_debugdata`.
        let mini = dir.join("libbtprof_mini.so");
        let keep = dir.join("keep_symbols");
        std::fs::write(&keep, "btprof_hidden_a\nbtprof_hidden_b\n").expect("keep list");
        let mini_debug = dir.join("mini_debuginfo");
        let only_debug = dir.join("only_debug");
        run("objcopy", &[&"--only-keep-debug", &full, &only_debug]);
        run(
            "objcopy",
            &[
                &"-S",
                &"--remove-section",
                &".gdb_index",
                &"--remove-section",
                &".comment",
                &format!("--keep-symbols={}", keep.display()),
                &only_debug,
                &mini_debug,
            ],
        );
        run("xz", &[&"--force", &"--keep", &mini_debug]);
        run("strip", &[&"--strip-all", &"-o", &mini, &full]);
        run(
            "objcopy",
            &[
                &format!(
                    "--add-section=.gnu_debugdata={}",
                    dir.join("mini_debuginfo.xz").display()
                ),
                &mini,
            ],
        );

        let cpp = shared_library(
            &dir,
            "c++",
            ("btprof_cpp.cpp", CPP_SOURCE),
            &["-O1"],
            "libbtprof_cpp.so",
        );

        Built {
            dir,
            full,
            stripped,
            debuglink,
            build_id,
            build_id_root,
            mini,
            cpp,
        }
    })
}

fn build_id_hex(path: &Path) -> String {
    let data = std::fs::read(path).expect("read library");
    let file = object::File::parse(&*data).expect("parse library");
    let id = file
        .build_id()
        .expect("notes")
        .expect("the library has a build id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Link-time start and size of a function symbol of the unstripped library.
fn function(name: &str) -> (u64, u64) {
    let data = std::fs::read(&built().full).expect("read library");
    let file = object::File::parse(&*data).expect("parse library");
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    assert!(symbol.size() > 8, "{name} is too small to probe");
    (symbol.address(), symbol.size())
}

fn resolver(library: &Path, search: DebugSearch) -> Resolver {
    Resolver::from_object_files([(library.to_owned(), BIAS)])
        .expect("library readable")
        .with_debug_search(search)
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Asserts that both hidden functions resolve, at their start and inside, to their names.
fn assert_named(resolver: &mut Resolver, what: &str) {
    for name in ["btprof_hidden_a", "btprof_hidden_b"] {
        let (start, size) = function(name);
        for addr in [start, start + size / 2, start + size - 1] {
            let symbol = resolver.resolve(addr + BIAS);
            assert_eq!(&*symbol.name, name, "{what}: {addr:#x}");
            assert_eq!(symbol.function_start, Some(start + BIAS), "{what}");
        }
    }
}

/// Asserts that both hidden functions resolve to `module+0x<start>`, one frame per function.
fn assert_function_starts(resolver: &mut Resolver, module: &str, what: &str) {
    for name in ["btprof_hidden_a", "btprof_hidden_b"] {
        let (start, size) = function(name);
        let expected = format!("{module}+{start:#x}");
        for addr in [start, start + 1, start + size / 2, start + size - 1] {
            let symbol = resolver.resolve(addr + BIAS);
            assert_eq!(&*symbol.name, expected, "{what}: {name} at {addr:#x}");
            assert_eq!(symbol.function_start, Some(start + BIAS), "{what}: {name}");
            assert_eq!(symbol.module.as_deref(), Some(module));
        }
    }
}

#[test]
fn stripped_library_groups_addresses_by_eh_frame_function() {
    let b = built();
    let mut r = resolver(&b.stripped, DebugSearch::beside_binary_only());
    assert_function_starts(&mut r, &file_name(&b.stripped), "stripped");
    // The exported function keeps its name from .dynsym.
    let (start, _) = function("btprof_lib_function");
    assert_eq!(&*r.resolve(start + BIAS).name, "btprof_lib_function");
}

#[test]
fn debuglink_file_names_stripped_functions() {
    let b = built();
    let mut r = resolver(&b.debuglink, DebugSearch::beside_binary_only());
    assert_named(&mut r, "debuglink");
}

/// A directory `name` under the built libraries holding a copy of the
/// debuglink library (without its debug file), and the copy's path.
fn debuglink_library_in(name: &str) -> (PathBuf, PathBuf) {
    let dir = built().dir.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let lib = dir.join("libbtprof_dl.so");
    std::fs::copy(&built().debuglink, &lib).expect("copy library");
    (dir, lib)
}

#[test]
fn debuglink_is_also_found_in_the_dot_debug_directory() {
    let b = built();
    let (dir, lib) = debuglink_library_in("dotdebug");
    std::fs::create_dir_all(dir.join(".debug")).expect("dir");
    std::fs::copy(
        b.debuglink.with_file_name("libbtprof_dl.so.debug"),
        dir.join(".debug/libbtprof_dl.so.debug"),
    )
    .expect("copy debug file");
    let mut r = resolver(&lib, DebugSearch::beside_binary_only());
    assert_named(&mut r, "debuglink in .debug/");
}

#[test]
fn without_its_debug_file_a_stripped_library_falls_back_to_function_starts() {
    // The debuglink library copied where its debug file is not.
    let (_, lib) = debuglink_library_in("no-debug-file");
    let mut r = resolver(&lib, DebugSearch::beside_binary_only());
    assert_function_starts(&mut r, "libbtprof_dl.so", "debug file missing");
}

#[test]
fn debuglink_file_of_another_build_is_ignored() {
    let b = built();
    let (dir, lib) = debuglink_library_in("wrong-crc");
    // The right name, the wrong file: both carry build ids, which differ (without build ids
    // the CRC in the debuglink decides).
    std::fs::copy(&b.cpp, dir.join("libbtprof_dl.so.debug")).expect("copy other file");
    let mut r = resolver(&lib, DebugSearch::beside_binary_only());
    assert_function_starts(&mut r, "libbtprof_dl.so", "wrong debug file");
}

#[test]
fn build_id_directory_names_stripped_functions() {
    let b = built();
    let search = DebugSearch {
        roots: vec![b.build_id_root.clone()],
        debuginfod_cache: None,
    };
    let mut r = resolver(&b.build_id, search);
    assert_named(&mut r, "build-id");
    // Without the root it is just stripped.
    let mut r = resolver(&b.build_id, DebugSearch::beside_binary_only());
    assert_function_starts(&mut r, &file_name(&b.build_id), "no build-id root");
}

#[test]
fn debuginfod_cache_names_stripped_functions() {
    let b = built();
    let cache = b.dir.join("debuginfod-cache");
    let entry = cache.join(build_id_hex(&b.full));
    std::fs::create_dir_all(&entry).expect("cache entry");
    std::fs::copy(&b.full, entry.join("debuginfo")).expect("copy debug file");
    let search = DebugSearch {
        roots: Vec::new(),
        debuginfod_cache: Some(cache),
    };
    let mut r = resolver(&b.build_id, search);
    assert_named(&mut r, "debuginfod cache");
}

#[test]
fn mini_debuginfo_names_stripped_functions() {
    let b = built();
    let mut r = resolver(&b.mini, DebugSearch::beside_binary_only());
    assert_named(&mut r, "MiniDebugInfo");
}

/// The line of `source` holding `marker`, 1-based.
fn line_of(source: &str, marker: &str) -> u32 {
    let index = source
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no {marker} in the source"));
    u32::try_from(index + 1).unwrap()
}

/// The inline chains of every address of `btprof_hidden_a` in `library`.
fn chains_of_hidden_a(library: &Path, search: DebugSearch) -> Vec<Vec<btprof_symbols::Frame>> {
    let mut r = resolver(library, search);
    let (start, size) = function("btprof_hidden_a");
    (start..start + size)
        .map(|addr| r.resolve_frames(addr + BIAS).to_vec())
        .collect()
}

fn assert_inlined_step_expands(chains: &[Vec<btprof_symbols::Frame>], what: &str) {
    let (start, _) = function("btprof_hidden_a");
    let call_site = line_of(C_SOURCE, "CALL_SITE");
    let body = line_of(C_SOURCE, "INLINED_BODY")..line_of(C_SOURCE, "INLINED_BODY") + 2;
    let inlined: Vec<_> = chains.iter().filter(|c| c.len() == 2).collect();
    assert!(
        !inlined.is_empty(),
        "{what}: no address of btprof_hidden_a expands into an inline chain: {:?}",
        chains.iter().map(|c| c.len()).collect::<Vec<_>>()
    );
    for chain in inlined {
        let (outer, inner) = (&chain[0], &chain[1]);
        assert_eq!(&*outer.name, "btprof_hidden_a", "{what}");
        assert!(!outer.inlined);
        assert_eq!(&*inner.name, "btprof_inlined_step", "{what}");
        assert!(inner.inlined);
        for frame in chain {
            assert_eq!(frame.function_start, Some(start + BIAS));
            let file = frame.file.as_deref().unwrap_or("");
            assert!(file.ends_with("btprof_lib.c"), "{what}: file {file:?}");
        }
        assert_eq!(outer.line, Some(call_site), "{what}: the call site");
        let line = inner.line.expect("the inlined line");
        assert!(body.contains(&line), "{what}: line {line} not in {body:?}");
    }
    // Every chain starts with the machine function and has no other non-inlined frame.
    for chain in chains {
        assert_eq!(&*chain[0].name, "btprof_hidden_a", "{what}");
        assert_eq!(chain.iter().filter(|f| !f.inlined).count(), 1, "{what}");
    }
}

#[test]
fn inline_frames_and_lines_come_from_the_binary() {
    let b = built();
    let chains = chains_of_hidden_a(&b.full, DebugSearch::beside_binary_only());
    assert_inlined_step_expands(&chains, "unstripped");
}

#[test]
fn inline_frames_and_lines_come_from_the_debug_file() {
    let b = built();
    let chains = chains_of_hidden_a(&b.debuglink, DebugSearch::beside_binary_only());
    assert_inlined_step_expands(&chains, "debuglink");
}

#[test]
fn without_dwarf_a_chain_is_the_symbol() {
    let b = built();
    let mut r = resolver(&b.stripped, DebugSearch::beside_binary_only());
    let (start, size) = function("btprof_hidden_a");
    let frames = r.resolve_frames(start + size / 2 + BIAS);
    assert_eq!(frames.len(), 1);
    assert_eq!(*frames[0].name, *r.resolve(start + size / 2 + BIAS).name);
    assert_eq!(frames[0].file, None);
    assert_eq!(frames[0].line, None);
    assert!(!frames[0].inlined);
}

#[test]
fn cpp_names_are_demangled() {
    let b = built();
    let mut r = Resolver::from_object_files([(b.cpp.clone(), BIAS)]).expect("C++ library");
    let data = std::fs::read(&b.cpp).expect("read");
    let file = object::File::parse(&*data).expect("parse");
    let mut seen = Vec::new();
    for symbol in file.symbols() {
        let (Ok(raw), true) = (symbol.name(), symbol.size() > 0) else {
            continue;
        };
        let expected = match raw {
            "_ZN9btprof_ns6Widget4spinEi" => "btprof_ns::Widget::spin(int)",
            "_ZN9btprof_ns5twiceIiEET_S1_" => "int btprof_ns::twice<int>(int)",
            _ => continue,
        };
        let resolved = r.resolve(symbol.address() + symbol.size() / 2 + BIAS);
        assert_eq!(&*resolved.name, expected);
        seen.push(expected);
    }
    assert_eq!(seen.len(), 2, "both C++ functions found: {seen:?}");
}
