//! `go tool pprof`, the reader pprof files are checked with, for the CLI's
//! tests that have one; where Go is missing a test says NOT CHECKED.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `go` command on `PATH`, or `None` after saying that `what` was
/// not checked.
pub fn go(what: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("go"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = format!(
            "go is not installed (apt-get install golang-go): {what} NOT checked with go tool pprof"
        );
        println!("NOT CHECKED: {why}");
        eprintln!("NOT CHECKED: {why}");
    }
    found
}

/// `go tool pprof ARGS FILE`'s standard output; panics if it fails.
pub fn go_pprof(go: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
