//! Parsing `--duration` values: the library's parser, which the
//! environment's settings (`BTPROF_PUSH_INTERVAL`) use too.

pub use btprof::duration::parse_duration;
