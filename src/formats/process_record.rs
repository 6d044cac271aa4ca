//! The record of one process profiled by `btprof record`: the preloaded
//! sampler writes, per process (and per program image, since `exec`
//! starts a new one), a folded file and this JSON beside it; the CLI
//! reads them back and merges them (see `docs/record.md`).
//!
//! The JSON holds every field of the run metadata ([`RunInfo`], flattened)
//! plus who the process was, so the per-process file is also an ordinary
//! sidecar that `btprof report` and `btprof diff` read.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::profile::RunInfo;

/// The environment variables through which `btprof record` configures
/// the preloaded sampler in every process it starts (children inherit
/// them with the environment).
pub mod env {
    /// The directory each process writes its files to; without it the
    /// preloaded library does nothing.
    pub const DIR: &str = "BTPROF_RECORD_DIR";
    /// Samples per second (as `--hz`).
    pub const HZ: &str = "BTPROF_RECORD_HZ";
    /// `cpu` or `wall`.
    pub const MODE: &str = "BTPROF_RECORD_MODE";
    /// The Linux profiling signal, as a number (default `SIGURG`).
    pub const SIGNAL: &str = "BTPROF_RECORD_SIGNAL";
    /// Most frames kept per stack.
    pub const MAX_DEPTH: &str = "BTPROF_RECORD_MAX_DEPTH";
    /// Most distinct stacks kept.
    pub const MAX_STACKS: &str = "BTPROF_RECORD_MAX_STACKS";
    /// `1`: leave inlined functions out of the folded file.
    pub const NO_INLINE: &str = "BTPROF_RECORD_NO_INLINE";
    /// When sampling stops, in milliseconds since the Unix epoch: a
    /// process still running then writes its profile and samples no more.
    pub const DEADLINE_MS: &str = "BTPROF_RECORD_DEADLINE_MS";
    /// Profile only a process whose parent has this pid (`--no-follow`:
    /// the command's own process, whatever it `exec`s).
    pub const PARENT: &str = "BTPROF_RECORD_PARENT";
}

/// Who a profiled process was and how its profile ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// Its process id.
    pub pid: u32,
    /// The name it goes by in the merged profile: the file name of its
    /// `argv[0]` (what `ps` shows), else of its executable.
    pub name: String,
    /// Its command line, `argv[0]` first.
    pub command_line: Vec<String>,
    /// Why the profile was written: `exit`, `exec`, `signal SIGTERM`,
    /// `duration` (sampling stopped at `--duration`).
    pub ended_by: String,
    /// How it was sampled and what was achieved.
    #[serde(flatten)]
    pub run: RunInfo,
    /// What pushing its windows did, when it pushed (`record --push`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushSummary>,
}

/// What one process's pushing did, for `btprof record` to add up: each
/// process pushes its own windows, so only its record can tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushSummary {
    /// Windows made to be pushed.
    pub windows: u64,
    /// Windows the server accepted.
    pub pushed: u64,
    /// Windows dropped: the queue was full, or the server refused them.
    pub dropped: u64,
    /// Windows still queued when the process stopped.
    pub unsent: u64,
    /// Bytes of request bodies the server accepted.
    pub bytes_sent: u64,
}

impl std::ops::Add for PushSummary {
    type Output = PushSummary;

    /// The sum of two processes' pushing.
    fn add(self, other: PushSummary) -> PushSummary {
        PushSummary {
            windows: self.windows + other.windows,
            pushed: self.pushed + other.pushed,
            dropped: self.dropped + other.dropped,
            unsent: self.unsent + other.unsent,
            bytes_sent: self.bytes_sent + other.bytes_sent,
        }
    }
}

impl ProcessRecord {
    /// Writes the record as pretty JSON with one trailing newline.
    pub fn write_json<W: io::Write>(&self, mut w: W) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self).map_err(io::Error::other)?;
        w.write_all(b"\n")
    }

    /// Reads the record at `path`.
    pub fn read(path: &Path) -> io::Result<ProcessRecord> {
        let text = fs::read_to_string(path)?;
        serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a btprof process record: {e}", path.display()),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stats;

    #[test]
    fn record_round_trips_and_reads_as_a_sidecar() {
        let stats = Stats::new(&btprof_sampler::SamplerConfig::default());
        let record = ProcessRecord {
            pid: 42,
            name: "sh".into(),
            command_line: vec!["sh".into(), "-c".into(), "exit 7".into()],
            ended_by: "exit".into(),
            run: RunInfo::of_this_process(&stats, 0),
            push: Some(PushSummary {
                windows: 3,
                pushed: 2,
                unsent: 1,
                ..PushSummary::default()
            }),
        };
        let dir = std::env::temp_dir().join(format!("btprof-process-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let json = dir.join("42.json");
        let mut bytes = Vec::new();
        record.write_json(&mut bytes).unwrap();
        fs::write(&json, &bytes).unwrap();
        assert_eq!(ProcessRecord::read(&json).unwrap(), record);
        // The same file is an ordinary sidecar of `42.folded`.
        let info = RunInfo::read_sidecar(&dir.join("42.folded")).unwrap();
        assert_eq!(info, Some(record.run.clone()));
        fs::write(&json, "{}").unwrap();
        assert!(ProcessRecord::read(&json).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
