//! Every command the README shows in a `sh` block works as written. The
//! `btprof` commands run here, in order, in a scratch directory, with the
//! built binary's directory first on `PATH` (as `cargo install --path
//! cli` would leave it). The README's cargo and script commands cannot
//! run inside `cargo test` as written: a nested cargo waits for the build
//! directory this test run holds, and `scripts/test` runs this very test.
//! Each of them is therefore mapped to what it stands for and checked
//! that way, and a command the test does not know fails it, so the README
//! cannot gain an untested command.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_btprof");

/// What the test does with one README command.
#[derive(Debug)]
enum Step {
    /// Run this shell command; it must exit with one of these codes.
    Run(String, Vec<i32>),
    /// `cargo install --path cli`: installs the package this test belongs
    /// to, whose binary is [`BIN`].
    Install,
    /// `scripts/test`: the script that runs this test.
    TestScript,
}

/// `cargo run --release -p btprof-cli -- ARGS` runs the binary this
/// package builds, which is [`BIN`]: the `btprof ARGS` it stands for.
const CARGO_RUN: &str = "cargo run --release -p btprof-cli -- ";

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md")
}

/// The README's shell commands, in order, each as a [`Step`].
fn readme_steps(readme: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh || line.trim().is_empty() {
            continue;
        }
        if let Some(code) = line.strip_prefix("echo $?   # ") {
            // `echo $?   # 1: why`: the command before exits with that code.
            let code: i32 = code.split(':').next().unwrap().parse().unwrap();
            match steps.last_mut() {
                Some(Step::Run(_, codes)) => *codes = vec![code],
                other => panic!("`{line}` follows {other:?}, not a btprof command"),
            }
            continue;
        }
        let command = match line.strip_prefix(CARGO_RUN) {
            Some(args) => format!("btprof {args}"),
            None => line.to_owned(),
        };
        let step = if command == "cargo install --path cli" {
            Step::Install
        } else if command == "scripts/test" {
            Step::TestScript
        } else if command.starts_with("btprof ")
            || command.contains("| btprof ")
            // `sleep 3 & btprof dump --pid $!`: a process to look at.
            || command.contains("& btprof ")
        {
            // A profiling run's self-check may fail (exit 1) on a loaded
            // machine; its files are written all the same.
            let codes = if command.contains("--pid-self") {
                vec![0, 1]
            } else {
                vec![0]
            };
            Step::Run(command, codes)
        } else {
            panic!("README command `{line}` is not run by this test: teach it how");
        };
        steps.push(step);
    }
    steps
}

#[test]
fn every_readme_command_works_as_written() {
    let readme = readme();
    let steps = readme_steps(&readme);
    let runs = steps.iter().filter(|s| matches!(s, Step::Run(..))).count();
    assert!(runs >= 8, "README commands not found: {steps:?}");
    for set_up in [
        CARGO_RUN.trim_end(),
        "cargo install --path cli",
        "scripts/test",
    ] {
        assert!(
            readme.lines().any(|l| l.starts_with(set_up)),
            "the README lost its set-up command `{set_up}`"
        );
    }
    let dir = std::env::temp_dir().join(format!("btprof-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin_dir: PathBuf = Path::new(BIN).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    // `./your-program` in the README stands for the reader's program: a
    // shell script that does some work stands in for it here.
    let program = dir.join("your-program");
    std::fs::write(
        &program,
        "#!/bin/sh\ni=0\nwhile [ $i -lt 200000 ]; do i=$((i+1)); done\necho done $i\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for step in steps {
        match step {
            Step::Install => {
                // `--path cli` names this package, and its binary is `btprof`.
                assert_eq!(
                    root.join("cli").canonicalize().unwrap(),
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .canonicalize()
                        .unwrap()
                );
                assert_eq!(Path::new(BIN).file_stem().unwrap(), "btprof");
                println!("ok (this package, binary btprof): cargo install --path cli");
            }
            Step::TestScript => {
                let script =
                    std::fs::read_to_string(root.join("scripts/test")).expect("scripts/test");
                assert!(
                    script.contains("cargo test --workspace"),
                    "scripts/test no longer runs the workspace's tests"
                );
                let syntax = Command::new("bash")
                    .arg("-n")
                    .arg(root.join("scripts/test"))
                    .status()
                    .expect("run bash -n");
                assert!(syntax.success(), "scripts/test does not parse");
                println!("ok (runs this test; parses): scripts/test");
            }
            Step::Run(command, codes) => {
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(&command)
                    .current_dir(&dir)
                    .env("PATH", &path)
                    .output()
                    .expect("run sh");
                let code = out.status.code().unwrap_or(-1);
                assert!(
                    codes.contains(&code),
                    "README command `{command}` exited {code}, expected {codes:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                println!("ok ({code}): {command}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
