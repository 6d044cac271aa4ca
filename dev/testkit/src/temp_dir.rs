//! Scratch directories for tests that write files.

use std::fs;
use std::path::{Path, PathBuf};

/// A scratch directory under the system's temporary directory, created
/// empty and removed on drop. Its name holds the process id, so test
/// binaries running at the same time never share one.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `TMP/PREFIX-PID-TEST`, emptied if a previous run left it behind.
    pub fn new(prefix: &str, test: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("{prefix}-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.0
    }

    /// The path of `name` inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `text` to `name` and returns its path as a string (for a
    /// command's arguments).
    pub fn file(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        fs::write(&path, text).expect("write test file");
        path.to_str().expect("a UTF-8 temp path").to_owned()
    }

    /// The names of the files in it, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .expect("read temp dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
