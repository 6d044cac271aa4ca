//! The `btprof` command line's building blocks: the built-in workload
//! that `--pid-self` profiles, the self-check that judges the result,
//! argument parsing helpers, the files a profiling run writes, and the
//! commands that read folded files
//! (`diff`, `report`, `flamegraph`). `main.rs` wires them to `clap`.

pub mod clock_arg;
pub mod commands;
pub mod duration;
pub mod outputs;
pub mod push_args;
pub mod selfcheck;
pub mod thread_dump;
pub mod workload;
