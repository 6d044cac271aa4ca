//! What the handler's fault-safe stack reads cost.
//!
//! The Linux handler reads the interrupted stack with `process_vm_readv`
//! (a window copied into a slot buffer) instead of plain loads, so memory
//! unmapped under it ends the walk instead of crashing the process. This
//! walks a real frame chain of `DEPTH` frames on this thread's own stack
//! both ways, many times, in the same run, and reports the median time
//! per walk of several rounds and the ratio. Frames here are small, so
//! one 4 KiB window covers about the first 60 of them; the deep case
//! shows what further windows cost.
//!
//! `cargo bench -p btprof-sampler --bench stack_reads`. Reports, never
//! gates.
//!
//! Writes its latest results to `docs/results/stack_reads.md`.

#[cfg(target_os = "linux")]
#[path = "../../benches/support/results.rs"]
mod results;

#[cfg(target_os = "linux")]
mod linux {
    use std::time::Instant;

    use btprof_sampler::bench_support::{probe, CheckedMemory, WINDOW_WORDS};
    use btprof_sampler::walker::{walk, Arch, Registers, StackBounds, StackMemory};

    /// Plain loads: what the handler did before.
    struct Plain;

    impl StackMemory for Plain {
        fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
            // SAFETY: the walker keeps reads inside this thread's own live
            // stack, `[sp, top of its pthread stack)`, all mapped.
            Some(unsafe { core::ptr::read_volatile(addr as *const [u64; 2]) })
        }
    }

    #[inline(never)]
    fn recurse(depth: usize, at_bottom: &mut dyn FnMut()) {
        if depth == 0 {
            at_bottom();
        } else {
            recurse(depth - 1, at_bottom);
        }
        std::hint::black_box(depth);
    }

    #[inline(always)]
    fn here() -> Registers {
        let fp: u64;
        let sp: u64;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reads two registers.
        unsafe {
            std::arch::asm!("mov {}, rbp", "mov {}, rsp", out(reg) fp, out(reg) sp)
        };
        #[cfg(target_arch = "aarch64")]
        // SAFETY: reads two registers.
        unsafe {
            std::arch::asm!("mov {}, x29", "mov {}, sp", out(reg) fp, out(reg) sp)
        };
        Registers {
            pc: 0,
            fp,
            sp,
            lr: 0,
        }
    }

    /// The top of this thread's stack, from its pthread attributes.
    fn stack_top() -> u64 {
        // SAFETY: querying the calling thread's attributes into valid
        // out-pointers, then destroying them.
        unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::zeroed();
            assert_eq!(
                libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()),
                0
            );
            let mut base = std::ptr::null_mut();
            let mut size = 0;
            assert_eq!(
                libc::pthread_attr_getstack(attr.as_ptr(), &mut base, &mut size),
                0
            );
            libc::pthread_attr_destroy(attr.as_mut_ptr());
            base as u64 + size as u64
        }
    }

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    pub fn main() {
        assert!(probe(), "process_vm_readv must work here");
        // A thread of our own: its whole stack is one known mapping.
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(run)
            .unwrap()
            .join()
            .unwrap();
    }

    fn run() {
        let top = stack_top();
        let walks = 20_000;
        let rounds = 7;
        let mut results = crate::results::Results::new(
            "stack_reads",
            "Fault-safe stack reads against plain loads",
            "cargo bench -p btprof-sampler --bench stack_reads",
        );
        let mut rows = Vec::new();
        for depth in [20usize, 200] {
            let mut plain_ns = Vec::new();
            let mut checked_ns = Vec::new();
            let mut frames_seen = 0;
            let mut copies = 0;
            recurse(depth, &mut || {
                let regs = here();
                let bounds = StackBounds {
                    low: regs.sp,
                    high: top,
                };
                let mut out = vec![0u64; 512];
                let mut window = vec![0u64; WINDOW_WORDS];
                for _ in 0..rounds {
                    let t = Instant::now();
                    for _ in 0..walks {
                        let w = walk(Arch::host(), &regs, Some(bounds), &mut Plain, &mut out);
                        frames_seen = w.depth;
                    }
                    plain_ns.push(t.elapsed().as_nanos() as f64 / walks as f64);
                    let t = Instant::now();
                    for _ in 0..walks {
                        let mut memory = CheckedMemory::new(&mut window, bounds.low, bounds.high);
                        let w = walk(Arch::host(), &regs, Some(bounds), &mut memory, &mut out);
                        assert_eq!(w.depth, frames_seen);
                        copies = memory.copies();
                    }
                    checked_ns.push(t.elapsed().as_nanos() as f64 / walks as f64);
                }
            });
            let (p, c) = (median(&mut plain_ns), median(&mut checked_ns));
            println!(
                "stack_reads: {frames_seen} frames: plain loads {p:.0} ns/walk, process_vm_readv \
                 {c:.0} ns/walk ({copies} copies), {:.2}x, +{:.2} us per sample",
                c / p,
                (c - p) / 1000.0
            );
            rows.push(vec![
                frames_seen.to_string(),
                format!("{p:.0}"),
                format!("{c:.0}"),
                copies.to_string(),
                format!("{:.2}x", c / p),
                format!("{:.2}", (c - p) / 1000.0),
            ]);
        }
        results.paragraph(&format!(
            "A frame-pointer walk of this thread's own stack, {walks} walks per round, \
             medians of {rounds} rounds: plain loads against fault-safe `process_vm_readv` \
             windows (`CheckedMemory`), as the signal handler reads."
        ));
        results.table(
            &[
                "frames",
                "plain loads, ns/walk",
                "process_vm_readv, ns/walk",
                "windows copied",
                "ratio",
                "added per sample, µs",
            ],
            &rows,
        );
        results.write();
    }
}

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("stack_reads: Linux only (the handler's process_vm_readv reads)");
}
