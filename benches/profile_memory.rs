//! Memory of a recorded profile: 32,768 distinct stacks of 30 frames (the
//! default stack limit, full), in the interned model against the model it
//! replaced.
//!
//! The baseline is the old `Profile`'s layout, rebuilt here the way its
//! `from_raw` built it: a `Vec` of stacks, each owning its thread name (an
//! `Arc<str>` allocated per stack) and a `Vec` of 30 `Arc<str>` frame names
//! shared with the symbol cache. The new one is a `Profile` built through
//! `profile::Builder`, the path `Profile::from_raw` takes once names are
//! resolved. Bytes are counted by a counting global allocator: what each
//! finished profile holds after its temporaries are freed. The names
//! themselves are counted for the new model (it copies them into its name
//! table) and not for the old one (the symbol cache owned them), which
//! favours the baseline.
//!
//! Median of `BTPROF_BENCH_RUNS` (default 5) rounds; fails if the new model
//! takes more than half the baseline's bytes.
//!
//! Writes its latest results to `docs/results/profile_memory.md`.

#[path = "support/results.rs"]
mod results;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use btprof::profile::Builder;
use btprof::{Profile, Stats};
use btprof_testkit::measure;

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const STACKS: usize = 32_768;
const DEPTH: usize = 30;
/// Distinct function names, as a symbol cache would hold them.
const NAMES: usize = 2_000;
const THREADS: usize = 8;

/// The old `Stack`, field for field.
#[allow(dead_code)]
struct OldStack {
    thread: Arc<str>,
    frames: Vec<Arc<str>>,
    truncated: bool,
    count: u64,
}

/// The old `Profile`, field for field.
#[allow(dead_code)]
struct OldProfile {
    stacks: Vec<OldStack>,
    threads: Vec<btprof_sampler::ThreadInfo>,
    stats: Stats,
}

/// Stack `i`'s frames as indexes into the name pool, root first: a few
/// shared roots, varied middles, and the last two frames spelling `i`, so
/// all stacks are distinct.
fn frames_of(i: usize) -> [usize; DEPTH] {
    let mut f = [0; DEPTH];
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (d, slot) in f.iter_mut().enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *slot = match d {
            0..=2 => d,
            _ if d == DEPTH - 2 => i / NAMES,
            _ if d == DEPTH - 1 => i % NAMES,
            _ => (x % NAMES as u64) as usize,
        };
    }
    f
}

fn thread_infos() -> Vec<btprof_sampler::ThreadInfo> {
    (0..THREADS)
        .map(|t| btprof_sampler::ThreadInfo {
            tid: 1000 + t as u64,
            name: format!("worker-{t}"),
        })
        .collect()
}

/// The old `from_raw`: merge by (thread, truncated, names), then a `Stack`
/// per entry with its own thread-name `Arc`, sorted.
fn old_profile(names: &[Arc<str>]) -> OldProfile {
    let threads = thread_infos();
    let mut merged: HashMap<(u32, bool, Vec<Arc<str>>), u64> = HashMap::new();
    for i in 0..STACKS {
        let frames: Vec<Arc<str>> = frames_of(i).iter().map(|&n| names[n].clone()).collect();
        *merged
            .entry(((i % THREADS) as u32, false, frames))
            .or_default() += 1 + (i % 7) as u64;
    }
    let mut stacks: Vec<OldStack> = merged
        .into_iter()
        .map(|((thread, truncated, frames), count)| OldStack {
            thread: Arc::from(threads[thread as usize].name.as_str()),
            frames,
            truncated,
            count,
        })
        .collect();
    stacks.sort_by(|a, b| (&a.thread, &a.frames).cmp(&(&b.thread, &b.frames)));
    OldProfile {
        stacks,
        threads,
        stats: Stats::new(&Default::default()),
    }
}

/// The same stacks into the interned model.
fn new_profile(names: &[Arc<str>]) -> Profile {
    let mut builder = Builder::new();
    let threads: Vec<_> = thread_infos()
        .iter()
        .map(|t| builder.thread(&t.name, Some(t.tid)).unwrap())
        .collect();
    for i in 0..STACKS {
        let frames = frames_of(i).map(|n| &*names[n]);
        builder
            .add_stack(
                Some(threads[i % THREADS]),
                frames,
                false,
                1 + (i % 7) as u64,
            )
            .unwrap();
    }
    builder.finish(Stats::new(&Default::default()))
}

/// Live bytes `build`'s result holds once built.
fn held_by<T>(build: impl FnOnce() -> T) -> (usize, T) {
    let before = LIVE.load(Ordering::Relaxed);
    let value = build();
    (LIVE.load(Ordering::Relaxed) - before, value)
}

fn main() {
    let mut results = results::Results::new(
        "profile_memory",
        "Memory of a recorded profile",
        "cargo bench --bench profile_memory",
    );
    let runs = measure::runs(5);
    let names: Vec<Arc<str>> = (0..NAMES)
        .map(|n| {
            Arc::from(format!(
                "app::module_{}::Type{}::function_{n}",
                n % 37,
                n % 11
            ))
        })
        .collect();
    let (mut old_bytes, mut new_bytes) = (Vec::new(), Vec::new());
    for round in 0..runs {
        let (old, p) = held_by(|| old_profile(&names));
        assert_eq!(p.stacks.len(), STACKS);
        drop(p);
        let (new, p) = held_by(|| new_profile(&names));
        assert_eq!(p.distinct_stacks(), STACKS);
        drop(p);
        println!(
            "  round {}/{runs}: old model {:.1} MiB, interned Profile {:.1} MiB",
            round + 1,
            old as f64 / (1 << 20) as f64,
            new as f64 / (1 << 20) as f64
        );
        old_bytes.push(old as f64);
        new_bytes.push(new as f64);
    }
    let (old, new) = (measure::median(old_bytes), measure::median(new_bytes));
    let ratio = new / old;
    println!(
        "profile memory, {STACKS} distinct stacks of {DEPTH} frames (median of {runs}):\n  \
         old Profile (Vec<Stack>, Arc<str> names)  {:7.1} MiB\n  \
         interned Profile                          {:7.1} MiB ({ratio:.2}x, goal <= 0.50x)",
        old / (1 << 20) as f64,
        new / (1 << 20) as f64,
    );
    let mib = |bytes: f64| format!("{:.1}", bytes / (1 << 20) as f64);
    results.paragraph(&format!(
        "Heap bytes held by a finished profile of {STACKS} distinct stacks of {DEPTH} frames, \
         median of {runs} rounds, against the model it replaced (goal: at most 0.50x)."
    ));
    results.table(
        &["model", "MiB", "ratio"],
        &[
            vec![
                "old `Profile` (`Vec<Stack>`, `Arc<str>` names)".to_owned(),
                mib(old),
                "1.00x".to_owned(),
            ],
            vec![
                "interned `Profile`".to_owned(),
                mib(new),
                format!("{ratio:.2}x"),
            ],
        ],
    );
    results.write();
    assert!(
        ratio <= 0.5,
        "the interned Profile takes {ratio:.2}x the old one's memory"
    );
}
