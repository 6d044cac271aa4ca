//! pprof export: a gzipped `profile.proto`, what Grafana Pyroscope,
//! Parca, Datadog, Google Cloud Profiler and `go tool pprof` read.
//!
//! [`PprofBuilder`] takes stacks of [`Frame`]s (root first, as every
//! other btprof format; [`crate::Profile::write_pprof`] feeds it a
//! profile) and builds the proto's tables: a function per
//! distinct name and file, a mapping per module, and a location per
//! distinct code address, with inlined frames folded into their caller's
//! location as extra lines (pprof's representation of inlining). Frames
//! known only by name (a folded file read back) become locations without
//! an address. The thread of a stack becomes a `thread` label on its
//! sample, so a backend can filter by thread without a fake root frame,
//! and each of the stack's labels ([`crate::Stack::labels`]) a string
//! label beside it, so a backend can split by them.
//!
//! Values: every sample carries its count (`samples`/`count`) and, when
//! the sampling period is known, the time it stands for (`cpu` or `wall`
//! nanoseconds = count x period), the type a viewer shows first, as Go's
//! own CPU profiles do.

mod convert;
pub mod proto;

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

/// A frame as pprof needs it: the model's frame, of which everything but
/// the name is optional (a folded file read back knows names only).
pub use crate::profile::FrameInfo as Frame;

/// What one sample stands for besides itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    /// Unknown (a folded file from another tool): samples only.
    Unknown,
    /// Each sample stands for this many nanoseconds of the thread's CPU
    /// time.
    CpuNanos(u64),
    /// Each sample stands for this many nanoseconds of wall time.
    WallNanos(u64),
}

/// How the profile was taken: the proto's header fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// What a sample stands for.
    pub period: Period,
    /// When sampling started, nanoseconds since the Unix epoch (0:
    /// unknown).
    pub start_unix_nanos: i64,
    /// How long sampling ran, in nanoseconds (0: unknown).
    pub duration_nanos: i64,
    /// Free-text comments (the producer, the source file).
    pub comments: Vec<String>,
}

impl Default for Header {
    fn default() -> Self {
        Header {
            period: Period::Unknown,
            start_unix_nanos: 0,
            duration_nanos: 0,
            comments: vec![format!("btprof {}", env!("CARGO_PKG_VERSION"))],
        }
    }
}

/// One location: its address and mapping, then for each frame (the
/// functions inlined into the code first, the function it is in last) the
/// function's id and the line (as `u64`). Flat, so that a lookup borrows a
/// reused buffer as a slice instead of building a key per frame.
type LocationKey = Vec<u64>;

/// Builds a pprof profile one sample at a time.
pub struct PprofBuilder {
    profile: proto::Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64), u64>,
    mappings: HashMap<i64, u64>,
    locations: HashMap<LocationKey, u64>,
    thread_key: i64,
    /// Nanoseconds per sample, when known.
    period_nanos: Option<i64>,
    /// Reused per sample.
    location_ids: Vec<u64>,
    /// Reused per location looked up.
    location_key: LocationKey,
}

impl PprofBuilder {
    /// An empty profile with `header`'s sample types and times.
    pub fn new(header: &Header) -> PprofBuilder {
        let mut b = PprofBuilder {
            profile: proto::Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            thread_key: 0,
            period_nanos: None,
            location_ids: Vec::new(),
            location_key: Vec::new(),
        };
        b.string(""); // index 0, as the proto requires
        b.thread_key = b.string("thread");
        let samples = b.value_type("samples", "count");
        b.profile.sample_type.push(samples);
        let timed = match header.period {
            Period::Unknown => None,
            Period::CpuNanos(n) => Some(("cpu", n)),
            Period::WallNanos(n) => Some(("wall", n)),
        };
        match timed {
            Some((kind, nanos)) => {
                let time = b.value_type(kind, "nanoseconds");
                b.profile.sample_type.push(time);
                b.profile.period_type = Some(time);
                b.profile.period = i64::try_from(nanos).unwrap_or(i64::MAX);
                b.profile.default_sample_type = time.r#type;
                b.period_nanos = Some(b.profile.period);
            }
            None => {
                b.profile.period_type = Some(samples);
                b.profile.period = 1;
                b.profile.default_sample_type = samples.r#type;
            }
        }
        b.profile.time_nanos = header.start_unix_nanos;
        b.profile.duration_nanos = header.duration_nanos;
        for c in &header.comments {
            let c = b.string(c);
            b.profile.comment.push(c);
        }
        b
    }

    /// Adds `count` samples of the stack `frames` (root first), of
    /// `thread` if known.
    pub fn add_sample<'f>(
        &mut self,
        thread: Option<&str>,
        frames: impl DoubleEndedIterator<Item = Frame<'f>>,
        count: u64,
    ) {
        self.add_labelled_sample(thread, [], frames, count);
    }

    /// [`PprofBuilder::add_sample`] with string labels (`(name, value)`,
    /// after the `thread` label).
    pub fn add_labelled_sample<'f, 'l>(
        &mut self,
        thread: Option<&str>,
        labels: impl IntoIterator<Item = (&'l str, &'l str)>,
        frames: impl DoubleEndedIterator<Item = Frame<'f>>,
        count: u64,
    ) {
        let mut ids = std::mem::take(&mut self.location_ids);
        ids.clear();
        // Leaf first, as pprof wants; a run of inlined frames joins the
        // next non-inlined frame toward the root.
        let mut group: Vec<Frame<'f>> = Vec::new();
        for frame in frames.rev() {
            group.push(frame);
            if !frame.inlined {
                ids.push(self.location(&group));
                group.clear();
            }
        }
        if !group.is_empty() {
            // Inlined frames with no caller frame (a cut-off stack): their
            // own location.
            ids.push(self.location(&group));
        }
        let count_value = i64::try_from(count).unwrap_or(i64::MAX);
        let mut value = vec![count_value];
        if let Some(period) = self.period_nanos {
            value.push(count_value.saturating_mul(period));
        }
        let mut label: Vec<proto::Label> = thread
            .map(|t| proto::Label {
                key: self.thread_key,
                str: self.string(t),
                ..proto::Label::default()
            })
            .into_iter()
            .collect();
        for (name, value) in labels {
            label.push(proto::Label {
                key: self.string(name),
                str: self.string(value),
                ..proto::Label::default()
            });
        }
        self.profile.sample.push(proto::Sample {
            location_id: ids.clone(),
            value,
            label,
        });
        self.location_ids = ids;
    }

    /// The finished profile.
    pub fn finish(self) -> proto::Profile {
        self.profile
    }

    /// Writes the finished profile gzipped, as pprof files are.
    pub fn write_gzipped<W: Write>(self, w: W) -> io::Result<()> {
        write_gzipped(&self.finish(), w)
    }

    /// The location of `group`: innermost inlined frame first, the frame
    /// holding the code last.
    fn location(&mut self, group: &[Frame<'_>]) -> u64 {
        let outer = group[group.len() - 1];
        let mapping = outer.module.map_or(0, |m| self.mapping(m, group));
        let address = outer.address.unwrap_or(0);
        let mut key = std::mem::take(&mut self.location_key);
        key.clear();
        key.extend([address, mapping]);
        for frame in group {
            let function = self.function(frame);
            key.extend([function, i64::from(frame.line.unwrap_or(0)) as u64]);
        }
        let id = match self.locations.get(&key[..]) {
            Some(&id) => id,
            None => {
                let id = self.profile.location.len() as u64 + 1;
                self.profile.location.push(proto::Location {
                    id,
                    mapping_id: mapping,
                    address,
                    line: key[2..]
                        .chunks_exact(2)
                        .map(|pair| proto::Line {
                            function_id: pair[0],
                            line: pair[1] as i64,
                            column: 0,
                        })
                        .collect(),
                    is_folded: false,
                });
                self.locations.insert(key.clone(), id);
                id
            }
        };
        self.location_key = key;
        id
    }

    fn function(&mut self, frame: &Frame<'_>) -> u64 {
        let name = self.string(frame.name);
        let file = frame.file.map_or(0, |f| self.string(f));
        if let Some(&id) = self.functions.get(&(name, file)) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        self.profile.function.push(proto::Function {
            id,
            name,
            // Left empty (not the name): pprof treats a function whose
            // system name equals its name as not yet demangled, and its
            // C++ heuristics would then cut `<...>` and `(...)` out of
            // names that are already final (`<Vec<T> as Drop>::drop`).
            // The linker's (mangled) name is not in btprof's model.
            system_name: 0,
            filename: file,
            start_line: 0,
        });
        self.functions.insert((name, file), id);
        id
    }

    fn mapping(&mut self, module: &str, group: &[Frame<'_>]) -> u64 {
        let filename = self.string(module);
        let id = match self.mappings.get(&filename) {
            Some(&id) => id,
            None => {
                let id = self.profile.mapping.len() as u64 + 1;
                self.profile.mapping.push(proto::Mapping {
                    id,
                    filename,
                    // Names come with every location: no consumer should
                    // try to symbolise addresses against a file it may
                    // not have.
                    has_functions: true,
                    ..proto::Mapping::default()
                });
                self.mappings.insert(filename, id);
                id
            }
        };
        let m = &mut self.profile.mapping[id as usize - 1];
        m.has_filenames |= group.iter().any(|f| f.file.is_some());
        m.has_line_numbers |= group.iter().any(|f| f.line.is_some());
        m.has_inline_frames |= group.len() > 1;
        id
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }
}

impl crate::Profile {
    /// Writes the profile as gzipped pprof (`profile.proto`): thread names
    /// as `thread` labels and each stack's labels as labels of their own,
    /// frames with the module, address, file, line and
    /// inlining known of them, values in samples and, with the run's rate,
    /// CPU (or wall) nanoseconds.
    pub fn write_pprof<W: Write>(&self, w: W) -> Result<(), crate::Error> {
        self.write_pprof_with(false, w)
    }

    /// [`Profile::write_pprof`](crate::Profile::write_pprof); with
    /// `thread_root`, a stack without a known thread (a folded file read
    /// back) has its first frame taken as its thread's name (as in
    /// btprof's own folded files), a `thread` label instead of a frame.
    pub fn write_pprof_with<W: Write>(&self, thread_root: bool, w: W) -> Result<(), crate::Error> {
        convert::from_profile(self, thread_root, |_, _| true)
            .write_gzipped(w)
            .map_err(crate::Error::Io)
    }

    /// [`Profile::write_pprof`](crate::Profile::write_pprof), with only
    /// the stack labels `keep` accepts (the push leaves out those the
    /// server would refuse), compressed with `gzip`, whose state is reused
    /// from window to window.
    #[cfg(feature = "push")]
    pub(crate) fn write_pprof_keeping(
        &self,
        keep: impl FnMut(&str, &str) -> bool,
        gzip: &mut Gzip,
        out: &mut Vec<u8>,
    ) -> Result<(), crate::Error> {
        let profile = convert::from_profile(self, false, keep).finish();
        gzip.write(&profile, out).map_err(crate::Error::Io)
    }
}

/// [`write_gzipped`] for a writer of many profiles: the same format and
/// level (the deflate blocks may split differently), but the deflate
/// state, which zlib allocates and clears at some cost, and the buffer of
/// the encoded proto are kept and reset between profiles.
#[cfg(feature = "push")]
pub(crate) struct Gzip {
    deflate: flate2::Compress,
    encoded: Vec<u8>,
}

#[cfg(feature = "push")]
impl Gzip {
    pub(crate) fn new() -> Gzip {
        Gzip {
            deflate: flate2::Compress::new(Compression::fast(), false),
            encoded: Vec::new(),
        }
    }

    /// Appends `profile`, gzipped, to `out`: RFC 1952's header as
    /// `flate2`'s `GzEncoder` writes it (no name, no time, "fastest"
    /// flag, unknown OS), the raw deflate stream, then the CRC-32 and
    /// length of the encoded proto.
    pub(crate) fn write(&mut self, profile: &proto::Profile, out: &mut Vec<u8>) -> io::Result<()> {
        self.encoded.clear();
        profile
            .encode(&mut self.encoded)
            .map_err(io::Error::other)?;
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
        self.deflate.reset();
        loop {
            // Fast deflate of a profile rarely grows it; room for the
            // input plus a margin usually ends the stream in one call.
            out.reserve(self.encoded.len() / 2 + 64);
            let read = self.deflate.total_in() as usize;
            let status = self
                .deflate
                .compress_vec(&self.encoded[read..], out, flate2::FlushCompress::Finish)
                .map_err(io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                break;
            }
        }
        let mut crc = flate2::Crc::new();
        crc.update(&self.encoded);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&crc.amount().to_le_bytes());
        Ok(())
    }
}

/// Writes `profile` as a gzipped protobuf, at gzip's fastest level, as
/// Go's `runtime/pprof` does: a pushed window is compressed every few
/// seconds, and the default level took several times the CPU for a
/// window an eighth smaller (`cargo bench --bench push`).
pub fn write_gzipped<W: Write>(profile: &proto::Profile, w: W) -> io::Result<()> {
    let mut gz = GzEncoder::new(w, Compression::fast());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn strings(p: &proto::Profile, i: i64) -> &str {
        &p.string_table[i as usize]
    }

    #[test]
    fn frames_functions_and_locations_are_shared() {
        let mut b = PprofBuilder::new(&Header {
            period: Period::CpuNanos(1_000_000),
            start_unix_nanos: 5,
            duration_nanos: 7,
            comments: vec![],
        });
        let names = |v: &[&'static str]| v.iter().map(|&n| Frame::named(n)).collect::<Vec<_>>();
        b.add_sample(Some("main"), names(&["root", "a", "leaf"]).into_iter(), 3);
        b.add_sample(Some("w"), names(&["root", "b", "leaf"]).into_iter(), 2);
        let p = b.finish();
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.function.len(), 4);
        assert_eq!(p.location.len(), 4);
        assert_eq!(p.sample.len(), 2);
        let s = &p.sample[0];
        assert_eq!(s.value, [3, 3_000_000]);
        // Leaf first.
        let leaf = &p.location[s.location_id[0] as usize - 1];
        let f = &p.function[leaf.line[0].function_id as usize - 1];
        assert_eq!(strings(&p, f.name), "leaf");
        assert_eq!(strings(&p, s.label[0].key), "thread");
        assert_eq!(strings(&p, s.label[0].str), "main");
        assert_eq!(
            strings(&p, p.period_type.unwrap().r#type),
            "cpu",
            "time is the period's type"
        );
        assert_eq!(p.default_sample_type, p.sample_type[1].r#type);
        assert_eq!(
            (p.time_nanos, p.duration_nanos, p.period),
            (5, 7, 1_000_000)
        );
    }

    #[test]
    fn inlined_frames_join_their_callers_location() {
        let mut b = PprofBuilder::new(&Header::default());
        let frames = [
            Frame {
                name: "main",
                module: Some("/bin/app"),
                address: Some(0x1000),
                file: Some("main.rs"),
                line: Some(3),
                inlined: false,
            },
            Frame {
                name: "outer",
                module: Some("/bin/app"),
                address: Some(0x2000),
                file: Some("lib.rs"),
                line: Some(10),
                inlined: false,
            },
            Frame {
                name: "inlined_helper",
                module: Some("/bin/app"),
                address: Some(0x2000),
                file: Some("lib.rs"),
                line: Some(20),
                inlined: true,
            },
        ];
        b.add_sample(None, frames.into_iter(), 1);
        let p = b.finish();
        assert_eq!(p.sample[0].location_id.len(), 2, "two code addresses");
        let leaf = &p.location[p.sample[0].location_id[0] as usize - 1];
        assert_eq!(leaf.address, 0x2000);
        let names: Vec<&str> = leaf
            .line
            .iter()
            .map(|l| strings(&p, p.function[l.function_id as usize - 1].name))
            .collect();
        assert_eq!(names, ["inlined_helper", "outer"], "innermost first");
        assert_eq!(leaf.line[0].line, 20);
        let m = &p.mapping[0];
        assert_eq!(strings(&p, m.filename), "/bin/app");
        assert!(m.has_functions && m.has_filenames && m.has_line_numbers && m.has_inline_frames);
        assert!(p.sample[0].label.is_empty());
        // Unknown period: samples only, period 1 sample.
        assert_eq!(p.sample[0].value, [1]);
        assert_eq!(p.period, 1);
    }

    #[test]
    fn a_stacks_labels_are_its_samples_labels_beside_the_thread() {
        use crate::profile::Builder;
        let mut b = Builder::new();
        let t = b.thread("worker", None).unwrap();
        let set = b
            .labels(&[("tenant", "acme"), ("endpoint", "pay")])
            .unwrap();
        b.add_labelled_stack(Some(t), set, ["main", "f"], false, 3)
            .unwrap();
        b.add_stack(Some(t), ["main", "f"], false, 1).unwrap();
        let profile = b.finish(crate::Stats::new(&Default::default()));
        let labels = |p: &proto::Profile| -> Vec<Vec<(String, String)>> {
            p.sample
                .iter()
                .map(|s| {
                    s.label
                        .iter()
                        .map(|l| (strings(p, l.key).to_owned(), strings(p, l.str).to_owned()))
                        .collect()
                })
                .collect()
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let all = convert::from_profile(&profile, false, |_, _| true).finish();
        assert_eq!(
            labels(&all),
            [
                vec![
                    pair("thread", "worker"),
                    pair("endpoint", "pay"),
                    pair("tenant", "acme")
                ],
                vec![pair("thread", "worker")],
            ]
        );
        assert_eq!(all.sample[0].value[0], 3);
        let kept = convert::from_profile(&profile, false, |k, _| k != "tenant").finish();
        assert_eq!(
            labels(&kept)[0],
            [pair("thread", "worker"), pair("endpoint", "pay")]
        );
    }

    #[test]
    fn the_file_is_gzipped_protobuf_that_decodes_back() {
        let mut b = PprofBuilder::new(&Header::default());
        b.add_sample(Some("t"), [Frame::named("f")].into_iter(), 9);
        let p = b.finish();
        let mut gz = Vec::new();
        write_gzipped(&p, &mut gz).unwrap();
        assert_eq!(gz[..2], [0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(proto::Profile::decode(&raw[..]).unwrap(), p);
    }

    /// The kept compressor writes a whole gzip stream of each profile,
    /// window after window: its state is reset, not carried over.
    #[cfg(feature = "push")]
    #[test]
    fn a_reused_gzip_writes_each_profile_whole() {
        let mut gzip = Gzip::new();
        for (i, name) in ["f", "g", "h"].iter().enumerate() {
            let mut b = PprofBuilder::new(&Header::default());
            for n in 0..200 {
                let callee = format!("callee_{n}");
                let frames = [Frame::named(name), Frame::named(&callee)];
                b.add_sample(Some("t"), frames.into_iter(), i as u64 + n);
            }
            let p = b.finish();
            let mut gz = vec![0xaa];
            gzip.write(&p, &mut gz).unwrap();
            assert_eq!(gz[..11], [0xaa, 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
            // The decoder checks the trailer's CRC-32 and length too.
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&gz[1..])
                .read_to_end(&mut raw)
                .unwrap();
            assert_eq!(proto::Profile::decode(&raw[..]).unwrap(), p);
        }
    }
}
