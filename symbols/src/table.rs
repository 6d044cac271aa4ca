//! Format-independent, sorted function-symbol table of one module.
//!
//! The table is built once per module (from an `object::File`, or from plain entries for
//! formats or sources `object` does not cover) and then only searched, so it is a plain
//! sorted vector searched by binary search: compact, cache-friendly, no per-lookup
//! allocation.

use std::cmp::Ordering;

use object::{Object, ObjectSymbol, SymbolKind};

/// One function symbol: runtime start address, size (0 when the format does not record
/// one) and raw (still mangled) name. Names are demangled lazily by the resolver, only for
/// symbols that are actually hit.
#[derive(Debug)]
struct Entry {
    start: u64,
    size: u64,
    name: Box<str>,
}

/// A symbol before deduplication, with the attributes used to pick one winner per address.
struct Candidate {
    start: u64,
    size: u64,
    global: bool,
    name: String,
}

/// Sorted function symbols of one module, searched by binary search.
///
/// Lookup semantics: the symbol with the greatest start `<= addr` covers `addr`, unless it
/// has a known (non-zero) size and `addr` lies past its end. A symbol without a size
/// extends up to the next symbol; this is what Mach-O symbols (which carry no size) and
/// hand-written assembly labels need.
#[derive(Debug, Default)]
pub struct SymbolTable {
    /// Sorted by `start`, at most one entry per start address.
    entries: Vec<Entry>,
}

impl SymbolTable {
    /// Builds a table from the function symbols of `file` (both the static `.symtab` and the
    /// dynamic `.dynsym` tables, merged), adding `bias` (the load bias) to every symbol value
    /// so that lookups take runtime addresses.
    ///
    /// Only defined text symbols with a non-zero address are kept; names that are empty or
    /// not valid UTF-8 are skipped rather than failing the whole module.
    pub fn from_object(file: &object::File<'_>, bias: u64) -> SymbolTable {
        let candidates = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|sym| {
                sym.kind() == SymbolKind::Text && !sym.is_undefined() && sym.address() != 0
            })
            .filter_map(|sym| {
                let name = sym.name().ok().filter(|name| !name.is_empty())?;
                Some(Candidate {
                    start: sym.address().wrapping_add(bias),
                    size: sym.size(),
                    global: sym.is_global(),
                    name: name.to_owned(),
                })
            })
            .collect();
        Self::build(candidates)
    }

    /// Builds a table from `(start, size, raw name)` entries, where `size` is 0 when unknown.
    ///
    /// Used by tests and by sources that are not parsed with `object`. All entries are
    /// treated as global, so among entries sharing a start address the longest wins.
    pub fn from_entries(entries: Vec<(u64, u64, String)>) -> SymbolTable {
        let candidates = entries
            .into_iter()
            .map(|(start, size, name)| Candidate {
                start,
                size,
                global: true,
                name,
            })
            .collect();
        Self::build(candidates)
    }

    /// Sorts and deduplicates: one entry per start address, preferring a global symbol
    /// (local aliases are often compiler-generated clones or labels), then the longest size
    /// (an alias with a size covers more than a zero-size label), then the name with the
    /// fewest leading underscores (`getpid` over `__getpid`), then the smallest name so that
    /// the choice is deterministic.
    fn build(mut candidates: Vec<Candidate>) -> SymbolTable {
        candidates.sort_unstable_by(|a, b| {
            a.start
                .cmp(&b.start)
                .then_with(|| b.global.cmp(&a.global))
                .then_with(|| b.size.cmp(&a.size))
                .then_with(|| compare_names(&a.name, &b.name))
        });
        candidates.dedup_by_key(|c| c.start);
        let entries = candidates
            .into_iter()
            .map(|c| Entry {
                start: c.start,
                size: c.size,
                name: c.name.into_boxed_str(),
            })
            .collect();
        SymbolTable { entries }
    }

    /// Returns the start address and raw (mangled) name of the symbol covering `addr`.
    pub fn lookup(&self, addr: u64) -> Option<(u64, &str)> {
        let index = self.entries.partition_point(|e| e.start <= addr);
        let entry = self.entries.get(index.checked_sub(1)?)?;
        if entry.size != 0 && addr - entry.start >= entry.size {
            return None;
        }
        Some((entry.start, &entry.name))
    }

    /// Start addresses in ascending order (tests of the Linux process inspect real tables
    /// through this).
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().map(|e| e.start)
    }

    /// Number of distinct symbols (start addresses) in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table holds no symbols (e.g. a stripped module or one that failed to parse).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Orders names so that public spellings come before reserved (`_`-prefixed) aliases.
fn compare_names(a: &str, b: &str) -> Ordering {
    let underscores = |s: &str| s.bytes().take_while(|&c| c == b'_').count();
    underscores(a)
        .cmp(&underscores(b))
        .then_with(|| a.len().cmp(&b.len()))
        .then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::SymbolTable;

    fn table() -> SymbolTable {
        SymbolTable::from_entries(vec![
            (0x3000, 0, "labelled".to_owned()),
            (0x1000, 0x100, "first".to_owned()),
            (0x2000, 0x10, "second".to_owned()),
            (0x4000, 0, "last".to_owned()),
        ])
    }

    #[test]
    fn before_first_symbol_is_uncovered() {
        assert_eq!(table().lookup(0), None);
        assert_eq!(table().lookup(0xfff), None);
    }

    #[test]
    fn inside_a_sized_symbol() {
        let t = table();
        assert_eq!(t.lookup(0x1000), Some((0x1000, "first")));
        assert_eq!(t.lookup(0x10ff), Some((0x1000, "first")));
        assert_eq!(t.lookup(0x2005), Some((0x2000, "second")));
    }

    #[test]
    fn past_the_size_is_uncovered() {
        let t = table();
        assert_eq!(t.lookup(0x1100), None);
        assert_eq!(t.lookup(0x2010), None);
    }

    #[test]
    fn between_symbols_is_uncovered_when_sizes_are_known() {
        assert_eq!(table().lookup(0x1800), None);
    }

    #[test]
    fn zero_size_symbol_extends_to_the_next() {
        let t = table();
        assert_eq!(t.lookup(0x3000), Some((0x3000, "labelled")));
        assert_eq!(t.lookup(0x3fff), Some((0x3000, "labelled")));
        assert_eq!(t.lookup(0x4000), Some((0x4000, "last")));
        assert_eq!(t.lookup(u64::MAX), Some((0x4000, "last")));
    }

    #[test]
    fn duplicates_prefer_the_longest_then_the_plainest_name() {
        let t = SymbolTable::from_entries(vec![
            (0x1000, 0, "label".to_owned()),
            (0x1000, 0x20, "__alias".to_owned()),
            (0x1000, 0x20, "real".to_owned()),
        ]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.lookup(0x1010), Some((0x1000, "real")));
        assert_eq!(t.lookup(0x1020), None);
    }

    #[test]
    fn empty_table() {
        let t = SymbolTable::from_entries(Vec::new());
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert_eq!(t.lookup(0x1234), None);
    }
}
