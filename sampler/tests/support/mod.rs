//! What the sampler's tests that check stacks share: the names of a
//! sampled stack's frames. Helpers that tests of other crates use too
//! (the thread's CPU clock, the watchdog) are in `btprof-testkit`.

use btprof_symbols::Resolver;

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
