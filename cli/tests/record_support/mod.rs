//! What the `btprof record` tests share: scratch directories, compiling
//! the C programs in `programs/`, running `btprof record` with a time
//! limit, and reading the folded files it writes. Each test crate uses a
//! part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_btprof");

/// A scratch directory per test, removed on success.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("btprof-record-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A scratch directory for test `name`, or `None` (said on stdout) where
/// `tool` is not installed.
pub fn scratch_if_installed(tool: &str, name: &str) -> Option<Scratch> {
    if !has(tool) {
        println!("NOT CHECKED: {tool} is not installed");
        return None;
    }
    Some(Scratch::new(name))
}

/// Compiles `programs/SOURCE` with `flags` into `dir`; `None` (said on
/// stdout) without a C compiler.
pub fn compile(dir: &Scratch, source: &str, out: &str, flags: &[&str]) -> Option<PathBuf> {
    compile_with("cc", dir, source, out, flags)
}

/// [`compile`] with the C compiler `cc` (a cross compiler, say).
pub fn compile_with(
    cc: &str,
    dir: &Scratch,
    source: &str,
    out: &str,
    flags: &[&str],
) -> Option<PathBuf> {
    if !has(cc) {
        println!("NOT CHECKED: no C compiler ({cc}) on this machine");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(source);
    let exe = dir.path(out);
    let status = Command::new(cc)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-pthread")
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{cc} {source} failed");
    Some(exe)
}

/// Runs `btprof record ARGS`, killing it after `limit`.
pub fn record(dir: &Scratch, args: &[&str], limit: Duration) -> Output {
    record_through(&[], dir, args, limit)
}

/// [`record`], with btprof started by the program and arguments
/// `through` (an emulator, say) when that is not empty.
pub fn record_through(through: &[&str], dir: &Scratch, args: &[&str], limit: Duration) -> Output {
    let mut command = match through.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    let child = command
        .current_dir(&dir.0)
        .arg("record")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run btprof");
    wait_limited(child, limit)
}

pub fn wait_limited(mut child: std::process::Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "btprof record still ran after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A folded file's lines: (frames, count) each.
pub type Folded = Vec<(Vec<String>, u64)>;

/// Runs `btprof record ARGS` as [`record`] does, which must succeed, and
/// reads the profile it wrote: most tests look at nothing else.
pub fn record_folded(dir: &Scratch, args: &[&str], limit: Duration) -> (Output, Folded) {
    record_folded_through(&[], dir, args, limit)
}

/// [`record_folded`] through [`record_through`].
pub fn record_folded_through(
    through: &[&str],
    dir: &Scratch,
    args: &[&str],
    limit: Duration,
) -> (Output, Folded) {
    let out = record_through(through, dir, args, limit);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = folded(&dir.path("btprof.folded"));
    (out, lines)
}

/// The record of the one process `btprof record --raw-dir RAW` profiled.
pub fn raw_record(raw: &Path) -> serde_json::Value {
    let json = std::fs::read_dir(raw)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("the process's record");
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

/// The folded file's lines as (frames, count).
pub fn folded(path: &Path) -> Folded {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("stack count");
            (
                stack.split(';').map(str::to_owned).collect(),
                count.parse().expect("a count"),
            )
        })
        .collect()
}

/// `name seconds` lines the test programs print.
pub fn measured(stdout: &str) -> HashMap<String, f64> {
    stdout
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// Samples in `function` or what it calls.
pub fn samples_in(lines: &[(Vec<String>, u64)], function: &str) -> u64 {
    samples_where(lines, |name| name == function)
}

/// Samples with a frame whose function `is_wanted`.
pub fn samples_where(lines: &[(Vec<String>, u64)], is_wanted: impl Fn(&str) -> bool) -> u64 {
    lines
        .iter()
        .filter(|(f, _)| f.iter().any(|name| is_wanted(name)))
        .map(|(_, c)| c)
        .sum()
}

/// All the samples.
pub fn total(lines: &[(Vec<String>, u64)]) -> u64 {
    lines.iter().map(|(_, c)| c).sum()
}

/// The roots of a folded file: `name (pid)` each.
pub fn roots(lines: &[(Vec<String>, u64)]) -> Vec<String> {
    let mut roots: Vec<String> = lines.iter().map(|(f, _)| f[0].clone()).collect();
    roots.sort();
    roots.dedup();
    roots
}

/// Compiles `programs/SOURCE` into `out` lightly optimized and with frame
/// pointers, as the programs whose stacks are not the point are built.
pub fn framed_program(scratch: &Scratch, source: &str, out: &str) -> Option<PathBuf> {
    compile(scratch, source, out, &["-O1", "-fno-omit-frame-pointer"])
}

/// Starts `btprof record --mode wall -- sleep 100` in `scratch`, with the
/// per-process records in `raw/`, and returns once sleep is being
/// profiled (and 300 ms more), for tests that signal btprof.
pub fn record_sleep_until_profiled(scratch: &Scratch) -> (std::process::Child, PathBuf) {
    let raw = scratch.path("raw");
    let child = Command::new(BIN)
        .current_dir(&scratch.0)
        .args(["record", "--mode", "wall", "--raw-dir"])
        .arg(&raw)
        .args(["--", "sleep", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !std::fs::read_dir(&raw).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "started")))
    }) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "sleep never started profiling"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    (child, raw)
}

/// Checks what a signalled [`record_sleep_until_profiled`] run left: a
/// profile of sleep written, and the record saying which signal ended it;
/// returns the record.
pub fn assert_sleep_profiled_until(
    scratch: &Scratch,
    raw: &Path,
    stderr: &str,
    ended_by: &str,
) -> serde_json::Value {
    let lines = folded(&scratch.path("btprof.folded"));
    // Not a chance count: in wall mode each tick counts the sleeping thread,
    // and 300 ms or more were profiled; none is a profile not written.
    assert!(total(&lines) > 0, "{stderr}");
    assert!(
        lines.iter().all(|(f, _)| f[0].starts_with("sleep (")),
        "{lines:?}"
    );
    let record = raw_record(raw);
    assert_eq!(record["ended_by"], ended_by, "{record}");
    record
}

/// The profile of `programs/two_threads.c` against the CPU time its two
/// threads measured themselves.
pub struct Split {
    /// Samples in `alpha` and `beta` (or what they call).
    pub samples: (u64, u64),
    /// The CPU seconds `alpha`'s and `beta`'s threads measured.
    pub cpu: (f64, f64),
}

impl Split {
    /// From the profile's lines and the program's output.
    pub fn of(lines: &[(Vec<String>, u64)], stdout: &str) -> Split {
        let truth = measured(stdout);
        let cpu = |name: &str| {
            *truth
                .get(name)
                .unwrap_or_else(|| panic!("no CPU time of {name} in: {stdout}"))
        };
        Split {
            samples: (samples_in(lines, "alpha"), samples_in(lines, "beta")),
            cpu: (cpu("alpha"), cpu("beta")),
        }
    }

    /// `alpha`'s share of the two functions' samples, in percent.
    pub fn share(&self) -> f64 {
        let (a, b) = self.samples;
        100.0 * a as f64 / (a + b) as f64
    }

    /// `alpha`'s share of the two threads' CPU time, in percent.
    pub fn true_share(&self) -> f64 {
        let (a, b) = self.cpu;
        100.0 * a / (a + b)
    }

    /// The two functions' samples per CPU-second the threads measured.
    pub fn rate(&self) -> f64 {
        (self.samples.0 + self.samples.1) as f64 / (self.cpu.0 + self.cpu.1)
    }
}

/// The functions a complete stack of `programs/two_threads.c` passes
/// through: `main`, or a thread's start routine.
pub const SPLIT_ENTRIES: [&str; 3] = ["main", "start_alpha", "start_beta"];

/// Samples whose stack reaches one of [`SPLIT_ENTRIES`].
pub fn split_complete(lines: &[(Vec<String>, u64)]) -> u64 {
    samples_where(lines, |name| SPLIT_ENTRIES.contains(&name))
}
