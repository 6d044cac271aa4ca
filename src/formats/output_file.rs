//! Writing files so that a failure never destroys what was there.
//!
//! Every file btprof writes (folded stacks, the JSON sidecar, SVGs, pprof,
//! periodic dumps) goes through [`PendingFile`]: the bytes go to a
//! temporary file in the destination's own directory (so the final
//! `rename` stays on one file system and is atomic), and only a complete,
//! flushed and synced file is renamed over the destination. Until then
//! the user's existing file is untouched; on any failure, or if the
//! pending file is dropped without [`PendingFile::commit`], the temporary
//! file is removed, so nothing is left behind.
//!
//! A command that writes several files creates all of them as pending
//! first (a bad path fails before any work is done) and commits them
//! together at the end, so a failure in the last one does not leave the
//! first ones replaced by a run the user never saw finish.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes temporary files of one process (threads, dumps).
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name beside its destination.
#[derive(Debug)]
pub struct PendingFile {
    dest: PathBuf,
    temp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl PendingFile {
    /// Creates the temporary file beside `dest`. Fails, naming `dest`,
    /// when its directory does not exist or cannot be written, and when
    /// `dest` is a directory; nothing is created then.
    pub fn create(dest: impl AsRef<Path>) -> io::Result<PendingFile> {
        let dest = dest.as_ref().to_path_buf();
        let at = |e: io::Error| with_path(&dest, e);
        let Some(name) = dest.file_name() else {
            return Err(at(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a file name",
            )));
        };
        if dest.is_dir() {
            return Err(at(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a directory",
            )));
        }
        let temp_name = format!(
            ".{}.{}-{}.btprof-tmp",
            name.to_string_lossy(),
            std::process::id(),
            NEXT_TEMP.fetch_add(1, Ordering::Relaxed)
        );
        let temp = dest.with_file_name(temp_name);
        // `create_new`: never follow or reuse whatever sits at that name.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(at)?;
        // Keep an existing file's permissions (a script made executable,
        // a file shared with a group); best effort.
        if let Ok(meta) = fs::metadata(&dest) {
            let _ = file.set_permissions(meta.permissions());
        }
        Ok(PendingFile {
            dest,
            temp,
            out: Some(BufWriter::new(file)),
        })
    }

    /// Where the file will end up.
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// The writer for the file's contents.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.out
            .as_mut()
            .expect("a pending file has its writer until commit")
    }

    /// Flushes, syncs and renames the file into place. On failure the
    /// temporary file is removed and the destination is unchanged.
    pub fn commit(mut self) -> io::Result<PathBuf> {
        let result = self.finish();
        if result.is_err() {
            let _ = fs::remove_file(&self.temp);
        }
        result.map_err(|e| with_path(&self.dest, e))?;
        Ok(self.dest.clone())
    }

    fn finish(&mut self) -> io::Result<()> {
        let out = self.out.take().expect("commit runs once");
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&self.temp, &self.dest)
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        // Not committed (an error, or a panic): leave nothing behind.
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Writes `dest` with `write` through a [`PendingFile`]: all or nothing.
/// Errors from `write` are returned as they are; errors creating or
/// committing the file name `dest`.
pub fn write_atomically<E: From<io::Error>>(
    dest: impl AsRef<Path>,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<PathBuf, E> {
    let mut pending = PendingFile::create(dest)?;
    write(pending.writer())?;
    Ok(pending.commit()?)
}

/// `e` with `path` in its message, so it can be printed on its own.
fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    use btprof_testkit::temp_dir::TempDir as Dir;

    #[test]
    fn a_complete_write_replaces_the_file() {
        let dir = Dir::new("btprof-output-file", "ok");
        let dest = dir.path("out.txt");
        fs::write(&dest, "old").unwrap();
        write_atomically(&dest, |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&dest).unwrap(), "new");
        assert_eq!(dir.entries(), ["out.txt"]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_leaves_no_temp() {
        let dir = Dir::new("btprof-output-file", "fail");
        let dest = dir.path("out.txt");
        fs::write(&dest, "old").unwrap();
        let err = write_atomically(&dest, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("renderer failed"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "renderer failed");
        assert_eq!(fs::read_to_string(&dest).unwrap(), "old");
        assert_eq!(dir.entries(), ["out.txt"]);
    }

    #[test]
    fn an_uncommitted_file_is_removed_on_drop() {
        let dir = Dir::new("btprof-output-file", "drop");
        let mut p = PendingFile::create(dir.path("a")).unwrap();
        p.writer().write_all(b"x").unwrap();
        assert_eq!(dir.entries().len(), 1, "the temporary file exists");
        drop(p);
        assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    }

    #[test]
    fn a_missing_directory_fails_early_naming_the_path() {
        let err = PendingFile::create("/nonexistent-btprof/p.svg").unwrap_err();
        assert!(
            err.to_string().starts_with("/nonexistent-btprof/p.svg: "),
            "{err}"
        );
        let dir = Dir::new("btprof-output-file", "isdir");
        let err = PendingFile::create(dir.root()).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        assert!(dir.entries().is_empty());
    }

    #[test]
    fn a_failed_rename_leaves_no_temp() {
        // A directory appears at the destination after the temp file was
        // created: the rename fails, the temp is cleaned up.
        let dir = Dir::new("btprof-output-file", "rename");
        let dest = dir.path("d");
        let mut p = PendingFile::create(&dest).unwrap();
        p.writer().write_all(b"x").unwrap();
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("keep"), "k").unwrap();
        assert!(p.commit().is_err());
        assert_eq!(dir.entries(), ["d"]);
        assert_eq!(fs::read_to_string(dest.join("keep")).unwrap(), "k");
    }

    #[cfg(unix)]
    #[test]
    fn permissions_of_an_existing_file_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = Dir::new("btprof-output-file", "perm");
        let dest = dir.path("x.sh");
        fs::write(&dest, "old").unwrap();
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o750)).unwrap();
        write_atomically(&dest, |w| w.write_all(b"new")).unwrap();
        let mode = fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
    }
}
