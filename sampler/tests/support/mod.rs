//! What the sampler's tests that check profiles share: the names of a
//! sampled stack's frames and the samples of a named thread. Helpers that
//! tests of other crates use too (the thread's CPU clock, the watchdog)
//! are in `btprof-testkit`.

// Shared by several test binaries, each using part of it.
#![allow(dead_code)]

use btprof_sampler::RawProfile;
use btprof_symbols::Resolver;

/// Samples recorded on threads named `name` (a name several threads
/// share counts them all).
pub fn samples_named(raw: &RawProfile, name: &str) -> u64 {
    raw.table
        .iter()
        .filter(|(k, _)| raw.threads[k.thread as usize].name == name)
        .map(|(_, c)| c)
        .sum()
}

/// The function names of a sampled stack's frames, leaf first: the leaf
/// is the interrupted pc, each caller a return address looked up one byte
/// back (inside its call instruction).
pub fn frame_names(resolver: &mut Resolver, frames: &[u64]) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let lookup = if i == 0 { a } else { a - 1 };
            resolver.resolve(lookup).name.to_string()
        })
        .collect()
}
