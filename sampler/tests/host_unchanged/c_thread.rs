//! A C thread on a stack of the test's own mapping, as a C program makes
//! one with `pthread_attr_setstack` (the C library then puts the thread's
//! control block at the top of that stack).

/// Runs `body(arg)` on a new thread whose stack is `[low, low + len)`,
/// calls `while_running` once the thread is started, and joins it.
///
/// # Safety
/// `[low, low + len)` must be mapped and unused, and `arg` valid for
/// `body` until this returns.
pub unsafe fn run_on_stack(
    low: u64,
    len: usize,
    body: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
    while_running: impl FnOnce(libc::pthread_t),
) {
    // SAFETY: the caller's promises; the attributes live until the join.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::zeroed();
        assert_eq!(libc::pthread_attr_init(attr.as_mut_ptr()), 0);
        assert_eq!(
            libc::pthread_attr_setstack(attr.as_mut_ptr(), low as *mut _, len),
            0
        );
        let mut thread: libc::pthread_t = 0;
        assert_eq!(
            libc::pthread_create(&mut thread, attr.as_ptr(), body, arg),
            0
        );
        while_running(thread);
        assert_eq!(libc::pthread_join(thread, std::ptr::null_mut()), 0);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
    }
}
