//! `--push URL` and its options, shared by `--pid-self` and `record`:
//! send each window to a Grafana Pyroscope server as the run goes on.
//!
//! Credentials are read from the environment only
//! (`BTPROF_PUSH_TOKEN`, `BTPROF_PUSH_BASIC_AUTH`, `BTPROF_PUSH_TENANT`),
//! never from arguments, which other users of the machine can read in the
//! process list.

use std::time::Duration;

use btprof::Push;
use clap::Args;

use crate::duration::parse_duration;

/// The variables `btprof record` sets in CMD's environment for the
/// preloaded profiler (read by `btprof::Push::from_env`).
const URL: &str = "BTPROF_PUSH_URL";
const SERVICE_NAME: &str = "BTPROF_PUSH_SERVICE_NAME";
const LABELS: &str = "BTPROF_PUSH_LABELS";
const INTERVAL: &str = "BTPROF_PUSH_INTERVAL";

#[derive(Args, Debug, Clone, Default)]
pub struct PushArgs {
    /// Send each window to the Grafana Pyroscope server at URL as the run
    /// goes on (http://host:4040, or a Grafana Cloud profiles URL). A
    /// token, basic auth or a tenant come from BTPROF_PUSH_TOKEN,
    /// BTPROF_PUSH_BASIC_AUTH (user:password) and BTPROF_PUSH_TENANT.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,

    /// The application's name on the server [default: the program's
    /// executable name].
    #[arg(long, value_name = "NAME", requires = "push")]
    pub service_name: Option<String>,

    /// A label on every window pushed: env=prod (repeatable).
    #[arg(long = "label", value_name = "NAME=VALUE", requires = "push", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// Time between pushes, each a window that long: 10s, 1s.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, requires = "push")]
    pub push_interval: Duration,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE (e.g. env=prod)"))?;
    Ok((name.to_owned(), value.to_owned()))
}

impl PushArgs {
    /// The push these options ask for, with the credentials of the
    /// environment; `None` without `--push`.
    pub fn push(&self) -> Result<Option<Push>, String> {
        let Some(url) = &self.push else {
            return Ok(None);
        };
        let mut push = Push::pyroscope(url.clone())
            .interval(self.push_interval)
            .credentials_from_env()?;
        if let Some(name) = &self.service_name {
            push = push.service_name(name.clone());
        }
        for (name, value) in &self.labels {
            push = push.label(name.clone(), value.clone());
        }
        Ok(Some(push))
    }

    /// The environment that makes a preloaded profiler push as asked
    /// (credentials pass through from btprof's own environment).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let Some(url) = &self.push else {
            return Vec::new();
        };
        let mut vars = vec![
            (URL, url.clone()),
            (INTERVAL, format!("{}ms", self.push_interval.as_millis())),
        ];
        if let Some(name) = &self.service_name {
            vars.push((SERVICE_NAME, name.clone()));
        }
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            vars.push((LABELS, labels.join(",")));
        }
        vars
    }
}

/// One line on what was pushed, for the end of a run.
pub fn summary(stats: &btprof::PushStats) -> String {
    let mut line = format!(
        "pushed {} of {} windows ({} bytes)",
        stats.pushed, stats.windows, stats.bytes_sent
    );
    for (count, what) in [
        (stats.retried, "attempts retried"),
        (stats.dropped, "dropped"),
        (stats.refused, "refused by the server"),
        (stats.unsent, "not sent by the stop's deadline"),
    ] {
        if count > 0 {
            line += &format!(", {count} {what}");
        }
    }
    if let Some(e) = stats
        .last_error
        .as_ref()
        .filter(|_| stats.pushed < stats.windows)
    {
        line += &format!("; last problem: {e}");
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_as_name_value() {
        assert_eq!(
            parse_label("env=prod").unwrap(),
            ("env".into(), "prod".into())
        );
        assert_eq!(parse_label("q=a=b").unwrap(), ("q".into(), "a=b".into()));
        assert!(parse_label("env").unwrap_err().contains("NAME=VALUE"));
    }

    #[test]
    fn a_preloaded_profiler_gets_the_options_through_the_environment() {
        let args = PushArgs {
            push: Some("http://p:4040".into()),
            service_name: Some("svc".into()),
            labels: vec![("env".into(), "ci".into()), ("team".into(), "a".into())],
            push_interval: Duration::from_secs(1),
        };
        let env = args.env();
        assert!(env.contains(&(URL, "http://p:4040".into())));
        assert!(env.contains(&(INTERVAL, "1000ms".into())));
        assert!(env.contains(&(LABELS, "env=ci,team=a".into())));
        assert!(PushArgs::default().env().is_empty());
    }
}
