//! The messages of Grafana Pyroscope's push API (`api/push/v1/push.proto`
//! and `LabelPair` of `api/types/v1/types.proto` in the `grafana/pyroscope`
//! repository), derived with `prost` so no `protoc` runs at build time.
//! Field numbers and types are the protos'.

/// The body of `POST /push.v1.PusherService/Push`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    /// One entry per label set: btprof sends one series per window.
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

/// Profiles that share one label set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    /// The series' labels: `__name__`, `service_name` and the rest.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    /// The profiles of the series.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// One label of a series.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// One profile: gzipped pprof bytes and an id the server may use to tell
/// a retried push from a new one.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    pub id: String,
}
