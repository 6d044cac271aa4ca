//! Inline expansion end to end: a hot `#[inline(always)]` function is a
//! frame of its own in a recording, under its caller, with its file and
//! line in the model; folded output shows it by default and leaves it out
//! with `hide_inlined`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use btprof::{FoldOptions, Mode, Profile, Profiler};

const HOT_FIRST_LINE: u32 = line!();
/// The hot loop, always inlined into [`inline_caller`]: without inline
/// expansion its samples would all be named `inline_caller`.
#[inline(always)]
fn inline_hot(x: u64) -> u64 {
    let mut x = x;
    for i in 0..20_000 {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}
const HOT_LAST_LINE: u32 = line!();

#[inline(never)]
fn inline_caller(stop: &AtomicBool) -> u64 {
    let mut x = 3u64;
    while !stop.load(Ordering::Relaxed) {
        x = inline_hot(x);
    }
    x
}

const THREAD: &str = "inline-spin";

fn record() -> Profile {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let worker = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || inline_caller(&stop2))
        .unwrap();
    let profiler = Profiler::builder()
        .hz(1000)
        .mode(Mode::Cpu)
        .start()
        .unwrap();
    // CPU mode: the samples follow the CPU the spinner got, so a busy
    // machine gives fewer of them, not wrong ones.
    std::thread::sleep(Duration::from_millis(800));
    let profile = profiler.stop().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    profile
}

fn ends_with_fn(name: &str, function: &str) -> bool {
    name.strip_suffix(function)
        .is_some_and(|head| head.ends_with("::"))
}

#[test]
fn an_inlined_hot_function_is_a_frame_with_file_and_line_and_folds_both_ways() {
    let profile = record();
    let spinner: Vec<_> = profile
        .stacks()
        .filter(|s| s.thread() == Some(THREAD))
        .collect();
    let total: u64 = spinner.iter().map(|s| s.count()).sum();
    // Whole periods of the spinner's CPU in an 800 ms wall-clock sleep: not
    // random. 100 needs an eighth of a CPU meanwhile: it fails on a machine
    // starved that far (no chance tail), or when the spinner is not sampled.
    assert!(total >= 100, "only {total} samples of the spinner");

    // In the model: `inline_hot`, inlined, right after the machine frame
    // of `inline_caller`, with this file and a line of its body.
    let (mut under_caller, mut with_line) = (0u64, 0u64);
    for stack in &spinner {
        let frames: Vec<_> = stack
            .frame_ids()
            .iter()
            .map(|&id| profile.frame(id))
            .collect();
        let Some(at) = frames
            .iter()
            .position(|f| ends_with_fn(f.name, "inline_hot"))
        else {
            continue;
        };
        let hot = frames[at];
        assert!(hot.inlined, "{hot:?} is not marked inlined");
        let caller = frames[at.checked_sub(1).expect("inline_hot has a caller")];
        assert!(
            ends_with_fn(caller.name, "inline_caller") && !caller.inlined,
            "inline_hot under {caller:?}"
        );
        assert_eq!(hot.address, caller.address, "one chain, one address");
        assert!(caller.module.is_some(), "{caller:?} has no module");
        under_caller += stack.count();
        let in_body = hot.file.is_some_and(|f| f.ends_with("inline_frames.rs"))
            && hot
                .line
                .is_some_and(|l| (HOT_FIRST_LINE..=HOT_LAST_LINE).contains(&l));
        if in_body {
            with_line += stack.count();
        }
    }
    // Nearly all the spinner's time is in the loop. Samples outside it are
    // Binomial(total, q), q its time outside (a load of `stop` per 20,000
    // rounds): at 100 samples, more than 20 has P under 1e-4 for q to 8.6%.
    assert!(
        under_caller * 10 >= total * 8,
        "inline_hot in {under_caller} of {total} samples"
    );
    // Each address has one line: samples off the body are Binomial(n, q), q
    // the loop's time at instructions whose line lies outside it (none
    // expected); at n = 80, more than 8 has P under 1e-4 for q to 2.3%.
    assert!(
        with_line * 10 >= under_caller * 9,
        "file and line in {with_line} of {under_caller} inline_hot samples"
    );

    // Folded, by default: the inlined function is an ordinary frame.
    let lines = profile.folded_lines(FoldOptions::default());
    let unique: HashSet<&str> = lines
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    assert_eq!(unique.len(), lines.len(), "a folded line appears twice");
    let count = |l: &String| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap();
    let shown: u64 = lines
        .iter()
        .filter(|l| {
            l.starts_with(THREAD) && l.contains("::inline_caller;") && l.contains("::inline_hot")
        })
        .map(count)
        .sum();
    assert_eq!(shown, under_caller);

    // Hidden: no inline_hot anywhere, its samples on inline_caller as leaf
    // (unless something else is inlined into it too), nothing lost.
    let hidden = profile.folded_lines(FoldOptions {
        hide_inlined: true,
        ..FoldOptions::default()
    });
    assert!(
        hidden.iter().all(|l| !l.contains("inline_hot")),
        "{hidden:?}"
    );
    let sum = |lines: &[String]| lines.iter().map(count).sum::<u64>();
    assert_eq!(sum(&hidden), sum(&lines));
    let on_caller: u64 = hidden
        .iter()
        .filter(|l| l.starts_with(THREAD))
        .filter(|l| ends_with_fn(l.rsplit_once(' ').unwrap().0, "inline_caller"))
        .map(count)
        .sum();
    assert!(on_caller >= under_caller, "{on_caller} < {under_caller}");
    let unique: HashSet<&str> = hidden
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    assert_eq!(unique.len(), hidden.len(), "a folded line appears twice");
}
