//! A workload with its hot code where frame pointers are missing, to
//! check CFI unwinding by hand: one thread cycles through four phases, each
//! timing its own CPU time: a `malloc`/`free` storm, large `memcpy`s,
//! `qsort` with a Rust comparator (all in glibc), and the frameless C test
//! library calling back into Rust.
//!
//! It profiles itself with the sampler (CFI walking on; `--fp` for frame
//! pointers only) and prints each phase's share of the samples (stacks
//! that hold the phase function) against its measured share of CPU time,
//! and how many samples lost the phase function (their callers).
//! `--no-profiler` runs the workload alone, for `perf record
//! --call-graph dwarf` to sample the same thing:
//!
//! ```sh
//! cargo run --release -p btprof-sampler --example frameless_phases
//! perf record -e cpu-clock:u -F 1000 --call-graph dwarf -o /tmp/p.data -- \
//!     target/release/examples/frameless_phases --no-profiler
//! ```
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("frameless_phases: Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::hint::black_box;
    use std::time::Duration;

    use btprof_sampler::{Mode, Sampler, SamplerConfig};
    use btprof_symbols::Resolver;
    use btprof_testkit::thread_cpu_ns;

    const PHASES: [&str; 4] = [
        "phase_malloc",
        "phase_memcpy",
        "phase_qsort",
        "phase_c_library",
    ];
    const CPU: Duration = Duration::from_secs(4);

    type Callback = extern "C" fn(u64) -> u64;
    type NoframesCall = unsafe extern "C" fn(Callback, u64, u64) -> u64;

    #[inline(never)]
    fn phase_malloc(seed: u64) -> u64 {
        let mut x = seed | 1;
        let mut keep: Vec<Vec<u8>> = Vec::with_capacity(64);
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = vec![x as u8; 16 + (x % 4000) as usize];
            if keep.len() < 64 {
                keep.push(v);
            } else {
                keep[(x % 64) as usize] = v;
            }
        }
        black_box(keep.len() as u64)
    }

    #[inline(never)]
    fn phase_memcpy(bufs: &mut (Vec<u8>, Vec<u8>)) -> u64 {
        for _ in 0..4 {
            let (src, dst) = (&bufs.0, &mut bufs.1);
            // SAFETY: two distinct buffers of equal length.
            unsafe { libc::memcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), src.len()) };
            black_box(&mut *dst);
        }
        u64::from(bufs.1[3])
    }

    extern "C" fn compare(a: *const libc::c_void, b: *const libc::c_void) -> libc::c_int {
        // SAFETY: qsort passes two elements of the u64 array.
        let (a, b) = unsafe { (*(a as *const u64), *(b as *const u64)) };
        a.cmp(&b) as libc::c_int
    }

    #[inline(never)]
    fn phase_qsort(values: &mut Vec<u64>, seed: u64) -> u64 {
        let mut x = seed | 1;
        values.clear();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x);
        }
        // SAFETY: a valid u64 array and a comparator for it.
        unsafe { libc::qsort(values.as_mut_ptr().cast(), values.len(), 8, Some(compare)) };
        black_box(values[0])
    }

    #[inline(never)]
    extern "C" fn callback(x: u64) -> u64 {
        let mut v = x | 1;
        for i in 0..10_000u64 {
            v = black_box(v.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(i));
        }
        v
    }

    #[inline(never)]
    fn phase_c_library(call: NoframesCall) -> u64 {
        // SAFETY: the library's function with a valid callback.
        black_box(unsafe { call(callback, 8, 20_000) })
    }

    fn load_c_library() -> NoframesCall {
        let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
            panic!("the frameless C test library was not built (see the build script's warning)");
        };
        let path = std::ffi::CString::new(path).unwrap();
        // SAFETY: our own test library; no initialisers.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null());
        // SAFETY: a valid handle and name.
        let sym = unsafe { libc::dlsym(handle, c"noframes_call".as_ptr()) };
        assert!(!sym.is_null());
        // SAFETY: the function's signature (tests/c/noframes.c).
        unsafe { std::mem::transmute::<*mut libc::c_void, NoframesCall>(sym) }
    }

    /// Runs the phases for [`CPU`] of thread CPU time; returns the CPU
    /// nanoseconds spent in each.
    fn work() -> [u64; 4] {
        let call = load_c_library();
        let mut bufs = (vec![7u8; 4 << 20], vec![0u8; 4 << 20]);
        let mut values = Vec::with_capacity(20_000);
        let mut ns = [0u64; 4];
        let start = thread_cpu_ns();
        let mut round = 0u64;
        while thread_cpu_ns() - start < CPU.as_nanos() as u64 {
            for (i, n) in ns.iter_mut().enumerate() {
                let t = thread_cpu_ns();
                match i {
                    0 => black_box(phase_malloc(round)),
                    1 => black_box(phase_memcpy(&mut bufs)),
                    2 => black_box(phase_qsort(&mut values, round + 1)),
                    _ => black_box(phase_c_library(call)),
                };
                *n += thread_cpu_ns() - t;
            }
            round += 1;
        }
        ns
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let worker = || {
            std::thread::Builder::new()
                .name("phases".into())
                .spawn(work)
                .unwrap()
        };
        if args.iter().any(|a| a == "--no-profiler") {
            let ns = worker().join().unwrap();
            print_truth(&ns);
            return;
        }
        let sampler = Sampler::start(SamplerConfig {
            hz: 1000,
            mode: Mode::Cpu,
            frame_pointers_only: args.iter().any(|a| a == "--fp"),
            ..SamplerConfig::default()
        })
        .unwrap();
        let ns = worker().join().unwrap();
        let raw = sampler.stop().unwrap();
        let mut resolver = Resolver::for_current_process().unwrap();
        let (mut total, mut lost, mut leaf_only) = (0u64, 0u64, 0u64);
        let mut held = [0u64; 4];
        for (key, count) in raw.table.iter() {
            if raw.threads[key.thread as usize].name != "phases" {
                continue;
            }
            let names: Vec<String> = key
                .frames
                .iter()
                .enumerate()
                .map(|(i, &a)| {
                    let a = if i == 0 { a } else { a - 1 };
                    resolver.resolve(a).name.to_string()
                })
                .collect();
            // The harness's clock reads between phases are no phase.
            if names
                .iter()
                .any(|n| n.contains("btprof_testkit::thread_cpu"))
            {
                continue;
            }
            total += count;
            if key.frames.len() == 1 {
                leaf_only += count;
            }
            match PHASES
                .iter()
                .position(|p| names.iter().any(|n| n.ends_with(p)))
            {
                Some(p) => held[p] += count,
                None => lost += count,
            }
        }
        let cpu: u64 = ns.iter().sum();
        println!(
            "{} samples of thread `phases`; {:.2}% kept only the leaf, {:.2}% lost their phase function; \
             callers from CFI: {} of {}",
            total,
            100.0 * leaf_only as f64 / total.max(1) as f64,
            100.0 * lost as f64 / total.max(1) as f64,
            raw.stats.cfi_frames,
            raw.stats.cfi_frames + raw.stats.frame_pointer_frames
        );
        println!("  phase              samples    truth   points");
        for (i, p) in PHASES.iter().enumerate() {
            let share = 100.0 * held[i] as f64 / total.max(1) as f64;
            let truth = 100.0 * ns[i] as f64 / cpu.max(1) as f64;
            println!("  {p:<16} {share:8.2}% {truth:7.2}% {:+8.2}", share - truth);
        }
    }

    fn print_truth(ns: &[u64; 4]) {
        let cpu: u64 = ns.iter().sum();
        for (i, p) in PHASES.iter().enumerate() {
            println!(
                "  {p:<16} truth {:7.2}%",
                100.0 * ns[i] as f64 / cpu.max(1) as f64
            );
        }
    }
}
