//! Test support: whether a test process runs under QEMU's user-mode
//! emulator, as `scripts/check-linux-arm64` runs the aarch64 unit tests.
//!
//! QEMU emulates the system calls a program makes, but what `/proc` says
//! of a task's state, signal mask or memory map is the host's view of the
//! emulator's own thread (the process is named `qemu-aarch64` there), and
//! some calls are not emulated at all (`process_vm_readv`,
//! `perf_event_open`). A test of those is skipped under QEMU, saying
//! NOT CHECKED and why; run natively it checks as before.

/// Why a test of `process_vm_readv` is not checked under QEMU.
pub(crate) const NO_VM_READV: &str = "QEMU does not emulate process_vm_readv";

/// Whether this process is QEMU running a guest program: its main
/// thread's name, which `/proc` reports from the host, is QEMU's (a test
/// binary's own main thread is named after the binary).
pub(crate) fn under_qemu() -> bool {
    std::fs::read_to_string(format!("/proc/{}/comm", std::process::id()))
        .is_ok_and(|name| name.starts_with("qemu-"))
}

/// [`under_qemu`], printing that `what` is NOT CHECKED, and `why`, if so.
pub(crate) fn not_checked_under_qemu(what: &str, why: &str) -> bool {
    let emulated = under_qemu();
    if emulated {
        println!("NOT CHECKED under QEMU: {what}: {why}");
    }
    emulated
}

#[cfg(test)]
mod tests {
    /// An x86_64 build runs natively here (the emulator runs aarch64
    /// builds), so it must never be taken for QEMU: that would skip checks.
    #[test]
    fn a_native_run_is_not_taken_for_qemu() {
        if cfg!(target_arch = "x86_64") {
            assert!(!super::under_qemu());
        } else {
            println!("under QEMU: {}", super::under_qemu());
        }
    }
}
