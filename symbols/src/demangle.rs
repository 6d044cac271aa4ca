//! Symbol-name demangling: Rust, C++ and (through the Swift runtime, when it is loaded) Swift.
//!
//! Every path falls back to the raw name: the profiler must never lose a name it cannot
//! interpret.

use std::ffi::{c_char, CStr};

/// Demangles a symbol name (Rust and C++; Swift names need the Swift runtime, which the
/// resolver uses when the process has it loaded).
///
/// Rust symbols (legacy `_ZN…17h<hash>E` and v0 `_R…`) are demangled without the trailing
/// hash (`{:#}`), because the hash differs between builds and would split otherwise
/// identical frames in a flamegraph. Other Itanium-mangled names (`_Z…`: C++) are demangled
/// with `cpp_demangle`, parameters included, as perf shows them. Anything else (C names,
/// names no demangler accepts) is returned unchanged.
pub fn demangle(raw: &str) -> String {
    if let Some(rust) = demangle_rust(raw) {
        return rust;
    }
    if raw.starts_with("_Z") {
        if let Some(cpp) = demangle_cpp(raw) {
            return cpp;
        }
    }
    // A legacy-scheme name without a hash is valid C++ *and* Rust; C++ was tried first
    // above, so this is only reached for names cpp_demangle rejected.
    match rustc_demangle::try_demangle(raw) {
        Ok(demangled) => format!("{demangled:#}"),
        Err(_) => raw.to_owned(),
    }
}

/// A Rust symbol for certain: v0 (`_R`), or legacy with rustc's `17h<16 hex digits>E` hash
/// suffix. (A legacy name without a hash is also a valid C++ name, so it is left to C++.)
fn demangle_rust(raw: &str) -> Option<String> {
    let demangled = rustc_demangle::try_demangle(raw).ok()?;
    let v0 = raw.starts_with("_R") || raw.starts_with("__R");
    let hashed = raw
        .strip_suffix('E')
        .and_then(|s| s.get(s.len().checked_sub(19)?..))
        .is_some_and(|tail| {
            tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit())
        });
    (v0 || hashed).then(|| format!("{demangled:#}"))
}

/// An Itanium C++ name, demangled with its parameters; `None` when it does not parse.
fn demangle_cpp(raw: &str) -> Option<String> {
    let symbol = cpp_demangle::Symbol::new(raw.as_bytes()).ok()?;
    symbol.demangle().ok()
}

/// The Rust standard-library module (`core::hint`, `alloc::vec`) whose source file is `file`,
/// when it is one: `…/library/{core,alloc,std}/src/<path>.rs`, as rustc records it
/// (`/rustc/<commit>/library/…`, or the `rust-src` component's path).
///
/// With `debug = "line-tables-only"` (btprof's release profile, and a common choice) DWARF
/// names an inlined function by its short name only (`black_box<u64>`, `wrapping_mul`), so a
/// std helper inlined into user code would look like user code. Qualified with its module
/// from the file it is in, it says where it comes from (`core::hint::black_box<u64>`), which
/// is what lets `btprof diff` count its time to the user's function (a macro-generated
/// function gets the macro's file: `core::num::uint_macros::wrapping_mul`).
pub(crate) fn rust_library_module(file: &str) -> Option<String> {
    let (_, rest) = file.rsplit_once("/library/")?;
    let (krate, path) = rest.split_once("/src/")?;
    if !matches!(krate, "core" | "alloc" | "std") {
        return None;
    }
    let path = path.strip_suffix(".rs")?;
    let mut module = String::from(krate);
    for part in path.split('/') {
        if matches!(part, "mod" | "lib") {
            continue;
        }
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        module.push_str("::");
        module.push_str(part);
    }
    Some(module)
}

/// Whether `raw` looks like a Swift mangled name (Swift 4+ `$s`, Swift 4.0 `$S`, embedded
/// Swift `$e`, Swift 3 `_T0`), with or without the Mach-O underscore.
pub(crate) fn is_swift(raw: &str) -> bool {
    let raw = raw
        .strip_prefix('_')
        .filter(|r| r.starts_with('$'))
        .unwrap_or(raw);
    ["$s", "$S", "$e", "_T0"].iter().any(|p| raw.starts_with(p))
}

/// `char *swift_demangle(const char *mangledName, size_t mangledNameLength,
/// char *outputBuffer, size_t *outputBufferSize, uint32_t flags)`, exported by
/// `libswiftCore`: with a null output buffer it returns a `malloc`ed string (or null when the
/// name is not a Swift name), which the caller frees.
pub(crate) type SwiftDemangleFn =
    unsafe extern "C" fn(*const c_char, usize, *mut c_char, *mut usize, u32) -> *mut c_char;

/// The demangler the resolver uses: [`demangle`] plus the Swift runtime's own demangler when
/// the process has `libswiftCore` loaded.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Demangler {
    swift: Option<SwiftDemangleFn>,
}

impl Demangler {
    /// Looks `swift_demangle` up in the loaded images (`dlsym(RTLD_DEFAULT, …)`), which finds
    /// it only when `libswiftCore` is already loaded: nothing is loaded for it.
    ///
    /// `dlsym` takes the dynamic loader's lock, so this must never run while a sampled
    /// thread is stopped; the resolver calls it when it is built or refreshed, after
    /// sampling.
    #[cfg(unix)]
    pub(crate) fn for_current_process() -> Demangler {
        // SAFETY: `dlsym` with `RTLD_DEFAULT` and a NUL-terminated name only searches the
        // loaded images; it returns null when no image exports the name.
        let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"swift_demangle".as_ptr()) };
        let swift = (!symbol.is_null()).then(|| {
            // SAFETY: `swift_demangle` is exported by the Swift runtime with exactly the
            // signature of `SwiftDemangleFn` (swift/include/swift/Demangling/Demangle.h), so
            // the address may be called through that type.
            unsafe { std::mem::transmute::<*mut libc::c_void, SwiftDemangleFn>(symbol) }
        });
        Demangler { swift }
    }

    /// No Swift runtime lookup where there is no `dlsym`.
    #[cfg(not(unix))]
    pub(crate) fn for_current_process() -> Demangler {
        Demangler::default()
    }

    /// A demangler that calls `swift` for Swift names (tests give a fake).
    #[cfg(test)]
    pub(crate) fn with_swift(swift: SwiftDemangleFn) -> Demangler {
        Demangler { swift: Some(swift) }
    }

    /// Demangles `raw`: Swift names through the runtime when it is loaded, everything else
    /// with [`demangle`]. Falls back to the raw name.
    pub(crate) fn demangle(&self, raw: &str) -> String {
        if let Some(swift) = self.swift.filter(|_| is_swift(raw)) {
            if let Some(name) = call_swift_demangle(swift, raw) {
                return name;
            }
            return raw.to_owned();
        }
        demangle(raw)
    }
}

/// Calls the runtime's `swift_demangle` on `raw`; `None` when it declines.
fn call_swift_demangle(swift: SwiftDemangleFn, raw: &str) -> Option<String> {
    // SAFETY: `raw` is valid for `raw.len()` bytes (the runtime reads exactly that many, no
    // NUL needed); a null output buffer and size pointer ask the runtime to allocate the
    // result with `malloc`, and flags 0 is the default. `swift` is the runtime's function
    // (see `for_current_process`) or a test's fake with the same contract.
    let out = unsafe {
        swift(
            raw.as_ptr().cast::<c_char>(),
            raw.len(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if out.is_null() {
        return None;
    }
    // SAFETY: a non-null result is a NUL-terminated string the runtime allocated with
    // `malloc`; it is copied before being freed, and freed exactly once.
    let name = unsafe { CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: see above: `out` came from `malloc` and is not used after this.
    unsafe { libc::free(out.cast()) };
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts what each mangled name demangles to.
    fn assert_demangles(cases: &[(&str, &str)]) {
        for &(mangled, want) in cases {
            assert_eq!(demangle(mangled), want, "{mangled}");
        }
    }

    #[test]
    fn legacy_rust_symbol_loses_its_hash() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
    }

    #[test]
    fn v0_rust_symbol_is_demangled() {
        let name = demangle("_RNvCs1234_7mycrate3foo");
        assert_eq!(name, "mycrate::foo");
    }

    #[test]
    fn plain_c_name_is_unchanged() {
        assert_demangles(&[
            ("getpid", "getpid"),
            ("__libc_start_main", "__libc_start_main"),
        ]);
    }

    #[test]
    fn cpp_names_are_demangled_with_parameters() {
        assert_demangles(&[
            ("_Z3fooi", "foo(int)"),
            ("_ZN5space3fooEibc", "space::foo(int, bool, char)"),
            (
                "_ZNSt6vectorIiSaIiEE9push_backERKi",
                "std::vector<int, std::allocator<int> >::push_back(int const&)",
            ),
        ]);
    }

    #[test]
    fn garbage_after_z_is_kept_raw() {
        assert_demangles(&[("_Z", "_Z"), ("_Zfoo bar", "_Zfoo bar")]);
    }

    #[test]
    fn swift_names_are_recognised() {
        assert!(is_swift("$s4main3fooyyF"));
        assert!(is_swift("_$s4main3fooyyF"));
        assert!(is_swift("_T04main3fooyyF"));
        assert!(!is_swift("_ZN3foo3barE"));
        assert!(!is_swift("main"));
    }

    /// Stands in for the runtime: demangles one name, declines everything else, and
    /// allocates its answer with `malloc` as the runtime does.
    unsafe extern "C" fn fake_swift_demangle(
        name: *const c_char,
        len: usize,
        _out: *mut c_char,
        _size: *mut usize,
        _flags: u32,
    ) -> *mut c_char {
        // SAFETY: the caller passes `len` readable bytes at `name`.
        let name = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
        if name != b"$s4main3fooyyF" {
            return std::ptr::null_mut();
        }
        // SAFETY: `strdup` copies a NUL-terminated literal into `malloc`ed memory.
        unsafe { libc::strdup(c"main.foo() -> ()".as_ptr()) }
    }

    #[test]
    fn swift_names_go_through_the_runtime_and_fall_back_to_raw() {
        let d = Demangler::with_swift(fake_swift_demangle);
        assert_eq!(d.demangle("$s4main3fooyyF"), "main.foo() -> ()");
        assert_eq!(d.demangle("$s4main3baryyF"), "$s4main3baryyF");
        // Non-Swift names never reach the runtime.
        assert_eq!(d.demangle("_Z3fooi"), "foo(int)");
        // Without the runtime a Swift name stays raw.
        assert_eq!(
            Demangler::default().demangle("$s4main3fooyyF"),
            "$s4main3fooyyF"
        );
    }

    #[test]
    fn no_swift_runtime_in_this_process() {
        // The test binary links no Swift: the lookup must find nothing rather than guess.
        assert!(Demangler::for_current_process().swift.is_none());
    }

    #[test]
    fn std_source_files_name_their_module() {
        let hint = "/rustc/1159e78c4747b02ef996e55082b704c09b970588/library/core/src/hint.rs";
        assert_eq!(rust_library_module(hint).as_deref(), Some("core::hint"));
        let ptr = "/home/u/.rustup/toolchains/x/lib/rustlib/src/rust/library/core/src/ptr/mod.rs";
        assert_eq!(rust_library_module(ptr).as_deref(), Some("core::ptr"));
        let vec = "/rustc/abc/library/alloc/src/vec/mod.rs";
        assert_eq!(rust_library_module(vec).as_deref(), Some("alloc::vec"));
        assert_eq!(
            rust_library_module("/rustc/abc/library/std/src/lib.rs").as_deref(),
            Some("std")
        );
        // Not the standard library: a user crate, another library's `library/` folder.
        assert_eq!(rust_library_module("/work/app/src/main.rs"), None);
        assert_eq!(rust_library_module("/x/library/mylib/src/lib.rs"), None);
        assert_eq!(
            rust_library_module("/rustc/abc/library/core/src/hint.c"),
            None
        );
    }
}
