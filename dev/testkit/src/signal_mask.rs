//! Blocking every signal in the calling thread, as daemons and `signalfd`
//! programs do, for tests of threads that cannot take the profiling
//! signal.

/// Blocks every signal in the calling thread (threads it creates inherit
/// the mask).
pub fn block_every_signal() {
    // SAFETY: a full set, applied to the calling thread only.
    unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigfillset(all.as_mut_ptr());
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), std::ptr::null_mut()),
            0
        );
    }
}

/// Undoes [`block_every_signal`].
pub fn unblock_every_signal() {
    // SAFETY: as above.
    unsafe {
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_UNBLOCK, all.as_ptr(), std::ptr::null_mut());
    }
}
