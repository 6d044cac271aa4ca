//! btprof among other tools: it reads what they write (the quirky files in
//! `tests/fixtures/`), draws what inferno draws, writes pprof that `go tool
//! pprof` reads, and never destroys a user's file when a write fails.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use btprof_testkit::svg::flamegraph_frames;
use btprof_testkit::temp_dir::TempDir;

use serde_json::Value;

mod go_support;
use go_support::{go, go_pprof};

const BIN: &str = env!("CARGO_BIN_EXE_btprof");

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(kind)
}

/// Every fixture of a folder, sorted.
fn fixture_files(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(fixtures(kind))
        .expect("fixture folder")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "fixtures missing in {kind}");
    files
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    raw_stderr: Vec<u8>,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit code: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", self.describe()))
    }
}

fn finish(output: Output) -> Run {
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        raw_stderr: output.stderr,
    }
}

fn btprof(args: &[&str]) -> Run {
    finish(Command::new(BIN).args(args).output().expect("run btprof"))
}

fn btprof_stdin(args: &[&str], input: &[u8]) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run btprof");
    let mut stdin = child.stdin.take().unwrap();
    // A command that fails before reading its input closes the pipe.
    if let Err(e) = stdin.write_all(input) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    finish(child.wait_with_output().unwrap())
}

/// Runs btprof with files limited to `bytes` (RLIMIT_FSIZE): a write past
/// it fails with EFBIG, as on a full disk. stdout and stderr are pipes,
/// which the limit does not cover.
fn btprof_with_file_limit(args: &[&str], bytes: u64) -> Run {
    let mut command = Command::new(BIN);
    command.args(args);
    // SAFETY: between fork and exec only async-signal-safe calls
    // (setrlimit, signal) are made; nothing is allocated.
    unsafe {
        command.pre_exec(move || {
            // Without this, the write past the limit kills the process
            // with SIGXFSZ instead of failing.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    finish(command.output().expect("run btprof"))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Function -> (self, total) samples from `btprof report --format json`.
fn report_functions(run: &Run) -> BTreeMap<String, (u64, u64)> {
    let v = run.json();
    v["top_by_total"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_owned(),
                (
                    f["self_samples"].as_u64().unwrap(),
                    f["total_samples"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

fn report(file: &str, extra: &[&str]) -> (Run, BTreeMap<String, (u64, u64)>, u64) {
    let mut args = vec!["report", "--format", "json", "--top", "0"];
    args.extend(extra);
    args.push(file);
    let run = btprof(&args);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let functions = report_functions(&run);
    let total = run.json()["samples"].as_u64().unwrap();
    (run, functions, total)
}

#[test]
fn every_fixture_passes_report_flamegraph_and_diff_against_itself() {
    let dir = TempDir::new("btprof-interop", "every_fixture");
    let mut files = fixture_files("folded");
    files.extend(fixture_files("raw"));
    for file in &files {
        let f = s(file);
        let run = btprof(&["report", f]);
        assert_eq!(run.code, Some(0), "report {f}\n{}", run.describe());
        let svg = dir.path("out.svg");
        let run = btprof(&["flamegraph", f, "-o", s(&svg)]);
        assert_eq!(run.code, Some(0), "flamegraph {f}\n{}", run.describe());
        assert!(fs::read_to_string(&svg).unwrap().contains("</svg>"));
        let run = btprof(&["diff", f, f, "-o", s(&dir.path("diff.svg"))]);
        assert_eq!(run.code, Some(0), "diff {f} {f}\n{}", run.describe());
        assert!(run.stdout.contains("no regression"), "{}", run.describe());
    }
}

#[test]
fn svg_frames_match_inferno_for_every_fixture() {
    let dir = TempDir::new("btprof-interop", "svg_parity");
    for file in fixture_files("folded") {
        let out = dir.path("btprof.svg");
        let run = btprof(&["flamegraph", s(&file), "-o", s(&out)]);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        let ours = flamegraph_frames(&fs::read_to_string(&out).unwrap());

        // What `inferno-flamegraph FILE` draws: its library on the file,
        // at its defaults.
        // inferno refuses input that is not UTF-8 altogether; btprof reads
        // it with U+FFFD for the bad bytes, so inferno gets that text.
        let bytes = fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let mut theirs_svg = Vec::new();
        let mut options = inferno::flamegraph::Options::default();
        inferno::flamegraph::from_reader(&mut options, text.as_bytes(), &mut theirs_svg).unwrap();
        let theirs: Vec<_> = flamegraph_frames(&String::from_utf8(theirs_svg).unwrap())
            .into_iter()
            // inferno draws an empty frame with no name; btprof names it
            // [unknown], so that a frame without a symbol still has a name to
            // diff and search by. Everything else is equal.
            .map(|(name, c, x, y, w)| {
                let name = if name.is_empty() {
                    "[unknown]".to_owned()
                } else {
                    name
                };
                (name, c, x, y, w)
            })
            .collect();
        let mut theirs = theirs;
        theirs.sort();
        assert!(ours.len() > 2, "{file:?}: no frames parsed");
        assert_eq!(ours, theirs, "{file:?}: frames differ from inferno's");
    }
}

#[test]
fn min_width_is_inferno_percent_of_the_width() {
    // 1 sample in 100,000: 0.001 % wide. inferno's default (0.01 %)
    // leaves it out, 0 keeps it, and a 5 % cut leaves out a 3 % frame.
    let dir = TempDir::new("btprof-interop", "min_width");
    let file = dir.path("narrow.folded");
    // `small` is 0.05 % wide: kept at inferno's 0.01 % default, lost at
    // the 0.1 btprof used to pass.
    fs::write(
        &file,
        "main;wide 96949\nmain;narrow 1\nmain;small 50\nmain;three 3000\n",
    )
    .unwrap();
    let draw = |extra: &[&str]| {
        let out = dir.path("o.svg");
        let mut args = vec!["flamegraph", s(&file), "-o", s(&out)];
        args.extend(extra);
        let run = btprof(&args);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        let names: Vec<String> = flamegraph_frames(&fs::read_to_string(out).unwrap())
            .into_iter()
            .map(|f| f.0)
            .collect();
        names
    };
    let default = draw(&[]);
    assert!(!default.contains(&"narrow".to_owned()) && default.contains(&"three".to_owned()));
    assert!(default.contains(&"small".to_owned()), "{default:?}");
    assert!(!draw(&["--min-width", "0.1"]).contains(&"small".to_owned()));
    assert!(draw(&["--min-width", "0"]).contains(&"narrow".to_owned()));
    assert!(!draw(&["--min-width", "5"]).contains(&"three".to_owned()));
    let help = btprof(&["flamegraph", "--help"]).stdout;
    assert!(
        help.contains("percentage of the graph's width") && help.contains("0.01"),
        "{help}"
    );
}

#[test]
fn empty_frames_read_as_unknown() {
    let f = fixtures("folded").join("perf-all-empty-frames.folded");
    let (_, functions, total) = report(s(&f), &[]);
    assert_eq!(total, 12 + 40 + 3 + 5 + 10 + 7 + 2);
    // `main;;compute` 12, `[unknown];;;read` 3, `main;` 5, `__libc_start_main;  ` 10,
    // `do_idle_[k];` 7, `;burn` 2: every stack with an empty frame.
    assert_eq!(
        functions["[unknown]"],
        (5 + 10 + 7, 12 + 3 + 5 + 10 + 7 + 2)
    );
    assert!(!functions.contains_key(""));
}

#[test]
fn decimal_counts_are_exact_and_fractions_rounded_with_one_warning() {
    let f = fixtures("folded").join("decimal-counts.folded");
    let (run, functions, total) = report(s(&f), &[]);
    assert_eq!(functions["tokenize"].0, 31);
    assert_eq!(functions["build_tree"].0, 10);
    assert_eq!(functions["render"].0, 14);
    assert_eq!(functions["layout"].0, 7);
    assert_eq!(functions["idle"].0, 2);
    assert_eq!(total, 31 + 10 + 14 + 7 + 2);
    assert_eq!(
        run.stderr.matches("warning").count(),
        1,
        "{}",
        run.describe()
    );
    assert!(
        run.stderr
            .contains("2 line(s) had fractional sample counts"),
        "{}",
        run.describe()
    );
}

#[test]
fn comment_lines_are_skipped() {
    let f = fixtures("folded").join("austin-header.folded");
    let (_, functions, total) = report(s(&f), &["--skip-root"]);
    assert_eq!(total, 1500 + 300 + 900);
    assert_eq!(functions["work (app.py):7"].0, 1500);
    assert!(
        !functions.keys().any(|k| k.starts_with('#')),
        "{functions:?}"
    );
}

#[test]
fn crlf_spaces_and_duplicates_read_as_meant() {
    let (_, functions, total) = report(s(&fixtures("folded").join("crlf-and-spaces.folded")), &[]);
    assert_eq!(total, 12);
    assert_eq!(functions["b"], (3, 3));
    assert_eq!(functions["c"], (5, 5));
    let (_, functions, total) = report(
        s(&fixtures("folded").join("unsorted-duplicates.folded")),
        &[],
    );
    assert_eq!(total, 15);
    assert_eq!(functions["leaf"], (8, 8));
    assert_eq!(functions["b"], (7, 7));
}

#[test]
fn standard_input_is_read_by_report_flamegraph_diff_and_export() {
    let dir = TempDir::new("btprof-interop", "stdin");
    let file = fixtures("folded").join("awkward-names.folded");
    let text = fs::read(&file).unwrap();
    let from_file = report(s(&file), &[]).1;
    let run = btprof_stdin(&["report", "--format", "json", "--top", "0", "-"], &text);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(report_functions(&run), from_file);
    assert_eq!(run.json()["source"], "<stdin>");

    let svg = dir.path("in.svg");
    let run = btprof_stdin(&["flamegraph", "-", "-o", s(&svg)], &text);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(svg.is_file());
    let run = btprof_stdin(&["flamegraph", "-"], &text);
    assert_eq!(
        run.code,
        Some(2),
        "no output name for stdin: {}",
        run.describe()
    );

    let run = btprof_stdin(&["diff", s(&file), "-"], &text);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run = btprof_stdin(&["diff", "-", s(&file)], &text);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run = btprof_stdin(&["diff", "-", "-"], &text);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.contains("only one side"), "{}", run.describe());

    let pb = dir.path("in.pb.gz");
    let run = btprof_stdin(&["export", "-", "-o", s(&pb)], &text);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(pb.is_file());
}

#[test]
fn perf_script_output_is_read_without_a_collapse_step() {
    let dir = TempDir::new("btprof-interop", "perf_script");
    let perf = fixtures("raw").join("perf-script.txt");
    let (run, functions, _) = report(s(&perf), &[]);
    assert!(
        run.stderr.contains("collapsed with inferno"),
        "{}",
        run.describe()
    );
    // The program's call chain: main -> inner / helper_2, under the
    // command name and libc's start code.
    assert!(
        functions["inner"].0 > 0 && functions["helper_2"].0 > 0,
        "{functions:?}"
    );
    assert_eq!(functions["main"].0, 0);
    assert_eq!(functions["burn"].1, functions["main"].1);

    // Piped, as `perf script | btprof report -`.
    let piped = btprof_stdin(
        &["report", "--format", "json", "--top", "0", "-"],
        &fs::read(&perf).unwrap(),
    );
    assert_eq!(report_functions(&piped), functions);

    let svg = dir.path("perf.svg");
    let run = btprof(&["flamegraph", s(&perf), "-o", s(&svg)]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(fs::read_to_string(&svg).unwrap().contains("helper_2 ("));
    let run = btprof(&["diff", s(&perf), s(&perf)]);
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

#[test]
fn malformed_input_names_file_line_and_text_and_exits_2() {
    let bad = fixtures("malformed").join("garbage-line.folded");
    for command in [
        &["report"][..],
        &["flamegraph", "-o", "/dev/null"],
        &["diff", s(&bad)],
    ] {
        let mut args = command.to_vec();
        args.push(s(&bad));
        assert_refused(
            &args,
            &["garbage-line.folded:3: ", "this line has no count"],
        );
    }
    // --lenient: skipped, counted, named.
    let (run, functions, total) = report(s(&bad), &["--lenient"]);
    assert_eq!(total, 12);
    assert_eq!(functions.len(), 4);
    assert!(
        run.stderr.contains("skipped 1 malformed line(s)") && run.stderr.contains(":3: "),
        "{}",
        run.describe()
    );

    let huge = fixtures("malformed").join("huge-count.folded");
    assert_refused(&["report", s(&huge)], &["huge-count.folded:2: ", "2^53"]);
    let mixed = fixtures("malformed").join("mixed-counts.folded");
    for command in [
        &["report"][..],
        &["flamegraph", "-o", "/dev/null"],
        &["diff"],
    ] {
        let mut args = command.to_vec();
        args.push(s(&mixed));
        assert_refused(
            &args,
            &[
                "mixed-counts.folded:2: ",
                "one sample count at the end, but the first stack (line 1) had two",
            ],
        );
    }
}

/// Runs `btprof ARGS` and asserts it refused its input (exit 2) with an
/// error that says each of `says`.
fn assert_refused(args: &[&str], says: &[&str]) {
    let run = btprof(args);
    assert_eq!(run.code, Some(2), "{args:?}\n{}", run.describe());
    for part in says {
        assert!(run.stderr.contains(part), "{part:?}\n{}", run.describe());
    }
}

#[test]
fn binary_input_is_escaped_in_errors_never_echoed_raw() {
    let bin = fixtures("malformed").join("binary.bin");
    let run = btprof(&["report", s(&bin)]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(
        run.stderr.contains("\\x7fELF\\x02\\x01"),
        "{}",
        run.describe()
    );
    assert!(run.stderr.contains("\\x1b[31m"), "{}", run.describe());
    let raw_control = run
        .raw_stderr
        .iter()
        .any(|&b| (b < 0x20 && b != b'\n') || b == 0x7f);
    assert!(
        !raw_control,
        "raw control bytes on stderr: {:?}",
        run.raw_stderr
    );
}

/// A folded file big enough that every output of it is over 4 KiB.
fn big_folded(dir: &TempDir) -> PathBuf {
    let mut text = String::new();
    for i in 0..400 {
        text.push_str(&format!(
            "main;module_{};function_number_{i} {}\n",
            i % 7,
            i + 1
        ));
    }
    let path = dir.path("big.folded");
    fs::write(&path, text).unwrap();
    path
}

/// Runs `args` with files limited to 4 KiB, so writing the output fails
/// midway, and checks that `existing` kept its contents and that nothing
/// else was left in the directory.
fn check_failed_write_keeps(dir: &TempDir, args: &[&str], existing: &[&Path]) {
    let before: Vec<(PathBuf, Vec<u8>)> = existing
        .iter()
        .map(|p| {
            fs::write(p, format!("precious {}", p.display())).unwrap();
            (p.to_path_buf(), fs::read(p).unwrap())
        })
        .collect();
    let entries = dir.entries();
    let run = btprof_with_file_limit(args, 4096);
    assert_eq!(
        run.code,
        Some(2),
        "{args:?} should fail\n{}",
        run.describe()
    );
    for (path, contents) in before {
        let after = fs::read(&path).unwrap();
        assert!(
            after == contents,
            "{path:?} changed by {args:?}: {} bytes before, {} after",
            contents.len(),
            after.len()
        );
    }
    assert_eq!(dir.entries(), entries, "{args:?} left files behind");
}

#[test]
fn a_failed_write_never_changes_an_existing_file() {
    let dir = TempDir::new("btprof-interop", "failed_write");
    let input = big_folded(&dir);
    let i = s(&input);
    let out = dir.path("out.svg");
    check_failed_write_keeps(&dir, &["flamegraph", i, "-o", s(&out)], &[&out]);
    check_failed_write_keeps(&dir, &["diff", i, i, "-o", s(&out)], &[&out]);
    let negated = dir.path("neg.svg");
    check_failed_write_keeps(
        &dir,
        &["diff", i, i, "--negated-output", s(&negated)],
        &[&negated],
    );
    let pb = dir.path("out.pb.gz");
    check_failed_write_keeps(&dir, &["export", i, "-o", s(&pb)], &[&pb]);

    // A profiling run: all outputs are written completely, then renamed
    // together; one failure leaves every old file.
    let folded = dir.path("run.folded");
    let sidecar = dir.path("run.json");
    check_failed_write_keeps(
        &dir,
        &[
            "--pid-self",
            "--duration",
            "300ms",
            "--quiet",
            "--folded",
            s(&folded),
            "--output",
            s(&out),
            "--pprof",
            s(&pb),
        ],
        &[&folded, &sidecar, &out, &pb],
    );
}

#[test]
fn a_bad_output_path_fails_before_touching_anything() {
    // The SVG's directory does not exist; the
    // folded file and its sidecar beside it must survive.
    let dir = TempDir::new("btprof-interop", "bad_path");
    let folded = dir.path("good.folded");
    let sidecar = dir.path("good.json");
    fs::write(&folded, "main;f 1\n").unwrap();
    fs::write(&sidecar, "{}\n").unwrap();
    let run = btprof(&[
        "--pid-self",
        "--duration",
        "200ms",
        "-o",
        "/nonexistent/p.svg",
        "--folded",
        s(&folded),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(
        run.stderr.contains("/nonexistent/p.svg"),
        "{}",
        run.describe()
    );
    assert_eq!(fs::read_to_string(&folded).unwrap(), "main;f 1\n");
    assert_eq!(fs::read_to_string(&sidecar).unwrap(), "{}\n");
    assert_eq!(dir.entries(), ["good.folded", "good.json"]);
}

/// Function -> (flat, cum) and the total from `go tool pprof -top`.
fn pprof_top(go: &Path, file: &Path) -> (BTreeMap<String, (u64, u64)>, u64) {
    let text = go_pprof(
        go,
        &[
            "-top",
            "-sample_index=samples",
            "-nodefraction=0",
            "-edgefraction=0",
            "-nodecount=1000000",
        ],
        file,
    );
    // "Showing nodes accounting for 107, 100% of 107 total"
    let total_line = text
        .lines()
        .find(|l| l.starts_with("Showing nodes accounting for"))
        .unwrap_or_else(|| panic!("no total in:\n{text}"));
    let total: u64 = total_line
        .rsplit_once(" of ")
        .unwrap()
        .1
        .trim_end_matches(" total")
        .parse()
        .unwrap();
    let mut functions = BTreeMap::new();
    let mut rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1);
    for row in &mut rows {
        // flat flat% sum% cum cum%  name (the name may hold spaces)
        let mut rest = row;
        let mut fields = Vec::new();
        for _ in 0..5 {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let name = rest.strip_prefix("  ").unwrap_or(rest.trim_start());
        functions.insert(
            name.to_owned(),
            (fields[0].parse().unwrap(), fields[3].parse().unwrap()),
        );
    }
    (functions, total)
}

#[test]
fn go_tool_pprof_reads_exports_with_the_same_functions_and_totals() {
    let Some(go) = go("btprof's pprof output was") else {
        return;
    };
    let dir = TempDir::new("btprof-interop", "pprof_export");
    let mut files = fixture_files("folded");
    files.retain(|f| !f.ends_with("non-utf8.folded"));
    files.push(fixtures("raw").join("perf-script.txt"));
    for file in files {
        let pb = dir.path("out.pb.gz");
        let run = btprof(&["export", s(&file), "--thread-root", "-o", s(&pb)]);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        let (go_functions, go_total) = pprof_top(&go, &pb);
        let (_, ours, total) = report(s(&file), &["--skip-root"]);
        assert_eq!(go_total, total, "{file:?}: totals differ");
        assert_eq!(go_functions, ours, "{file:?}: functions differ");
    }
}

#[test]
fn go_tool_pprof_reads_a_recorded_profile_like_btprof_report() {
    let Some(go) = go("btprof's pprof output was") else {
        return;
    };
    let dir = TempDir::new("btprof-interop", "pprof_record");
    let (folded, svg, pb) = (dir.path("r.folded"), dir.path("r.svg"), dir.path("r.pb.gz"));
    let run = btprof(&[
        "--pid-self",
        "--duration",
        "1s",
        "--quiet",
        "--folded",
        s(&folded),
        "--output",
        s(&svg),
        "--pprof",
        s(&pb),
    ]);
    // 1: the self-check may fail on a loaded machine; the files are
    // written either way.
    assert!(matches!(run.code, Some(0 | 1)), "{}", run.describe());
    let (go_functions, go_total) = pprof_top(&go, &pb);
    // Inlined frames are Lines of their caller's Location, which pprof
    // marks "(inline)": the workload's `#[inline(always)]` helper is one.
    assert!(
        go_functions.contains_key("btprof_cli::workload::timed_spin (inline)"),
        "timed_spin is not an inlined frame in pprof: {go_functions:?}"
    );
    let go_functions: BTreeMap<String, (u64, u64)> = go_functions
        .into_iter()
        .map(|(name, counts)| match name.strip_suffix(" (inline)") {
            Some(plain) => (plain.to_owned(), counts),
            None => (name, counts),
        })
        .collect();
    // Thread names are labels in pprof, the root frame in folded files.
    let (_, ours, total) = report(s(&folded), &["--skip-root"]);
    // A survival bar, not random: two workers spin through the 1 s, up to
    // ~2,000 whole periods; 100 only shows a profile to compare.
    assert!(total > 100, "{total} samples");
    assert_eq!(go_total, total);
    assert_eq!(go_functions, ours);
    // The header: CPU time at the requested rate, with the run's duration.
    let raw = Command::new(&go)
        .args(["tool", "pprof", "-raw"])
        .arg(&pb)
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw.stdout);
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    assert!(raw.contains("Period: 1000000"), "{raw}");
    assert!(raw.contains("samples/count cpu/nanoseconds"), "{raw}");
    assert!(raw.contains("thread:["), "{raw}");
}

#[test]
fn dump_settings_without_dump_every_are_errors() {
    for args in [
        &["--pid-self", "--keep", "3"][..],
        &["--pid-self", "--dump-dir", "somewhere"],
        &["--pid-self", "--dump-svg"],
    ] {
        let run = btprof(args);
        assert_eq!(run.code, Some(2), "{args:?}\n{}", run.describe());
        assert!(run.stderr.contains("--dump-every"), "{}", run.describe());
        assert!(!Path::new("somewhere").exists());
    }
}

#[test]
fn help_documents_ctrl_c_pprof_stdin_and_lenient() {
    let help = btprof(&["--help"]).stdout;
    assert!(help.contains("exits 130"), "{help}");
    assert!(help.contains("--pprof"), "{help}");
    for command in ["report", "flamegraph", "diff", "export"] {
        let help = btprof(&[command, "--help"]).stdout;
        assert!(help.contains("--lenient"), "{command}: {help}");
    }
    let report = btprof(&["report", "--help"]).stdout;
    assert!(
        report.contains("standard input") && report.contains("perf script"),
        "{report}"
    );
}
