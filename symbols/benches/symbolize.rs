//! Symbolisation throughput and memory: 100,000 distinct addresses across 50 modules,
//! resolved to one symbol each ([`Resolver::resolve`], the baseline) and expanded into inline
//! chains with file and line ([`Resolver::resolve_frames`], DWARF).
//!
//! The modules are 50 copies of one generated C library (1,000 functions, each with two
//! inlined helpers), built with `cc -O2 -g` into cargo's temporary directory and resolved at
//! made-up load addresses through [`Resolver::from_object_files`], so every module is read,
//! parsed and (for inline expansion) has its DWARF loaded separately, as 50 different
//! libraries would be. Each variant runs in a child process of its own, so that its peak
//! resident set is its own; each is run for several rounds and the median reported.
//!
//! `cargo bench -p btprof-symbols --bench symbolize` (Linux; it needs `cc`). Writes its
//! latest results to `docs/results/symbols_symbolize.md`.

#[path = "../../benches/support/results.rs"]
mod results;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use btprof_symbols::Resolver;
use btprof_testkit::measure::{self, fields, median, peak_rss_kib};

const MODULES: usize = 50;
const ADDRESSES: usize = 100_000;
const FUNCTIONS: usize = 1_000;
const ROUNDS: usize = 5;

/// The load address of module `index`: 256 MiB apart, far above the
/// bench's own mappings.
fn module_bias(index: usize) -> u64 {
    0x7f00_0000_0000 + index as u64 * 0x1000_0000
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(index) = args.iter().position(|a| a == "--child") {
        let variant = args.get(index + 1).expect("variant");
        let dir = PathBuf::from(args.get(index + 2).expect("library directory"));
        child(variant, &dir);
        return;
    }
    if !cfg!(target_os = "linux") {
        println!("symbolize: this benchmark builds ELF libraries with cc and runs on Linux only");
        return;
    }
    let mut report = results::Results::new(
        "symbols_symbolize",
        "The resolver: symbolisation throughput and memory",
        "cargo bench -p btprof-symbols --bench symbolize",
    );
    let mut rows = Vec::new();
    let dir = build_libraries();
    println!(
        "symbolize: {ADDRESSES} distinct addresses across {MODULES} modules \
         ({FUNCTIONS} functions each, -O2 -g), median of {ROUNDS} rounds, each in a fresh process"
    );
    let mut results = Vec::new();
    for variant in ["none", "symbols", "inline"] {
        let mut cold = Vec::new();
        let mut warm = Vec::new();
        let mut rss = Vec::new();
        let mut frames = 0.0;
        for _ in 0..ROUNDS {
            let line = run_child(variant, &dir);
            for (key, value) in fields(&line) {
                match key {
                    "cold_ms" => cold.push(value),
                    "warm_ms" => warm.push(value),
                    "rss_kib" => rss.push(value),
                    "frames" => frames = value,
                    _ => {}
                }
            }
        }
        let (cold, warm, rss) = (median(cold), median(warm), median(rss));
        results.push((variant, cold, warm, rss, frames));
    }
    let (_, _, _, rss_none, _) = results[0];
    let (_, cold_symbols, _, _, _) = results[1];
    for &(variant, cold, warm, rss, frames) in &results[1..] {
        println!(
            "  {variant:<8} first pass {cold:8.1} ms ({:6.0} ns/address), cached pass {warm:6.1} ms, \
             {frames:.0} frames, peak RSS {:.1} MiB ({:+.1} MiB over the address list alone), \
             {:.2}x the symbol-only first pass",
            cold * 1e6 / ADDRESSES as f64,
            rss / 1024.0,
            (rss - rss_none) / 1024.0,
            cold / cold_symbols,
        );
        rows.push(vec![
            variant.to_owned(),
            format!("{cold:.1}"),
            format!("{:.0}", cold * 1e6 / ADDRESSES as f64),
            format!("{warm:.1}"),
            format!("{frames:.0}"),
            format!("{:.1}", rss / 1024.0),
            format!("{:+.1}", (rss - rss_none) / 1024.0),
            format!("{:.2}x", cold / cold_symbols),
        ]);
    }
    report.paragraph(&format!(
        "{ADDRESSES} distinct addresses across {MODULES} modules ({FUNCTIONS} functions each, \
         built with `cc -O2 -g`), resolved to one symbol each (`symbols`) and expanded into \
         inline chains with file and line (`inline`); median of {ROUNDS} rounds, each in a \
         fresh process. The first pass loads the tables (and DWARF); the second hits the \
         per-address cache."
    ));
    report.table(
        &[
            "variant",
            "first pass, ms",
            "ns per address",
            "cached pass, ms",
            "frames",
            "peak RSS, MiB",
            "over the address list alone, MiB",
            "first pass, to `symbols`",
        ],
        &rows,
    );
    report.write();
}

/// One measured run: resolve every address twice (first pass loads tables and DWARF; second
/// hits the per-address cache) and report times, frame count and peak RSS.
fn child(variant: &str, dir: &Path) {
    let (files, addresses) = workload(dir);
    let mut resolver = Resolver::from_object_files(files).expect("libraries");
    let mut frames = 0usize;
    let mut pass = |resolver: &mut Resolver| {
        let start = Instant::now();
        frames = 0;
        for &addr in &addresses {
            match variant {
                "symbols" => {
                    std::hint::black_box(resolver.resolve(addr));
                    frames += 1;
                }
                "inline" => frames += std::hint::black_box(resolver.resolve_frames(addr)).len(),
                _ => {}
            }
        }
        start.elapsed().as_secs_f64() * 1e3
    };
    let cold = pass(&mut resolver);
    let warm = pass(&mut resolver);
    println!(
        "cold_ms={cold} warm_ms={warm} frames={frames} rss_kib={}",
        peak_rss_kib()
    );
}

/// The 50 modules (path, load bias) and 100,000 distinct addresses spread over the code of
/// each (its `.text`).
fn workload(dir: &Path) -> (Vec<(PathBuf, u64)>, Vec<u64>) {
    use object::{Object, ObjectSection};
    let per_module = ADDRESSES / MODULES;
    let mut files = Vec::new();
    let mut addresses = Vec::with_capacity(ADDRESSES);
    for index in 0..MODULES {
        let path = dir.join(format!("libbench{index:02}.so"));
        let bias = module_bias(index);
        let data = std::fs::read(&path).expect("library");
        let file = object::File::parse(&*data).expect("ELF");
        let text = file.section_by_name(".text").expect(".text");
        let step = text.size() / per_module as u64;
        assert!(
            step >= 1,
            ".text too small for {per_module} distinct addresses"
        );
        // One address per `step` bytes, at a pseudo-random offset inside its step: a fixed
        // offset would alias with the generated functions' identical layout and always hit
        // the same instruction of each.
        addresses
            .extend((0..per_module as u64).map(|i| {
                text.address() + i * step + (i.wrapping_mul(2_654_435_761) % step) + bias
            }));
        files.push((path, bias));
    }
    (files, addresses)
}

fn run_child(variant: &str, dir: &Path) -> String {
    measure::run_self(&format!("child {variant}"), |c| {
        c.arg("--child").arg(variant).arg(dir)
    })
    .lines()
    .find(|l| l.starts_with("cold_ms="))
    .expect("result line")
    .to_owned()
}

/// Generates and builds the library once, then copies it to 50 files.
fn build_libraries() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("btprof-symbolize-bench");
    std::fs::create_dir_all(&dir).expect("directory");
    let mut source = String::new();
    for i in 0..FUNCTIONS {
        let shift = 3 + i % 13;
        source.push_str(&format!(
            "static inline __attribute__((always_inline)) unsigned mix{i}(unsigned x) {{\n\
             \x20   x ^= x >> {shift};\n    x *= 0x9E3779B1u;\n    return x ^ (x >> 7);\n}}\n\
             static inline __attribute__((always_inline)) unsigned fold{i}(unsigned x, unsigned i) {{\n\
             \x20   return mix{i}(x + i) ^ (i << {shift});\n}}\n\
             __attribute__((noinline)) unsigned bench_fn{i}(unsigned n) {{\n\
             \x20   unsigned a = n;\n\
             \x20   for (unsigned i = 0; i < n; i++) {{\n\
             \x20       a = fold{i}(a, i);\n\
             \x20       if (a & 1) a = mix{i}(a ^ i);\n\
             \x20   }}\n\
             \x20   return a;\n}}\n"
        ));
    }
    let c = dir.join("bench.c");
    std::fs::write(&c, source).expect("write source");
    let lib = dir.join("libbench.so");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-g", "-o"])
        .arg(&lib)
        .arg(&c)
        .status()
        .expect("this benchmark needs a C compiler (`cc`)");
    assert!(status.success(), "cc failed");
    for index in 0..MODULES {
        std::fs::copy(&lib, dir.join(format!("libbench{index:02}.so"))).expect("copy");
    }
    dir
}
