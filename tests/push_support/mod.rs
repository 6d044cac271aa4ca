//! A Pyroscope receiver for the push tests: an HTTP server on loopback
//! that decodes each push as Pyroscope's distributor and ingester do
//! (`pkg/validation/validate.go`, the ingester's `uuid.Parse` of the
//! profile id, gzip then pprof, the split by sample labels of
//! `pkg/pprof/split`), and that can misbehave on request. Like
//! Pyroscope's server it keeps a connection open after an answered push,
//! so clients reuse it (the scripted failures close theirs).
//!
//! Its messages are its own, written from `api/push/v1/push.proto`, not
//! btprof's, so a field number wrong in btprof fails here.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use btprof::formats::pprof::proto::Profile as Pprof;
use prost::Message;

#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    pub id: String,
}

/// How the receiver answers the next requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Validates and answers 200 (400 with the reason if invalid).
    Accept,
    /// Answers this status without looking.
    Status(u16),
    /// Reads the request and never answers.
    Hang,
    /// Reads part of the body, then resets the connection.
    ResetMidBody,
}

/// One push the receiver accepted.
#[derive(Clone, Debug)]
pub struct Pushed {
    pub labels: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub id: String,
    pub profile: Pprof,
    /// The gzipped pprof as sent.
    pub raw: Vec<u8>,
}

impl Pushed {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Each sample's string labels (`thread` included) and samples.
    pub fn sample_labels(&self) -> Vec<(Vec<(&str, &str)>, i64)> {
        let s = |i: i64| self.profile.string_table[i as usize].as_str();
        self.profile
            .sample
            .iter()
            .map(|sample| {
                let labels = sample.label.iter().map(|l| (s(l.key), s(l.str))).collect();
                (labels, sample.value[0])
            })
            .collect()
    }

    /// The profile's samples (its first value, `samples/count`).
    pub fn samples(&self) -> i64 {
        self.profile.sample.iter().map(|s| s.value[0]).sum()
    }
}

#[derive(Default)]
pub struct Received {
    pub accepted: Vec<Pushed>,
    /// Requests seen, however answered.
    pub requests: usize,
    /// Why pushes were invalid (a test expects none).
    pub invalid: Vec<String>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Received>>,
    behaviour: Arc<Mutex<Vec<Behaviour>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    /// Listens on `addr` (port 0: any free port). `script` is the
    /// behaviour for the first requests, one each; the last repeats.
    pub fn start(addr: &str, script: &[Behaviour]) -> Receiver {
        let listener = TcpListener::bind(addr).expect("bind");
        listener.set_nonblocking(true).unwrap();
        let receiver = Receiver {
            addr: listener.local_addr().unwrap(),
            received: Arc::default(),
            behaviour: Arc::new(Mutex::new(script.to_vec())),
            stop: Arc::default(),
        };
        let (received, behaviour, stop) = (
            receiver.received.clone(),
            receiver.behaviour.clone(),
            receiver.stop.clone(),
        );
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (received, script) = (received.clone(), behaviour.clone());
                        thread::spawn(move || serve(stream, &script, &received));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        receiver
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn accepted(&self) -> Vec<Pushed> {
        self.received.lock().unwrap().accepted.clone()
    }

    pub fn requests(&self) -> usize {
        self.received.lock().unwrap().requests
    }

    pub fn invalid(&self) -> Vec<String> {
        self.received.lock().unwrap().invalid.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request: its path, headers and body.
/// A request as read: its path, headers (names in lower case) and body.
type Request = (String, Vec<(String, String)>, Vec<u8>);

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some((path, headers, body))
}

/// Answers `status`; with `keep_alive` the connection stays open for the
/// client's next request, as Pyroscope's HTTP server (Go's `net/http`)
/// keeps it.
fn respond(stream: &mut TcpStream, status: u16, body: &str, keep_alive: bool) {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: {connection}\r\n\r\n{body}",
        body.len()
    );
}

/// The behaviour for the next request: the script's first, the last
/// repeating.
fn next_behaviour(script: &Mutex<Vec<Behaviour>>) -> Behaviour {
    let mut script = script.lock().unwrap();
    if script.len() > 1 {
        script.remove(0)
    } else {
        script[0]
    }
}

/// Serves one connection: request after request while the answers keep it
/// open (those of [`Behaviour::Accept`]); each request takes the next
/// behaviour of the script once its first bytes arrive, so a connection
/// the client closes unused takes none.
fn serve(mut stream: TcpStream, script: &Mutex<Vec<Behaviour>>, received: &Mutex<Received>) {
    stream.set_nonblocking(false).unwrap();
    let mut first = [0u8; 1];
    while matches!(stream.peek(&mut first), Ok(1..)) {
        if !serve_one(&mut stream, next_behaviour(script), received) {
            return;
        }
    }
}

/// Serves one request as `behaviour` says; whether the connection stays
/// open.
fn serve_one(stream: &mut TcpStream, behaviour: Behaviour, received: &Mutex<Received>) -> bool {
    if behaviour == Behaviour::ResetMidBody {
        let mut part = [0u8; 64];
        let _ = stream.read(&mut part);
        received.lock().unwrap().requests += 1;
        // Linger 0: close sends a reset, not a clean end.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid socket and a linger struct of the size given.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&*stream),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        return false;
    }
    let Some((path, headers, body)) = read_request(stream) else {
        return false;
    };
    received.lock().unwrap().requests += 1;
    match behaviour {
        Behaviour::Hang => {
            thread::sleep(Duration::from_secs(3600));
            false
        }
        Behaviour::Status(status) => {
            respond(stream, status, "scripted failure", false);
            false
        }
        _ => {
            match validate(&path, &headers, &body) {
                Ok(pushes) => {
                    received.lock().unwrap().accepted.extend(pushes);
                    respond(stream, 200, "", true);
                }
                Err(why) => {
                    received.lock().unwrap().invalid.push(why.clone());
                    respond(stream, 400, &why, true);
                }
            }
            true
        }
    }
}

/// What Pyroscope checks before it takes a push.
fn validate(path: &str, headers: &[(String, String)], body: &[u8]) -> Result<Vec<Pushed>, String> {
    if path != "/push.v1.PusherService/Push" {
        return Err(format!("unknown path {path}"));
    }
    let content_type = headers.iter().find(|(k, _)| k == "content-type");
    if content_type.map(|(_, v)| v.as_str()) != Some("application/proto") {
        return Err(format!("content type {content_type:?}"));
    }
    let request = PushRequest::decode(body).map_err(|e| format!("PushRequest: {e}"))?;
    let mut pushes = Vec::new();
    for series in request.series {
        let mut labels: Vec<(String, String)> = series
            .labels
            .iter()
            .map(|l| (l.name.clone(), l.value.clone()))
            .collect();
        labels.sort();
        validate_labels(&labels)?;
        for sample in series.samples {
            if !is_uuid(&sample.id) {
                return Err(format!("profile id {:?} is not a UUID", sample.id));
            }
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&sample.raw_profile[..])
                .read_to_end(&mut raw)
                .map_err(|e| format!("gzip: {e}"))?;
            let profile = Pprof::decode(&raw[..]).map_err(|e| format!("pprof: {e}"))?;
            if profile.location.iter().any(|l| l.id == 0)
                || profile.function.iter().any(|f| f.id == 0)
            {
                return Err("location or function id 0".into());
            }
            for t in &profile.sample_type {
                if profile.string_table[t.r#type as usize].contains('-') {
                    return Err("sample type contains -".into());
                }
            }
            // The server splits the profile by its samples' string labels
            // into series of the request's labels plus the sample's (a
            // label already there wins; span ids do not split), and
            // validates each series as the request's.
            for s in &profile.sample {
                let mut series = labels.clone();
                for l in s.label.iter().filter(|l| l.str != 0) {
                    let name = &profile.string_table[l.key as usize];
                    let value = &profile.string_table[l.str as usize];
                    let known = series.iter().any(|(k, _)| k == name);
                    if !known && name != "span_id" && name != "profile_id" {
                        series.push((name.clone(), value.clone()));
                    }
                }
                series.sort();
                validate_labels(&series).map_err(|e| format!("a sample's series: {e}"))?;
            }
            pushes.push(Pushed {
                labels: labels.clone(),
                headers: headers.to_vec(),
                id: sample.id,
                profile,
                raw: sample.raw_profile,
            });
        }
    }
    Ok(pushes)
}

fn validate_labels(labels: &[(String, String)]) -> Result<(), String> {
    if labels.is_empty() || labels.len() > 30 {
        return Err(format!("{} labels", labels.len()));
    }
    let get = |name: &str| {
        labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let metric = get("__name__").unwrap_or("");
    let metric_ok = metric.chars().enumerate().all(|(i, c)| {
        c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
    });
    if metric.is_empty() || !metric_ok {
        return Err(format!("invalid metric name {metric:?}"));
    }
    if get("service_name").is_none_or(str::is_empty) {
        return Err("service name is not provided".into());
    }
    let mut last = "";
    for (name, value) in labels {
        let name_ok = name
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if name.is_empty() || !name_ok || name.len() > 1024 || value.len() > 2048 {
            return Err(format!("invalid label {name:?}={value:?}"));
        }
        if name == last {
            return Err(format!("duplicate label name {name:?}"));
        }
        last = name;
    }
    Ok(())
}

fn is_uuid(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}
