//! Where `btprof record` finds the library it preloads.
//!
//! In this order: the file `BTPROF_PRELOAD` names; the copy embedded in
//! this executable at build time (see `cli/build.rs`), written on first
//! use to a cache directory under a name made of its content hash and
//! checked against the embedded bytes before every use; a
//! `libbtprof_preload.so` (`.dylib`) beside the executable or in `../lib`
//! from it, for builds without the embedded copy (cross-compiled ones).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The library embedded at build time (empty when none was).
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/preload.bin"));

/// Its FNV-1a hash, hex (empty when none was embedded).
const EMBEDDED_HASH: &str = env!("BTPROF_PRELOAD_HASH");

/// The environment variable that names the library to preload instead.
pub const PRELOAD_ENV: &str = "BTPROF_PRELOAD";

/// The library's file name on this platform.
pub const FILE_NAME: &str = if cfg!(target_os = "macos") {
    "libbtprof_preload.dylib"
} else {
    "libbtprof_preload.so"
};

/// The library to preload, or what to do about its absence.
pub fn find() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(PRELOAD_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return match path.is_file() {
            true => Ok(absolute(&path)),
            false => Err(format!("{PRELOAD_ENV}={}: no such file", path.display())),
        };
    }
    if !EMBEDDED.is_empty() {
        return extract();
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join(FILE_NAME), dir.join("../lib").join(FILE_NAME)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "this btprof was built without its preload library, and there is no {FILE_NAME} beside \
         it ({}): build it with `cargo build -p btprof-preload` and set {PRELOAD_ENV} to its path",
        dir.display()
    ))
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The embedded library as a file: the cached copy when its bytes are
/// the embedded ones, else written anew (to a temporary name, renamed
/// into place, so concurrent runs never see half a file).
fn extract() -> Result<PathBuf, String> {
    let dir = cache_dir().join(EMBEDDED_HASH);
    let path = dir.join(FILE_NAME);
    if fs::read(&path).is_ok_and(|bytes| bytes == EMBEDDED) {
        return Ok(path);
    }
    let fail = |e: std::io::Error| {
        format!(
            "cannot write the preload library to {}: {e} (set {PRELOAD_ENV} to a copy of it, or \
             XDG_CACHE_HOME to a writable directory)",
            dir.display()
        )
    };
    create_private_dir(&dir).map_err(fail)?;
    let temp = dir.join(format!(".{FILE_NAME}.{}", std::process::id()));
    let mut file = fs::File::create(&temp).map_err(fail)?;
    file.write_all(EMBEDDED).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    drop(file);
    fs::rename(&temp, &path).map_err(|e| {
        let _ = fs::remove_file(&temp);
        fail(e)
    })?;
    Ok(path)
}

/// `$XDG_CACHE_HOME/btprof`, `~/.cache/btprof`, or a per-user directory
/// in the temporary directory.
fn cache_dir() -> PathBuf {
    let var = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(cache) = var("XDG_CACHE_HOME") {
        return cache.join("btprof");
    }
    if let Some(home) = var("HOME") {
        return home.join(".cache").join("btprof");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("btprof-{uid}"))
}

/// Creates `dir` (and its parents), readable by this user only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
