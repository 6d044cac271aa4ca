//! What is known about how a profile was taken, for comparing two runs.

use crate::{Mode, Stats};

/// How a profile was taken, as far as it is known.
///
/// A [`Profile`](crate::Profile) knows its rate and mode; a folded file on
/// its own does not (the format has no header). Every field is an `Option`
/// so a source that knows only part of it (a future metadata file beside
/// the folded file, a caller who remembers the rate) can say just that, and
/// [`diff`](crate::diff) warns only about differences it can see.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunInfo {
    /// The sampling rate asked for, per thread.
    pub requested_hz: Option<u32>,
    /// Which threads were sampled.
    pub mode: Option<Mode>,
}

impl RunInfo {
    /// What a profiler's own statistics say.
    pub fn from_stats(stats: &Stats) -> RunInfo {
        RunInfo {
            requested_hz: Some(stats.requested_hz),
            mode: Some(stats.mode),
        }
    }

    /// Reasons two runs may not compare like for like, one sentence each;
    /// empty when nothing known differs.
    pub fn differences(base: Option<&RunInfo>, new: Option<&RunInfo>) -> Vec<String> {
        let (Some(base), Some(new)) = (base, new) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let (Some(b), Some(n)) = (base.requested_hz, new.requested_hz) {
            if b != n {
                out.push(format!(
                    "the profiles were sampled at different rates (base {b} Hz, new {n} Hz): \
                     shares still compare, but the run with fewer samples limits which \
                     changes can be told from noise"
                ));
            }
        }
        if let (Some(b), Some(n)) = (base.mode, new.mode) {
            if b != n {
                out.push(format!(
                    "the profiles were taken in different modes (base {b}, new {n}): \
                     a cpu profile counts running threads only and a wall profile blocked \
                     ones too, so their shares do not measure the same thing"
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(hz: u32, mode: Mode) -> RunInfo {
        RunInfo {
            requested_hz: Some(hz),
            mode: Some(mode),
        }
    }

    #[test]
    fn differences_name_rate_and_mode() {
        let base = info(1000, Mode::Cpu);
        assert!(RunInfo::differences(Some(&base), Some(&base)).is_empty());
        let d = RunInfo::differences(Some(&base), Some(&info(99, Mode::Wall)));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("base 1000 Hz, new 99 Hz"), "{d:?}");
        assert!(d[1].contains("base cpu, new wall"), "{d:?}");
    }

    #[test]
    fn unknown_fields_are_not_differences() {
        let base = info(1000, Mode::Cpu);
        let partial = RunInfo {
            requested_hz: None,
            mode: Some(Mode::Cpu),
        };
        assert!(RunInfo::differences(Some(&base), Some(&partial)).is_empty());
        assert!(RunInfo::differences(Some(&base), None).is_empty());
        assert!(RunInfo::differences(None, None).is_empty());
    }
}
