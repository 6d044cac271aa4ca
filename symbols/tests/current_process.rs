//! Resolving addresses of the test process itself through the public API.
//!
//! Module discovery exists for Linux and macOS. The macOS tests (dyld's image list, symbols
//! read from the shared cache) have never run on this project's Linux machines: they are
//! compiled and linked by the macOS build check and run on a Mac with `cargo test`.
#![cfg(any(target_os = "linux", target_os = "macos"))]

#[cfg(any(target_env = "gnu", target_os = "macos"))]
use std::ffi::CStr;

use btprof_symbols::Resolver;

/// Held by the tests that load a library and the one that expects the
/// module list not to change: tests run on parallel threads of one process.
static MODULE_LIST: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn module_list_lock() -> std::sync::MutexGuard<'static, ()> {
    MODULE_LIST.lock().unwrap_or_else(|e| e.into_inner())
}

/// Target with a known name and a body comfortably longer than 5 bytes.
#[inline(never)]
fn btprof_probe_target(x: u64) -> u64 {
    let mut acc = x;
    for i in 0..std::hint::black_box(10u64) {
        acc = acc.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(acc)
}

/// Runtime address of [`btprof_probe_target`].
fn probe_addr() -> u64 {
    let f: fn(u64) -> u64 = btprof_probe_target;
    f as usize as u64
}

/// Runtime address of libc's `getpid` (in a PIE this is the real function in libc, taken
/// from the GOT, not a PLT stub in the executable; on macOS the function in
/// `libsystem_kernel.dylib`, likewise through the GOT).
fn getpid_addr() -> u64 {
    let f: unsafe extern "C" fn() -> libc::pid_t = libc::getpid;
    f as usize as u64
}

fn resolver() -> Resolver {
    match Resolver::for_current_process() {
        Ok(r) => r,
        Err(e) => panic!("module discovery failed: {e}"),
    }
}

#[test]
fn resolves_own_function_and_an_address_inside_it() {
    assert_ne!(btprof_probe_target(1), 0);
    let addr = probe_addr();
    let mut r = resolver();
    let at_start = r.resolve(addr);
    assert!(
        at_start.name.ends_with("btprof_probe_target"),
        "got {:?}",
        at_start
    );
    assert_eq!(at_start.function_start, Some(addr));
    assert!(at_start.module.is_some());

    let inside = r.resolve(addr + 5);
    assert_eq!(inside.name, at_start.name);
    assert_eq!(inside.function_start, at_start.function_start);
}

/// Asserts that `s` names a function whose name holds `name`, in a module
/// whose name `in_module` accepts.
#[cfg(any(target_env = "gnu", target_os = "macos"))]
fn assert_found(s: &btprof_symbols::Symbol, name: &str, in_module: impl Fn(&str) -> bool) {
    assert!(s.name.contains(name), "got {s:?}");
    assert!(s.module.as_deref().is_some_and(in_module), "got {s:?}");
}

#[cfg(target_env = "gnu")]
#[test]
fn resolves_libc_function() {
    let addr = getpid_addr();
    let s = resolver().resolve(addr);
    assert_found(&s, "getpid", |m| m.contains("libc"));
}

/// `getpid` lives in `libsystem_kernel.dylib`, which exists only in the dyld shared cache:
/// its symbols can only have come from the image's `__LINKEDIT` in memory.
#[cfg(target_os = "macos")]
#[test]
fn resolves_shared_cache_function() {
    let s = resolver().resolve(getpid_addr());
    assert_found(&s, "getpid", |m| m == "libsystem_kernel.dylib");
}

#[test]
fn address_outside_all_modules_has_fallback_name() {
    let s = resolver().resolve(0x10);
    assert!(!s.name.is_empty());
    assert_eq!(&*s.name, "[unknown]+0x10");
    assert_eq!(s.module, None);
    assert_eq!(s.function_start, None);
}

#[test]
fn cache_returns_identical_results() {
    let mut r = resolver();
    let addrs = [probe_addr(), getpid_addr(), 0x10];
    let first: Vec<_> = addrs.iter().map(|&a| r.resolve(a)).collect();
    let second: Vec<_> = addrs.iter().map(|&a| r.resolve(a)).collect();
    assert_eq!(first, second);
}

#[test]
fn refresh_without_change_keeps_results() {
    let _list = module_list_lock();
    let mut r = resolver();
    let addr = probe_addr();
    let before = r.resolve(addr);
    let count = r.module_count();
    r.refresh();
    assert_eq!(r.module_count(), count);
    assert_eq!(r.resolve(addr), before);
}

/// Loads `library` after a resolver was made, refreshes the resolver and
/// asserts that it resolves `function` in a module whose name starts with
/// `module`. `false`, checking nothing, where the library cannot be loaded.
#[cfg(any(target_env = "gnu", target_os = "macos"))]
fn refresh_resolves_after_dlopen(library: &CStr, function: &CStr, module: &str) -> bool {
    let _list = module_list_lock();
    let mut r = resolver();
    // SAFETY: the callers name system libraries whose initialisers affect nothing here;
    // the handle is intentionally leaked so the library stays loaded for the rest of the
    // test process.
    let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` is a valid handle returned by `dlopen` above.
    let address = unsafe { libc::dlsym(handle, function.as_ptr()) };
    assert!(!address.is_null());
    r.refresh();
    let s = r.resolve(address as u64);
    assert_found(&s, function.to_str().unwrap(), |m| m.starts_with(module));
    true
}

#[cfg(target_env = "gnu")]
#[test]
fn refresh_sees_dlopened_library() {
    // `frexp`, not `cos`: `cos` is an IFUNC whose selected implementation is a local
    // symbol that stripped distribution libraries do not carry. Without libm on this
    // system there is nothing to test.
    refresh_resolves_after_dlopen(c"libm.so.6", c"frexp", "libm");
}

#[cfg(target_os = "macos")]
#[test]
fn refresh_sees_dlopened_library() {
    assert!(
        refresh_resolves_after_dlopen(c"/usr/lib/libz.1.dylib", c"deflate", "libz"),
        "every macOS has libz in its shared cache"
    );
}

/// A refresh skips the rescan while the loader's counts of loaded and unloaded objects
/// stay the same: a library that was not loaded before must still bump them and appear.
#[cfg(target_env = "gnu")]
#[test]
fn refresh_sees_a_library_loaded_for_the_first_time() {
    let _list = module_list_lock();
    // glibc's small compatibility libraries: nothing in a test process loads them.
    let candidates = [c"libBrokenLocale.so.1", c"libanl.so.1"];
    let not_loaded = |name: &CStr| {
        // SAFETY: RTLD_NOLOAD only asks whether the library is loaded; a handle it
        // returns is leaked (the library is loaded anyway).
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        handle.is_null()
    };
    let Some(library) = candidates.into_iter().find(|&name| not_loaded(name)) else {
        return;
    };
    let mut r = resolver();
    r.refresh();
    let before = r.module_count();
    // SAFETY: a glibc library whose initialiser affects nothing here; the handle is leaked
    // so it stays loaded for the rest of the test process.
    let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return;
    }
    r.refresh();
    assert_eq!(r.module_count(), before + 1, "{library:?}");
}

#[test]
fn module_names_are_file_names() {
    let r = resolver();
    assert!(r.module_count() > 1);
    for name in r.module_names() {
        assert!(!name.is_empty());
        assert!(!name.contains('/'), "{name}");
    }
}

/// Inlined into [`btprof_inline_caller`] even in unoptimised builds (`inline(always)`).
#[inline(always)]
fn btprof_inlined_helper(x: u64) -> u64 {
    let y = x.wrapping_mul(0x9E37_79B9_7F4A_7C15); // INLINED_HELPER_BODY
    y ^ (y >> 29)
}

#[inline(never)]
fn btprof_inline_caller(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..std::hint::black_box(n) {
        acc = acc.wrapping_add(btprof_inlined_helper(acc ^ i)); // INLINE_CALL_SITE
    }
    std::hint::black_box(acc)
}

/// The test binary's own DWARF: an `#[inline(always)]` function hot in a loop appears as an
/// inlined frame under its caller, with this file and its lines.
///
/// On macOS the DWARF must be in a `.dSYM` beside the test binary, which cargo makes with
/// `CARGO_PROFILE_DEV_SPLIT_DEBUGINFO=packed`; by default it stays in the object files of
/// the debug map, which are not read, and the test says so and checks nothing.
#[test]
fn inlined_rust_function_is_its_own_frame_with_file_and_line() {
    assert_ne!(btprof_inline_caller(3), 0);
    if cfg!(target_os = "macos") {
        let exe = std::env::current_exe().expect("own path");
        let mut bundle = exe.into_os_string();
        bundle.push(".dSYM");
        if !std::path::Path::new(&bundle).exists() {
            println!(
                "skipped: no .dSYM beside the test binary; rerun with \
                 CARGO_PROFILE_DEV_SPLIT_DEBUGINFO=packed to check inline frames on macOS"
            );
            return;
        }
    }
    let source = include_str!("current_process.rs");
    let line_of = |marker: &str| {
        let index = source
            .lines()
            .position(|l| l.contains(marker) && !l.contains("line_of"))
            .expect("marker");
        u32::try_from(index + 1).unwrap()
    };
    let (body, call_site) = (line_of("INLINED_HELPER_BODY"), line_of("INLINE_CALL_SITE"));
    let f: fn(u64) -> u64 = btprof_inline_caller;
    let start = f as usize as u64;
    let mut r = resolver();
    let mut found = 0;
    // Walk the caller's code until the symbol ends.
    let mut addr = start;
    while r.resolve(addr).function_start == Some(start) && addr < start + 4096 {
        let frames = r.resolve_frames(addr);
        assert!(
            frames[0].name.ends_with("btprof_inline_caller"),
            "{frames:?}"
        );
        assert!(!frames[0].inlined);
        if let Some(index) = frames
            .iter()
            .position(|f| f.name.ends_with("btprof_inlined_helper"))
        {
            let inner = &frames[index];
            assert!(inner.inlined, "{frames:?}");
            assert_eq!(inner.function_start, Some(start));
            assert!(
                inner
                    .file
                    .as_deref()
                    .is_some_and(|f| f.ends_with("current_process.rs")),
                "{inner:?}"
            );
            assert!(
                matches!(inner.line, Some(l) if l == body || l == body + 1),
                "{inner:?}, body at {body}"
            );
            // Its caller's frame is at the call site; deeper frames (core's `wrapping_mul`,
            // itself inlined) may follow it.
            assert_eq!(frames[index - 1].line, Some(call_site), "{frames:?}");
            found += 1;
        }
        addr += 1;
    }
    assert!(
        found > 0,
        "no address of the caller expanded into the inlined helper"
    );
}

/// `dwarf_loads` counts what makes a first inline lookup slow, once: the first address of a
/// module reads its DWARF and builds the context over its units; the same address again, or
/// a second address of the same function (same units), loads nothing more.
#[test]
fn dwarf_loads_count_first_lookups_only() {
    assert_ne!(btprof_inline_caller(3), 0);
    let mut r = resolver();
    assert_eq!(r.dwarf_loads(), 0);
    let _ = r.resolve(probe_addr());
    assert_eq!(r.dwarf_loads(), 0, "symbol tables are not DWARF");
    let f: fn(u64) -> u64 = btprof_inline_caller;
    let start = f as usize as u64;
    let first = r.resolve_frames(start + 1);
    let loads = r.dwarf_loads();
    assert!(loads >= 1, "the test binary's DWARF was not counted");
    assert_eq!(r.resolve_frames(start + 1), first);
    let _ = r.resolve_frames(start + 2);
    assert_eq!(
        r.dwarf_loads(),
        loads,
        "a second address of one function loaded more"
    );
    let before = r.cached_addresses();
    let _ = r.resolve(start + 3);
    assert_eq!(r.cached_addresses(), before + 1);
}
