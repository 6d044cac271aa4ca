//! Format-independent, sorted function-symbol table of one module.
//!
//! The table is built once per module (from an `object::File`, or from plain entries for
//! formats or sources `object` does not cover) and then only searched, so it is a plain
//! sorted vector searched by binary search: compact, cache-friendly, no per-lookup
//! allocation.

use std::cmp::Ordering;

use object::{Object, ObjectSymbol, SymbolKind};

/// One function: runtime start address, size (0 when the format does not record one) and
/// raw (still mangled) name, or `None` for a function known only by its extent (an `.eh_frame`
/// FDE, an `LC_FUNCTION_STARTS` entry), which the resolver names `module+0x<start>`. Names are
/// demangled lazily by the resolver, only for symbols that are actually hit.
#[derive(Debug)]
struct Entry {
    start: u64,
    size: u64,
    name: Option<Box<str>>,
}

/// A function before deduplication, with the attributes used to pick one winner per address.
pub(crate) struct Candidate {
    pub(crate) start: u64,
    pub(crate) size: u64,
    pub(crate) global: bool,
    /// `None` for an unnamed function (see [`Entry`]).
    pub(crate) name: Option<String>,
}

impl Candidate {
    /// A function known only by its runtime extent.
    pub(crate) fn unnamed(start: u64, size: u64) -> Candidate {
        Candidate {
            start,
            size,
            global: false,
            name: None,
        }
    }
}

/// What a lookup found: the start of the function covering the address and its raw name,
/// `None` when the function has no name (see [`SymbolTable::lookup`]).
pub type Hit<'a> = (u64, Option<&'a str>);

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
        Self::build(Self::candidates(file, bias))
    }

    /// The named function symbols of `file`, as [`SymbolTable::from_object`] selects them,
    /// before deduplication (so that several files' symbols can be merged).
    pub(crate) fn candidates(file: &object::File<'_>, bias: u64) -> Vec<Candidate> {
        file.symbols()
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
                    name: Some(name.to_owned()),
                })
            })
            .collect()
    }

    /// Builds a table from `(start, size, raw name)` entries, where `size` is 0 when unknown.
    ///
    /// Used by tests and by sources that are not parsed with `object`. All entries are
    /// treated as global, so among entries sharing a start address the longest wins.
    pub fn from_entries(entries: Vec<(u64, u64, String)>) -> SymbolTable {
        Self::from_functions(entries, &[])
    }

    /// Builds a table from named `(start, size, raw name)` entries and from the
    /// `(start, size)` extents of functions without a name (`size` 0 when unknown).
    ///
    /// An unnamed function that starts where a named one does only lends it its size when
    /// the named one has none; one that starts inside a named function's known extent is
    /// taken to be part of it (a cold split, a second FDE) and dropped.
    pub fn from_functions(named: Vec<(u64, u64, String)>, unnamed: &[(u64, u64)]) -> SymbolTable {
        let mut candidates: Vec<Candidate> = named
            .into_iter()
            .map(|(start, size, name)| Candidate {
                start,
                size,
                global: true,
                name: Some(name),
            })
            .collect();
        candidates.extend(
            unnamed
                .iter()
                .map(|&(start, size)| Candidate::unnamed(start, size)),
        );
        Self::build(candidates)
    }

    /// Sorts and deduplicates: one entry per start address, preferring a named function over
    /// an unnamed one, then a global symbol (local aliases are often compiler-generated
    /// clones or labels), then the longest size (an alias with a size covers more than a
    /// zero-size label), then the name with the fewest leading underscores (`getpid` over
    /// `__getpid`), then the smallest name so that the choice is deterministic. Unnamed
    /// functions inside a named function's extent are dropped (see
    /// [`SymbolTable::from_functions`]).
    pub(crate) fn build(mut candidates: Vec<Candidate>) -> SymbolTable {
        candidates.sort_unstable_by(|a, b| {
            a.start
                .cmp(&b.start)
                .then_with(|| b.name.is_some().cmp(&a.name.is_some()))
                .then_with(|| b.global.cmp(&a.global))
                .then_with(|| b.size.cmp(&a.size))
                .then_with(|| match (&a.name, &b.name) {
                    (Some(a), Some(b)) => compare_names(a, b),
                    _ => Ordering::Equal,
                })
        });
        candidates.dedup_by(|later, kept| {
            if later.start != kept.start {
                return false;
            }
            if kept.size == 0 {
                kept.size = later.size;
            }
            true
        });
        let mut entries: Vec<Entry> = Vec::with_capacity(candidates.len());
        let mut named_end = 0u64;
        for c in candidates {
            if c.name.is_none() && c.start < named_end {
                continue;
            }
            if c.name.is_some() {
                named_end = c.start.saturating_add(c.size);
            }
            entries.push(Entry {
                start: c.start,
                size: c.size,
                name: c.name.map(String::into_boxed_str),
            });
        }
        entries.shrink_to_fit();
        SymbolTable { entries }
    }

    /// Returns the start address and raw (mangled) name of the function covering `addr`;
    /// the name is `None` for a function known only by its extent.
    pub fn lookup(&self, addr: u64) -> Option<Hit<'_>> {
        let index = self.entries.partition_point(|e| e.start <= addr);
        let entry = self.entries.get(index.checked_sub(1)?)?;
        if entry.size != 0 && addr - entry.start >= entry.size {
            return None;
        }
        Some((entry.start, entry.name.as_deref()))
    }

    /// Whether any function in the table has a name (a table built only from `.eh_frame`
    /// has none, and a MiniDebugInfo symbol table is then worth reading).
    pub fn has_names(&self) -> bool {
        self.entries.iter().any(|e| e.name.is_some())
    }

    /// Start addresses of the named functions in ascending order (tests of the Linux process
    /// inspect real tables through this).
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn named_starts(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries
            .iter()
            .filter(|e| e.name.is_some())
            .map(|e| e.start)
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

    /// What [`table`] finds at each address: the start and name of the
    /// symbol covering it, or nothing, and why.
    #[test]
    fn lookups_find_the_covering_symbol_or_nothing() {
        // (address, (start, name) of the symbol found, why).
        type Case = (u64, Option<(u64, &'static str)>, &'static str);
        let cases: [Case; 12] = [
            (0, None, "before the first symbol"),
            (0xfff, None, "before the first symbol"),
            (0x1000, Some((0x1000, "first")), "inside a sized symbol"),
            (0x10ff, Some((0x1000, "first")), "inside a sized symbol"),
            (0x2005, Some((0x2000, "second")), "inside a sized symbol"),
            (0x1100, None, "past the size"),
            (0x2010, None, "past the size"),
            (0x1800, None, "between symbols whose sizes are known"),
            (
                0x3000,
                Some((0x3000, "labelled")),
                "a zero size extends to the next",
            ),
            (
                0x3fff,
                Some((0x3000, "labelled")),
                "a zero size extends to the next",
            ),
            (
                0x4000,
                Some((0x4000, "last")),
                "a zero size extends to the next",
            ),
            (
                u64::MAX,
                Some((0x4000, "last")),
                "a zero size extends to the next",
            ),
        ];
        let t = table();
        for (addr, want, why) in cases {
            let want = want.map(|(start, name)| (start, Some(name)));
            assert_eq!(t.lookup(addr), want, "at {addr:#x}: {why}");
        }
    }

    #[test]
    fn duplicates_prefer_the_longest_then_the_plainest_name() {
        let t = SymbolTable::from_entries(vec![
            (0x1000, 0, "label".to_owned()),
            (0x1000, 0x20, "__alias".to_owned()),
            (0x1000, 0x20, "real".to_owned()),
        ]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.lookup(0x1010), Some((0x1000, Some("real"))));
        assert_eq!(t.lookup(0x1020), None);
    }

    #[test]
    fn empty_table() {
        let t = SymbolTable::from_entries(Vec::new());
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert_eq!(t.lookup(0x1234), None);
    }

    #[test]
    fn unnamed_functions_fill_gaps_but_not_named_extents() {
        let t = SymbolTable::from_functions(
            vec![
                (0x1000, 0x100, "named".to_owned()),
                (0x3000, 0, "sizeless".to_owned()),
            ],
            &[
                (0x1000, 0x80), // same start: the named one wins, keeps its own size
                (0x1040, 0x20), // inside `named`: part of it
                (0x2000, 0x40), // a gap: an unnamed function
                (0x3000, 0x10), // lends its size to `sizeless`
            ],
        );
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup(0x1050), Some((0x1000, Some("named"))));
        assert_eq!(t.lookup(0x10f0), Some((0x1000, Some("named"))));
        assert_eq!(t.lookup(0x2000), Some((0x2000, None)));
        assert_eq!(t.lookup(0x203f), Some((0x2000, None)));
        assert_eq!(t.lookup(0x2040), None);
        assert_eq!(t.lookup(0x300f), Some((0x3000, Some("sizeless"))));
        assert_eq!(t.lookup(0x3010), None);
        assert!(t.has_names());
        assert!(!SymbolTable::from_functions(Vec::new(), &[(1, 1)]).has_names());
    }
}
