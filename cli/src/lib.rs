//! The `btprof` command line's building blocks: the built-in workload
//! that `--pid-self` profiles, the self-check that judges the result, and
//! argument parsing helpers. `main.rs` wires them to `clap`.

pub mod duration;
pub mod selfcheck;
pub mod workload;
