//! Per-thread POSIX CPU timers: `timer_create` on a thread's own CPU clock,
//! whose expiry raises the profiling signal in that same thread.
//!
//! The clock for another thread of this process is built from its id as
//! glibc's `pthread_getcpuclockid` does (`CLOCK_THREAD_CPUTIME_ID` of that
//! thread), and `SIGEV_THREAD_ID` sends each expiry to the thread whose CPU
//! time ran out, so the sample lands in the thread that used the CPU, at a
//! point unrelated to the code it runs. Unlike perf events this needs no
//! privilege, and the default container seccomp profiles allow it: it is
//! the kernel-paced clock where `perf_event_open` is refused.
//!
//! The kernel checks CPU timers on the scheduler tick (CONFIG_HZ, often
//! 250), so a period shorter than a tick expires once per tick, with
//! `si_overrun` counting the further periods that expiry covered. Each
//! sample therefore stands for `1 + si_overrun` periods ([`sample_weight`]);
//! the stats report these weighted samples apart from the distinct ones.
//! A thread that exits, or is running when sampling stops, may have run
//! periods out since its last signal that no tick found it running for;
//! the engine counts them then on its last sample's stack, as an overrun
//! is counted.
//!
//! A timer can also stay silent while its thread runs and takes signals:
//! on some kernels (seen on 6.18) the CPU timers of a process forked from
//! one whose threads had CPU timers fire up to half a second of CPU time
//! late, though armed and overdue. The engine samples such a thread
//! itself and restarts its timer ([`PosixTimer::restart`]).
//!
//! Wall mode uses the same timers once per sample, as requests that only
//! a running thread can take ([`PosixTimer::open_request`]).
//!
//! A timer's signal carries a cookie in `si_value` that names the running
//! sampler: the handler takes an `SI_TIMER` signal as a sample only while
//! that cookie is current, so a timer signal of the application's own, or
//! one of a stopped sampler, is counted as stray instead.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::threads;

/// For btprof's own tests: timers armed while this is set fire only after
/// [`HELD_BACK_NS`] of CPU time, as if the kernel held their expiries
/// back (see the module docs).
#[cfg(feature = "test-hooks")]
pub(crate) static HOLD_BACK: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
/// An hour: longer than any test runs.
#[cfg(feature = "test-hooks")]
const HELD_BACK_NS: u64 = 3_600_000_000_000;

/// The cookie of the running sampler's timers (0: none runs).
static RUN_COOKIE: AtomicU64 = AtomicU64::new(0);
/// Tells one sampler run's cookie from the next.
static RUN_GENERATION: AtomicU64 = AtomicU64::new(1);
/// The high bits of every cookie: no pointer an application would put in
/// its own timers' `si_value` looks like this (not canonical on x86_64 or
/// aarch64).
const COOKIE_TAG: u64 = 0xb7b7 << 48;

/// Makes the timers opened from now on, and only they, count as samples.
pub(crate) fn begin_run() {
    let generation = RUN_GENERATION.fetch_add(1, Relaxed) & 0xffff_ffff_ffff;
    RUN_COOKIE.store(COOKIE_TAG | generation, Relaxed);
}

/// After the last timer is deleted: a signal still on its way is stray.
pub(crate) fn end_run() {
    RUN_COOKIE.store(0, Relaxed);
}

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
    tid: i32,
    /// The thread's CPU clock when the timer was created.
    start_ns: u64,
}

impl PosixTimer {
    /// Creates and arms a timer that raises `signal` in thread `tid` every
    /// `period_ns` of that thread's CPU time. `ESRCH`/`EINVAL`: the thread
    /// exited.
    pub(crate) fn open(tid: i32, period_ns: u64, signal: libc::c_int) -> io::Result<PosixTimer> {
        let mut timer = PosixTimer::open_unarmed(tid, signal, RUN_COOKIE.load(Relaxed))?;
        timer.start_ns =
            threads::thread_cpu_ns(tid).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        timer.restart(period_ns)?;
        Ok(timer)
    }

    /// Sets the timer to expire first after `first` of the thread's CPU
    /// time, then every `interval` (zero: once).
    fn arm(&self, interval: libc::timespec, first: libc::timespec) -> io::Result<()> {
        let spec = TimerSpec {
            interval,
            value: first,
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

    /// Starts the timer's period again from the thread's CPU time now.
    /// An expiry the kernel has not signalled yet is dropped with it, so
    /// the periods a sample taken another way stood for are not counted
    /// again as that signal's overrun when it finally comes.
    pub(crate) fn restart(&self, period_ns: u64) -> io::Result<()> {
        #[cfg(feature = "test-hooks")]
        let period_ns = if HOLD_BACK.load(Relaxed) {
            HELD_BACK_NS
        } else {
            period_ns
        };
        let period = timespec(period_ns);
        self.arm(period, period)
    }

    /// The CPU time the thread used since the timer was created, in
    /// nanoseconds; `None` once the thread exited.
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        threads::thread_cpu_ns(self.tid).map(|now| now.saturating_sub(self.start_ns))
    }
}

impl Drop for PosixTimer {
    fn drop(&mut self) {
        // A signal the timer already queued is dropped by the kernel when
        // its timer is deleted before delivery (and otherwise finds the
        // run's cookie gone, or the handler replaced, and counts as stray).
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
    /// `generation` under a tag of its own ([`requested_dump`]).
    pub(crate) fn open_dump_request(
        tid: i32,
        signal: libc::c_int,
        generation: u64,
    ) -> io::Result<PosixTimer> {
        PosixTimer::open_once(tid, signal, DUMP_REQUEST_TAG | (generation & VALUE_MASK))
    }

    /// A wake notice for idle thread `tid`: a timer on its CPU clock that,
    /// armed with [`Self::arm_once`], raises `signal` in that thread once it
    /// used that much more CPU time, carrying `index` ([`wake_index`]). Like
    /// a request's, its signal is taken on the way back to user space after
    /// a scheduler tick of the thread's running, never inside a blocking
    /// call. See `handler::wake_notices`.
    pub(crate) fn open_wake(tid: i32, signal: libc::c_int, index: usize) -> io::Result<PosixTimer> {
        PosixTimer::open_unarmed(tid, signal, WAKE_TAG | (index as u64 & VALUE_MASK))
    }

    /// Arms the timer to expire once, after `after_ns` (at least 1) more of
    /// the thread's CPU time.
    pub(crate) fn arm_once(&self, after_ns: u64) -> io::Result<()> {
        self.arm(timespec(0), timespec(after_ns.max(1)))
    }

    /// A timer on thread `tid`'s CPU clock that expires once, after the
    /// first nanosecond of CPU time it uses from now.
    fn open_once(tid: i32, signal: libc::c_int, value: u64) -> io::Result<PosixTimer> {
        let timer = PosixTimer::open_unarmed(tid, signal, value)?;
        timer.arm(timespec(0), timespec(1))?;
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
        Ok(PosixTimer {
            id,
            tid,
            start_ns: 0,
        })
    }
}

/// The high bits of a sample request's timer value ([`PosixTimer::
/// open_request`]): apart from the run cookie's, and from any pointer.
const REQUEST_TAG: u64 = 0xb7b6 << 48;
/// The high bits of a one-shot capture's request ([`PosixTimer::
/// open_dump_request`]), apart from a sample request's.
const DUMP_REQUEST_TAG: u64 = 0xb7b5 << 48;
/// The high bits of a wake notice's timer value ([`PosixTimer::
/// open_wake`]).
const WAKE_TAG: u64 = 0xb7b4 << 48;
/// The bits below a tag.
const VALUE_MASK: u64 = (1 << 48) - 1;

/// The `si_value` of a request's timer for an armed slot's `value`.
fn request_value(value: usize) -> u64 {
    REQUEST_TAG | value as u64
}

/// The armed slot's value a request timer's signal carries, if `info` is
/// one (`SI_TIMER` with the request tag). Async-signal-safe.
pub(crate) fn requested_slot(info: &libc::siginfo_t) -> Option<usize> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == REQUEST_TAG).then_some((value & VALUE_MASK) as usize)
}

/// The notice index a wake timer's signal carries, if `info` is one
/// (`SI_TIMER` with the wake tag). Async-signal-safe.
pub(crate) fn wake_index(info: &libc::siginfo_t) -> Option<usize> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == WAKE_TAG).then_some((value & VALUE_MASK) as usize)
}

/// The generation a one-shot capture's request timer carries, if `info`
/// is one (`SI_TIMER` with the capture's tag). Async-signal-safe.
pub(crate) fn requested_dump(info: &libc::siginfo_t) -> Option<u64> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == DUMP_REQUEST_TAG).then_some(value & VALUE_MASK)
}

/// The `si_value` of an `SI_TIMER` signal. On 64-bit Linux the `_timer`
/// member starts at byte 16 of `siginfo_t`: `int si_tid; int si_overrun;
/// sigval_t si_sigval;`.
fn timer_value(info: &libc::siginfo_t) -> u64 {
    const VALUE_AT: usize = 24;
    let base = (info as *const libc::siginfo_t).cast::<u8>();
    // SAFETY: `siginfo_t` is 128 bytes and an `SI_TIMER` signal fills its
    // `_timer` member at this offset; an unaligned read of an integer.
    unsafe { base.add(VALUE_AT).cast::<u64>().read_unaligned() }
}

/// The periods a timer signal stands for, `1 + si_overrun`, if it is one of
/// the running sampler's timers (`si_code` `SI_TIMER` and its cookie in
/// `si_value`); `None` for any other signal. Async-signal-safe.
pub(crate) fn sample_weight(info: &libc::siginfo_t) -> Option<u64> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    // `si_overrun` follows `si_tid` in the `_timer` member (see
    // `timer_value`).
    const OVERRUN_AT: usize = 20;
    let base = (info as *const libc::siginfo_t).cast::<u8>();
    // SAFETY: `siginfo_t` is 128 bytes and an `SI_TIMER` signal fills its
    // `_timer` member at this offset; an unaligned read of an integer.
    let overrun = unsafe { base.add(OVERRUN_AT).cast::<i32>().read_unaligned() };
    let value = timer_value(info);
    let cookie = RUN_COOKIE.load(Relaxed);
    if cookie == 0 || value != cookie {
        return None;
    }
    Some(1 + u64::from(overrun.max(0).unsigned_abs()))
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
