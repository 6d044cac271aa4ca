//! `struct perf_event_attr` (up to `PERF_ATTR_SIZE_VER5`, 112 bytes) and the flag bits btprof
//! sets, from `<linux/perf_event.h>`.

/// The attribute block passed to `perf_event_open`; zero is the kernel's default.
#[repr(C)]
#[derive(Default)]
pub(crate) struct PerfEventAttr {
    pub kind: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved: u16,
}

impl PerfEventAttr {
    /// One thread's software task clock, overflowing every `period_ns`.
    pub(crate) fn task_clock(period_ns: u64, flags: u64) -> Self {
        PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns.max(1),
            flags,
            ..PerfEventAttr::default()
        }
    }

    /// A software event that counts and samples nothing, user space only, not inherited.
    pub(crate) fn dummy() -> Self {
        PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_DUMMY,
            flags: FLAGS_EXCLUDE_KERNEL_HV,
            ..PerfEventAttr::default()
        }
    }

    /// `perf_event_open` with no group; the new descriptor is close-on-exec.
    pub(crate) fn open(&self, tid: i32, cpu: i32) -> std::io::Result<libc::c_int> {
        // SAFETY: `self` is initialised and `size` its length; `tid` is our thread (0: the
        // caller), `cpu` a CPU or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                self as *const PerfEventAttr,
                tid,
                cpu,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        match fd {
            ..0 => Err(std::io::Error::last_os_error()),
            fd => Ok(fd as libc::c_int),
        }
    }
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

// The bits of `perf_event_attr`'s flags word, named as in the header.
pub(crate) const FLAG_DISABLED: u64 = 1 << 0;
pub(crate) const FLAG_INHERIT: u64 = 1 << 1;
/// `exclude_kernel` and `exclude_hv`: user space only, as unprivileged use requires.
pub(crate) const FLAGS_EXCLUDE_KERNEL_HV: u64 = (1 << 5) | (1 << 6);
pub(crate) const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub(crate) const FLAG_COMM: u64 = 1 << 9;
/// `inherit_stat`: an inherited copy's count is recorded at thread exit.
pub(crate) const FLAG_INHERIT_STAT: u64 = 1 << 11;
pub(crate) const FLAG_TASK: u64 = 1 << 13;
pub(crate) const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub(crate) const FLAG_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
pub(crate) const FLAG_USE_CLOCKID: u64 = 1 << 25;
/// Linux 5.13: inherited by threads, not by children.
pub(crate) const FLAG_INHERIT_THREAD: u64 = 1 << 35;
/// Linux 5.13: gone when the thread calls `execve`.
pub(crate) const FLAG_REMOVE_ON_EXEC: u64 = 1 << 36;

pub(crate) const PERF_SAMPLE_TID: u64 = 1 << 1;
pub(crate) const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub(crate) const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub(crate) const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
pub(crate) const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_perf_attr_size_ver5() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 112);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sample_regs_user), 80);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sample_stack_user), 88);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sample_max_stack), 108);
    }
}
