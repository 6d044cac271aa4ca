//! The whole pipeline in one process: sample, symbolise, fold, render.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use btprof::profile::Builder;
use btprof::{Error, FoldOptions, Mode, Profile, Profiler, Stats};

/// One profiler per process: tests in this file take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[inline(never)]
fn pipeline_leaf(stop: &AtomicBool) -> u64 {
    let mut x = 7u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(i));
        }
    }
    x
}

#[inline(never)]
fn pipeline_caller(stop: &AtomicBool) -> u64 {
    std::hint::black_box(pipeline_leaf(stop)) + 1
}

/// Profiles a thread named `name` spinning in `pipeline_caller ->
/// pipeline_leaf` for `time`: of wall time in wall mode; in cpu mode, until
/// the sampled threads used that much CPU time, so a loaded machine only
/// makes the test slower.
fn profile_spinner(name: &str, mode: Mode, time: Duration) -> Profile {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let worker = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            btprof::register_current_thread();
            pipeline_caller(&stop2)
        })
        .unwrap();
    let profiler = Profiler::builder().hz(1000).mode(mode).start().unwrap();
    match mode {
        Mode::Wall => std::thread::sleep(time),
        Mode::Cpu => {
            let give_up = Instant::now() + Duration::from_secs(60);
            while profiler.progress().sampled_cpu_ns.load(Ordering::Relaxed)
                < time.as_nanos() as u64
                && Instant::now() < give_up
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let profile = profiler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    profile
}

#[test]
fn long_thread_names_are_kept_whole() {
    // Linux keeps 15 bytes of a thread's name; the thread registered its
    // full Rust name, which is what its stacks are rooted at.
    let name = "pipeline-spinner-with-a-long-name";
    let profile = profile_spinner(name, Mode::Cpu, Duration::from_millis(300));
    let lines = profile.folded_lines(FoldOptions::default());
    assert!(
        lines.iter().any(|l| l.starts_with(&format!("{name};"))),
        "no stack rooted at the full name:\n{}",
        lines.join("\n")
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with(&format!("{};", &name[..15]))),
        "a stack rooted at the cut name"
    );
}

/// The samples of the folded `lines` whose stack (the line without its
/// count) `keep` accepts.
fn samples_where(lines: &[&String], keep: impl Fn(&str) -> bool) -> u64 {
    lines
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap())
        .filter(|(stack, _)| keep(stack))
        .map(|(_, count)| count.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn folded_lines_name_the_thread_caller_and_leaf() {
    let profile = profile_spinner("pipe-spin", Mode::Cpu, Duration::from_millis(400));
    // Machine functions only: the leaf's loop has std's arithmetic
    // inlined into it (tests/inline_frames.rs checks inlined frames).
    let lines = profile.folded_lines(FoldOptions {
        hide_inlined: true,
        ..FoldOptions::default()
    });
    let spinner: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("pipe-spin;"))
        .collect();
    let samples = samples_where(&spinner, |_| true);
    // A sample per millisecond of the spinner's CPU time.
    let tid = profile
        .threads()
        .find(|t| t.name == "pipe-spin")
        .and_then(|t| t.tid)
        .expect("the spinner was seen, with its id");
    let cpu = profile
        .stats()
        .and_then(|s| s.cpu_of(tid))
        .unwrap_or_default();
    // Not random: the 400 ms of its CPU in whole periods, 2 off at the ends,
    // skips under 1%; 10% is 40 and catches a tenth lost. 300 shows the 60 s
    // wait did not give up first.
    assert!(
        samples > 300 && samples as f64 >= cpu.as_secs_f64() * 1000.0 * 0.9,
        "only {samples} samples of the spinning thread for {cpu:?} of CPU\n{:#?}",
        profile.stats()
    );
    // Nearly every sample of the spinner ends in the leaf under its caller:
    // the interrupted function is the leaf. (This package is optimised in
    // dev builds too, see Cargo.toml, so the leaf calls no helpers.)
    let with_leaf = samples_where(&spinner, |stack| {
        stack.ends_with("pipeline::pipeline_caller;pipeline::pipeline_leaf")
    });
    // Misses, Binomial(n, q), q its time in the caller's own instructions or
    // a failed walk: 5% of 400 has P under 1e-4 while q <= 2.0%.
    assert!(
        with_leaf * 100 >= samples * 95,
        "{with_leaf} of {samples}:\n{spinner:#?}"
    );
    // Lines are sorted and unique.
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, lines);
    let stats = profile.stats().expect("a recording has stats");
    assert_eq!(stats.samples, profile.total_samples());
    assert!(stats.ticks > 0 && stats.duration > Duration::ZERO);
}

#[test]
fn merged_threads_and_svg() {
    let profile = profile_spinner("pipe-svg", Mode::Wall, Duration::from_millis(300));
    let merged = profile.folded_lines(FoldOptions {
        merge_threads: true,
        ..FoldOptions::default()
    });
    assert!(merged.iter().all(|l| !l.starts_with("pipe-svg;")));
    assert!(merged.iter().any(|l| l.contains("pipeline::pipeline_leaf")));
    // Wall mode also samples threads that are blocked (this test's own
    // thread sleeps while profiling).
    assert!(profile.threads().len() >= 2);
    let mut svg = Vec::new();
    profile.write_flamegraph(&mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains("<svg"));
    assert!(svg.contains("pipeline_leaf"));
    assert!(
        svg.contains("samples over"),
        "title names samples and duration"
    );
}

#[test]
fn an_empty_profile_is_a_clear_error() {
    let profile = Builder::new().finish(Stats::new(&Default::default()));
    assert!(profile.is_empty());
    let err = profile.write_flamegraph(Vec::new()).unwrap_err();
    assert!(matches!(err, Error::EmptyProfile));
    assert!(err.to_string().contains("no samples"));
    let mut folded = Vec::new();
    profile.write_folded(&mut folded).unwrap();
    assert!(folded.is_empty());
}

#[test]
fn flamegraph_colours_are_stable_across_runs() {
    let a = profile_spinner("pipe-colour", Mode::Cpu, Duration::from_millis(200));
    let b = profile_spinner("pipe-colour", Mode::Cpu, Duration::from_millis(200));
    let fill_of = |p: &Profile| {
        let mut svg = Vec::new();
        p.write_flamegraph(&mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        // The <g> of a frame holds its <title> and then its rect's fill.
        let at = svg
            .find("pipeline::pipeline_leaf (")
            .expect("leaf frame in svg");
        let fill = &svg[at..];
        let fill = &fill[fill.find("fill=\"").unwrap() + 6..];
        fill[..fill.find('"').unwrap()].to_owned()
    };
    assert_eq!(fill_of(&a), fill_of(&b));
}
