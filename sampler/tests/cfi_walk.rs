//! Stacks through code without frame pointers: a C library
//! built with `-O2 -fomit-frame-pointer` (`tests/c/noframes.c`, built by
//! the build script) that calls back into Rust, and glibc (`memcpy`,
//! `qsort` calling a Rust comparator). With CFI the callers are present
//! and the walk reaches the thread's entry in (nearly) every sample; with
//! frame pointers only they are not, which each test also checks, so it
//! could not pass on a frame-pointer-only walker.
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof_sampler::{Mode, RawProfile, SampleClock, Sampler, SamplerConfig};
use btprof_symbols::Resolver;

mod support;
use support::frame_names;

/// One sampler per process: the tests here take turns.
static SAMPLER: Mutex<()> = Mutex::new(());

/// CPU time the sampled thread must get: about 600 samples at 1000 Hz.
const WORK_CPU: Duration = Duration::from_millis(600);
/// Fails the test rather than waiting forever on a starved machine.
const WALL_LIMIT: Duration = Duration::from_secs(60);

type Callback = extern "C" fn(u64) -> u64;
type NoframesCall = unsafe extern "C" fn(Callback, u64, u64) -> u64;

/// How much of its CPU time the through-C worker runs one copy of the
/// library before it loads the next.
const RELOAD_EVERY: Duration = Duration::from_millis(100);

thread_local! {
    /// This thread's current copy of the library: its `noframes_call`,
    /// and the thread's CPU time when it was loaded.
    static LOADED: std::cell::Cell<Option<(usize, Duration)>> =
        const { std::cell::Cell::new(None) };
}

/// `noframes_call` of the frameless C library, from a copy this thread
/// loaded less than [`RELOAD_EVERY`] of its CPU time ago. Libraries are
/// loaded while programs are profiled (plugins, lazy dependencies), and
/// the first samples in a new one are the hard case for a walker that
/// reads the loaded objects' unwind information ahead of time: each
/// profile here loads several, while it is sampled.
fn noframes_call() -> NoframesCall {
    let now = thread_cpu();
    let addr = LOADED.with(|loaded| match loaded.get() {
        Some((addr, at)) if now - at < RELOAD_EVERY => addr,
        _ => {
            let addr = load_copy();
            loaded.set(Some((addr, now)));
            addr
        }
    });
    // SAFETY: `noframes_call` has this signature (tests/c/noframes.c).
    unsafe { std::mem::transmute::<usize, NoframesCall>(addr) }
}

/// Where [`load_copy`] puts its copies.
fn copies_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("btprof-cfi-copies-{}", std::process::id()))
}

/// Removes the copies when dropped (they stay loaded, so the profile's
/// frames in them can be named until then).
struct RemoveCopies;

impl Drop for RemoveCopies {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(copies_dir());
    }
}

/// Loads a new copy of the frameless C library (a file of its own, so the
/// loader maps a new object) and returns its `noframes_call`. Never
/// unloaded.
fn load_copy() -> usize {
    static COPIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
        panic!(
            "the frameless C test library was not built: the sampler's build script \
             needs a C compiler (see its cargo warning)"
        );
    };
    let dir = copies_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(format!(
        "libnoframes-{}.so",
        COPIES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::copy(path, &copy).unwrap();
    let copy = std::ffi::CString::new(copy.to_str().unwrap()).unwrap();
    // SAFETY: our own test library; it has no initialisers.
    let handle = unsafe { libc::dlopen(copy.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {copy:?}");
    // SAFETY: a valid handle and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(handle, c"noframes_call".as_ptr()) };
    assert!(!sym.is_null(), "noframes_call not found");
    sym as usize
}

#[inline(never)]
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Rust work called back from C: the leaf of some samples.
#[inline(never)]
extern "C" fn rust_callback(x: u64) -> u64 {
    let mut v = x | 1;
    for i in 0..20_000u64 {
        v = std::hint::black_box(v.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(i));
    }
    v
}

/// Rust calling into the frameless C library.
#[inline(never)]
fn rust_calls_c(rounds: u64) -> u64 {
    // SAFETY: the library's function with a valid callback.
    let r = unsafe { noframes_call()(rust_callback, rounds, 40_000) };
    std::hint::black_box(r)
}

/// Rust copying large buffers: the leaf is glibc's `memcpy`.
#[inline(never)]
fn rust_copies(src: &[u8], dst: &mut [u8]) {
    for _ in 0..8 {
        // SAFETY: both buffers are valid for their common length and do
        // not overlap.
        unsafe {
            libc::memcpy(
                dst.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                src.len().min(dst.len()),
            )
        };
        std::hint::black_box(&mut *dst);
    }
}

extern "C" fn compare_u64(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    // SAFETY: qsort hands two elements of the u64 array being sorted.
    let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    a.cmp(&b) as libc::c_int
}

/// Rust sorting with glibc's `qsort` and a Rust comparator.
#[inline(never)]
fn rust_sorts(values: &mut [u64], seed: u64) {
    let mut x = seed | 1;
    for v in values.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *v = x;
    }
    // SAFETY: a valid array of `len` u64 and a comparator for u64.
    unsafe {
        libc::qsort(
            values.as_mut_ptr().cast(),
            values.len(),
            8,
            Some(compare_u64),
        )
    };
    // Used after the call, so `qsort` is not a tail call that would take
    // this frame off the stack.
    std::hint::black_box(&mut *values);
}

/// Runs `work` on a thread named `name` until it used [`WORK_CPU`], under
/// a sampler with the given walk, and returns the profile.
fn profile(
    name: &str,
    frame_pointers_only: bool,
    clock: Option<SampleClock>,
    max_depth: usize,
    work: fn(u64),
) -> RawProfile {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let (s, d) = (stop.clone(), done.clone());
    let sampler = Sampler::start(SamplerConfig {
        hz: 1000,
        mode: Mode::Cpu,
        frame_pointers_only,
        clock,
        max_depth,
        ..SamplerConfig::default()
    })
    .unwrap();
    let worker = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let start = thread_cpu();
            let mut round = 0;
            while !s.load(Ordering::Relaxed) && thread_cpu() - start < WORK_CPU {
                work(round);
                round += 1;
            }
            d.store(true, Ordering::Relaxed);
        })
        .unwrap();
    let started = Instant::now();
    while !done.load(Ordering::Relaxed) {
        if started.elapsed() > WALL_LIMIT {
            stop.store(true, Ordering::Relaxed);
            panic!("{name}: the worker did not get {WORK_CPU:?} of CPU in {WALL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let raw = sampler.stop().unwrap();
    worker.join().unwrap();
    raw
}

/// Functions a thread's stack begins with (as in the root crate's
/// `walk_ends`).
fn is_entry(name: &str) -> bool {
    matches!(
        name,
        "start_thread" | "clone" | "__clone" | "clone3" | "__clone3"
    ) || name.ends_with("::thread_start")
}

/// Whether a stack is the thread's start or exit in the runtime, before or
/// after the closure it runs: among them the signal stack Rust's runtime
/// maps for each thread and unmaps as it exits (`stack_overflow::imp`'s
/// `make_handler` and `drop_handler`), whose `munmap` can take
/// milliseconds of CPU on a busy machine (10 of 597 samples in one run
/// beside two busy processes).
fn in_thread_start_or_exit(names: &[String]) -> bool {
    let teardown = [
        "__libc_thread_freeres",
        "__call_tls_dtors",
        "std::sys::thread_local::",
        "::stack_overflow::imp::",
    ];
    if names.iter().any(|n| teardown.iter().any(|t| n.contains(t))) {
        return true;
    }
    let start = |n: &String| {
        is_entry(n)
            || n.contains("__rust_begin_short_backtrace")
            || n.starts_with("core::ops::function::FnOnce::call_once")
    };
    let mut rest = names.iter().skip_while(|n| n.starts_with("__memset"));
    names.iter().any(start) && rest.all(start)
}

/// What the samples of thread `name` show.
#[derive(Debug, Default)]
struct Tally {
    samples: u64,
    /// Samples with `must` among their frames.
    with_caller: u64,
    /// Samples with `must` among their frames that reach the entry.
    complete: u64,
    /// Samples whose walk does not reach the thread's entry, whatever
    /// their frames.
    cut_short: u64,
    /// Leaf names, most frequent first, for failure messages.
    leaves: Vec<(String, u64)>,
    /// A few stacks that are not complete (leaf first, with how they
    /// ended), for failure messages.
    incomplete: Vec<(Vec<String>, String)>,
}

/// `names` with runs of one name written once, with their length, so that
/// a deep recursion fits a failure message.
fn collapse(names: &[String]) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for n in names {
        match out.last_mut() {
            Some((last, count)) if last == n => *count += 1,
            _ => out.push((n.clone(), 1)),
        }
    }
    out.into_iter()
        .map(|(n, c)| if c > 1 { format!("{n} x{c}") } else { n })
        .collect()
}

fn tally(raw: &RawProfile, name: &str, must: &str) -> Tally {
    let mut resolver = Resolver::for_current_process().unwrap();
    let mut t = Tally::default();
    let mut leaves: HashMap<String, u64> = HashMap::new();
    for (key, count) in raw.table.iter() {
        if raw.threads[key.thread as usize].name != name {
            continue;
        }
        let names = frame_names(&mut resolver, key.frames);
        // The harness's own CPU-clock reads and copies of the library are
        // not the work under test. Where the kernel allows samples in
        // system calls, the copy's are walked from inside `io::copy`,
        // whose 8 KiB buffer on the stack is as large as a ring sample's
        // stack copy: without frame pointers in std the walk ends there.
        if names
            .iter()
            .any(|n| n.ends_with("cfi_walk::thread_cpu") || n.starts_with("std::sys::fs::copy"))
        {
            continue;
        }
        // Nor is the thread's start and exit in the runtime: its
        // thread-locals set up (zeroed: page faults) and torn down
        // (`munmap`), kernel time too where samples in system calls are
        // allowed.
        if in_thread_start_or_exit(&names) {
            continue;
        }
        t.samples += count;
        *leaves.entry(names[0].clone()).or_default() += count;
        let with_caller = names.iter().any(|n| n.ends_with(must));
        let reaches_entry = names.iter().any(|n| is_entry(n));
        let complete = with_caller && reaches_entry;
        if !reaches_entry {
            t.cut_short += count;
        }
        if with_caller {
            t.with_caller += count;
        }
        if complete {
            t.complete += count;
        } else if t.incomplete.len() < 6 {
            t.incomplete
                .push((collapse(&names), format!("{:?}", key.end)));
        }
    }
    t.leaves = leaves.into_iter().collect();
    t.leaves.sort_by_key(|l| std::cmp::Reverse(l.1));
    t.leaves.truncate(6);
    t
}

/// Checks that with CFI at least 99% of the thread's samples hold `must`
/// and reach the entry, and that frame pointers alone fall clearly short.
fn check(name: &str, must: &str, work: fn(u64)) {
    check_with(name, must, None, work)
}

/// [`check`] on `clock` (`None`: the default).
fn check_with(name: &str, must: &str, clock: Option<SampleClock>, work: fn(u64)) {
    check_deep(name, must, clock, SamplerConfig::default().max_depth, work)
}

/// [`check_with`], walking up to `max_depth` frames.
fn check_deep(name: &str, must: &str, clock: Option<SampleClock>, max_depth: usize, work: fn(u64)) {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let cfi = profile(name, false, clock, max_depth, work);
    let t = tally(&cfi, name, must);
    // A precondition, not random: 600 ms of the worker's CPU, ~600 whole
    // periods less the excluded clock reads and start and exit; 200 makes
    // the shares below judge enough samples.
    assert!(t.samples >= 200, "{name}: {t:?} {:?}", cfi.stats);
    // Misses are walks that fail, Binomial(n, q) (a new copy of the library
    // is read at its first sample, see `CfiWalker::complete`): 6 of 600 has
    // P under 1e-4 while q <= 0.17% (2 of 200: 0.043%); frame pointers miss most.
    assert!(
        t.complete * 100 >= t.samples * 99,
        "{name}: with CFI only {} of {} samples hold `{must}` and reach the thread's entry: \
         {t:?}",
        t.complete,
        t.samples
    );
    println!(
        "{name}: clock {}, {} of {} samples from the rings, {} threads handed to timers",
        cfi.stats.clock, cfi.stats.ring_samples, cfi.stats.samples, cfi.stats.timer_threads
    );
    // Walks that stop early: at most 0.5%, beside CPU hogs too (the
    // through-C worker's first samples in each library it loads are the
    // hard case, see `noframes_call`). Chance failures, Binomial(n, q): 3 of
    // 600 has P under 1e-4 while q <= 0.039%. Not chance: on the rings the
    // 300-deep case's walks cut before its hand-off, 3 at least: all 600 allow.
    assert!(
        t.cut_short * 1000 <= t.samples * 5,
        "{name}: with CFI {} of {} walks did not reach the thread's entry: {t:?}",
        t.cut_short,
        t.samples
    );
    // Not random: every complete walk above went through frameless code with
    // CFI; none means CFI was never used.
    assert!(cfi.stats.cfi_frames > 0, "{:?}", cfi.stats);

    let fp = profile(name, true, clock, max_depth, work);
    let f = tally(&fp, name, must);
    // The same precondition for the frame-pointer run.
    assert!(f.samples >= 200, "{name}: {f:?}");
    // A sensitivity check: frame pointers alone complete only samples in the
    // Rust frames, Binomial(n, r), r their small time share; 90% is reached
    // with P under 1e-4 while r <= 85% (80% at 200 samples).
    assert!(
        f.complete * 100 < f.samples * 90,
        "{name}: frame pointers alone kept `{must}` and the entry in {} of {} samples; \
         the test does not exercise frameless code: {f:?}",
        f.complete,
        f.samples
    );
    assert_eq!(fp.stats.cfi_frames, 0);
    println!(
        "{name}: complete with `{must}`: CFI {}/{} ({:.1}%), frame pointers only {}/{} ({:.1}%); \
         CFI walks cut short {}; CFI frames {} of {}",
        t.complete,
        t.samples,
        100.0 * t.complete as f64 / t.samples as f64,
        f.complete,
        f.samples,
        100.0 * f.complete as f64 / f.samples as f64,
        t.cut_short,
        cfi.stats.cfi_frames,
        cfi.stats.cfi_frames + cfi.stats.frame_pointer_frames,
    );
    for (stack, end) in &t.incomplete {
        println!("  incomplete ({end}): {}", stack.join(" <- "));
    }
}

#[test]
fn stacks_through_a_frameless_c_library_are_complete() {
    let _copies = RemoveCopies;
    check("through-c", "rust_calls_c", |_| {
        rust_calls_c(16);
    });
}

/// `noframes_big_frame`'s function pointer (one copy of the library,
/// loaded once: this test is about the frame's size, not new code).
fn noframes_big_frame() -> NoframesCall {
    static ADDR: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let addr = *ADDR.get_or_init(|| {
        let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
            panic!("the frameless C test library was not built (see the build script's warning)");
        };
        let path = std::ffi::CString::new(path).unwrap();
        // SAFETY: our own test library; it has no initialisers.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {path:?}");
        // SAFETY: a valid handle and a NUL-terminated name.
        let sym = unsafe { libc::dlsym(handle, c"noframes_big_frame".as_ptr()) };
        assert!(!sym.is_null(), "noframes_big_frame not found");
        sym as usize
    });
    // SAFETY: `noframes_big_frame` has this signature (tests/c/noframes.c).
    unsafe { std::mem::transmute::<usize, NoframesCall>(addr) }
}

/// Rust calling frameless C that keeps a 10 KiB buffer in its frame.
#[inline(never)]
fn rust_calls_big_c_frame(rounds: u64) -> u64 {
    // SAFETY: the library's function with a valid callback.
    let r = unsafe { noframes_big_frame()(rust_callback, rounds, 40_000) };
    std::hint::black_box(r)
}

/// A frame without frame pointers more than 8 KiB deep (under the leaf
/// and its frameless caller): the walk gets past it only with a stack
/// copy that reaches its return address. Signal-handler samples (the
/// sampler-thread clock): their copy is the one this tests.
#[test]
fn stacks_through_a_large_frameless_frame_are_complete() {
    check_with(
        "big-c-frame",
        "rust_calls_big_c_frame",
        Some(SampleClock::SamplerThread),
        |_| {
            rust_calls_big_c_frame(16);
        },
    );
}

/// Recurses `depth` times, then calls into the frameless C library.
#[inline(never)]
fn deep_recursion(depth: u32, rounds: u64) -> u64 {
    if depth == 0 {
        return rust_calls_c(rounds);
    }
    let r = deep_recursion(depth - 1, rounds);
    // Used after the call, so the recursion is not a tail call.
    std::hint::black_box(r).wrapping_add(u64::from(depth))
}

/// Stacks deeper than the kernel's call-chain limit for ring samples
/// (`kernel.perf_event_max_stack`, 127 frames by default), with a
/// frameless leaf: where perf events are allowed the ring clock hands
/// such a thread to a signal timer, whose handler walks the whole depth
/// asked for. The samples taken before the hand-off are cut at the
/// kernel's limit, so it must come within the first few.
#[test]
fn stacks_300_frames_deep_are_complete() {
    let _copies = RemoveCopies;
    check_deep("deep", "deep_recursion", None, 400, |_| {
        deep_recursion(300, 16);
    });
}

#[test]
fn stacks_with_a_memcpy_leaf_are_complete() {
    check("memcpy", "rust_copies", |_| {
        thread_local! {
            static BUFS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
                std::cell::RefCell::new((vec![1u8; 8 << 20], vec![0u8; 8 << 20]));
        }
        BUFS.with(|b| {
            let (src, dst) = &mut *b.borrow_mut();
            rust_copies(src, dst);
        });
    });
}

#[test]
fn stacks_through_qsort_callbacks_are_complete() {
    check("qsort", "rust_sorts", |round| {
        let mut values = vec![0u64; 100_000];
        rust_sorts(&mut values, round + 1);
    });
}

/// Objects loaded and unloaded while sampling: the module list follows,
/// and nothing crashes (the handler never reads unwind data; the sampler
/// thread unwinds with copies of it).
#[test]
fn dlopen_and_dlclose_while_profiling() {
    let _turn = SAMPLER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
        panic!("the frameless C test library was not built (see the build script's warning)");
    };
    // Two copies, so each dlopen maps a new object (one path would only
    // raise the reference count of the one loaded above).
    let dir = std::env::temp_dir().join(format!("btprof-cfi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copies: Vec<std::ffi::CString> = (0..2)
        .map(|i| {
            let p = dir.join(format!("libnoframes{i}.so"));
            std::fs::copy(path, &p).unwrap();
            std::ffi::CString::new(p.to_str().unwrap()).unwrap()
        })
        .collect();
    let sampler = Sampler::start(SamplerConfig::default()).unwrap();
    let worker = std::thread::Builder::new()
        .name("dl-churn".into())
        .spawn(move || {
            let start = thread_cpu();
            let mut cycles = 0u64;
            while thread_cpu() - start < Duration::from_millis(400) {
                let lib = &copies[(cycles % 2) as usize];
                // SAFETY: our own test library; no initialisers.
                let handle =
                    unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
                assert!(!handle.is_null());
                // SAFETY: a valid handle and name.
                let sym = unsafe { libc::dlsym(handle, c"noframes_call".as_ptr()) };
                // SAFETY: the library's function (see `noframes_call`).
                let call = unsafe { std::mem::transmute::<*mut libc::c_void, NoframesCall>(sym) };
                // SAFETY: a valid callback.
                std::hint::black_box(unsafe { call(rust_callback, 2, 20_000) });
                // SAFETY: nothing from the library is in use any more.
                assert_eq!(unsafe { libc::dlclose(handle) }, 0);
                cycles += 1;
            }
            cycles
        })
        .unwrap();
    let cycles = worker.join().unwrap();
    let raw = sampler.stop().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // A workload check, not a sample count: 400 ms of CPU of load, call and
    // unload; over 10 shows objects came and went while sampled.
    assert!(cycles > 10, "{cycles} load/unload cycles");
    let samples = support::samples_named(&raw, "dl-churn");
    // A survival bar, not random: 400 ms of its CPU is up to 400 whole
    // periods (its kernel time sampled only where allowed); 50 shows sampling
    // went on through the churn, not the rate.
    assert!(samples > 50, "{samples} samples: {:?}", raw.stats);
    println!("dl-churn: {cycles} dlopen/dlclose cycles, {samples} samples");
}
