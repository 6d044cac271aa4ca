//! The files a profiling run writes: the folded stacks, their sidecar,
//! the flamegraph and, when asked for, a pprof file. Both ways of
//! profiling (`btprof --pid-self` and `btprof record`) write the same
//! set, so they write it here.

use std::path::Path;

use btprof::formats::output_file::PendingFile;
use btprof::formats::sidecar::sidecar_path;
use btprof::{FlamegraphOptions, FoldOptions, Profile};

/// How a run's files are drawn and announced.
#[derive(Clone, Debug, Default)]
pub struct OutputOptions {
    /// How the folded file's stacks are folded.
    pub fold: FoldOptions,
    /// How the flamegraph is drawn.
    pub flamegraph: FlamegraphOptions,
    /// Leave out the `wrote PATH` line for each file.
    pub quiet: bool,
}

/// The output files, created under temporary names before profiling
/// starts (a bad path costs nothing) and renamed into place together once
/// every one is complete: a failure leaves the user's existing files as
/// they were and no temporary file behind (see
/// `btprof::formats::output_file`).
pub struct Outputs {
    folded: PendingFile,
    sidecar: PendingFile,
    svg: PendingFile,
    pprof: Option<PendingFile>,
}

impl Outputs {
    /// Creates the folded file at `folded` (its sidecar beside it), the
    /// flamegraph at `svg` and the pprof file at `pprof`, if any.
    pub fn create(folded: &Path, svg: &Path, pprof: Option<&Path>) -> Result<Outputs, String> {
        let create =
            |path: &Path| PendingFile::create(path).map_err(|e| format!("cannot write {e}"));
        Ok(Outputs {
            folded: create(folded)?,
            sidecar: create(&sidecar_path(folded))?,
            svg: create(svg)?,
            pprof: pprof.map(create).transpose()?,
        })
    }

    /// Writes `profile` into every file and then puts them all in place.
    /// The sidecar holds the profile's run metadata, when it has any. An
    /// empty profile draws no flamegraph: the old one, if any, stays.
    pub fn write(mut self, profile: &Profile, options: &OutputOptions) -> Result<(), String> {
        let folded_path = self.folded.path().to_path_buf();
        profile
            .write_folded_with(options.fold, self.folded.writer())
            .map_err(|e| format!("{}: {e}", folded_path.display()))?;
        if let Some(info) = profile.run_info() {
            let path = self.sidecar.path().to_path_buf();
            info.write_json(self.sidecar.writer())
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let svg_path = self.svg.path().to_path_buf();
        let svg = if profile.is_empty() {
            None
        } else {
            profile
                .write_flamegraph_with(&options.flamegraph, self.svg.writer())
                .map_err(|e| format!("{}: {e}", svg_path.display()))?;
            Some(self.svg)
        };
        if let Some(pprof) = &mut self.pprof {
            let path = pprof.path().to_path_buf();
            profile
                .write_pprof(pprof.writer())
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        // Everything is complete: now replace the old files.
        let all = [Some(self.folded), Some(self.sidecar), svg, self.pprof];
        for pending in all.into_iter().flatten() {
            let path = pending.commit().map_err(|e| format!("cannot write {e}"))?;
            if !options.quiet {
                println!("wrote {}", path.display());
            }
        }
        if profile.is_empty() {
            eprintln!(
                "btprof: no samples, so no flamegraph was written ({} is unchanged)",
                svg_path.display()
            );
        }
        Ok(())
    }
}
