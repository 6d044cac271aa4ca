//! End-to-end tests of comparisons written as files: the differential
//! flamegraphs of `btprof diff`, and two-count ("differential folded")
//! files, read from what `inferno-diff-folded` writes and written as it
//! writes them, drawn as `inferno-flamegraph` draws them.

mod run_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use btprof_testkit::svg::flamegraph_frames;
use btprof_testkit::temp_dir::TempDir;
use run_support::{path_str, run_in, Run};
use serde_json::Value;

/// Runs `btprof ARGS` in `dir`.
fn btprof(dir: &TempDir, args: &[&str]) -> Run {
    run_in(dir, args)
}

/// A fixture folded file of another tool's, from `tests/fixtures`.
fn fixture(kind: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(kind)
        .join(name)
}

/// `(name, samples, x, width)` of every frame of a flamegraph SVG: all
/// but its height on the page, since btprof's differential graphs have a
/// subtitle (what the colours mean) that moves every frame down.
fn placed_frames(svg: &str) -> Vec<(String, String, String, String)> {
    flamegraph_frames(svg)
        .into_iter()
        .map(|(name, samples, x, _y, width)| (name, samples, x, width))
        .collect()
}

/// Functions of a JSON report or diff, by name: the same data whatever
/// order equal rows came in.
fn functions_by_name(run: &Run, key: &str) -> Vec<Value> {
    let mut rows = run.json()[key].as_array().expect(key).clone();
    rows.sort_by_key(|row| row["name"].to_string());
    rows
}

#[test]
fn differential_flamegraphs_are_written() {
    let dir = TempDir::new("btprof-compare-test", "flamegraphs");
    let base = dir.file("base.folded", "t;main;old 400\nt;main;keep 600\n");
    let new = dir.file("new.folded", "t;main;fresh 400\nt;main;keep 600\n");
    let (svg, negated) = (dir.path("diff.svg"), dir.path("negated.svg"));
    let run = btprof(
        &dir,
        &[
            "diff",
            &base,
            &new,
            "-o",
            path_str(&svg),
            "--negated-output",
            path_str(&negated),
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stdout.contains("fresh [new]") && run.stdout.contains("old [vanished]"));
    assert!(
        run.stdout.contains("new functions (1): fresh"),
        "{}",
        run.describe()
    );
    let diff_svg = fs::read_to_string(&svg).expect("diff.svg written");
    let negated_svg = fs::read_to_string(&negated).expect("negated.svg written");
    assert!(diff_svg.contains("<svg") && negated_svg.contains("<svg"));
    assert!(diff_svg.contains("fresh (400 samples") && !diff_svg.contains("old ("));
    assert!(
        negated_svg.contains("old (400 samples"),
        "vanished code shows"
    );
    assert!(
        !dir.path("diff.base.svg").exists(),
        "the companion was named"
    );
    // Each frame says how its total changed, leaves and callers alike.
    assert!(diff_svg.contains("<title>main (1,000 samples, 100.00% \u{2192} 100.00% of samples"));
    assert!(diff_svg.contains("fresh (400 samples, 0.00% \u{2192} 40.00% of samples"));

    // Asked for the graph alone, a diff where code vanished writes the
    // base run's graph beside it, and says why.
    let run = btprof(&dir, &["diff", &base, &new, "-o", "only.svg"]);
    run.assert_stderr(
        1,
        "only.base.svg: the base run's stacks, where the 1 function(s)",
    );
    let companion = fs::read_to_string(dir.path("only.base.svg")).expect("companion");
    assert!(companion.contains("old (400 samples, 40.00% \u{2192} 0.00%"));
    // Where nothing vanished, there is no companion to write.
    let run = btprof(&dir, &["diff", &new, &new, "-o", "same.svg"]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(dir.path("same.svg").exists() && !dir.path("same.base.svg").exists());
}

#[test]
fn two_count_files_from_inferno_read_as_the_runs_they_compare() {
    let dir = TempDir::new("btprof-compare-test", "two_counts");
    let pairs = [
        (
            fixture("compare", "base.folded"),
            fixture("compare", "new.folded"),
        ),
        (
            fixture("folded", "awkward-names.folded"),
            fixture("folded", "unsorted-duplicates.folded"),
        ),
    ];
    for (base, new) in pairs {
        let (base, new) = (path_str(&base), path_str(&new));
        // What `inferno-diff-folded BASE NEW > two.folded` writes: its
        // library on the files, at its defaults.
        let mut text = Vec::new();
        inferno::differential::from_files(Default::default(), base, new, &mut text).unwrap();
        let two = dir.file("two.folded", std::str::from_utf8(&text).unwrap());

        // The diff of the one file is the diff of the two it was made from.
        let of_two = btprof(&dir, &["diff", &two, "--format", "json"]);
        let of_pair = btprof(&dir, &["diff", base, new, "--format", "json"]);
        assert_eq!(of_two.code, of_pair.code, "{}", of_two.describe());
        assert!(matches!(of_two.code, Some(0 | 1)), "{}", of_two.describe());
        assert_eq!(
            functions_by_name(&of_two, "functions"),
            functions_by_name(&of_pair, "functions"),
            "{base} {new}"
        );

        // A report reads the new run, and says so.
        let report = btprof(&dir, &["report", &two, "--format", "json", "--top", "0"]);
        let report_new = btprof(&dir, &["report", new, "--format", "json", "--top", "0"]);
        report.assert_stderr(0, "read the second count, the new run's");
        assert_eq!(report.json()["samples"], report_new.json()["samples"]);
        assert_eq!(
            functions_by_name(&report, "top_by_total"),
            functions_by_name(&report_new, "top_by_total")
        );

        // A flamegraph of it is differential, with the frames
        // inferno-flamegraph draws of the same file.
        let svg = dir.path("two.svg");
        let drawn = btprof(&dir, &["flamegraph", &two, "-o", path_str(&svg)]);
        drawn.assert_stdout(0, &["differential"]);
        let mut theirs = Vec::new();
        let mut options = inferno::flamegraph::Options::default();
        inferno::flamegraph::from_reader(&mut options, &text[..], &mut theirs).unwrap();
        let ours = fs::read_to_string(&svg).unwrap();
        assert_eq!(
            placed_frames(&ours),
            placed_frames(&String::from_utf8(theirs).unwrap()),
            "{base} {new}"
        );
        assert!(ours.contains("(base) \u{2192} "), "title names the base");
    }

    // One file of one count per line is not a comparison.
    let one = btprof(
        &dir,
        &["diff", path_str(&fixture("compare", "base.folded"))],
    );
    one.assert_stderr(2, "has one count per line: give the new profile too");
}

#[test]
fn the_comparison_is_written_as_the_two_count_file_inferno_writes() {
    let dir = TempDir::new("btprof-compare-test", "folded_out");
    let (base, new) = (
        fixture("compare", "base.folded"),
        fixture("compare", "new.folded"),
    );
    let (base, new) = (path_str(&base), path_str(&new));
    let (folded, svg) = (dir.path("diff.folded"), dir.path("diff.svg"));
    let run = btprof(
        &dir,
        &[
            "diff",
            base,
            new,
            "--folded-out",
            path_str(&folded),
            "-o",
            path_str(&svg),
        ],
    );
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let written = fs::read_to_string(&folded).expect("the two-count file");
    assert!(run.stderr.contains("wrote") && run.stderr.contains("diff.folded"));

    // Line for line what `inferno-diff-folded --normalize BASE NEW` writes
    // (base 1,340 samples scaled to the new run's 1,350), sorted.
    let mut theirs = Vec::new();
    let normalize = inferno::differential::Options {
        normalize: true,
        strip_hex: false,
    };
    inferno::differential::from_files(normalize, base, new, &mut theirs).unwrap();
    let mut theirs: Vec<_> = std::str::from_utf8(&theirs).unwrap().lines().collect();
    theirs.sort_unstable();
    assert_eq!(written.lines().collect::<Vec<_>>(), theirs);

    // inferno-flamegraph draws the file with the frames of btprof's own
    // differential graph (whose subtitle moves its frames down).
    let mut drawn = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    inferno::flamegraph::from_reader(&mut options, written.as_bytes(), &mut drawn).unwrap();
    let ours = fs::read_to_string(&svg).unwrap();
    assert_eq!(
        placed_frames(&String::from_utf8(drawn).unwrap()),
        placed_frames(&ours)
    );

    // btprof reads it back as the comparison.
    let again = btprof(&dir, &["diff", path_str(&folded)]);
    again.assert_stdout(1, &["REGRESSED", "render"]);

    // FlameGraph's Perl script, where it is installed.
    match Command::new("flamegraph.pl").arg(&folded).output() {
        Ok(out) => {
            let svg = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "flamegraph.pl failed: {out:?}");
            for frame in ["render", "parse", "fresh"] {
                assert!(svg.contains(&format!("<title>{frame} (")), "{frame}\n{svg}");
            }
            println!("flamegraph.pl drew the two-count file");
        }
        Err(_) => println!("NOT CHECKED: FlameGraph's flamegraph.pl is not installed"),
    }
}

/// inferno's own two-count file: `tests/data/diff-folded/results/default.txt`
/// of github.com/jonhoo/inferno (release 0.12.8), what `inferno-diff-folded
/// before.txt after.txt` writes for its test corpus, vendored unchanged.
fn inferno_two_count_file() -> PathBuf {
    fixture("difffolded", "inferno-default.folded")
}

#[test]
fn inferno_s_own_two_count_file_is_read_by_report_diff_flamegraph_and_export() {
    let dir = TempDir::new("btprof-compare-test", "inferno_corpus");
    let file = inferno_two_count_file();
    let text = fs::read_to_string(&file).unwrap();
    // The second column's samples, and the first's, summed by hand.
    let column = |i: usize| -> u64 {
        text.lines()
            .map(|l| {
                l.split(' ')
                    .rev()
                    .nth(1 - i)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    let (before, after) = (column(0), column(1));
    assert_eq!((before, after), (65, 80), "the vendored file changed");

    // A report is of the second count, and says so.
    let report = btprof(&dir, &["report", path_str(&file), "--format", "json"]);
    report.assert_stderr(0, "read the second count, the new run's");
    assert_eq!(report.json()["samples"], after);

    // The diff of its two columns: `write;...;__fget_light_[k]` went from
    // 0 to 12 of the new run's 80 samples, 15 points of self share.
    let diff = btprof(&dir, &["diff", path_str(&file), "--format", "json"]);
    assert!(matches!(diff.code, Some(0 | 1)), "{}", diff.describe());
    let json = diff.json();
    let runs = |side: &str| json[side][0]["samples"].as_u64();
    assert_eq!((runs("base"), runs("new")), (Some(before), Some(after)));
    let fget = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "__fget_light_[k]")
        .expect("__fget_light_[k] compared");
    assert_eq!(fget["presence"], "new", "{fget}");

    // The flamegraph is differential, with the frames inferno draws.
    let svg = dir.path("inferno.svg");
    let drawn = btprof(&dir, &["flamegraph", path_str(&file), "-o", path_str(&svg)]);
    drawn.assert_stdout(0, &["differential"]);
    let mut theirs = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    inferno::flamegraph::from_reader(&mut options, text.as_bytes(), &mut theirs).unwrap();
    let ours = fs::read_to_string(&svg).unwrap();
    assert_eq!(
        placed_frames(&ours),
        placed_frames(&String::from_utf8(theirs).unwrap())
    );

    // inferno's quirks on two-count lines: a `#` comment, blank frames
    // (which inferno's collapsers write for `[unknown]`) and counts
    // written as decimals read as the file they stand for.
    let quirky: String = std::iter::once("# two-count file, hand-edited\n".to_owned())
        .chain(text.lines().map(|l| {
            let (stack, counts) = l.split_once(' ').unwrap();
            let counts = counts.replace(' ', ".0 ");
            format!("{} {counts}.0\n", stack.replace("[unknown]", ""))
        }))
        .collect();
    assert!(
        quirky.contains("dd;;read ") && quirky.contains(".0 "),
        "{quirky}"
    );
    let quirky = dir.file("quirky.folded", &quirky);
    let of_quirky = btprof(&dir, &["diff", &quirky, "--format", "json"]);
    assert_eq!(of_quirky.code, diff.code, "{}", of_quirky.describe());
    assert_eq!(
        functions_by_name(&of_quirky, "functions"),
        functions_by_name(&diff, "functions")
    );

    // An export is of the second count too, and says so.
    let pprof = dir.path("inferno.pb.gz");
    let export = btprof(&dir, &["export", path_str(&file), "-o", path_str(&pprof)]);
    export.assert_stderr(0, "read the second count, the new run's");
    assert!(fs::metadata(&pprof).unwrap().len() > 0);
}
