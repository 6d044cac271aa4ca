//! Which of a window's sample labels ([`crate::with_labels`]) are sent.
//!
//! Pyroscope splits a pushed profile by its samples' string labels: each
//! distinct set becomes a series whose labels are the request's series
//! labels plus the sample's, a series label winning over a sample label of
//! the same name (`pkg/pprof/split`, `VisitSampleSeries`). It then
//! validates every such series as it does the request's
//! (`pkg/validation/validate.go`), and one bad label refuses the whole
//! request: every sample of the window would be lost for one label.
//!
//! So each sample label is held to the rules a user's series label is
//! ([`labels::check_user_label`]), and one the server would ignore or
//! refuse is left out of the pprof sent (the window's other labels and
//! samples go), said once per name through the push's error callback:
//!
//! - a name that is not `[a-zA-Z_][a-zA-Z0-9_]*`, starts with `__`, or is
//!   longer than 1024 bytes; a value that is empty or longer than 2048
//!   bytes;
//! - a name of a series label (`service_name`, `env`, ...) or `thread`
//!   (btprof's own sample label): the server would keep the other value;
//! - a name past the server's limit of labels per series: the series
//!   labels and `thread` count, and the first names seen take the room
//!   left, for as long as the profiler runs, so every window splits alike.

use std::collections::HashSet;

use super::labels::{self, MAX_LABELS};
use super::Push;

/// The sample label btprof itself gives every sample.
const THREAD_LABEL: &str = "thread";

/// The rules for one push's sample labels, and the names admitted so far.
#[derive(Debug)]
pub(crate) struct SampleLabels {
    /// Names a sample label may not take: the series labels' and `thread`.
    taken: HashSet<String>,
    /// Distinct sample label names the server's limit leaves room for.
    room: usize,
    /// Names admitted so far (at most `room`).
    admitted: HashSet<String>,
    /// Names left out so far (each said once).
    refused: HashSet<String>,
}

impl SampleLabels {
    /// The rules for pushing as `config` says (its own labels added).
    pub(crate) fn new(config: &Push) -> SampleLabels {
        let mut taken: HashSet<String> = ["__name__", "service_name", "clock", THREAD_LABEL]
            .into_iter()
            .map(str::to_owned)
            .collect();
        taken.extend(config.labels.iter().map(|(name, _)| name.clone()));
        SampleLabels {
            room: MAX_LABELS.saturating_sub(taken.len()),
            taken,
            admitted: HashSet::new(),
            refused: HashSet::new(),
        }
    }

    /// Whether `name` was left out for the first time (so it is said).
    pub(crate) fn first_refusal(&mut self, name: &str) -> bool {
        !self.refused.contains(name) && self.refused.insert(name.to_owned())
    }

    /// Whether the sample label `name=value` is sent; if not, why.
    pub(crate) fn check(&mut self, name: &str, value: &str) -> Result<(), String> {
        labels::check_user_label(name, value, false).map_err(|e| e.reason)?;
        if self.taken.contains(name) {
            return Err(format!(
                "`{name}` is a series label (or btprof's `thread`), whose value the server \
                 keeps instead"
            ));
        }
        if !self.admitted.contains(name) {
            if self.admitted.len() >= self.room {
                return Err(format!(
                    "the server accepts {MAX_LABELS} labels per series, and the series labels, \
                     `thread` and {} sample label names take them",
                    self.admitted.len()
                ));
            }
            self.admitted.insert(name.to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(labels: &[(&str, &str)]) -> SampleLabels {
        let mut push = Push::pyroscope("http://pyro:4040");
        for &(k, v) in labels {
            push = push.label(k, v);
        }
        SampleLabels::new(&push)
    }

    #[test]
    fn labels_the_server_would_refuse_or_ignore_are_left_out() {
        let mut r = rules(&[("env", "prod")]);
        assert_eq!(r.check("endpoint", "checkout"), Ok(()));
        for (name, value) in [
            ("end-point", "x"),
            ("__name__", "x"),
            ("2x", "x"),
            ("endpoint", ""),
            ("env", "dev"),
            ("thread", "t"),
            ("service_name", "other"),
        ] {
            let why = r.check(name, value).unwrap_err();
            assert!(!why.is_empty(), "{name}");
        }
        let long = "v".repeat(labels::MAX_VALUE_BYTES + 1);
        assert!(r.check("endpoint", &long).is_err());
    }

    #[test]
    fn names_past_the_series_limit_are_left_out_and_the_first_stay() {
        // Series: __name__, service_name, clock, env; plus thread: 5.
        let mut r = rules(&[("env", "prod")]);
        let names: Vec<String> = (0..MAX_LABELS).map(|i| format!("l{i:02}")).collect();
        let admitted = names.iter().filter(|n| r.check(n, "v").is_ok()).count();
        assert_eq!(admitted, MAX_LABELS - 5);
        assert_eq!(r.check("l00", "other value"), Ok(()), "admitted for good");
        let last = names.last().unwrap();
        assert!(r.check(last, "v").unwrap_err().contains("per series"));
        assert!(r.first_refusal(last));
        assert!(!r.first_refusal(last), "said once");
    }
}
