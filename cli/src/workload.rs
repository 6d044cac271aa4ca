//! The built-in workload `btprof --pid-self` profiles: CPU-bound threads
//! running functions with known shares of CPU time.
//!
//! The truth the profile is checked against is measured, not assumed: each
//! function times its own work with the thread's CPU clock, and only while
//! the profiler is recording. Every function but one is a pure arithmetic
//! loop that calls nothing, so a correct sampler must find it as the leaf.
//! The exception, `sort_in_libc`, spends its time inside the C library
//! (`qsort`, calling back a Rust comparator), which is built without frame
//! pointers: its samples count for it only when the walk found it among
//! the callers, which takes CFI unwinding.
//!
//! Thread `btprof-work-0` runs `alpha`, `beta` and `sort_in_libc`; thread
//! `btprof-work-1` runs `beta` and the three-deep chain
//! `chain_outer` → `chain_middle` → `chain_inner`. Each call runs under a
//! label ([`STEP_LABEL`]) naming it, so its samples carry that label. For a thread dump,
//! [`BlockedReader`] adds `btprof-wait`, waiting in `read` on a pipe.
//!
//! [`Work::slow`] makes one function do twice (or any factor of) the work
//! per call: a known regression for `btprof diff` to find. The truth is measured either way,
//! so the self-check of a slowed run checks the profile against the
//! slowed split.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The functions whose shares are checked, in report order.
pub const FUNCTIONS: [&str; 6] = [
    "alpha",
    "beta",
    "chain_outer",
    "chain_middle",
    "chain_inner",
    "sort_in_libc",
];
/// Functions whose samples have their leaf elsewhere (in the C library):
/// their share is that of the stacks they appear in.
pub const INCLUSIVE_FUNCTIONS: [&str; 1] = ["sort_in_libc"];
/// The entry function of every worker thread: the root a complete stack
/// reaches.
pub const THREAD_ROOT: &str = "worker_main";
/// The `#[inline(always)]` function every workload function runs its
/// loop in: with inline frames it is a frame of its own under each of
/// them, taking that function's measured share.
pub const INLINED: &str = "timed_spin";
/// The source lines of [`INLINED`] (the self-check expects its frames'
/// lines in this range, in `workload.rs`).
pub const INLINED_LINES: std::ops::RangeInclusive<u32> =
    TIMED_SPIN_FIRST_LINE..=TIMED_SPIN_LAST_LINE;
/// The label each call of a workload function runs under: `alpha`,
/// `beta`, `sort` (`sort_in_libc`) or `chain` (`chain_outer` and the
/// functions it calls).
pub const STEP_LABEL: &str = "step";
/// Thread names start with this.
pub const THREAD_PREFIX: &str = "btprof-work-";
/// Worker threads.
pub const THREADS: usize = 2;

// Each function's slot in the per-function arrays, looked up in
// `FUNCTIONS` so that the slots follow the report order if it changes.
const ALPHA: usize = function_index("alpha");
const BETA: usize = function_index("beta");
const OUTER: usize = function_index("chain_outer");
const MIDDLE: usize = function_index("chain_middle");
const INNER: usize = function_index("chain_inner");
const SORT: usize = function_index("sort_in_libc");

/// The index of `name` in [`FUNCTIONS`], at compile time (a name not
/// there fails the build).
const fn function_index(name: &str) -> usize {
    let mut i = 0;
    while i < FUNCTIONS.len() {
        if same_str(FUNCTIONS[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("not one of FUNCTIONS");
}

/// `a == b`, which a `const fn` cannot write for strings.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A `--slow FUNCTION=FACTOR` factor: a positive number up to 100.
fn parse_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 100.0 => Ok(f),
        _ => Err(format!(
            "`{text}` is not a factor: expected a number above 0 and up to 100, like 1.1 or 2"
        )),
    }
}

/// Loop iterations per call, about 1.3 ns each: calls of 0.25-1.5 ms, long
/// next to the clock reads that time them. For `sort_in_libc`, the values
/// sorted per call (about 0.5 ms).
const ITERATIONS: [u64; 6] = [1_200_000, 400_000, 200_000, 200_000, 800_000, 6_000];

/// How much work each function does per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    iterations: [u64; 6],
}

impl Default for Work {
    fn default() -> Self {
        Work {
            iterations: ITERATIONS,
        }
    }
}

impl Work {
    /// The same work with slower functions, as `--slow` spells it:
    /// `FUNCTION` (a name from [`FUNCTIONS`]) does twice the work per call,
    /// `FUNCTION=FACTOR` that many times the work (`beta=1.09`: 9% more,
    /// a regression of about a point and a half of `beta`'s share when the
    /// workers split the CPU evenly, small enough to tell a diff's noise
    /// rules apart).
    pub fn slow(self, spec: &str) -> Result<Work, String> {
        let (function, factor) = match spec.split_once('=') {
            None => (spec, 2.0),
            Some((function, factor)) => (function, parse_factor(factor)?),
        };
        self.slow_by(function, factor)
    }

    /// The same work with `function` doing `factor` times the work per
    /// call (rounded to whole iterations).
    pub fn slow_by(mut self, function: &str, factor: f64) -> Result<Work, String> {
        let index = FUNCTIONS
            .iter()
            .position(|&f| f == function)
            .ok_or_else(|| {
                format!(
                    "`{function}` is not a workload function: expected one of {}",
                    FUNCTIONS.join(", ")
                )
            })?;
        let scaled = (self.iterations[index] as f64 * factor).round();
        // The slowed count stays at least 1 and within what a u64 holds.
        self.iterations[index] = scaled.clamp(1.0, u64::MAX as f64 / 4.0) as u64;
        Ok(self)
    }

    /// Loop iterations per call, in [`FUNCTIONS`] order.
    pub fn iterations(&self) -> [u64; 6] {
        self.iterations
    }
}

/// CPU time measured inside each function while recording.
#[derive(Debug, Default)]
pub struct Truth {
    function_ns: [AtomicU64; 6],
    /// All worker CPU time while recording, timed functions or not.
    total_ns: AtomicU64,
    /// The same per worker thread.
    thread_ns: [AtomicU64; THREADS],
}

impl Truth {
    /// A truth from known timings (for checking the self-check itself).
    pub fn from_ns(function_ns: [u64; 6], total_ns: u64) -> Truth {
        Truth {
            function_ns: function_ns.map(AtomicU64::new),
            total_ns: AtomicU64::new(total_ns),
            thread_ns: Default::default(),
        }
    }

    /// CPU time worker `index` used while recording, in seconds (complete
    /// iterations only).
    pub fn thread_seconds(&self, index: usize) -> f64 {
        self.thread_ns[index].load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Each function's measured share of worker CPU time, in
    /// [`FUNCTIONS`] order.
    pub fn shares(&self) -> [f64; 6] {
        let total = self.total_ns.load(Ordering::Relaxed) as f64;
        std::array::from_fn(|i| {
            if total > 0.0 {
                self.function_ns[i].load(Ordering::Relaxed) as f64 / total
            } else {
                0.0
            }
        })
    }

    /// Worker CPU time while recording, in seconds.
    pub fn total_seconds(&self) -> f64 {
        self.total_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
}

/// The running workload.
pub struct Workload {
    stop: Arc<AtomicBool>,
    recording: Arc<AtomicBool>,
    truth: Arc<Truth>,
    threads: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts the worker threads with the default work (not yet
    /// recording).
    pub fn start() -> std::io::Result<Workload> {
        Workload::start_with(Work::default())
    }

    /// Starts the worker threads doing `work` (not yet recording).
    pub fn start_with(work: Work) -> std::io::Result<Workload> {
        let stop = Arc::new(AtomicBool::new(false));
        let recording = Arc::new(AtomicBool::new(false));
        let truth = Arc::new(Truth::default());
        let mut threads = Vec::new();
        for index in 0..THREADS {
            let (stop, recording, truth) = (stop.clone(), recording.clone(), truth.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{THREAD_PREFIX}{index}"))
                    .spawn(move || worker_main(index, &work, &stop, &recording, &truth))?,
            );
        }
        Ok(Workload {
            stop,
            recording,
            truth,
            threads,
        })
    }

    /// Starts or stops accumulating the truth; bracket the profiler with it.
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::SeqCst);
    }

    /// The truth measured so far.
    pub fn truth(&self) -> &Truth {
        &self.truth
    }

    /// Stops and joins the workers.
    pub fn stop(self) -> Arc<Truth> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        self.truth
    }
}

/// Per-iteration timings, added to the shared truth only if the whole
/// iteration ran while recording, and the work per call.
struct Local {
    ns: [u64; 6],
    iterations: [u64; 6],
    /// `sort_in_libc`'s values, allocated once per thread.
    values: Vec<u64>,
}

/// Runs a call under the label `step=NAME` ([`STEP_LABEL`]). A macro, not
/// a function, so that no frame (nor inlined frame) comes between
/// `worker_main` and the call.
macro_rules! step {
    ($name:literal, $call:expr) => {{
        let _step = btprof::labels(&[(STEP_LABEL, $name)]);
        $call
    }};
}

#[inline(never)]
fn worker_main(
    index: usize,
    work: &Work,
    stop: &AtomicBool,
    recording: &AtomicBool,
    truth: &Truth,
) {
    let mut local = Local {
        ns: [0; 6],
        iterations: work.iterations,
        values: Vec::with_capacity(work.iterations[SORT] as usize),
    };
    while !stop.load(Ordering::Relaxed) {
        let was_recording = recording.load(Ordering::Relaxed);
        local.ns = [0; 6];
        let start = thread_cpu_ns();
        if index == 0 {
            step!("alpha", alpha(&mut local));
            step!("beta", beta(&mut local));
            step!("sort", sort_in_libc(&mut local));
        } else {
            step!("beta", beta(&mut local));
            step!("chain", chain_outer(&mut local));
        }
        let end = thread_cpu_ns();
        if was_recording && recording.load(Ordering::Relaxed) {
            for (sum, ns) in truth.function_ns.iter().zip(local.ns) {
                sum.fetch_add(ns, Ordering::Relaxed);
            }
            truth.total_ns.fetch_add(end - start, Ordering::Relaxed);
            truth.thread_ns[index].fetch_add(end - start, Ordering::Relaxed);
        }
    }
}

const TIMED_SPIN_FIRST_LINE: u32 = line!();
/// Runs the slot's iterations of a multiply-add chain the optimiser cannot remove
/// and times it into `slot`. Always inlined, so its samples belong to the
/// calling workload function (the machine function), under which inline
/// expansion shows it as its own frame.
#[inline(always)]
fn timed_spin(local: &mut Local, slot: usize) {
    let start = thread_cpu_ns();
    let mut x = black_box(slot as u64 + 1);
    for i in 0..local.iterations[slot] {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    black_box(x);
    local.ns[slot] += thread_cpu_ns() - start;
}
const TIMED_SPIN_LAST_LINE: u32 = line!();

/// The heaviest function, on worker 0.
#[inline(never)]
fn alpha(local: &mut Local) {
    timed_spin(local, ALPHA);
}

/// Runs on both workers.
#[inline(never)]
fn beta(local: &mut Local) {
    timed_spin(local, BETA);
}

/// Top of the three-deep chain: some work of its own, then the middle.
#[inline(never)]
fn chain_outer(local: &mut Local) {
    timed_spin(local, OUTER);
    chain_middle(local);
}

/// Middle of the chain.
#[inline(never)]
fn chain_middle(local: &mut Local) {
    timed_spin(local, MIDDLE);
    chain_inner(local);
}

/// Bottom of the chain.
#[inline(never)]
fn chain_inner(local: &mut Local) {
    timed_spin(local, INNER);
}

/// Sorts values with the C library's `qsort` and a Rust comparator: the
/// time goes to frameless C code (and the comparator it calls).
#[inline(never)]
fn sort_in_libc(local: &mut Local) {
    let start = thread_cpu_ns();
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    local.values.clear();
    for _ in 0..local.iterations[SORT] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        local.values.push(x);
    }
    // SAFETY: a valid array of `len` u64 and a comparator for u64.
    unsafe {
        libc::qsort(
            local.values.as_mut_ptr().cast(),
            local.values.len(),
            std::mem::size_of::<u64>(),
            Some(compare_u64),
        )
    };
    black_box(&mut local.values);
    local.ns[SORT] += thread_cpu_ns() - start;
}

/// `qsort`'s comparator: called from the C library.
extern "C" fn compare_u64(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
    // SAFETY: qsort passes pointers to two elements of the u64 array.
    let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
    a.cmp(&b) as libc::c_int
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The name of the workload's thread that waits in `read` on a pipe.
pub const BLOCKED_THREAD: &str = "btprof-wait";
/// The function it waits in.
pub const BLOCKED_FUNCTION: &str = "wait_for_input";

/// A thread of the workload blocked in `read` on a pipe until stopped:
/// what a thread dump shows as blocked in a system call (it must be read
/// without interrupting it).
pub struct BlockedReader {
    write_end: i32,
    thread: Option<JoinHandle<()>>,
}

impl BlockedReader {
    /// Starts the thread; it blocks in [`BLOCKED_FUNCTION`] at once.
    pub fn start() -> std::io::Result<BlockedReader> {
        let mut fds = [0i32; 2];
        // SAFETY: a valid array for the two descriptors.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let read_end = fds[0];
        let thread = std::thread::Builder::new()
            .name(BLOCKED_THREAD.into())
            .spawn(move || {
                wait_for_input(read_end);
                // SAFETY: closing this thread's own read end once.
                unsafe { libc::close(read_end) };
            })?;
        Ok(BlockedReader {
            write_end: fds[1],
            thread: Some(thread),
        })
    }
}

impl Drop for BlockedReader {
    /// Wakes the thread with one byte and joins it.
    fn drop(&mut self) {
        // SAFETY: one byte from a valid buffer to our own pipe, then
        // closing the write end once.
        unsafe {
            libc::write(self.write_end, b"x".as_ptr().cast(), 1);
            libc::close(self.write_end);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits for one byte on `fd` (retrying a read a signal cut short).
#[inline(never)]
fn wait_for_input(fd: i32) {
    let mut byte = 0u8;
    loop {
        // SAFETY: reading one byte into a valid buffer.
        let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_doubles_one_function_each_time() {
        let work = Work::default().slow("chain_inner").unwrap();
        let mut want = ITERATIONS;
        want[INNER] *= 2;
        assert_eq!(work.iterations(), want);
        want[INNER] *= 2;
        assert_eq!(work.slow("chain_inner").unwrap().iterations(), want);
    }

    #[test]
    fn slow_names_the_choices_for_an_unknown_function() {
        let err = Work::default().slow("gamma").unwrap_err();
        assert!(
            err.contains("`gamma`") && err.contains("alpha, beta"),
            "{err}"
        );
        let err = Work::default().slow("gamma=2").unwrap_err();
        assert!(err.contains("`gamma`"), "{err}");
    }

    #[test]
    fn slow_with_a_factor_scales_one_function() {
        let work = Work::default().slow("beta=1.1").unwrap();
        let mut want = ITERATIONS;
        want[BETA] = 440_000;
        assert_eq!(work.iterations(), want);
        assert_eq!(
            Work::default().slow("beta=2").unwrap(),
            Work::default().slow("beta").unwrap()
        );
        for bad in ["beta=", "beta=0", "beta=-1", "beta=x", "beta=1e9"] {
            let err = Work::default().slow(bad).unwrap_err();
            assert!(err.contains("is not a factor"), "{bad}: {err}");
        }
    }
}
