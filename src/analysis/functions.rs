//! Per-function sample counts of a profile.
//!
//! A function is its frame name, wherever it appears: summed over threads
//! and over every stack that contains it. Two counts per function:
//!
//! - **self**: samples whose leaf (last frame) is the function: time spent
//!   in its own code;
//! - **total**: samples whose stack contains the function at least once:
//!   time spent in it and everything it called. A recursive function is
//!   counted once per stack, so total never exceeds the profile's samples.
//!
//! Shares are these counts divided by all samples of the profile.
//!
//! Which frame "the leaf" is can be chosen ([`SelfFrame`]): with inlined
//! frames, the innermost frame of a hot loop is usually a standard-library
//! helper inlined into it (`core::hint::black_box`, `wrapping_add`), and a
//! comparison that names it instead of the user's function tells the user
//! nothing; [`SelfFrame::OwnCode`] counts such self time to the innermost
//! frame that is not Rust's standard library.

use crate::profile::Profile;

/// One function's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSamples {
    /// The frame name.
    pub name: String,
    /// Samples with this function as the leaf.
    pub self_samples: u64,
    /// Samples whose stack contains this function.
    pub total_samples: u64,
}

/// Which frame of a sample its self time is counted to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SelfFrame {
    /// The leaf: the innermost frame, whatever it is.
    #[default]
    Leaf,
    /// The innermost frame that is not Rust's standard library
    /// ([`is_rust_library_frame`]: `core::`, `alloc::`, `std::`), so that
    /// a std helper inlined into a loop (or a std function called from
    /// it) counts as time of the function holding the loop. The root frame
    /// (a thread or process label in most folded files) and `[...]` marker
    /// frames never take it; a stack with no other frame keeps its leaf.
    OwnCode,
}

impl SelfFrame {
    /// `"leaf"` or `"own-code"`, as the CLI and JSON reports spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            SelfFrame::Leaf => "leaf",
            SelfFrame::OwnCode => "own-code",
        }
    }
}

/// Whether `name` is a function of Rust's standard library (or C++'s:
/// `std::`): its path starts with `core::`, `alloc::` or `std::`
/// (`core::hint::black_box`, `<alloc::vec::Vec<T>>::push`,
/// `<alloc::vec::Vec<T> as core::ops::Drop>::drop`), or it is a library
/// trait's method for a built-in type (`<u64 as core::ops::Add>::add`).
/// A user type's impl of a library trait (`<app::Foo as
/// core::fmt::Debug>::fmt`) is user code. btprof qualifies the short names
/// DWARF gives inlined std functions (`black_box<u64>`) with their module
/// from their source file, so its own recordings are covered too.
pub fn is_rust_library_frame(name: &str) -> bool {
    const LIBRARIES: [&str; 3] = ["core::", "alloc::", "std::"];
    let in_library = |path: &str| LIBRARIES.iter().any(|l| path.starts_with(l));
    let Some(inner) = name.strip_prefix('<') else {
        return in_library(name);
    };
    let inner = inner.trim_start_matches('&');
    let inner = inner.strip_prefix("mut ").unwrap_or(inner);
    let inner = inner.strip_prefix("dyn ").unwrap_or(inner);
    if in_library(inner) {
        return true;
    }
    match inner.split_once(" as ") {
        Some((ty, tr)) => !ty.contains("::") && in_library(tr),
        None => false,
    }
}

/// Every function of a profile with its self and total samples.
#[derive(Clone, Debug)]
pub struct FunctionTable {
    total_samples: u64,
    /// Sorted by name.
    functions: Vec<FunctionSamples>,
}

impl FunctionTable {
    /// Counts self and total samples of every function in `profile`.
    ///
    /// With `skip_root`, each stack's first frame is not a function but a
    /// label (btprof's files start every stack with the thread name; perf
    /// based collapsers with the command name): it gets no counts, so
    /// thread names do not show up among functions, and a stack that is
    /// only a root gives no function any sample. The profile's total is
    /// unchanged either way.
    ///
    /// A stack is counted as its folded line reads: a recording's thread
    /// name and truncation marker are its first frames, as in its file.
    pub fn new(profile: &Profile, skip_root: bool) -> FunctionTable {
        FunctionTable::with_self_frame(profile, skip_root, SelfFrame::Leaf)
    }

    /// [`FunctionTable::new`], with self time counted to `self_frame`.
    pub fn with_self_frame(
        profile: &Profile,
        skip_root: bool,
        self_frame: SelfFrame,
    ) -> FunctionTable {
        FunctionTable::counted(profile, skip_root, self_frame, None)
    }

    /// One table per root frame (thread or process label) of `profile`,
    /// sorted by it: each counts only the stacks under that root, with the
    /// root itself skipped, and its total is those stacks' samples.
    pub fn by_root(profile: &Profile, self_frame: SelfFrame) -> Vec<(String, FunctionTable)> {
        let roots: std::collections::BTreeSet<u32> = profile
            .stacks()
            .filter_map(|s| s.folded_name_ids(false).next())
            .collect();
        let mut tables: Vec<(String, FunctionTable)> = roots
            .into_iter()
            .map(|root| {
                let table = FunctionTable::counted(profile, true, self_frame, Some(root));
                (profile.name(root).to_owned(), table)
            })
            .collect();
        tables.sort_by(|a, b| a.0.cmp(&b.0));
        tables
    }

    /// The counts of the stacks whose first frame is `root` (all stacks
    /// with `None`); see [`FunctionTable::new`] for `skip_root`.
    fn counted(
        profile: &Profile,
        skip_root: bool,
        self_frame: SelfFrame,
        root: Option<u32>,
    ) -> FunctionTable {
        let n = profile.distinct_names();
        // Per name: whether it can take a sample's self time as its own
        // code (only asked with `OwnCode`).
        let own_code: Vec<bool> = match self_frame {
            SelfFrame::Leaf => Vec::new(),
            SelfFrame::OwnCode => (0..n)
                .map(|id| {
                    let name = profile.name(id as u32);
                    !name.starts_with('[') && !is_rust_library_frame(name)
                })
                .collect(),
        };
        let (mut self_samples, mut total_samples) = (vec![0u64; n], vec![0u64; n]);
        // `seen[id] == stack + 1` once `id` was counted for this stack, so
        // recursion counts once without clearing anything per stack.
        let mut seen = vec![0usize; n];
        let mut line = Vec::new();
        // The samples of the stacks counted: the profile's, unless `root`.
        let mut stack_samples = 0;
        for (i, stack) in profile.stacks().enumerate() {
            line.clear();
            line.extend(stack.folded_name_ids(false));
            if root.is_some() && line.first().copied() != root {
                continue;
            }
            stack_samples += stack.count();
            let ids = &line[..];
            let ids = if skip_root {
                ids.get(1..).unwrap_or_default()
            } else {
                ids
            };
            let Some(&leaf) = ids.last() else { continue };
            let owner = match self_frame {
                SelfFrame::Leaf => leaf,
                // Innermost first, the root excluded.
                SelfFrame::OwnCode => ids
                    .iter()
                    .skip(1)
                    .rev()
                    .copied()
                    .find(|&id| own_code[id as usize])
                    .unwrap_or(leaf),
            };
            self_samples[owner as usize] += stack.count();
            for &id in ids {
                if seen[id as usize] != i + 1 {
                    seen[id as usize] = i + 1;
                    total_samples[id as usize] += stack.count();
                }
            }
        }
        let mut functions: Vec<FunctionSamples> = (0..n)
            .filter(|&id| total_samples[id] > 0)
            .map(|id| FunctionSamples {
                // `id` < distinct_names, which fits in a NameId.
                name: profile.name(id as u32).to_owned(),
                self_samples: self_samples[id],
                total_samples: total_samples[id],
            })
            .collect();
        functions.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        FunctionTable {
            total_samples: match root {
                None => profile.total_samples(),
                Some(_) => stack_samples,
            },
            functions,
        }
    }

    /// All samples of the profile.
    pub fn total_samples(&self) -> u64 {
        self.total_samples
    }

    /// Every function with at least one sample, sorted by name.
    pub fn functions(&self) -> &[FunctionSamples] {
        &self.functions
    }

    /// The function named `name`.
    pub fn get(&self, name: &str) -> Option<&FunctionSamples> {
        self.functions
            .binary_search_by(|f| f.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.functions[i])
    }

    /// `samples` as a fraction of all samples (0 for an empty profile).
    pub fn share(&self, samples: u64) -> f64 {
        if self.total_samples == 0 {
            0.0
        } else {
            samples as f64 / self.total_samples as f64
        }
    }

    /// The `n` functions with the most self samples, most first (ties by
    /// name); functions with no self samples are left out.
    pub fn top_by_self(&self, n: usize) -> Vec<&FunctionSamples> {
        self.top(n, |f| f.self_samples)
    }

    /// The `n` functions with the most total samples, most first (ties by
    /// name).
    pub fn top_by_total(&self, n: usize) -> Vec<&FunctionSamples> {
        self.top(n, |f| f.total_samples)
    }

    fn top(&self, n: usize, key: impl Fn(&FunctionSamples) -> u64) -> Vec<&FunctionSamples> {
        let mut all: Vec<&FunctionSamples> = self.functions.iter().filter(|f| key(f) > 0).collect();
        // Stable: equal counts keep name order.
        all.sort_by_key(|f| std::cmp::Reverse(key(f)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str, skip_root: bool) -> FunctionTable {
        let p = Profile::read_folded_from(text.as_bytes(), "t").unwrap();
        FunctionTable::new(&p, skip_root)
    }

    fn counts(t: &FunctionTable, name: &str) -> (u64, u64) {
        let f = t.get(name).unwrap_or_else(|| panic!("no {name}"));
        (f.self_samples, f.total_samples)
    }

    /// Asserts each named function's (self, total) samples in `t`.
    fn assert_counts(t: &FunctionTable, want: &[(&str, (u64, u64))]) {
        for &(name, counts_of_name) in want {
            assert_eq!(counts(t, name), counts_of_name, "{name}");
        }
    }

    #[test]
    fn self_is_the_leaf_and_total_is_anywhere() {
        let t = table("t1;main;a;b 6\nt1;main;a 3\nt2;main;b 1\n", false);
        assert_eq!(t.total_samples(), 10);
        assert_counts(
            &t,
            &[
                ("main", (0, 10)),
                ("a", (3, 9)),
                ("b", (7, 7)),
                ("t1", (0, 9)),
            ],
        );
        assert!((t.share(7) - 0.7).abs() < 1e-12);
    }

    #[test]
    fn recursion_counts_once_per_stack() {
        let t = table("main;rec;rec;rec 4\nmain;rec;leaf 1\n", false);
        assert_counts(&t, &[("rec", (4, 5)), ("main", (0, 5))]);
    }

    #[test]
    fn skip_root_drops_thread_labels_but_not_samples() {
        let t = table("w0;main;a 6\nw1;main;a 2\nw1 2\n", true);
        assert!(t.get("w0").is_none() && t.get("w1").is_none());
        assert_eq!(counts(&t, "a"), (8, 8));
        assert_eq!(t.total_samples(), 10);
        // A function named like a root elsewhere still counts there.
        let t = table("main;x 1\nx;main 1\n", true);
        assert_counts(&t, &[("x", (1, 1)), ("main", (1, 1))]);
    }

    #[test]
    fn top_lists_most_first_with_ties_by_name() {
        let t = table("m;b 2\nm;a 2\nm;c 5\nm 1\n", false);
        let names =
            |v: Vec<&FunctionSamples>| v.into_iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(t.top_by_self(10)), ["c", "a", "b", "m"]);
        assert_eq!(names(t.top_by_self(2)), ["c", "a"]);
        assert_eq!(names(t.top_by_total(1)), ["m"]);
    }

    #[test]
    fn functions_only_in_zero_count_stacks_are_left_out() {
        let t = table("m;a 1\nm;ghost 0\n", false);
        assert!(t.get("ghost").is_none());
        assert_eq!(t.functions().len(), 2);
    }

    #[test]
    fn own_code_takes_the_self_time_of_library_frames_under_it() {
        let text = "t1;main;app::work;core::hint::black_box<u64> 6\n\
                    t1;main;app::work;<u64 as core::ops::Add>::add 2\n\
                    t1;main;app::other 1\n\
                    t2;std::rt::lang_start;std::thread::sleep 3\n";
        let p = Profile::read_folded_from(text.as_bytes(), "t").unwrap();
        let leaf = FunctionTable::new(&p, false);
        assert_counts(
            &leaf,
            &[
                ("core::hint::black_box<u64>", (6, 6)),
                ("app::work", (0, 8)),
            ],
        );
        let own = FunctionTable::with_self_frame(&p, false, SelfFrame::OwnCode);
        assert_counts(
            &own,
            &[
                ("app::work", (8, 8)),
                ("core::hint::black_box<u64>", (0, 6)),
                ("app::other", (1, 1)),
            ],
        );
        // Only library frames below the root (a thread label): the leaf
        // keeps its time rather than the label taking it.
        assert_counts(&own, &[("std::thread::sleep", (3, 3)), ("t2", (0, 3))]);
        // Totals and the profile's samples do not move.
        assert_eq!(own.total_samples(), leaf.total_samples());
    }

    #[test]
    fn library_frames_are_known_by_their_path() {
        for std in [
            "core::hint::black_box<u64>",
            "std::thread::sleep",
            "alloc::vec::Vec<T>::push",
            "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop",
            "<core::cell::RefCell<T>>::borrow",
            "<u64 as core::ops::arith::Add>::add",
            "<&mut [u8] as std::io::Write>::write",
            "std::vector<int>::push_back",
        ] {
            assert!(is_rust_library_frame(std), "{std}");
        }
        for user in [
            "app::work",
            "timed_spin",
            "<app::Foo as core::fmt::Debug>::fmt",
            "corelib::x",
            "main",
            "[btprof: truncated]",
        ] {
            assert!(!is_rust_library_frame(user), "{user}");
        }
    }
}
