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
        let n = profile.distinct_names();
        let (mut self_samples, mut total_samples) = (vec![0u64; n], vec![0u64; n]);
        // `seen[id] == stack + 1` once `id` was counted for this stack, so
        // recursion counts once without clearing anything per stack.
        let mut seen = vec![0usize; n];
        let mut line = Vec::new();
        for (i, stack) in profile.stacks().enumerate() {
            line.clear();
            line.extend(stack.folded_name_ids(false));
            let ids = &line[..];
            let ids = if skip_root {
                ids.get(1..).unwrap_or_default()
            } else {
                ids
            };
            let Some(&leaf) = ids.last() else { continue };
            self_samples[leaf as usize] += stack.count();
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
            total_samples: profile.total_samples(),
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

    #[test]
    fn self_is_the_leaf_and_total_is_anywhere() {
        let t = table("t1;main;a;b 6\nt1;main;a 3\nt2;main;b 1\n", false);
        assert_eq!(t.total_samples(), 10);
        assert_eq!(counts(&t, "main"), (0, 10));
        assert_eq!(counts(&t, "a"), (3, 9));
        assert_eq!(counts(&t, "b"), (7, 7));
        assert_eq!(counts(&t, "t1"), (0, 9));
        assert!((t.share(7) - 0.7).abs() < 1e-12);
    }

    #[test]
    fn recursion_counts_once_per_stack() {
        let t = table("main;rec;rec;rec 4\nmain;rec;leaf 1\n", false);
        assert_eq!(counts(&t, "rec"), (4, 5));
        assert_eq!(counts(&t, "main"), (0, 5));
    }

    #[test]
    fn skip_root_drops_thread_labels_but_not_samples() {
        let t = table("w0;main;a 6\nw1;main;a 2\nw1 2\n", true);
        assert!(t.get("w0").is_none() && t.get("w1").is_none());
        assert_eq!(counts(&t, "a"), (8, 8));
        assert_eq!(t.total_samples(), 10);
        // A function named like a root elsewhere still counts there.
        let t = table("main;x 1\nx;main 1\n", true);
        assert_eq!(counts(&t, "x"), (1, 1));
        assert_eq!(counts(&t, "main"), (1, 1));
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
}
