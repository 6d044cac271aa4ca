//! `backtrace(&Thread::main())` from another thread names the function the
//! main thread is in, 100 of 100 times, while it spins, while it sleeps,
//! and while it sleeps after a nap taken one frame up (which leaves stale
//! words below its frames). A test binary of its own (no test harness), so
//! its main thread is this file's `main`.
//!
//! On Linux a sleeping thread's stack is read from outside, and its frame
//! pointer, which the kernel does not report, is recovered from the stack:
//! after the nap, `sleep`'s own frame held a zero word followed by a
//! stale return address, and taking that pair for the outermost frame
//! record lost every frame past `sleep` (0 of 100).
//!
//! The same code runs on Linux and macOS: there `backtrace` suspends the
//! main thread through the shared stop/walk/resume window, and the main
//! thread comes from `pthread_main_thread_np`. No machine of this project
//! runs macOS, so `scripts/mac-first-run` runs this binary on a Mac.

#[cfg(any(target_os = "linux", target_os = "macos"))]
mod main_thread {
    use std::hint::black_box;
    use std::sync::atomic::{
        AtomicBool, AtomicU32,
        Ordering::{Acquire, Relaxed, Release},
    };
    use std::sync::Arc;

    use btprof::{backtrace, Thread, ThreadState};

    #[inline(never)]
    fn main_thread_spins(stop: &AtomicBool, entered: &AtomicBool) {
        entered.store(true, Release);
        let mut x = 0u64;
        while !stop.load(Relaxed) {
            x = black_box(x.wrapping_add(1));
        }
    }

    #[inline(never)]
    fn main_thread_sleeps(stop: &AtomicBool, entered: &AtomicBool) {
        entered.store(true, Release);
        while !stop.load(Relaxed) {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }

    /// Naps one frame up first, then sleeps in [`main_thread_sleeps`].
    #[inline(never)]
    fn main_thread_naps_then_sleeps(stop: &AtomicBool, entered: &AtomicBool) {
        std::thread::sleep(std::time::Duration::from_millis(150));
        main_thread_sleeps(stop, entered);
        black_box(());
    }

    /// Sets its flag when dropped.
    struct StopOnDrop(Arc<AtomicBool>);

    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Relaxed);
        }
    }

    /// Runs `body` on the main thread while another thread takes 100
    /// backtraces of it; returns how many named `function`, and the states.
    fn hundred_backtraces(
        function: &'static str,
        body: fn(&AtomicBool, &AtomicBool),
    ) -> (u32, Vec<ThreadState>) {
        let main = Thread::main();
        assert_eq!(main, Thread::current(), "main() is this thread");
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicU32::new(0));
        let entered = Arc::new(AtomicBool::new(false));
        let taker = {
            let (stop, hits, entered) = (stop.clone(), hits.clone(), entered.clone());
            std::thread::spawn(move || {
                // The body ends however this thread does: a panic here
                // (a failed `backtrace`) fails the test instead of leaving
                // the main thread in its body for ever.
                let _release = StopOnDrop(stop.clone());
                // Until the main thread is inside `body` (a fixed wait
                // could end first on a loaded machine), and a little more
                // for it to reach its sleep.
                while !entered.load(Acquire) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut states = Vec::new();
                for _ in 0..100 {
                    let bt = backtrace(&main).unwrap();
                    if bt
                        .frames()
                        .iter()
                        .any(|f| f.function().is_some_and(|n| n.contains(function)))
                    {
                        hits.fetch_add(1, Relaxed);
                    } else {
                        eprintln!("{function} missing:\n{bt}");
                    }
                    states.push(bt.state());
                }
                states
            })
        };
        body(&stop, &entered);
        let states = taker.join().unwrap();
        (hits.load(Relaxed), states)
    }

    pub fn main() {
        let (spin_hits, spin_states) = hundred_backtraces("main_thread_spins", main_thread_spins);
        println!("while it spins: {spin_hits} of 100 name main_thread_spins");
        // Not random: every capture stops it inside its loop; one miss is
        // a walk that lost the frame.
        assert_eq!(spin_hits, 100);
        // On a CPU, or (macOS, beside busy processes) waiting for one.
        assert!(spin_states
            .iter()
            .all(|s| matches!(s, ThreadState::Running | ThreadState::Runnable)));
        let (sleep_hits, sleep_states) =
            hundred_backtraces("main_thread_sleeps", main_thread_sleeps);
        println!("while it sleeps: {sleep_hits} of 100 name main_thread_sleeps");
        // Not random: it is inside the function whether asleep or between
        // sleeps; one miss is a walk that lost the frame.
        assert_eq!(sleep_hits, 100);
        let blocked = sleep_states
            .iter()
            .filter(|s| **s == ThreadState::Blocked)
            .count();
        // Others are captures in its moment awake each second, Binomial(100,
        // w): over 10 has P under 1e-4 while w <= 2.7%; w is far smaller.
        assert!(blocked >= 90, "blocked in {blocked} of 100");
        let (nap_hits, _) = hundred_backtraces("main_thread_sleeps", main_thread_naps_then_sleeps);
        println!("while it sleeps after a nap: {nap_hits} of 100 name main_thread_sleeps");
        // Not random: the stale words are the same at each capture; the bug
        // lost every frame past `sleep` (0 of 100).
        assert_eq!(nap_hits, 100);
        // A thread from a pthread_t names the same thread.
        // SAFETY: pthread_self has no preconditions.
        let me = Thread::from_pthread(unsafe { libc::pthread_self() });
        assert_eq!(me, Thread::current());
        println!("main-thread backtraces: ok");
    }
}

fn main() {
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    main_thread::main();
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    println!("thread_dump_main: no capture backend on this platform; nothing run");
}
