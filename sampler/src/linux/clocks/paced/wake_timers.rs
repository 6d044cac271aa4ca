//! Which idle thread holds each wake notice index, on the paced clock.
//! Each timer holds a queued-signal entry against `RLIMIT_SIGPENDING`, so at
//! most a quarter of that limit, and [`WAKE_NOTICES`], are open at once.

use crate::linux::kernel::cpu_timers::PosixTimer;
use crate::linux::signal::wake_notices::{self, WAKE_NOTICES};

/// A thread's wake timer and the notice index it carries.
#[derive(Debug)]
pub(crate) struct WakeTimer {
    pub(crate) timer: PosixTimer,
    pub(crate) index: usize,
    /// Armed and not yet noticed.
    pub(crate) armed: bool,
}

#[derive(Debug)]
pub(crate) struct WakeTimers {
    /// The thread each index was given to (0: free).
    pub(crate) owners: Vec<i32>,
    pub(crate) free: Vec<usize>,
    /// The most timers open at once.
    pub(crate) cap: usize,
    /// The kernel refused a timer for want of resources: no more this run.
    pub(crate) refused: bool,
    pub(crate) notices: Vec<usize>,
}

impl WakeTimers {
    pub(crate) fn new() -> WakeTimers {
        wake_notices::clear();
        WakeTimers {
            owners: Vec::new(),
            free: Vec::new(),
            cap: WAKE_NOTICES.min(sigpending_limit() / 4),
            refused: false,
            notices: Vec::new(),
        }
    }

    pub(crate) fn allocate(&mut self, tid: i32) -> Option<usize> {
        if let Some(i) = self.free.pop() {
            self.owners[i] = tid;
            return Some(i);
        }
        (self.owners.len() < self.cap).then(|| {
            self.owners.push(tid);
            self.owners.len() - 1
        })
    }

    pub(crate) fn release(&mut self, index: usize) {
        self.owners[index] = 0;
        self.free.push(index);
    }
}

/// The soft `RLIMIT_SIGPENDING` (`usize::MAX` if unlimited).
fn sigpending_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid resource and a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_SIGPENDING, &mut limit) } != 0 {
        return 0;
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        usize::MAX
    } else {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_given_up_to_the_cap_and_reused_once_released() {
        let mut wakes = WakeTimers {
            owners: Vec::new(),
            free: Vec::new(),
            cap: 2,
            refused: false,
            notices: Vec::new(),
        };
        assert_eq!(wakes.allocate(10), Some(0));
        assert_eq!(wakes.allocate(11), Some(1));
        assert_eq!(wakes.allocate(12), None);
        wakes.release(0);
        assert_eq!(wakes.allocate(12), Some(0));
        assert_eq!(wakes.owners, vec![12, 11]);
    }
}
