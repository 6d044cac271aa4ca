//! Rosetta 2: an x86_64 build of the profiled program running translated
//! on Apple silicon.
//!
//! Under Rosetta the thread states `thread_get_state` returns are produced
//! by the translator, which runs inside the process with threads of its
//! own. btprof never stops those threads (they are recognised by name, see
//! [`never_stop`](crate::control::never_stop)), and says once that
//! results are less reliable there: the registers of a thread stopped in
//! the middle of translated code are the translator's reconstruction, and
//! stacks may end early or show the translator's frames.

use std::sync::Once;

/// Whether this process runs translated by Rosetta 2
/// (`sysctl.proc_translated` is 1). The name does not exist on Intel Macs
/// and on older systems: native.
pub(crate) fn is_translated() -> bool {
    let mut translated: libc::c_int = 0;
    let mut size = std::mem::size_of::<libc::c_int>();
    // SAFETY: a NUL-terminated name; `translated` is writable for `size`
    // bytes and `size` says so; no new value is set.
    let rc = unsafe {
        libc::sysctlbyname(
            c"sysctl.proc_translated".as_ptr(),
            (&mut translated as *mut libc::c_int).cast(),
            &mut size,
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0 && translated == 1
}

/// Prints, once per process, that results under Rosetta are less
/// reliable, if this process runs translated. Called when a sampler
/// starts, before any thread is stopped.
pub(crate) fn warn_once_if_translated() {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        if is_translated() {
            eprintln!(
                "btprof: warning: this x86_64 process runs under Rosetta 2; thread states come \
                 from the translator, so stacks are less reliable than in a native arm64 build \
                 (Rosetta's own threads are never stopped)"
            );
        }
    });
}
