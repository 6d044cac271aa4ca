//! One-shot POSIX CPU timers on a thread's own CPU clock, whose expiry raises the profiling
//! signal in that thread (`SIGEV_THREAD_ID`) with a tagged `si_value` (`signal::timer_values`).
//! The kernel checks a CPU timer only while its thread is on a CPU, so a timer due after the
//! next nanosecond of CPU time is a request only a running thread can take.

use std::io;

use super::threads;
use crate::linux::signal::timer_values::{request_value, DUMP_REQUEST_TAG, VALUE_MASK, WAKE_TAG};

/// `struct sigevent` for `SIGEV_THREAD_ID` on 64-bit Linux (64 bytes).
#[repr(C)]
struct ThreadSigevent {
    value: u64,
    signo: i32,
    notify: i32,
    tid: i32,
    _rest: [i32; 11],
}

const _: () = assert!(std::mem::size_of::<ThreadSigevent>() == 64);

/// One thread's POSIX CPU timer; deleted on drop.
#[derive(Debug)]
pub(crate) struct PosixTimer {
    id: i32,
}

impl Drop for PosixTimer {
    fn drop(&mut self) {
        // SAFETY: deleting our own timer id once; that also drops a signal it queued but did
        // not deliver.
        unsafe { libc::syscall(libc::SYS_timer_delete, self.id) };
    }
}

/// Whether this process may create POSIX CPU timers on its threads.
pub(crate) fn available() -> io::Result<()> {
    let timer = PosixTimer::open_unarmed(threads::gettid(), libc::SIGURG, 0)?;
    drop(timer);
    Ok(())
}

impl PosixTimer {
    /// A request for one sample of thread `tid`, raising `signal` with `value`
    /// ([`request_value`]) as soon as the thread uses CPU time. Unlike a signal sent to a
    /// thread seen running, it is raised on the way back to user space, never inside a
    /// blocking call (with `CONFIG_POSIX_CPU_TIMERS_TASK_WORK`), up to a tick late.
    pub(crate) fn open_request(
        tid: i32,
        signal: libc::c_int,
        value: usize,
    ) -> io::Result<PosixTimer> {
        PosixTimer::open_once(tid, signal, request_value(value))
    }

    /// A one-shot capture's request for thread `tid`, like [`Self::open_request`], carrying
    /// `generation` under its own tag.
    pub(crate) fn open_dump_request(
        tid: i32,
        signal: libc::c_int,
        generation: u64,
    ) -> io::Result<PosixTimer> {
        PosixTimer::open_once(tid, signal, DUMP_REQUEST_TAG | (generation & VALUE_MASK))
    }

    /// A wake notice for idle thread `tid` (see `signal::wake_notices`), carrying `index`;
    /// armed with [`Self::arm_once`].
    pub(crate) fn open_wake(tid: i32, signal: libc::c_int, index: usize) -> io::Result<PosixTimer> {
        PosixTimer::open_unarmed(tid, signal, WAKE_TAG | (index as u64 & VALUE_MASK))
    }

    /// Arms the timer to expire once, after `after_ns` (at least 1) more CPU time.
    pub(crate) fn arm_once(&self, after_ns: u64) -> io::Result<()> {
        let after_ns = after_ns.max(1);
        let at = libc::timespec {
            tv_sec: (after_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (after_ns % 1_000_000_000) as libc::c_long,
        };
        // `struct itimerspec`: no period, then the expiry.
        let spec = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            at,
        ];
        // SAFETY: our timer id and a valid spec; no old value asked for.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_settime,
                self.id,
                0,
                spec.as_ptr(),
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A timer that expires after the thread's next nanosecond of CPU time.
    fn open_once(tid: i32, signal: libc::c_int, value: u64) -> io::Result<PosixTimer> {
        let timer = PosixTimer::open_unarmed(tid, signal, value)?;
        timer.arm_once(1)?;
        Ok(timer)
    }

    /// An unarmed timer on thread `tid`'s CPU clock raising `signal` with `value` in that
    /// thread.
    fn open_unarmed(tid: i32, signal: libc::c_int, value: u64) -> io::Result<PosixTimer> {
        let event = ThreadSigevent {
            value,
            signo: signal,
            notify: libc::SIGEV_THREAD_ID,
            tid,
            _rest: [0; 11],
        };
        let mut id: libc::c_int = -1;
        // SAFETY: a valid clock id, sigevent and out-pointer.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_create,
                threads::thread_clock(tid),
                &event as *const ThreadSigevent,
                &mut id as *mut libc::c_int,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // The kernel says EINVAL for a clock whose thread is gone.
            return Err(if e.raw_os_error() == Some(libc::EINVAL) {
                io::Error::from_raw_os_error(libc::ESRCH)
            } else {
                e
            });
        }
        Ok(PosixTimer { id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_clock_is_the_one_the_cpu_time_readers_use() {
        let tid = threads::gettid();
        let ns = threads::clock_ns(threads::thread_clock(tid)).expect("a thread clock");
        // Our own clock, so at least what was read before.
        let before = threads::thread_cpu_ns(tid).unwrap();
        assert!(ns <= before + 1);
        assert!(available().is_ok());
    }
}
