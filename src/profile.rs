//! A finished, symbolised profile.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use btprof_sampler::walker::WalkEnd;
use btprof_sampler::{RawProfile, ThreadInfo};
use btprof_symbols::Resolver;

use crate::flamegraph::{write_flamegraph, FlamegraphOptions};
use crate::folded::{fold_lines, write_folded, FoldOptions, TABLE_FULL_FRAME};
use crate::run_info::RunInfo;
use crate::symbolize::{outermost_symbol, resolve_stack};
use crate::walk_ends;
use crate::{Error, Stats};

/// One distinct named stack and how often it was sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// The name of the thread it was sampled on.
    pub thread: Arc<str>,
    /// Function names, root first, leaf (the interrupted function) last.
    pub frames: Vec<Arc<str>>,
    /// Whether the walk ended before the root of the thread's stack.
    pub truncated: bool,
    /// Samples.
    pub count: u64,
}

/// Stacks with names, plus how they were taken.
#[derive(Clone, Debug)]
pub struct Profile {
    stacks: Vec<Stack>,
    threads: Vec<ThreadInfo>,
    stats: Stats,
    /// Truncated samples by the module of the frame where their walk
    /// stopped, most first (recorded profiles only).
    truncated_at: Vec<(Arc<str>, u64)>,
}

impl Profile {
    /// Symbolises a raw profile of the current process.
    ///
    /// Raw stacks that name the same functions (different instructions of
    /// one function, say) merge into one [`Stack`].
    pub fn from_raw(raw: &RawProfile, resolver: &mut Resolver) -> Profile {
        let mut merged: HashMap<(u32, bool, Vec<Arc<str>>), u64> = HashMap::new();
        let mut truncated_at: HashMap<Arc<str>, u64> = HashMap::new();
        let mut frames = Vec::new();
        for (key, count) in raw.table.iter() {
            resolve_stack(raw.arch, &key, resolver, &mut frames);
            frames.reverse();
            let outermost = outermost_symbol(&key, resolver);
            let truncated = walk_ends::is_truncated(key.end, &frames, &outermost);
            if truncated {
                let module = outermost.module.unwrap_or_else(|| Arc::from("[unknown]"));
                *truncated_at.entry(module).or_default() += count;
            }
            if key.end == WalkEnd::Blocked {
                frames.push(Arc::from(walk_ends::BLOCKED_FRAME));
            }
            *merged
                .entry((key.thread, truncated, frames.clone()))
                .or_default() += count;
        }
        let table_full: Arc<str> = Arc::from(TABLE_FULL_FRAME);
        for &(thread, count) in raw.table.overflow() {
            *merged
                .entry((thread, false, vec![table_full.clone()]))
                .or_default() += count;
        }
        let stacks = merged
            .into_iter()
            .map(|((thread, truncated, frames), count)| Stack {
                thread: raw.threads.get(thread as usize).map_or_else(
                    || Arc::from("[unknown thread]"),
                    |t| Arc::from(t.name.as_str()),
                ),
                frames,
                truncated,
                count,
            })
            .collect();
        let mut profile = Profile::from_stacks(stacks, raw.threads.clone(), raw.stats.clone());
        profile.truncated_at = truncated_at.into_iter().collect();
        profile
            .truncated_at
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        profile
    }

    /// A profile from already named stacks (tests, other sources).
    /// Stacks are put in a deterministic order.
    pub fn from_stacks(mut stacks: Vec<Stack>, threads: Vec<ThreadInfo>, stats: Stats) -> Profile {
        stacks.sort_by(|a, b| {
            (&a.thread, &a.frames, a.truncated).cmp(&(&b.thread, &b.frames, b.truncated))
        });
        Profile {
            stacks,
            threads,
            stats,
            truncated_at: Vec::new(),
        }
    }

    /// The distinct stacks, in a deterministic order.
    pub fn stacks(&self) -> &[Stack] {
        &self.stacks
    }

    /// The threads that were sampled.
    pub fn threads(&self) -> &[ThreadInfo] {
        &self.threads
    }

    /// How the profile was taken: rates, samples, missed ticks, truncated
    /// and failed walks.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Total samples over all stacks.
    pub fn total_samples(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }

    /// Samples a full stack table counted under [`TABLE_FULL_FRAME`].
    pub fn overflow_samples(&self) -> u64 {
        self.stacks
            .iter()
            .filter(|s| s.frames.len() == 1 && &*s.frames[0] == TABLE_FULL_FRAME)
            .map(|s| s.count)
            .sum()
    }

    /// Samples whose walk stopped short of the thread's entry (`main`, a
    /// thread start or the chain's terminator in the C library). Unlike
    /// [`Stats::truncated`], which counts how the raw walks ended, this
    /// leaves out the expected ends (the main thread's chain always breaks
    /// in the C start code after `main`).
    pub fn truncated_samples(&self) -> u64 {
        self.stacks
            .iter()
            .filter(|s| s.truncated)
            .map(|s| s.count)
            .sum()
    }

    /// Truncated samples by the module (file name) of the frame where
    /// their walk stopped, most first: the module that lacks frame
    /// pointers and unwind information, or the depth cap's last module.
    /// Empty for profiles read from files.
    pub fn truncated_by_module(&self) -> &[(Arc<str>, u64)] {
        &self.truncated_at
    }

    /// How, where and when the profile was taken, for the JSON sidecar and
    /// the flamegraph subtitle.
    pub fn run_info(&self) -> RunInfo {
        let mut info = RunInfo::of_this_process(&self.stats, self.overflow_samples());
        info.truncated_walks = self.truncated_samples();
        info
    }

    /// Whether nothing was sampled.
    pub fn is_empty(&self) -> bool {
        self.total_samples() == 0
    }

    /// The folded lines (`thread;root;...;leaf count`), sorted.
    pub fn folded_lines(&self, options: FoldOptions) -> Vec<String> {
        fold_lines(&self.stacks, options)
    }

    /// Writes folded stacks, one line per distinct stack, thread names as
    /// root frames.
    pub fn write_folded<W: Write>(&self, w: W) -> Result<(), Error> {
        self.write_folded_with(FoldOptions::default(), w)
    }

    /// Writes folded stacks with options (e.g. threads merged).
    pub fn write_folded_with<W: Write>(&self, options: FoldOptions, w: W) -> Result<(), Error> {
        write_folded(&self.stacks, options, w).map_err(Error::Io)
    }

    /// Writes an SVG flamegraph with the default title (samples, duration,
    /// achieved rate). An empty profile is [`Error::EmptyProfile`].
    pub fn write_flamegraph<W: Write>(&self, w: W) -> Result<(), Error> {
        write_flamegraph(self, &FlamegraphOptions::default(), w)
    }

    /// Writes an SVG flamegraph with options.
    pub fn write_flamegraph_with<W: Write>(
        &self,
        options: &FlamegraphOptions,
        w: W,
    ) -> Result<(), Error> {
        write_flamegraph(self, options, w)
    }
}
