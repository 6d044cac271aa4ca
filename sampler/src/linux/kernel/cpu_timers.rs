//! One-shot POSIX CPU timers: `timer_create` on a thread's own CPU clock,
//! whose expiry raises the profiling signal in that same thread.
//!
//! The clock for another thread of this process is built from its id as
//! glibc's `pthread_getcpuclockid` does (`CLOCK_THREAD_CPUTIME_ID` of that
//! thread), and `SIGEV_THREAD_ID` sends the expiry to that thread. The
//! kernel checks a CPU timer only while its thread is on a CPU, so a timer
//! that expires after its thread's next nanosecond of CPU time is a request
//! only a running thread can take: wall mode's samples of running threads
//! ([`PosixTimer::open_request`]), one-shot captures
//! ([`PosixTimer::open_dump_request`]) and wake notices for idle threads
//! ([`PosixTimer::open_wake`]). Each carries a tagged value in `si_value`
//! that the handler classifies (`signal::timer_values`); an `SI_TIMER`
//! signal with no tag of ours is stray.
//!
//! (Periodic POSIX CPU timers are no sampling clock: their expiries come on
//! the scheduler tick, a few milliseconds apart whatever the rate asked for;
//! see `docs/decisions/posix-clock.md`.)

use std::io;

use super::threads;
use crate::linux::signal::timer_values::{request_value, DUMP_REQUEST_TAG, VALUE_MASK, WAKE_TAG};

/// The CPU clock of thread `tid` of this process: the per-thread scheduler
/// clock, as glibc builds it (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`).
fn thread_clock(tid: i32) -> libc::clockid_t {
    (!tid << 3) | 6
}

/// `struct sigevent` as the kernel reads it for `SIGEV_THREAD_ID` on 64-bit
/// Linux: the value, the signal, the notification kind, then the thread id
/// in the union, in a 64-byte record.
#[repr(C)]
struct ThreadSigevent {
    value: u64,
    signo: i32,
    notify: i32,
    tid: i32,
    _rest: [i32; 11],
}

const _: () = assert!(std::mem::size_of::<ThreadSigevent>() == 64);

/// `struct itimerspec`: the period and the first expiry.
#[repr(C)]
struct TimerSpec {
    interval: libc::timespec,
    value: libc::timespec,
}

/// One thread's POSIX CPU timer; deleted on drop.
#[derive(Debug)]
pub(crate) struct PosixTimer {
    /// The kernel's timer id.
    id: i32,
}

impl PosixTimer {
    /// Sets the timer to expire once, after `after_ns` of the thread's CPU
    /// time.
    fn arm(&self, after_ns: u64) -> io::Result<()> {
        let spec = TimerSpec {
            interval: timespec(0),
            value: timespec(after_ns),
        };
        // SAFETY: a timer id the kernel gave us and a valid spec; no old
        // value is asked for.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_settime,
                self.id,
                0,
                &spec as *const TimerSpec,
                std::ptr::null_mut::<TimerSpec>(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for PosixTimer {
    fn drop(&mut self) {
        // A signal the timer already queued is dropped by the kernel when
        // its timer is deleted before delivery.
        // SAFETY: deleting our own timer id once; failure leaves nothing
        // to undo.
        unsafe { libc::syscall(libc::SYS_timer_delete, self.id) };
    }
}

/// `ns` nanoseconds as a `timespec`.
fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Whether this process may create POSIX CPU timers on its threads:
/// creates one on the calling thread's clock and deletes it, unarmed.
pub(crate) fn available() -> io::Result<()> {
    let timer = PosixTimer::open_unarmed(threads::gettid(), libc::SIGURG, 0)?;
    drop(timer);
    Ok(())
}

impl PosixTimer {
    /// A request for one sample of thread `tid` that only a running thread
    /// can take: a timer that expires once, as soon as the thread uses any
    /// CPU time, and raises `signal` with `value` (see [`request_value`]).
    ///
    /// A signal sent straight to a thread seen running can land after the
    /// thread entered `poll` or `nanosleep` and end the call with `EINTR`.
    /// A CPU timer cannot: the kernel checks it on the scheduler tick of a
    /// thread that is on a CPU and raises its signal on the way back to
    /// user space, so the handler runs where the program was, never
    /// inside a blocking call (on kernels that run CPU timers from task
    /// work, `CONFIG_POSIX_CPU_TIMERS_TASK_WORK`, the default on x86_64
    /// and arm64 since 5.11; older ones raise it from the tick, where a
    /// thread interrupted in the kernel just before it sleeps could still
    /// see it). The price is latency: up to one scheduler tick (4 ms at
    /// 250 Hz) of the thread's running.
    pub(crate) fn open_request(
        tid: i32,
        signal: libc::c_int,
        value: usize,
    ) -> io::Result<PosixTimer> {
        PosixTimer::open_once(tid, signal, request_value(value))
    }

    /// A one-shot capture's request for thread `tid`'s registers and
    /// stack: the same kind of timer as [`Self::open_request`], so that a
    /// capture, too, never interrupts a blocking call. Its signal carries
    /// `generation` under a tag of its own ([`requested_dump`](crate::linux::signal::timer_values::requested_dump)).
    pub(crate) fn open_dump_request(
        tid: i32,
        signal: libc::c_int,
        generation: u64,
    ) -> io::Result<PosixTimer> {
        PosixTimer::open_once(tid, signal, DUMP_REQUEST_TAG | (generation & VALUE_MASK))
    }

    /// A wake notice for idle thread `tid`: a timer on its CPU clock that,
    /// armed with [`Self::arm_once`], raises `signal` in that thread once it
    /// used that much more CPU time, carrying `index` ([`wake_index`](crate::linux::signal::timer_values::wake_index)). Like
    /// a request's, its signal is taken on the way back to user space after
    /// a scheduler tick of the thread's running, never inside a blocking
    /// call. See `handler::wake_notices`.
    pub(crate) fn open_wake(tid: i32, signal: libc::c_int, index: usize) -> io::Result<PosixTimer> {
        PosixTimer::open_unarmed(tid, signal, WAKE_TAG | (index as u64 & VALUE_MASK))
    }

    /// Arms the timer to expire once, after `after_ns` (at least 1) more of
    /// the thread's CPU time.
    pub(crate) fn arm_once(&self, after_ns: u64) -> io::Result<()> {
        self.arm(after_ns.max(1))
    }

    /// A timer on thread `tid`'s CPU clock that expires once, after the
    /// first nanosecond of CPU time it uses from now.
    fn open_once(tid: i32, signal: libc::c_int, value: u64) -> io::Result<PosixTimer> {
        let timer = PosixTimer::open_unarmed(tid, signal, value)?;
        timer.arm(1)?;
        Ok(timer)
    }

    /// Creates a timer on thread `tid`'s CPU clock that, once armed,
    /// raises `signal` in that thread with `value` in `si_value`.
    fn open_unarmed(tid: i32, signal: libc::c_int, value: u64) -> io::Result<PosixTimer> {
        let event = ThreadSigevent {
            value,
            signo: signal,
            notify: libc::SIGEV_THREAD_ID,
            tid,
            _rest: [0; 11],
        };
        let mut id: libc::c_int = -1;
        // SAFETY: a valid clock id, a complete sigevent record and a valid
        // out-pointer for the timer id; the kernel copies both in and out.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_timer_create,
                thread_clock(tid),
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
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and out-pointer.
        let rc = unsafe { libc::clock_gettime(thread_clock(tid), &mut ts) };
        assert_eq!(rc, 0);
        // The calling thread's clock, so at least what it read before.
        let before = threads::thread_cpu_ns(tid).unwrap();
        assert!(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 <= before + 1);
        assert!(available().is_ok());
    }
}
