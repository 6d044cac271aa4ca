//! btprof
