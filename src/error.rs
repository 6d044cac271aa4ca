//! The library's error type.

use std::fmt;
use std::io;

/// Why profiling or writing a profile failed.
#[derive(Debug)]
pub enum Error {
    /// Sampling could not start or stop.
    Sampler(btprof_sampler::Error),
    /// Loaded modules could not be listed for symbolisation.
    Symbols(io::Error),
    /// The profile has no samples, so there is nothing to draw.
    EmptyProfile,
    /// `inferno` could not render the flamegraph.
    Render(String),
    /// Writing output failed.
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sampler(e) => e.fmt(f),
            Error::Symbols(e) => write!(f, "could not list loaded modules for symbols: {e}"),
            Error::EmptyProfile => f.write_str(
                "the profile has no samples: no thread used CPU while sampling \
                 (try a longer run, or wall mode to sample blocked threads)",
            ),
            Error::Render(e) => write!(f, "could not render the flamegraph: {e}"),
            Error::Io(e) => write!(f, "could not write output: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sampler(e) => Some(e),
            Error::Symbols(e) | Error::Io(e) => Some(e),
            Error::EmptyProfile | Error::Render(_) => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<btprof_sampler::Error> for Error {
    fn from(e: btprof_sampler::Error) -> Self {
        Error::Sampler(e)
    }
}
