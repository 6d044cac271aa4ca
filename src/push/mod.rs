//! Sending each window to a profile server: Grafana Pyroscope's push API
//! (or its legacy `/ingest` endpoint), so a fleet's profiles are queried in
//! one place.
//!
//! The path of a window: the dump thread cuts it from the sampler and
//! symbolises it (as for dump files), encodes it as gzipped pprof
//! ([`crate::Profile::write_pprof`]: `samples/count` and `cpu/nanoseconds`,
//! or `wall/nanoseconds` in wall mode, the period, the window's start and
//! length) and adds it to a bounded outbox (`outbox.rs`). The push thread
//! (`sender.rs`) sends the outbox's windows oldest first, one request per
//! window (`request.rs`), and retries failures with back-off. Labels are
//! checked against the server's rules when the profiler starts
//! (`labels.rs`), and sample labels as each window is encoded
//! (`sample_labels.rs`).
//!
//! `docs/push.md` says what is sent, message by message, and what happens
//! when the server fails.

mod labels;
mod outbox;
pub mod proto;
mod request;
mod sample_labels;
mod sender;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use labels::LabelError;
pub(crate) use sender::Pusher;

/// The default time between pushes (pyroscope-rs's too).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// The default number of windows kept while the server cannot take them.
pub const DEFAULT_QUEUE_WINDOWS: usize = 6;
/// The default time [`crate::Profiler::stop`] gives the last windows.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// The default time limit of one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Which endpoint the windows go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `POST /push.v1.PusherService/Push`: Grafana Pyroscope 1.0 and later,
    /// Grafana Cloud.
    Push,
    /// `POST /ingest?name=...&format=pprof`: older Pyroscope servers, and
    /// tools that speak only that.
    LegacyIngest,
}

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// HTTP basic authentication (Grafana Cloud: the stack's user id and
    /// an access token).
    Basic { user: String, password: String },
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
}

impl fmt::Debug for Auth {
    // Secrets stay out of logs and panics.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, password: <hidden> }}"),
            Auth::Bearer(_) => f.write_str("Bearer(<hidden>)"),
        }
    }
}

/// What the pushing did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Windows handed to the push thread (empty windows are not sent).
    pub windows: u64,
    /// Windows the server accepted.
    pub pushed: u64,
    /// Failed attempts that were tried again (server errors, timeouts,
    /// refused connections).
    pub retried: u64,
    /// Windows dropped unsent: the oldest when the queue was full, and
    /// every window once the server refused the credentials.
    pub dropped: u64,
    /// Windows the server refused for good (a 4xx other than 401, 403,
    /// 408 and 429: too large, labels refused).
    pub refused: u64,
    /// Windows still queued when the stop gave up on them.
    pub unsent: u64,
    /// Windows waiting now.
    pub queued: u64,
    /// Samples in the windows the server accepted.
    pub samples_pushed: u64,
    /// Request bodies the server accepted, in bytes.
    pub bytes_sent: u64,
    /// The last problem, as it was reported.
    pub last_error: Option<String>,
}

impl PushStats {
    /// The counts `btprof record` adds up over processes; windows the
    /// server refused count as dropped.
    pub fn summary(&self) -> crate::formats::process_record::PushSummary {
        crate::formats::process_record::PushSummary {
            windows: self.windows,
            pushed: self.pushed,
            dropped: self.dropped + self.refused,
            unsent: self.unsent,
            bytes_sent: self.bytes_sent,
        }
    }
}

/// Where and how to push: `Push::pyroscope(url)` and the options below,
/// given to [`crate::ProfilerBuilder::push`].
///
/// ```no_run
/// let profiler = btprof::Profiler::builder()
///     .push(
///         btprof::Push::pyroscope("http://pyroscope:4040")
///             .service_name("checkout")
///             .label("env", "prod"),
///     )
///     .start()?;
/// # Ok::<(), btprof::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct Push {
    pub(crate) url: String,
    pub(crate) service_name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) interval: Duration,
    pub(crate) auth: Option<Auth>,
    pub(crate) tenant: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) protocol: Protocol,
    pub(crate) queue_windows: usize,
    pub(crate) flush_timeout: Duration,
    pub(crate) request_timeout: Duration,
    /// Set by the profiler: the rate (the legacy endpoint's `sampleRate`)
    /// and whether wall time is sampled (the profile type).
    pub(crate) hz: u32,
    pub(crate) wall: bool,
    pub(crate) on_error: Arc<dyn Fn(&str) + Send + Sync>,
}

impl fmt::Debug for Push {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Push")
            .field("url", &self.url)
            .field("service_name", &self.service_name)
            .field("labels", &self.labels)
            .field("interval", &self.interval)
            .field("auth", &self.auth)
            .field("tenant", &self.tenant)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("protocol", &self.protocol)
            .field("queue_windows", &self.queue_windows)
            .field("flush_timeout", &self.flush_timeout)
            .finish_non_exhaustive()
    }
}

impl Push {
    /// Pushes to the Pyroscope server at `url` (`http://host:4040`, or a
    /// Grafana Cloud profiles URL), with the push API. The service name
    /// defaults to the program's executable name.
    pub fn pyroscope(url: impl Into<String>) -> Push {
        Push {
            url: url.into(),
            service_name: crate::profile::run_info::program_name(),
            labels: Vec::new(),
            interval: DEFAULT_INTERVAL,
            auth: None,
            tenant: None,
            headers: Vec::new(),
            protocol: Protocol::Push,
            queue_windows: DEFAULT_QUEUE_WINDOWS,
            flush_timeout: DEFAULT_FLUSH_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            hz: 1000,
            wall: false,
            on_error: Arc::new(|message| eprintln!("{message}")),
        }
    }

    /// The application's name on the server (its `service_name` label).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// A label on every window (`env`, `region`, `version`...). Names are
    /// letters, digits and `_`; the server's own names (`__name__`...)
    /// and btprof's (`host`, `pid`, `clock`, `mode`) are taken.
    pub fn label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.push((name.into(), value.into()));
        self
    }

    /// Time between pushes, each a window of that length (default 10 s, at
    /// least 100 ms). With dump files too, they share the interval.
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every;
        self
    }

    /// HTTP basic authentication.
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some(Auth::Basic {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// `Authorization: Bearer TOKEN`.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.auth = Some(Auth::Bearer(token.into()));
        self
    }

    /// The tenant of a multi-tenant server (the `X-Scope-OrgID` header).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// An extra header on every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Which endpoint to use (default [`Protocol::Push`]).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Windows kept while the server cannot take them (default 6); when
    /// full, the oldest is dropped and counted.
    pub fn queue_windows(mut self, windows: usize) -> Self {
        self.queue_windows = windows;
        self
    }

    /// How long [`crate::Profiler::stop`] waits for the last windows to
    /// be sent (default 5 s); those not sent by then are counted in
    /// [`PushStats::unsent`].
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// The time limit of one request (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Where problems are said (default: one line on stderr). Each kind of
    /// problem is said once, and once more when pushing works again.
    pub fn on_error(mut self, report: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_error = Arc::new(report);
        self
    }

    /// The configuration in the environment, for programs configured by
    /// their deployment: `None` unless `BTPROF_PUSH_URL` is set. Also read:
    /// `BTPROF_PUSH_SERVICE_NAME`, `BTPROF_PUSH_LABELS` (`k=v,k=v`),
    /// `BTPROF_PUSH_INTERVAL` (`10s`, `500ms`), `BTPROF_PUSH_BASIC_AUTH`
    /// (`user:password`), `BTPROF_PUSH_TOKEN`, `BTPROF_PUSH_TENANT` and
    /// `BTPROF_PUSH_PROTOCOL` (`push` or `ingest`). An error names the
    /// variable and what it expected.
    pub fn from_env() -> Result<Option<Push>, String> {
        Push::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Push>, String> {
        let Some(url) = var("BTPROF_PUSH_URL").filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let mut push = Push::pyroscope(url);
        if let Some(name) = var("BTPROF_PUSH_SERVICE_NAME") {
            push = push.service_name(name);
        }
        if let Some(labels) = var("BTPROF_PUSH_LABELS") {
            for pair in labels.split(',').filter(|p| !p.trim().is_empty()) {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    format!(
                        "BTPROF_PUSH_LABELS: {pair:?} is not NAME=VALUE (e.g. env=prod,region=eu)"
                    )
                })?;
                push = push.label(k.trim(), v.trim());
            }
        }
        if let Some(every) = var("BTPROF_PUSH_INTERVAL") {
            let every = crate::duration::parse_duration(&every)
                .map_err(|e| format!("BTPROF_PUSH_INTERVAL: {e}"))?;
            push = push.interval(every);
        }
        push = push.credentials_from_vars(&var)?;
        match var("BTPROF_PUSH_PROTOCOL").as_deref() {
            None | Some("push") => {}
            Some("ingest") => push = push.protocol(Protocol::LegacyIngest),
            Some(other) => {
                return Err(format!(
                    "BTPROF_PUSH_PROTOCOL: {other:?} is neither `push` nor `ingest`"
                ))
            }
        }
        Ok(Some(push))
    }

    /// Takes the credentials and the tenant from `BTPROF_PUSH_BASIC_AUTH`
    /// (`user:password`), `BTPROF_PUSH_TOKEN` and `BTPROF_PUSH_TENANT`
    /// where set: a command line can then keep secrets out of its
    /// arguments, which the process list shows.
    pub fn credentials_from_env(self) -> Result<Push, String> {
        self.credentials_from_vars(&|name: &str| std::env::var(name).ok())
    }

    fn credentials_from_vars(
        mut self,
        var: &impl Fn(&str) -> Option<String>,
    ) -> Result<Push, String> {
        if let Some(auth) = var("BTPROF_PUSH_BASIC_AUTH") {
            let (user, password) = auth
                .split_once(':')
                .ok_or("BTPROF_PUSH_BASIC_AUTH: expected USER:PASSWORD")?;
            self = self.basic_auth(user, password);
        }
        if let Some(token) = var("BTPROF_PUSH_TOKEN") {
            self = self.bearer_token(token);
        }
        if let Some(tenant) = var("BTPROF_PUSH_TENANT") {
            self = self.tenant(tenant);
        }
        Ok(self)
    }

    /// Checks what can be checked before anything starts: the URL's
    /// scheme, the labels (against the server's rules), the numbers.
    /// [`crate::ProfilerBuilder::start`] does; a command line that hands
    /// the settings to another process checks them first with this.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!(
                "push URL {:?} must start with http:// or https://",
                self.url
            ));
        }
        if self.interval < crate::record::MIN_INTERVAL {
            return Err(format!(
                "a push interval of {:?} is too short; use at least {:?}",
                self.interval,
                crate::record::MIN_INTERVAL
            ));
        }
        if self.queue_windows == 0 {
            return Err("a push queue of 0 windows could hold nothing; use at least 1".into());
        }
        request::check_labels(self).map_err(|e| e.to_string())
    }

    /// btprof's own labels, added before the user's: the host, the
    /// process, btprof's version and the mode (the clock, which may differ
    /// from window to window, is added per window).
    pub(crate) fn add_own_labels(&mut self) {
        let own = [
            ("host", crate::profile::run_info::host_name()),
            ("pid", std::process::id().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("mode", if self.wall { "wall" } else { "cpu" }.to_owned()),
        ];
        let mut labels: Vec<(String, String)> = own
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        labels.append(&mut self.labels);
        self.labels = labels;
    }

    /// The `__name__` label: the profile type's name on the server.
    pub(crate) fn profile_type(&self) -> &'static str {
        if self.wall {
            "wall"
        } else {
            "process_cpu"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_environment_configures_a_push() {
        assert!(Push::from_vars(vars(&[])).unwrap().is_none());
        let push = Push::from_vars(vars(&[
            ("BTPROF_PUSH_URL", "https://p.example"),
            ("BTPROF_PUSH_SERVICE_NAME", "svc"),
            ("BTPROF_PUSH_LABELS", "env=prod, region=eu"),
            ("BTPROF_PUSH_INTERVAL", "500ms"),
            ("BTPROF_PUSH_BASIC_AUTH", "123:tok:en"),
            ("BTPROF_PUSH_TENANT", "t1"),
            ("BTPROF_PUSH_PROTOCOL", "ingest"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(push.service_name, "svc");
        assert_eq!(
            push.labels,
            [
                ("env".into(), "prod".into()),
                ("region".into(), "eu".into())
            ]
        );
        assert_eq!(push.interval, Duration::from_millis(500));
        assert_eq!(
            push.auth,
            Some(Auth::Basic {
                user: "123".into(),
                password: "tok:en".into()
            })
        );
        assert_eq!(push.protocol, Protocol::LegacyIngest);
        assert!(push.validate().is_ok());
        let bad = Push::from_vars(vars(&[
            ("BTPROF_PUSH_URL", "http://x"),
            ("BTPROF_PUSH_LABELS", "env"),
        ]));
        assert!(bad.err().unwrap().contains("BTPROF_PUSH_LABELS"));
        let bad = Push::from_vars(vars(&[
            ("BTPROF_PUSH_URL", "http://x"),
            ("BTPROF_PUSH_INTERVAL", "10 parsecs"),
        ]));
        assert!(bad.err().unwrap().contains("BTPROF_PUSH_INTERVAL"));
    }

    #[test]
    fn what_cannot_work_is_refused_before_the_start() {
        assert!(Push::pyroscope("pyroscope:4040").validate().is_err());
        let short = Push::pyroscope("http://x").interval(Duration::from_millis(10));
        assert!(short.validate().unwrap_err().contains("too short"));
        let bad = Push::pyroscope("http://x").label("my-env", "x");
        assert!(bad.validate().unwrap_err().contains("my-env"));
    }

    #[test]
    fn own_labels_come_first_and_clash_with_the_users() {
        let mut push = Push::pyroscope("http://x").label("pid", "1");
        push.add_own_labels();
        let names: Vec<&str> = push.labels.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            names.starts_with(&["host", "pid", "version", "mode"]),
            "{names:?}"
        );
        assert!(push.validate().unwrap_err().contains("pid"));
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let push = Push::pyroscope("http://x").basic_auth("u", "s3cret");
        assert!(!format!("{push:?}").contains("s3cret"));
        let push = Push::pyroscope("http://x").bearer_token("t0ken");
        assert!(!format!("{push:?}").contains("t0ken"));
    }
}
