//! Profiling a scope: a test, or one phase of an application.
//!
//! ```no_run
//! let _profile = btprof::profile_scope("parse_large_file");
//! // ... the work ...
//! // dropped: writes parse_large_file.folded, .json and .svg
//! ```
//!
//! [`profile_scope`] profiles only when the environment variable
//! `BTPROF_PROFILE` is set (to anything but `0`, `false` or `off`), so
//! guards can stay in a test suite and `BTPROF_PROFILE=1 cargo test`
//! switches all of them on without a code change. [`ScopeBuilder::always`]
//! profiles regardless.
//!
//! Files go to `BTPROF_DIR` if set, else `btprof/` under the Cargo target
//! directory (found from `CARGO_TARGET_DIR` or the running executable's
//! path), else `target/btprof/`.
//!
//! Only one profiler runs per process. A scope that starts while another
//! is profiling (nested in it, on another thread, or in a test running in
//! parallel) is not profiled: it says so on stderr and runs its code
//! unprofiled. It never waits for the other scope, because that scope may
//! be waiting for it (an outer scope joining a thread that opens a scope
//! of its own would hang forever). To get one profile per test, run the
//! tests one at a time (`cargo test -- --test-threads=1`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::formats::output_file::PendingFile;
use crate::formats::sidecar::sidecar_path;
use crate::{Error, Profiler};

/// The environment variable that switches [`profile_scope`] on.
pub const ENABLE_VAR: &str = "BTPROF_PROFILE";
/// The environment variable that overrides where scope profiles go.
pub const DIR_VAR: &str = "BTPROF_DIR";

/// Set while a scope is profiling.
static PROFILING: AtomicBool = AtomicBool::new(false);

/// The profiling scope's hold on [`PROFILING`]; released on drop.
struct Turn(());

impl Turn {
    /// Takes the turn if no scope is profiling; never waits.
    fn try_take() -> Option<Turn> {
        PROFILING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Turn(()))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        PROFILING.store(false, Ordering::Release);
    }
}

/// Profiles until dropped, if `BTPROF_PROFILE` is set; see the
/// [module docs](self).
pub fn profile_scope(name: &str) -> ProfileScope {
    ScopeBuilder::new(name).start()
}

/// Whether `BTPROF_PROFILE` asks for scope profiles.
pub fn enabled_by_env() -> bool {
    std::env::var(ENABLE_VAR).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "off" | "no"))
}

/// Configures a [`ProfileScope`].
#[must_use]
pub struct ScopeBuilder {
    name: String,
    dir: Option<PathBuf>,
    always: bool,
    profiler: crate::ProfilerBuilder,
}

impl ScopeBuilder {
    /// A scope named `name` (the file names; characters other than
    /// letters, digits, `-`, `_` and `.` become `_`).
    pub fn new(name: &str) -> ScopeBuilder {
        ScopeBuilder {
            name: file_name(name),
            dir: None,
            always: false,
            profiler: Profiler::builder(),
        }
    }

    /// Where the files go, instead of `BTPROF_DIR` or the default.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Profiles even when `BTPROF_PROFILE` is not set.
    pub fn always(mut self) -> Self {
        self.always = true;
        self
    }

    /// Sampling settings (rate, mode, depth).
    pub fn profiler(mut self, profiler: crate::ProfilerBuilder) -> Self {
        self.profiler = profiler;
        self
    }

    /// Starts profiling. A scope that cannot profile (disabled, another
    /// scope is profiling, or the profiler fails to start) runs unprofiled
    /// at once, never waiting; the last two say why on stderr.
    pub fn start(self) -> ProfileScope {
        let inactive = |name| ProfileScope {
            name,
            dir: PathBuf::new(),
            running: None,
        };
        if !(self.always || enabled_by_env()) {
            return inactive(self.name);
        }
        let Some(turn) = Turn::try_take() else {
            eprintln!(
                "btprof: scope {} not profiled: another profiled scope is running in this \
                 process (one at a time; its profile includes this scope's work if it runs \
                 in that scope's time)",
                self.name
            );
            return inactive(self.name);
        };
        match self.profiler.start() {
            Ok(profiler) => ProfileScope {
                dir: self.dir.unwrap_or_else(default_dir),
                name: self.name,
                running: Some((profiler, turn)),
            },
            Err(e) => {
                eprintln!("btprof: scope {} not profiled: {e}", self.name);
                inactive(self.name)
            }
        }
    }
}

/// The files a scope wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeFiles {
    /// Folded stacks.
    pub folded: PathBuf,
    /// The run metadata sidecar.
    pub metadata: PathBuf,
    /// The flamegraph; `None` when nothing was sampled (nothing to draw).
    pub svg: Option<PathBuf>,
}

/// A profiled scope; see [`profile_scope`]. Dropping it writes the files
/// (reporting a failure on stderr); [`ProfileScope::finish`] returns them.
#[must_use = "the scope is profiled until this is dropped"]
pub struct ProfileScope {
    name: String,
    dir: PathBuf,
    running: Option<(Profiler, Turn)>,
}

impl ProfileScope {
    /// Whether this scope is being profiled.
    pub fn is_active(&self) -> bool {
        self.running.is_some()
    }

    /// Stops profiling and writes `NAME.folded`, `NAME.json` and
    /// `NAME.svg`. `Ok(None)` for a scope that was not profiled.
    pub fn finish(mut self) -> Result<Option<ScopeFiles>, Error> {
        self.write()
    }

    fn write(&mut self) -> Result<Option<ScopeFiles>, Error> {
        let Some((profiler, turn)) = self.running.take() else {
            return Ok(None);
        };
        let profile = profiler.stop();
        drop(turn);
        let profile = profile?;
        fs::create_dir_all(&self.dir).map_err(|e| io_at(&self.dir, e))?;
        // All or nothing: a failure leaves the previous run's files.
        let folded_path = self.dir.join(format!("{}.folded", self.name));
        let mut folded = PendingFile::create(&folded_path)?;
        profile.write_folded(folded.writer())?;
        let mut metadata = PendingFile::create(sidecar_path(&folded_path))?;
        profile
            .run_info()
            .ok_or_else(|| Error::Io(io::Error::other("a recording without run metadata")))?
            .write_json(metadata.writer())?;
        let svg = if profile.is_empty() {
            None
        } else {
            let mut svg = PendingFile::create(self.dir.join(format!("{}.svg", self.name)))?;
            profile.write_flamegraph(svg.writer())?;
            Some(svg)
        };
        let folded = folded.commit()?;
        let metadata = metadata.commit()?;
        let svg = svg.map(PendingFile::commit).transpose()?;
        Ok(Some(ScopeFiles {
            folded,
            metadata,
            svg,
        }))
    }
}

impl Drop for ProfileScope {
    fn drop(&mut self) {
        if let Err(e) = self.write() {
            eprintln!("btprof: scope {}: {e}", self.name);
        }
    }
}

fn io_at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

/// `BTPROF_DIR`, else `btprof/` in the Cargo target directory.
fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    target_dir().join("btprof")
}

/// `CARGO_TARGET_DIR`, else the `target` directory the running executable
/// (a test binary lives in `target/debug/deps`) sits in, else `target`.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|p| p.file_name().is_some_and(|n| n == "target"))
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// `name` with anything but `[A-Za-z0-9_.-]` replaced by `_`, and a
/// `scope` prefix where it would be empty or hidden.
fn file_name(name: &str) -> String {
    let cleaned = safe_file_chars(name);
    if cleaned.is_empty() || cleaned.starts_with('.') {
        format!("scope{cleaned}")
    } else {
        cleaned
    }
}

/// `name` with anything but `[A-Za-z0-9_.-]` replaced by `_`: safe in a
/// file name on every platform (the dumps' prefixes use it too).
pub(super) fn safe_file_chars(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_become_safe_file_names() {
        assert_eq!(file_name("tests::parse big/file"), "tests__parse_big_file");
        assert_eq!(file_name(""), "scope");
        assert_eq!(file_name("../x"), "scope.._x");
    }
}
