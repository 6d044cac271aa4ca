//! What one window becomes on the wire: the URL, the headers and the body
//! of its HTTP request, for the push API or the legacy `/ingest`
//! endpoint. Pure, so that every rule is tested without a server.

use prost::Message;

use super::labels;
use super::proto::{LabelPair, PushRequest, RawProfileSeries, RawSample};
use super::{Auth, Protocol, Push};

/// One window, encoded once and sent as often as retries need.
#[derive(Clone, Debug)]
pub struct Window {
    /// Gzipped pprof of the window.
    pub pprof: Vec<u8>,
    /// The window's start and end, nanoseconds since the Unix epoch.
    pub start_unix_nanos: i64,
    pub end_unix_nanos: i64,
    /// Samples in the window (for the stats and the tests).
    pub samples: u64,
    /// A UUID, the same on every retry: the server's profile id.
    pub id: String,
    /// The clock that paced the window's samples (its `clock` label).
    pub clock: String,
}

impl Window {
    /// The window `profile` (symbolised), encoded with the sample labels
    /// `keep` accepts; `None` if it has no samples (an idle program:
    /// nothing worth a request) or cannot be encoded.
    pub(crate) fn of(
        profile: &crate::Profile,
        keep: impl FnMut(&str, &str) -> bool,
        gzip: &mut crate::formats::pprof::Gzip,
    ) -> Option<Window> {
        if profile.is_empty() {
            return None;
        }
        let mut pprof = Vec::new();
        profile.write_pprof_keeping(keep, gzip, &mut pprof).ok()?;
        let info = profile.run_info();
        let nanos = |secs: f64| (secs * 1e9).round() as i64;
        let start = info.map_or(0, |i| nanos(i.start_unix_secs));
        Some(Window {
            pprof,
            start_unix_nanos: start,
            end_unix_nanos: start + info.map_or(0, |i| nanos(i.duration_secs)),
            samples: profile.total_samples(),
            id: random_uuid(),
            // The names `--clock` takes (`perf`, `thread`).
            clock: info
                .and_then(|i| btprof_sampler::SampleClock::from_name(&i.clock))
                .map_or_else(String::new, |c| c.short_name().to_owned()),
        })
    }
}

/// 64 random bits: each `RandomState` is keyed from the OS's randomness
/// (then incremented per state in a thread), and hashing the time with it
/// mixes them. No cryptographic need: profile ids and back-off jitter.
pub(super) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A random (version 4) UUID, the form the server parses profile ids in.
fn random_uuid() -> String {
    let (hi, lo) = (random_u64(), random_u64());
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hi.to_be_bytes());
    b[8..].copy_from_slice(&lo.to_be_bytes());
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// An HTTP request ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The series' labels: `__name__` (the profile type), `service_name`,
/// btprof's own, then the user's, sorted by name as the server sorts them.
pub fn series_labels(config: &Push, window: &Window) -> Vec<LabelPair> {
    let mut pairs: Vec<LabelPair> = Vec::with_capacity(config.labels.len() + 2);
    let mut add = |name: &str, value: &str| {
        pairs.push(LabelPair {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    };
    add("__name__", config.profile_type());
    add("service_name", &config.service_name);
    if !window.clock.is_empty() {
        add("clock", &window.clock);
    }
    for (name, value) in &config.labels {
        add(name, value);
    }
    pairs.sort_by(|a, b| a.name.cmp(&b.name));
    pairs
}

/// The request that pushes `window`.
pub fn build(config: &Push, window: &Window) -> Request {
    let base = config.url.trim_end_matches('/');
    let mut headers = Vec::new();
    match &config.auth {
        Some(Auth::Basic { user, password }) => headers.push((
            "Authorization".to_owned(),
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes())),
        )),
        Some(Auth::Bearer(token)) => {
            headers.push(("Authorization".to_owned(), format!("Bearer {token}")))
        }
        None => {}
    }
    if let Some(tenant) = &config.tenant {
        headers.push(("X-Scope-OrgID".to_owned(), tenant.clone()));
    }
    headers.extend(config.headers.iter().cloned());
    match config.protocol {
        Protocol::Push => {
            headers.push(("Content-Type".to_owned(), "application/proto".to_owned()));
            // The Connect protocol's unary call, which Pyroscope serves:
            // a plain POST of the message, no envelope.
            headers.push(("Connect-Protocol-Version".to_owned(), "1".to_owned()));
            let body = PushRequest {
                series: vec![RawProfileSeries {
                    labels: series_labels(config, window),
                    samples: vec![RawSample {
                        raw_profile: window.pprof.clone(),
                        id: window.id.clone(),
                    }],
                }],
            }
            .encode_to_vec();
            Request {
                url: format!("{base}/push.v1.PusherService/Push"),
                headers,
                body,
            }
        }
        Protocol::LegacyIngest => {
            headers.push((
                "Content-Type".to_owned(),
                "application/octet-stream".to_owned(),
            ));
            let seconds = |nanos: i64| nanos.div_euclid(1_000_000_000);
            let url = format!(
                "{base}/ingest?name={}&from={}&until={}&format=pprof&sampleRate={}&spyName=btprof",
                percent_encode(&legacy_name(config, window)),
                seconds(window.start_unix_nanos),
                // At least a second after `from`: the server rounds to
                // seconds and drops an empty range.
                seconds(window.end_unix_nanos).max(seconds(window.start_unix_nanos) + 1),
                config.hz,
            );
            Request {
                url,
                headers,
                body: window.pprof.clone(),
            }
        }
    }
}

/// `service{k=v,...}`, the legacy endpoint's name with labels
/// (`__name__` is implied by the profile's sample types there).
fn legacy_name(config: &Push, window: &Window) -> String {
    let pairs: Vec<String> = series_labels(config, window)
        .into_iter()
        .filter(|p| p.name != "__name__" && p.name != "service_name")
        .map(|p| format!("{}={}", p.name, p.value))
        .collect();
    format!("{}{{{}}}", config.service_name, pairs.join(","))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Standard base64 with padding (for basic authentication).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Checks that `labels` can be sent at all (see [`labels`]).
pub fn check_labels(config: &Push) -> Result<(), labels::LabelError> {
    let legacy = config.protocol == Protocol::LegacyIngest;
    if config.service_name.is_empty() {
        return Err(labels::LabelError {
            name: "service_name".into(),
            reason: "the service name is empty; the server refuses a series without one".into(),
        });
    }
    if legacy {
        labels::check_user_label("service_name", &config.service_name, true)?;
    }
    for (name, value) in &config.labels {
        labels::check_user_label(name, value, legacy)?;
    }
    let mut names: Vec<&str> = vec!["__name__", "service_name", "clock"];
    names.extend(config.labels.iter().map(|(n, _)| n.as_str()));
    labels::check_set(&names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Push {
        let mut c = Push::pyroscope("http://pyro:4040/");
        c.service_name = "checkout".into();
        c.labels = vec![("region".into(), "eu west".into())];
        c
    }

    fn window() -> Window {
        Window {
            pprof: vec![0x1f, 0x8b, 1, 2],
            start_unix_nanos: 1_700_000_000_400_000_000,
            end_unix_nanos: 1_700_000_001_200_000_000,
            samples: 3,
            id: "0b8c6a2e-0d0f-4a8e-9c59-3c5e1d2f4a6b".into(),
            clock: "perf".into(),
        }
    }

    #[test]
    fn a_push_is_the_connect_call_with_the_series_labels() {
        let r = build(&config(), &window());
        assert_eq!(r.url, "http://pyro:4040/push.v1.PusherService/Push");
        assert!(r
            .headers
            .contains(&("Content-Type".into(), "application/proto".into())));
        let msg = PushRequest::decode(&r.body[..]).unwrap();
        let series = &msg.series[0];
        let names: Vec<&str> = series.labels.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["__name__", "clock", "region", "service_name"],
            "sorted"
        );
        assert_eq!(series.labels[0].value, "process_cpu");
        assert_eq!(series.samples[0].raw_profile, window().pprof);
        assert_eq!(series.samples[0].id, window().id);
    }

    #[test]
    fn authentication_and_tenant_are_headers() {
        let mut c = config();
        c.auth = Some(Auth::Basic {
            user: "Aladdin".into(),
            password: "open sesame".into(),
        });
        c.tenant = Some("team-a".into());
        let r = build(&c, &window());
        // RFC 7617's example.
        assert!(r.headers.contains(&(
            "Authorization".into(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==".into()
        )));
        assert!(r
            .headers
            .contains(&("X-Scope-OrgID".into(), "team-a".into())));
        c.auth = Some(Auth::Bearer("tok".into()));
        let r = build(&c, &window());
        assert!(r
            .headers
            .contains(&("Authorization".into(), "Bearer tok".into())));
    }

    #[test]
    fn the_legacy_endpoint_packs_labels_into_the_name() {
        let mut c = config();
        c.protocol = Protocol::LegacyIngest;
        c.labels = vec![
            ("region".into(), "eu".into()),
            ("env".into(), "prod".into()),
        ];
        let r = build(&c, &window());
        assert_eq!(
            r.url,
            "http://pyro:4040/ingest?name=checkout%7Bclock%3Dperf%2Cenv%3Dprod%2Cregion%3Deu%7D\
             &from=1700000000&until=1700000001&format=pprof&sampleRate=1000&spyName=btprof"
        );
        assert_eq!(r.body, window().pprof);
    }

    #[test]
    fn labels_the_server_refuses_are_refused_here() {
        let mut c = config();
        assert!(check_labels(&c).is_ok());
        c.protocol = Protocol::LegacyIngest;
        let e = check_labels(&c).unwrap_err();
        assert_eq!(e.name, "region", "a space in a legacy value");
        c.protocol = Protocol::Push;
        c.labels.push(("service_name".into(), "x".into()));
        assert!(check_labels(&c).is_err(), "service_name twice");
        c.labels.clear();
        c.service_name.clear();
        assert!(check_labels(&c).is_err());
    }

    #[test]
    fn profile_ids_are_distinct_version_4_uuids() {
        let (a, b) = (random_uuid(), random_uuid());
        assert_ne!(a, b);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
        assert_eq!(&a[14..15], "4", "version 4: {a}");
        assert!("89ab".contains(&a[19..20]), "RFC 4122 variant: {a}");
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }
}
