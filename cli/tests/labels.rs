//! Labels end to end: `btprof --pid-self` runs its workload's calls under
//! `step=NAME` labels, and the labels reach the folded file, the
//! flamegraph and the dumps (with `--label-frames`) and the pprof file
//! (always), where `go tool pprof` reads them.

mod go_support;
mod run_support;

use std::collections::BTreeMap;
use std::fs;

use btprof_testkit::svg::flamegraph_frames;
use btprof_testkit::temp_dir::TempDir;

use go_support::{go, go_pprof};
use run_support::run_in;

/// Each workload function whose samples are checked, and the `step` label
/// its calls run under.
const STEPS: [(&str, &str); 4] = [
    ("alpha", "alpha"),
    ("beta", "beta"),
    ("sort_in_libc", "sort"),
    ("chain_inner", "chain"),
];

/// Records the workload for 2 s into `dir`, with `extra` arguments.
fn record(dir: &TempDir, extra: &[&str]) {
    let mut args = vec![
        "--pid-self",
        "--duration",
        "2s",
        "--quiet",
        "--folded",
        "l.folded",
        "--output",
        "l.svg",
        "--pprof",
        "l.pb.gz",
    ];
    args.extend_from_slice(extra);
    let run = run_in(dir, &args);
    // 1: the self-check may fail on a loaded machine; the files are
    // written either way.
    assert!(matches!(run.code, Some(0 | 1)), "{}", run.describe());
}

/// `(frames, count)` of each line of a folded file.
fn folded_lines(dir: &TempDir) -> Vec<(Vec<String>, u64)> {
    let text = fs::read_to_string(dir.path("l.folded")).unwrap();
    text.lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            let frames = stack.split(';').map(str::to_owned).collect();
            (frames, count.parse().unwrap())
        })
        .collect()
}

#[test]
fn label_frames_put_each_call_under_its_label_in_folded_and_svg() {
    let dir = TempDir::new("btprof-labels", "label_frames");
    record(
        &dir,
        &[
            "--label-frames",
            "--dump-every",
            "1s",
            "--dump-dir",
            "dumps",
        ],
    );
    let lines = folded_lines(&dir);
    for (function, step) in STEPS {
        let frame = format!("[label: step={step}]");
        let leaf = format!("btprof_cli::workload::{function}");
        let (mut all, mut labelled) = (0, 0);
        for (frames, count) in &lines {
            if frames.contains(&leaf) {
                all += count;
                // The label frame sits right under the thread root.
                if frames[1] == frame {
                    labelled += count;
                }
            }
        }
        // A survival bar, not random: each function takes a tenth or more
        // of a worker's CPU, some 200 samples over the 2 s on idle cores;
        // beside CPU hogs a worker may get a fraction of a core.
        assert!(all >= 5, "{function}: {all} samples\n{lines:?}");
        // The sampler gives each sample the labels its thread had when
        // it was taken: every call is wholly inside its label's scope.
        assert_eq!(
            labelled, all,
            "{function}: {labelled} of {all} under {frame}"
        );
    }
    // The windows dumped meanwhile are split alike.
    let dumped: Vec<String> = fs::read_dir(dir.path("dumps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "folded"))
        .map(|p| fs::read_to_string(p).unwrap())
        .collect();
    assert!(!dumped.is_empty(), "no dump written");
    for text in &dumped {
        assert!(text.contains(";[label: step="), "{text}");
    }
    let svg = fs::read_to_string(dir.path("l.svg")).unwrap();
    let frames = flamegraph_frames(&svg);
    for (_, step) in STEPS {
        let frame = format!("[label: step={step}]");
        assert!(
            frames.iter().any(|f| f.0 == frame),
            "no {frame} in the flamegraph"
        );
    }
}

#[test]
fn pprof_carries_the_labels_without_label_frames_in_the_folded_file() {
    let dir = TempDir::new("btprof-labels", "pprof");
    record(&dir, &[]);
    let lines = folded_lines(&dir);
    assert!(
        lines
            .iter()
            .all(|(frames, _)| !frames[1].starts_with("[label:")),
        "a label frame without --label-frames: {lines:?}"
    );
    let Some(go) = go("the labels of btprof's pprof output were") else {
        return;
    };
    let pb = dir.path("l.pb.gz");
    let raw = go_pprof(&go, &["-raw"], &pb);
    for (_, step) in STEPS {
        assert!(raw.contains(&format!("step:[{step}]")), "{raw}");
    }
    // Samples per label value, as pprof counts them, are the folded
    // file's samples of the stacks in each label's functions.
    let tags = go_pprof(&go, &["-tags", "-sample_index=samples"], &pb);
    let step_tags: BTreeMap<String, u64> = tags
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("step:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            // "   132.0 (26.94%): alpha"
            let (count, value) = l.trim().split_once(' ').unwrap();
            let value = value.rsplit_once(": ").unwrap().1;
            (value.to_owned(), count.parse::<f64>().unwrap() as u64)
        })
        .collect();
    assert_eq!(
        step_tags.keys().map(String::as_str).collect::<Vec<_>>(),
        ["alpha", "beta", "chain", "sort"],
        "{tags}"
    );
    for (function, step) in STEPS {
        let leaf = format!("btprof_cli::workload::{function}");
        let in_function: u64 = lines
            .iter()
            .filter(|(frames, _)| frames.contains(&leaf))
            .map(|(_, count)| count)
            .sum();
        // `chain` also holds chain_outer's and chain_middle's own
        // samples, and every step a few of worker_main's between calls.
        assert!(
            step_tags[step] >= in_function,
            "{step}: {} tagged, {in_function} in {function}\n{tags}",
            step_tags[step]
        );
    }
}
