//! The sampler's clock on macOS: `mach_absolute_time` to read it and
//! `mach_wait_until` to sleep to an absolute deadline, so the shared
//! [`TickSchedule`](crate::clock::TickSchedule) keeps a drift-free rate.

use mach2::kern_return::KERN_ABORTED;
use mach2::mach_time::{mach_absolute_time, mach_timebase_info, mach_wait_until};

use crate::clock::{Clock, Timebase};

/// `mach_absolute_time` in nanoseconds.
pub(crate) struct MachClock {
    timebase: Timebase,
}

impl MachClock {
    pub(crate) fn new() -> MachClock {
        let mut info = mach_timebase_info { numer: 1, denom: 1 };
        // SAFETY: `info` is a valid out-pointer. The call cannot fail on a
        // running system; if it did, 1/1 (Intel's ratio) is kept.
        unsafe {
            mach_timebase_info(&mut info);
        }
        let timebase = if info.numer == 0 || info.denom == 0 {
            Timebase { numer: 1, denom: 1 }
        } else {
            Timebase {
                numer: info.numer,
                denom: info.denom,
            }
        };
        MachClock { timebase }
    }
}

impl Clock for MachClock {
    fn now_ns(&self) -> u64 {
        // SAFETY: no preconditions.
        self.timebase.ticks_to_ns(unsafe { mach_absolute_time() })
    }

    fn sleep_until(&self, deadline_ns: u64) {
        let deadline = self.timebase.ns_to_ticks_ceil(deadline_ns);
        // `KERN_ABORTED`: the wait was interrupted; wait again for the
        // same absolute deadline.
        // SAFETY: no preconditions; a deadline in the past returns at once.
        while unsafe { mach_wait_until(deadline) } == KERN_ABORTED {}
    }
}
