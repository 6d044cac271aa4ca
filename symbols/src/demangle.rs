//! Symbol-name demangling.

/// Demangles a symbol name.
///
/// Rust symbols (legacy `_ZN…E` and v0 `_R…`) are demangled without the trailing hash
/// (`{:#}`), because the hash differs between builds and would split otherwise identical
/// frames in a flamegraph. Anything that is not a Rust symbol (C names, C++ names) is
/// returned unchanged: the profiler must never lose a name it cannot interpret.
pub fn demangle(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(demangled) => format!("{demangled:#}"),
        Err(_) => raw.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn legacy_rust_symbol_loses_its_hash() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
    }

    #[test]
    fn v0_rust_symbol_is_demangled() {
        // `std::panicking::begin_panic` style v0 name for a crate-local function.
        let name = demangle("_RNvCs1234_7mycrate3foo");
        assert_eq!(name, "mycrate::foo");
    }

    #[test]
    fn plain_c_name_is_unchanged() {
        assert_eq!(demangle("getpid"), "getpid");
        assert_eq!(demangle("__libc_start_main"), "__libc_start_main");
    }

    #[test]
    fn non_rust_mangled_name_is_unchanged() {
        assert_eq!(demangle("_Z3fooi"), "_Z3fooi");
    }
}
