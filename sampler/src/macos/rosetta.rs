//! Rosetta 2: an x86_64 build of the profiled program running translated
//! on Apple silicon.
//!
//! Under Rosetta the thread states `thread_get_state` returns are produced
//! by the translator, which runs inside the process with threads of its
//! own, and that call can block while another translated thread is
//! suspended inside the translator. So sampling is refused there unless
//! the user opts in ([`rosetta_gate`]). When they do, btprof never stops
//! the translator's threads (recognised by name, see
//! [`never_stop`](crate::control::never_stop)), does not stop a thread
//! before it had the time to name itself, and says once that results are
//! less reliable: the registers of a thread stopped in the middle of
//! translated code are the translator's reconstruction, and stacks may
//! end early or show the translator's frames.

use std::sync::Once;

use crate::control::rosetta_gate;
use crate::{Error, SamplerConfig, ALLOW_ROSETTA_ENV};

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

/// Whether sampling may start in this process: `Ok(translated)` when it
/// is native, or translated and the user opted in (then a warning says
/// once that stacks are less reliable); [`Error::Rosetta`] otherwise (see
/// [`rosetta_gate`]). Called when a sampler starts, before any thread is
/// stopped.
pub(crate) fn refuse_unless_allowed(config: &SamplerConfig) -> Result<bool, Error> {
    let translated = is_translated();
    let env = std::env::var_os(ALLOW_ROSETTA_ENV);
    rosetta_gate::check(translated, config, env.as_deref())?;
    if translated {
        warn_once();
    }
    Ok(translated)
}

/// Says once per process, to stderr, that a translated process is being
/// sampled or captured at the user's request, and what that risks.
pub(crate) fn warn_once() {
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "btprof: warning: sampling an x86_64 process under Rosetta 2 as asked; \
             suspending translated threads can hang it, and thread states come from the \
             translator, so stacks are less reliable than in the native arm64 build"
        );
    });
}
