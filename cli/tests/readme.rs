//! Every `btprof` command the README shows works as written, once
//! `cargo install --path cli` has put `btprof` on `PATH`: the commands of
//! its `sh` blocks run here, in order, in a scratch directory, with the
//! built binary's directory first on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_btprof");

/// The README's shell commands that run `btprof`, in order, each with
/// the exit codes it may end with.
fn readme_commands() -> Vec<(String, Vec<i32>)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let mut commands: Vec<(String, Vec<i32>)> = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(code) = line.strip_prefix("echo $?   # ") {
            // `echo $?   # 1: why`: the command before exits with that code.
            let code: i32 = code.split(':').next().unwrap().parse().unwrap();
            commands.last_mut().expect("a command before echo $?").1 = vec![code];
            continue;
        }
        let runs_btprof = line.starts_with("btprof ") || line.contains("| btprof ");
        if !runs_btprof {
            continue; // cargo, scripts/test: the build itself
        }
        // A profiling run's self-check may fail (exit 1) on a loaded
        // machine; its files are written all the same.
        let codes = if line.contains("--pid-self") {
            vec![0, 1]
        } else {
            vec![0]
        };
        commands.push((line.to_owned(), codes));
    }
    commands
}

#[test]
fn every_readme_command_works_as_written() {
    let commands = readme_commands();
    assert!(
        commands.len() >= 8,
        "README commands not found: {commands:?}"
    );
    let dir = std::env::temp_dir().join(format!("btprof-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin_dir: PathBuf = Path::new(BIN).parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let has_go = Command::new("go").arg("version").output().is_ok();
    for (command, codes) in commands {
        if command.contains("go tool pprof") && !has_go {
            println!("NOT RUN (go is not installed): {command}");
            continue;
        }
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
    let _ = std::fs::remove_dir_all(&dir);
}
