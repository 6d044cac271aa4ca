//! Running the `btprof` binary in a scratch directory and judging what it
//! said: shared by the tests of the commands that read folded files.

// Shared by several test binaries, each using part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use btprof_testkit::temp_dir::TempDir;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_btprof");

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("temp path is UTF-8")
}

/// A finished run of the binary.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the run exited with `code` and its stdout says each of `says`.
    pub fn assert_stdout(&self, code: i32, says: &[&str]) {
        assert_eq!(self.code, Some(code), "{}", self.describe());
        for part in says {
            assert!(self.stdout.contains(part), "{part:?}\n{}", self.describe());
        }
    }

    /// Asserts the run exited with `code` and its stderr says `says`.
    pub fn assert_stderr(&self, code: i32, says: &str) {
        assert_eq!(self.code, Some(code), "{}", self.describe());
        assert!(self.stderr.contains(says), "{says:?}\n{}", self.describe());
    }

    pub fn describe(&self) -> String {
        format!(
            "exit code: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Its standard output as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", self.describe()))
    }
}

/// Runs `btprof ARGS` in `dir`.
pub fn run_in(dir: &TempDir, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir.root())
        .output()
        .expect("run btprof");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
