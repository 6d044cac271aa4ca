//! Profiled scopes never wait for each other: a scope
//! that starts while another is profiling — nested on the same thread, on
//! a thread the outer scope joins, or concurrently — runs unprofiled at
//! once and says so. Waiting could hang forever: the outer scope may be
//! waiting for the inner one's thread. Each case runs under a watchdog
//! that aborts the test binary rather than hang CI.

use std::thread;
use std::time::Duration;

use btprof::scope::ScopeBuilder;
use btprof_testkit::with_watchdog;

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("btprof-scopes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn nested_and_joined_scopes_never_hang() {
    with_watchdog("nested scopes", Duration::from_secs(60), || {
        let dir = scratch("nested");
        let outer = ScopeBuilder::new("outer").dir(&dir).always().start();
        assert!(outer.is_active(), "the outer scope profiles");

        // Same thread.
        let inner = ScopeBuilder::new("inner_same_thread")
            .dir(&dir)
            .always()
            .start();
        assert!(!inner.is_active(), "a nested scope runs unprofiled");
        assert_eq!(inner.finish().unwrap(), None);

        // A thread the outer scope joins opens its own scope: had the inner
        // scope waited for the outer one, this join would hang forever.
        let dir2 = dir.clone();
        let joined = thread::spawn(move || {
            let scope = ScopeBuilder::new("inner_thread")
                .dir(&dir2)
                .always()
                .start();
            let active = scope.is_active();
            let files = scope.finish().unwrap();
            (active, files)
        })
        .join()
        .unwrap();
        assert_eq!(
            joined,
            (false, None),
            "the joined thread's scope runs unprofiled"
        );

        let files = outer
            .finish()
            .unwrap()
            .expect("the outer scope wrote files");
        assert!(files.folded.exists());
        assert!(!dir.join("inner_thread.folded").exists());

        // Once the outer scope is done, a new scope profiles again.
        let again = ScopeBuilder::new("after").dir(&dir).always().start();
        assert!(again.is_active());
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    });
}
