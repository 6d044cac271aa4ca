//! The JSON sidecar: a profile's [`RunInfo`] in a file beside its folded
//! file (`run.folded` -> `run.json`), since folded lines have no place for
//! it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::output_file::write_atomically;
use crate::profile::RunInfo;

impl RunInfo {
    /// Writes the sidecar of the folded file at `folded`, all or nothing
    /// (see [`crate::formats::output_file`]).
    pub fn write_sidecar(&self, folded: &Path) -> io::Result<PathBuf> {
        write_atomically(sidecar_path(folded), |w| self.write_json(w))
    }

    /// Writes the sidecar's JSON (pretty, one trailing newline) to `w`.
    pub fn write_json<W: io::Write>(&self, mut w: W) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self).map_err(io::Error::other)?;
        w.write_all(b"\n")
    }

    /// Reads the sidecar of the folded file at `folded`: `Ok(None)` when
    /// there is none (folded files from other tools have none).
    pub fn read_sidecar(folded: &Path) -> io::Result<Option<RunInfo>> {
        let path = sidecar_path(folded);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not btprof run metadata: {e}", path.display()),
            )
        })
    }
}

/// Where the metadata of the folded file at `folded` lives: the same path
/// with the extension `.json` (`run.folded` → `run.json`).
pub fn sidecar_path(folded: &Path) -> PathBuf {
    folded.with_extension("json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stats;

    #[test]
    fn sidecar_round_trips() {
        let stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        let info = RunInfo::of_this_process(&stats, 3);
        let dir = std::env::temp_dir().join(format!("btprof-runinfo-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let folded = dir.join("run.folded");
        let written = info.write_sidecar(&folded).unwrap();
        assert_eq!(written, dir.join("run.json"));
        assert_eq!(RunInfo::read_sidecar(&folded).unwrap(), Some(info.clone()));
        assert_eq!(
            RunInfo::read_sidecar(&dir.join("none.folded")).unwrap(),
            None
        );
        fs::write(dir.join("bad.json"), "{").unwrap();
        let err = RunInfo::read_sidecar(&dir.join("bad.folded")).unwrap_err();
        assert!(err.to_string().contains("bad.json"), "{err}");

        fs::remove_dir_all(&dir).unwrap();
    }
}
