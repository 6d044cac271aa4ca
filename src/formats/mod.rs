//! Files a [`Profile`](crate::Profile) is written to or read from, one
//! module per format: [`folded`] stacks (read and write), SVG
//! [`flamegraph`]s (plain and differential, through `inferno`) and the
//! JSON [`sidecar`] of run metadata, and [`pprof`] (gzipped
//! `profile.proto`) for continuous-profiling backends, and the
//! [`process_record`] `btprof record` keeps per profiled process. Every file is
//! written all or nothing through [`output_file`].

pub mod flamegraph;
pub mod folded;
pub mod output_file;
pub mod pprof;
pub mod process_record;
pub mod sidecar;
