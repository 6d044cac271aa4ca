//! Files a [`Profile`](crate::Profile) is written to or read from, one
//! module per format: [`folded`] stacks (read and write), SVG
//! [`flamegraph`]s (plain and differential, through `inferno`) and the
//! JSON [`sidecar`] of run metadata.

pub mod flamegraph;
pub mod folded;
pub mod sidecar;
