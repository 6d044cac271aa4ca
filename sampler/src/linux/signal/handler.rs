//! The profiling signal's handler: tells a sample asked for, a timer's sample, a capture's
//! request, a wake notice and a stray apart, and walks the stack into a slot.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::walker::{self, Arch, StackBounds};

use super::registers::registers;
use super::safe_calls::{clock_ns, gettid};
use super::slots::{
    state, Slot, ARMED, CLAIMED, DONE, IDLE, MAX_DEPTH, MISSING_REGIONS, NEXT_GENERATION,
    NO_FREE_SLOT, OWN_PID, SLOT_TABLE, STRAY_SIGNALS, TIMER_MAX_DEPTH, WRITING,
};
use super::stack_bounds::stack_bounds;
use super::stack_copy::CAPTURE;
use super::{dump_slot, timer_fds, timer_values, wake_notices};

/// Tests only: CPU time each handler spends after claiming its slot, to catch threads in it.
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_NS: core::sync::atomic::AtomicU64 =
    core::sync::atomic::AtomicU64::new(0);
/// The one thread whose handlers take [`HANDLER_TEST_DELAY_NS`].
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_TID: core::sync::atomic::AtomicI32 =
    core::sync::atomic::AtomicI32::new(0);

/// The longest wait off CPU after the sampler's decision for a sample at a system call's exit
/// to be kept: threads are preempted there far more often than their CPU time warrants, so a
/// later one is given up and its periods paid by later samples.
const SYSCALL_EXIT_LATE_NS: u64 = 10_000;

/// The profiling signal's handler. Async-signal-safe: no allocation, locks or panics; keeps errno.
pub(crate) extern "C" fn on_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: `__errno_location` is valid for this thread, and the kernel passes an
    // `SA_SIGINFO` handler a valid `siginfo_t` and `ucontext_t`.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        take_sample(info, context);
        *errno = saved;
    }
}

/// `si_code` of a poll-band signal: how a perf timer's overflow arrives with `F_SETSIG`.
const POLL_CODES: core::ops::RangeInclusive<i32> = 1..=6;

/// # Safety
/// `info` and `context` must be the handler's arguments.
unsafe fn take_sample(info: *const libc::siginfo_t, context: *const libc::c_void) {
    if info.is_null() || context.is_null() {
        return;
    }
    // SAFETY: non-null and provided by the kernel (see `on_signal`).
    let info = unsafe { &*info };
    // SAFETY: `context` is the kernel's `ucontext_t` (checked non-null).
    let pc = || registers(unsafe { &*(context as *const libc::ucontext_t) }).pc;
    let claimed = if info.si_code == libc::SI_QUEUE {
        // SAFETY: si_pid and si_value are valid for SI_QUEUE signals.
        let (pid, value) = unsafe { (info.si_pid(), info.si_value().sival_ptr as usize) };
        if pid == OWN_PID.load(Relaxed) && value & dump_slot::DUMP_MARK != 0 {
            // A one-shot capture's request: its own slot, not a sample's.
            // SAFETY: `context` is the kernel's `ucontext_t` (checked non-null).
            unsafe { dump_slot::on_dump_signal(value, context) };
            return;
        }
        if pid != OWN_PID.load(Relaxed) {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        } else {
            claim_armed(value, pc())
        }
    } else if POLL_CODES.contains(&info.si_code) {
        // SAFETY: a poll-band signal carries `si_band` and `si_fd`.
        let fd = unsafe { poll_fd(info) };
        if dump_slot::is_request_fd(fd) {
            // A one-shot capture's request, raised by a perf event.
            // SAFETY: `context` is the kernel's `ucontext_t` (checked non-null).
            unsafe { dump_slot::on_perf_request(context) };
            return;
        }
        if info.si_signo == dump_slot::capture_signal() {
            // A capture's request that fired after the capture closed it.
            return;
        }
        if timer_fds::is_ours(fd) {
            claim_free()
        } else {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        }
    } else if let Some(generation) = timer_values::requested_dump(info) {
        // A one-shot capture's request, raised by a one-shot CPU timer.
        // SAFETY: `context` is the kernel's `ucontext_t` (checked non-null).
        unsafe { dump_slot::on_dump_signal(dump_slot::DUMP_MARK | generation as usize, context) };
        return;
    } else if let Some(value) = timer_values::requested_slot(info) {
        claim_armed(value, pc())
    } else if let Some(index) = timer_values::wake_index(info) {
        wake_notices::note(index);
        return;
    } else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        None
    };
    let Some((slot, generation, max_depth)) = claimed else {
        return;
    };
    #[cfg(feature = "test-hooks")]
    test_delay();
    // SAFETY: `context` is the kernel's `ucontext_t`, and we hold `slot` `Writing`.
    unsafe { walk_into(slot, generation, max_depth, context) };
}

/// Tests only: spends [`HANDLER_TEST_DELAY_NS`] of CPU time in the thread a test chose.
#[cfg(feature = "test-hooks")]
fn test_delay() {
    let delay = HANDLER_TEST_DELAY_NS.load(Relaxed);
    if delay != 0 && HANDLER_TEST_DELAY_TID.load(Relaxed) == gettid() {
        let until = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_add(delay);
        while clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) < until {
            core::hint::spin_loop();
        }
    }
}

/// Claims the slot `si_value` names, `Armed -> Writing` (stray if none). A late signal
/// (judged by `pc`) publishes the slot `Done`, marked late, and returns `None`.
fn claim_armed(value: usize, pc: u64) -> Option<(&'static Slot, u64, usize)> {
    let generation = (value >> 8) as u64;
    let claimed = SLOT_TABLE.get(value & 0xff).filter(|slot| {
        slot.state
            .compare_exchange(
                state(generation, ARMED),
                state(generation, WRITING),
                Acquire,
                Relaxed,
            )
            .is_ok()
    });
    let Some(slot) = claimed else {
        STRAY_SIGNALS.fetch_add(1, Relaxed);
        return None;
    };
    slot.tid.store(gettid(), Relaxed);
    let max_depth = (slot.max_depth.load(Relaxed) as usize).min(MAX_DEPTH);
    let sent = slot.sent_ns.load(Relaxed);
    // The wait: wall time since the sampler's reading less this thread's CPU time.
    let late = sent != 0 && {
        let cpu =
            clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(slot.sent_cpu_ns.load(Relaxed));
        let waited = clock_ns(libc::CLOCK_MONOTONIC)
            .saturating_sub(sent)
            .saturating_sub(cpu);
        waited > SYSCALL_EXIT_LATE_NS && after_system_call(pc)
    };
    slot.late.store(u32::from(late), Relaxed);
    if late {
        slot.state.store(state(generation, DONE), Release);
        return None;
    }
    Some((slot, generation, max_depth))
}

/// Whether the instruction before `pc` is a system call (x86_64 `syscall`, aarch64 `svc #0`).
/// Reads code fault-safely; unreadable means no. Async-signal-safe.
fn after_system_call(pc: u64) -> bool {
    #[cfg(target_arch = "x86_64")]
    const LEN: u64 = 2;
    #[cfg(target_arch = "x86_64")]
    const CODE: u32 = 0x050f;
    #[cfg(target_arch = "aarch64")]
    const LEN: u64 = 4;
    #[cfg(target_arch = "aarch64")]
    const CODE: u32 = 0xd400_0001;
    let Some(start) = pc.checked_sub(LEN) else {
        return false;
    };
    let base = start & !7;
    let at = (start - base) as usize;
    let mut words = [0u64; 2];
    if super::checked_memory::copy_words(base, &mut words) * 8 < at + LEN as usize {
        return false;
    }
    // SAFETY: two words are sixteen bytes, in memory order.
    let bytes: [u8; 16] = unsafe { core::mem::transmute(words) };
    let code = (0..LEN as usize)
        .rev()
        .fold(0u32, |code, i| code << 8 | u32::from(bytes[at + i]));
    code == CODE
}

/// Claims the lowest `Idle` slot for a timer sample (`Idle -> Writing`, fresh generation), or
/// counts it lost. Lowest first, so only the few slots in use at once have their pages written.
pub(super) fn claim_free() -> Option<(&'static Slot, u64, usize)> {
    for (index, slot) in SLOT_TABLE.iter().enumerate() {
        let current = slot.state.load(Relaxed);
        if current & 3 != IDLE {
            continue;
        }
        let generation = NEXT_GENERATION.fetch_add(1, Relaxed);
        if slot
            .state
            .compare_exchange(current, state(generation, WRITING), Acquire, Relaxed)
            .is_ok()
        {
            CLAIMED[index / 64].fetch_or(1 << (index % 64), Release);
            slot.tid.store(gettid(), Relaxed);
            slot.late.store(0, Relaxed);
            let max_depth = (TIMER_MAX_DEPTH.load(Relaxed) as usize).min(MAX_DEPTH);
            return Some((slot, generation, max_depth));
        }
    }
    NO_FREE_SLOT.fetch_add(1, Relaxed);
    None
}

/// The `si_fd` of a poll-band signal: on 64-bit Linux, after `long si_band` at byte 16.
///
/// # Safety
/// `info` must be a signal whose `si_code` is a poll band.
unsafe fn poll_fd(info: &libc::siginfo_t) -> i32 {
    const SI_FD_AT: usize = 16 + core::mem::size_of::<libc::c_long>();
    // SAFETY: within the 128-byte `siginfo_t`; the caller checked it is a poll-band signal.
    unsafe {
        (info as *const libc::siginfo_t)
            .cast::<u8>()
            .add(SI_FD_AT)
            .cast::<i32>()
            .read_unaligned()
    }
}

/// Walks the interrupted stack into `slot` and publishes it `Done`.
///
/// # Safety
/// `context` must be the handler's `ucontext_t`, and the caller must hold `slot` `Writing`.
unsafe fn walk_into(slot: &Slot, generation: u64, max_depth: usize, context: *const libc::c_void) {
    slot.taken_ns
        .store(clock_ns(libc::CLOCK_MONOTONIC), Relaxed);
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery.
    let regs = unsafe { registers(&*(context as *const libc::ucontext_t)) };
    let (high, own_top, listed) = stack_bounds(regs.sp);
    if !listed {
        MISSING_REGIONS.fetch_add(1, Relaxed);
    }
    let bounds = Some(StackBounds { low: regs.sp, high });
    // SAFETY: we won `-> Writing`: sole writer of frames, window and copy until `Done`.
    let (frames, window) = unsafe { (&mut *slot.frames.0.get(), &mut *slot.window.0.get()) };
    // SAFETY: as above.
    let mut memory = unsafe {
        slot.copy
            .capture(&regs, high, own_top, window, CAPTURE.load(Relaxed))
    };
    let walk = walker::walk(
        Arch::host(),
        &regs,
        bounds,
        &mut memory,
        &mut frames[..max_depth],
    );
    slot.depth.store(walk.depth as u32, Relaxed);
    slot.lr.store(walk.lr, Relaxed);
    slot.end.store(walk.end as u32, Relaxed);
    slot.state.store(state(generation, DONE), Release);
}

/// Whether thread `tid` holds a slot it is writing or wrote and the sampler has not collected:
/// the handler masks the profiling signal, so check this before taking `SigBlk` as proof the
/// thread blocks it. Conservative, and blind to the handler's first instructions.
pub(crate) fn in_handler(tid: i32) -> bool {
    dump_slot::in_dump_handler(tid)
        || SLOT_TABLE.iter().any(|slot| {
            matches!(slot.state.load(Acquire) & 3, WRITING | DONE) && slot.tid.load(Relaxed) == tid
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pc_right_after_a_system_call_instruction_is_recognised() {
        if crate::emulation::not_checked_under_qemu("reading code", crate::emulation::NO_VM_READV) {
            return;
        }
        assert!(super::super::checked_memory::probe());
        #[cfg(target_arch = "x86_64")]
        let code: &[u8] = &[0x0f, 0x05];
        #[cfg(target_arch = "aarch64")]
        let code: &[u8] = &[0x01, 0x00, 0x00, 0xd4];
        // Every alignment, so it straddles a word boundary too; read through the kernel.
        let mut buffer = [0u8; 64];
        for offset in 0..16 {
            buffer.fill(0x90);
            buffer[offset..offset + code.len()].copy_from_slice(code);
            std::hint::black_box(&mut buffer);
            let end = buffer.as_ptr() as u64 + (offset + code.len()) as u64;
            assert!(after_system_call(end), "offset {offset}");
            assert!(!after_system_call(end - 1), "offset {offset}");
            assert!(!after_system_call(end + 1), "offset {offset}");
        }
        assert!(!after_system_call(0));
        assert!(!after_system_call(8));
    }
}
