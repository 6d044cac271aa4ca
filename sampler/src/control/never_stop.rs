//! Threads the sampler must never stop, known by their names.
//!
//! - **Rosetta 2's own threads** (`com.apple.rosetta.exceptionserver`,
//!   `com.apple.rosetta.debugserver`, ...): under Rosetta an x86_64
//!   process's thread states are produced by the translator running in the
//!   process. Suspending its threads and asking for a thread state has hung
//!   or deadlocked other in-process tools (bugsnag-cocoa #1293, #1302,
//!   #1304; dotnet/runtime #76356).
//! - **Other in-process samplers** (Sentry's profiler): if one suspends
//!   btprof's sampler while btprof holds it suspended, both wait for each
//!   other forever. btprof cannot keep another sampler from stopping its
//!   thread, but it never stops theirs, so the cycle cannot close.
//! - **Crash reporters' exception handler threads** (KSCrash, SentryCrash,
//!   Bugsnag, Firebase Crashlytics): a crash on any thread waits for them;
//!   they must never be the one thread that is frozen at that moment, and
//!   some of them suspend every other thread to write their report.
//!
//! A name is only known once the thread set it (usually first thing), so a
//! thread caught before that may be stopped once or twice; names are
//! re-read while a thread is young (see the sampling loop).

/// Name prefixes of threads the sampler never stops.
const PREFIXES: &[&str] = &[
    // Rosetta 2's runtime threads.
    "com.apple.rosetta",
    // Sentry's sampling profiler (and its benchmarking twin).
    "io.sentry.SamplingProfiler",
    "io.sentry.BenchmarkingSamplingProfiler",
    // Firebase Crashlytics' Mach exception server.
    "com.google.firebase.crashlytics.MachExceptionServer",
];

/// Name endings of threads the sampler never stops: KSCrash and its forks
/// (SentryCrash, Bugsnag's, PLCrashReporter-style copies) name their two
/// handler threads `<Name> Exception Handler (Primary)` / `(Secondary)`.
const SUFFIXES: &[&str] = &[
    "Exception Handler (Primary)",
    "Exception Handler (Secondary)",
];

/// Whether a thread named `name` must never be stopped.
pub fn is_protected(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p)) || SUFFIXES.iter().any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rosetta_samplers_and_crash_handlers_are_protected() {
        for name in [
            "com.apple.rosetta.exceptionserver",
            "com.apple.rosetta.debugserver",
            "io.sentry.SamplingProfiler",
            "KSCrash Exception Handler (Primary)",
            "KSCrash Exception Handler (Secondary)",
            "SentryCrash Exception Handler (Primary)",
            "com.google.firebase.crashlytics.MachExceptionServer",
        ] {
            assert!(is_protected(name), "{name}");
        }
    }

    #[test]
    fn ordinary_threads_are_not() {
        for name in [
            "main",
            "btprof-work-0",
            "com.apple.main-thread",
            "tokio-runtime-worker",
            "io.sentry.session-tracker",
            "rosetta", // a user's thread that merely mentions it
            "Exception Handler (Primary) of mine",
        ] {
            assert!(!is_protected(name), "{name}");
        }
    }
}
