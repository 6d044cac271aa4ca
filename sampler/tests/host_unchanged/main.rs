//! The profiled program cannot tell it is profiled (`docs/architecture.md`, rule 8):
//! `exec` while profiling, `fork`, a handler installed after ours, stale
//! memory maps under a coroutine stack (and beside a new thread's own),
//! threads with little stack left.
//!
//! Every case runs in a child process of its own under a watchdog: the
//! runner starts this binary again with `--case NAME`, kills the child if
//! it does not finish within the case's limit and fails the case, so a
//! hang fails CI instead of stalling it, and a crash (the outcome several
//! of these cases guard against) fails only its own case. No libtest
//! harness: arguments that do not start with `-` filter cases by name, as
//! `cargo test` filters do.

#[cfg(target_os = "linux")]
mod c_thread;
#[cfg(target_os = "linux")]
mod cases;
#[cfg(target_os = "linux")]
mod side_stack;
#[cfg(target_os = "linux")]
mod small_stack;
#[cfg(target_os = "linux")]
mod watchdog;

/// Every case checks signals, `/proc` or `fork` behaviour of the Linux
/// backend; the Mach sampler sends no signal.
#[cfg(not(target_os = "linux"))]
fn main() {
    println!("host_unchanged: Linux only (the cases test the signal backend); nothing run");
}

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        let name = args.get(i + 1).expect("--case NAME");
        let case = cases::ALL
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        (case.body)();
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--role") {
        cases::run_role(&args[i + 1..]);
        return;
    }
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    std::process::exit(watchdog::run_all(cases::ALL, &filters));
}
