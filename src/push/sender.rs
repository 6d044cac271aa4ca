//! The push thread: sends the outbox's windows one at a time, oldest
//! first, and retries with back-off.
//!
//! It is btprof's own thread (excluded from sampling, every signal
//! blocked), so a slow or dead server delays nothing of the application's
//! and nothing of the sampler's: the dump thread only adds a window to the
//! outbox. Each request has a time limit, and at stop the last windows get
//! [`Push::flush_timeout`](super::Push::flush_timeout) in all, after which
//! the thread is left to finish its request alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::outbox::Outbox;
use super::request::{self, Window};
use super::sample_labels::SampleLabels;
use super::{Push, PushStats};
use crate::formats::pprof::Gzip;

/// How a request ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// 2xx.
    Sent,
    /// 401 or 403: the credentials are wrong; retrying cannot help.
    Unauthorized(u16, String),
    /// Another 4xx (but 408 and 429): the server will never take this
    /// window (too large, labels refused).
    Refused(u16, String),
    /// 5xx, 408, 429, or no answer at all: worth another try.
    Failed(String),
}

/// What the push thread and the profiler share.
pub(crate) struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Set once the thread has given up at stop (or finished).
    done: AtomicBool,
}

struct State {
    outbox: Outbox,
    stats: PushStats,
    /// Stop asked: send what is left until this moment, then end.
    flush_until: Option<Instant>,
    /// No attempt before this moment (back-off).
    retry_at: Option<Instant>,
    /// The credentials were refused: every window is dropped from then on.
    unauthorized: bool,
    /// The kinds of trouble said since the last window sent, so that each
    /// is said once, not once per window.
    reported: Vec<String>,
}

/// The running push thread.
pub(crate) struct Pusher {
    shared: Arc<Shared>,
    config: Arc<Push>,
    /// Which sample labels are sent, and the compressor kept from window
    /// to window (used on the dump thread only).
    encoding: Mutex<(SampleLabels, Gzip)>,
    thread: Option<JoinHandle<()>>,
}

impl Pusher {
    /// Starts the push thread.
    pub(crate) fn start(config: Push) -> std::io::Result<Pusher> {
        let config = Arc::new(config);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                outbox: Outbox::new(config.queue_windows),
                stats: PushStats::default(),
                flush_until: None,
                retry_at: None,
                unauthorized: false,
                reported: Vec::new(),
            }),
            wake: Condvar::new(),
            done: AtomicBool::new(false),
        });
        let (thread_shared, thread_config) = (shared.clone(), config.clone());
        let thread = btprof_sampler::spawn_with_signals_blocked("btprof-push", move || {
            let _excluded = btprof_sampler::exclude_current_thread();
            run(&thread_shared, &thread_config);
            thread_shared.done.store(true, Ordering::Release);
            thread_shared.wake.notify_all();
        })?;
        Ok(Pusher {
            shared,
            encoding: Mutex::new((SampleLabels::new(&config), Gzip::new())),
            config,
            thread: Some(thread),
        })
    }

    /// The window of `profile`, encoded with the sample labels the server
    /// takes; each name left out is said once for the profiler's life
    /// (`sample_labels.rs`): no delivery problem, so no recovery to say.
    pub(crate) fn window(&self, profile: &crate::Profile) -> Option<Window> {
        let mut to_say: Vec<String> = Vec::new();
        let window = {
            let mut encoding = self.encoding.lock().unwrap_or_else(|e| e.into_inner());
            let (rules, gzip) = &mut *encoding;
            let keep = |name: &str, value: &str| match rules.check(name, value) {
                Ok(()) => true,
                Err(why) => {
                    if rules.first_refusal(name) {
                        to_say.push(format!("sample label {name:?} is not sent: {why}"));
                    }
                    false
                }
            };
            Window::of(profile, keep, gzip)
        };
        for message in to_say {
            (self.config.on_error)(&format!("btprof: push to {}: {message}", self.config.url));
        }
        window
    }

    /// Queues `window` for sending (never blocks on the network).
    pub(crate) fn add(&self, window: Window) {
        let mut state = self.shared.lock();
        state.stats.windows += 1;
        if state.unauthorized {
            state.stats.dropped += 1;
            return;
        }
        if state.outbox.add(window).is_some() {
            state.stats.dropped += 1;
            let message = format!(
                "the push queue is full ({} windows): dropped the oldest window",
                self.config.queue_windows
            );
            state.report("queue full", &message, &self.config);
        }
        state.stats.queued = state.outbox.len() as u64;
        drop(state);
        self.shared.wake.notify_all();
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> PushStats {
        self.shared.lock().stats.clone()
    }

    /// Sends what is queued for at most the flush timeout, then stops the
    /// thread (or leaves it to end its last request alone); the windows
    /// not sent are counted in [`PushStats::unsent`].
    pub(crate) fn finish(&mut self) -> PushStats {
        let until = Instant::now() + self.config.flush_timeout;
        let mut state = self.shared.lock();
        state.flush_until = Some(until);
        // A window waiting out a back-off gets its try now.
        state.retry_at = None;
        self.shared.wake.notify_all();
        while !self.shared.done.load(Ordering::Acquire) {
            let now = Instant::now();
            // A little past the bound: the thread notices it between
            // requests, and a request's own limit ends at the bound.
            let Some(left) = (until + Duration::from_millis(200)).checked_duration_since(now)
            else {
                break;
            };
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.stats.unsent = state.outbox.len() as u64;
        state.stats.queued = 0;
        let stats = state.stats.clone();
        drop(state);
        if self.shared.done.load(Ordering::Acquire) {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
        // Otherwise the thread is in a request that ends by its own time
        // limit; it then sees the flush is over and returns.
        stats
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let mut state = self.shared.lock();
            state.flush_until = Some(Instant::now());
            drop(state);
            self.shared.wake.notify_all();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Says `message` once for each new kind of trouble.
    fn report(&mut self, kind: &str, message: &str, config: &Push) {
        self.stats.last_error = Some(message.to_owned());
        if !self.reported.iter().any(|k| k == kind) {
            self.reported.push(kind.to_owned());
            (config.on_error)(&format!("btprof: push to {}: {message}", config.url));
        }
    }
}

/// The push thread's loop.
fn run(shared: &Shared, config: &Push) {
    let agent = agent();
    let mut state = shared.lock();
    loop {
        let now = Instant::now();
        let flushing = state.flush_until;
        if flushing.is_some_and(|until| now >= until)
            || (flushing.is_some() && state.outbox.is_empty())
        {
            return;
        }
        let wait_until = match (state.outbox.next(), state.retry_at) {
            (None, _) => None,
            (Some(_), Some(at)) if at > now => Some(at),
            (Some(window), _) => {
                let window = window.clone();
                let limit = match flushing {
                    Some(until) => until.saturating_duration_since(now),
                    None => config.request_timeout,
                };
                drop(state);
                let req = request::build(config, &window);
                let outcome = send(&agent, &req, limit);
                state = shared.lock();
                settle(&mut state, config, &window, req.body.len(), outcome);
                continue;
            }
        };
        let timeout = [wait_until, flushing]
            .into_iter()
            .flatten()
            .min()
            .map_or(Duration::from_secs(1), |at| {
                at.saturating_duration_since(now)
            });
        state = shared
            .wake
            .wait_timeout(state, timeout.max(Duration::from_millis(1)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Counts what one attempt did, and takes the window out where it is done
/// with (sent, or never to be accepted).
fn settle(state: &mut State, config: &Push, window: &Window, bytes: usize, outcome: Outcome) {
    match outcome {
        Outcome::Sent => {
            state.outbox.remove(&window.id);
            state.outbox.succeeded();
            state.stats.pushed += 1;
            state.stats.samples_pushed += window.samples;
            state.stats.bytes_sent += bytes as u64;
            state.retry_at = None;
            if !std::mem::take(&mut state.reported).is_empty() {
                (config.on_error)(&format!("btprof: push to {}: sending again", config.url));
            }
        }
        Outcome::Unauthorized(status, body) => {
            state.unauthorized = true;
            state.stats.dropped += state.outbox.drain().len() as u64;
            let message = format!(
                "the server refused the credentials (HTTP {status}{}); no more windows are \
                 sent: check the token, the basic-auth user and password, and the tenant",
                brief(&body)
            );
            state.report("unauthorized", &message, config);
        }
        Outcome::Refused(status, body) => {
            state.outbox.remove(&window.id);
            state.stats.refused += 1;
            let message = format!(
                "the server refused a window (HTTP {status}{}); it is not sent again",
                brief(&body)
            );
            state.report(&format!("refused {status}"), &message, config);
        }
        Outcome::Failed(why) => {
            state.stats.retried += 1;
            let wait = state.outbox.failed(request::random_u64());
            state.retry_at = Some(Instant::now() + wait);
            let message = format!("{why}; retrying (the queue keeps the newest windows)");
            state.report("failing", &message, config);
        }
    }
    state.stats.queued = state.outbox.len() as u64;
}

/// `: BODY`, the server's message cut to one short line, or nothing.
fn brief(body: &str) -> String {
    let line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        _ if line.is_empty() => String::new(),
        Some((cut, _)) => format!(": {}...", &line[..cut]),
        None => format!(": {line}"),
    }
}

/// The HTTP client: TLS with the platform-independent Mozilla roots, no
/// redirects (a push is a POST), statuses as values, not errors.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(10)))
        .user_agent(format!("btprof/{}", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Sends `req` within `limit`.
fn send(agent: &ureq::Agent, req: &request::Request, limit: Duration) -> Outcome {
    let mut builder = agent
        .post(&req.url)
        .config()
        .timeout_global(Some(limit.max(Duration::from_millis(1))))
        .build();
    for (name, value) in &req.headers {
        builder = builder.header(name, value);
    }
    match builder.send(&req.body[..]) {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let body = response
                .body_mut()
                .with_config()
                .limit(4096)
                .read_to_string()
                .unwrap_or_default();
            match status {
                200..=299 => Outcome::Sent,
                401 | 403 => Outcome::Unauthorized(status, body),
                408 | 429 => Outcome::Failed(format!("HTTP {status}{}", brief(&body))),
                400..=499 => Outcome::Refused(status, body),
                _ => Outcome::Failed(format!("HTTP {status}{}", brief(&body))),
            }
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}
