//! The `btprof` command line's building blocks: the built-in workload
//! that `--pid-self` profiles, the self-check that judges the result,
//! argument parsing helpers, and the commands (profiling, `diff`,
//! `report`, `flamegraph`). `main.rs` parses and dispatches.

pub mod commands;
pub mod duration;
pub mod selfcheck;
pub mod workload;
