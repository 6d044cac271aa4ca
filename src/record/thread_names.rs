//! Full thread names for the roots of stacks.
//!
//! The sampler names a thread by what the OS keeps, which on Linux is
//! `comm`: cut to 15 bytes (`tokio-runtime-w`, `tests::parse_la`). Rust
//! knows the full name (`std::thread::Thread::name`) but only on the
//! thread itself, so a thread tells btprof its name here: a profiled
//! scope and [`crate::ProfilerBuilder::start`] do it for the calling thread, and
//! [`register_current_thread`] lets any other thread do it. When a
//! profile is symbolised, a sampled name that is the start of the
//! registered one is replaced by it; the OS name stays the fallback.

use std::collections::HashMap;
use std::sync::Mutex;

/// Thread id (as the sampler reports it) -> the full Rust name.
static NAMES: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);

/// Records the calling thread's full Rust name (if it has one) so its
/// stacks are rooted at it instead of the OS's shortened name. Cheap;
/// call it once at the start of a long-lived thread.
pub fn register_current_thread() {
    let current = std::thread::current();
    let Some(name) = current.name() else {
        return;
    };
    let tid = btprof_sampler::current_thread_id();
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .get_or_insert_with(HashMap::new)
        .insert(tid, name.to_owned());
}

/// The name to root `tid`'s stacks at: the registered full name when the
/// sampled OS name is its start (the thread was not renamed since), else
/// the sampled name.
pub(crate) fn full_name(tid: u64, sampled: &str) -> String {
    let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    match names.as_ref().and_then(|n| n.get(&tid)) {
        Some(full) if !sampled.is_empty() && full.starts_with(sampled) => full.clone(),
        _ => sampled.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_name_replaces_the_cut_one() {
        let long = "a-thread-name-longer-than-fifteen";
        let tid = std::thread::Builder::new()
            .name(long.into())
            .spawn(|| {
                register_current_thread();
                btprof_sampler::current_thread_id()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(full_name(tid, &long[..15]), long);
        // Renamed since (the OS name is no longer its start): the OS name.
        assert_eq!(full_name(tid, "renamed"), "renamed");
        // Another thread: untouched.
        assert_eq!(full_name(u64::MAX, "other"), "other");
    }
}
