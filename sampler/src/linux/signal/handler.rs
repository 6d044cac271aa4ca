//! The profiling signal's handler: tells what the signal is (a sample the
//! sampler asked for, a timer's sample, a capture's request, a wake
//! notice, or a stray) and walks the interrupted stack into a slot.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::walker::{self, Arch, StackBounds};

use super::registers::registers;
use super::slots::{
    state, Slot, ARMED, CLAIMED, DONE, IDLE, MAX_DEPTH, MISSING_REGIONS, NEXT_GENERATION,
    NO_FREE_SLOT, OWN_PID, SLOT_TABLE, STRAY_SIGNALS, TIMER_MAX_DEPTH, UNKNOWN_STACK_SPAN, WRITING,
};
use super::{dump_slot, own_stack, stack_regions, timer_fds, timer_values, wake_notices};

/// Tests only ([`crate::test_hooks`], feature `test-hooks`): CPU time each
/// handler spends after claiming its slot, as a slow walk would, so a test
/// can catch threads inside the handler (where the profiling signal is in
/// their `SigBlk`). Production builds have neither the statics nor the
/// check in the handler.
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_NS: core::sync::atomic::AtomicU64 =
    core::sync::atomic::AtomicU64::new(0);
/// The one thread whose handlers take [`HANDLER_TEST_DELAY_NS`].
#[cfg(feature = "test-hooks")]
pub(crate) static HANDLER_TEST_DELAY_TID: core::sync::atomic::AtomicI32 =
    core::sync::atomic::AtomicI32::new(0);

/// How long a thread may have been off CPU between the sampler's decision
/// and the signal's delivery and still be sampled at a system call's exit.
///
/// A signal to a thread running on another CPU is taken within
/// microseconds, where the thread is. One to a thread waiting for a CPU is
/// taken when the thread is scheduled again, where it was preempted. Most
/// preemptions come at a timer interrupt or at the sampler's own wakeup,
/// at an unbiased point of the thread's CPU time, and such a sample is
/// kept however long the wait (giving them up took the samples of the
/// thread that shares a CPU with the sampler: with two busy processes
/// beside it, one worker of two got 258 samples per CPU-second, the other
/// 684). But a thread is preempted on its way out of a system call far
/// more often than its CPU time there says (the scheduler preempts at the
/// return to user space, and reading a CPU clock can end a time slice), so
/// a signal that finds the thread there after a wait above this is given
/// up and its periods paid by later samples. It is above what delivering a
/// signal to a running thread takes in a VM.
const SYSCALL_EXIT_LATE_NS: u64 = 10_000;

/// The profiling signal's handler. Async-signal-safe: no allocation, no
/// locks, no panics; errno is preserved.
pub(crate) extern "C" fn on_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: reading and writing this thread's errno is always allowed.
    let errno_ptr = unsafe { libc::__errno_location() };
    // SAFETY: `__errno_location` returns a valid pointer for this thread.
    let saved_errno = unsafe { *errno_ptr };
    // SAFETY: the kernel passes a valid `siginfo_t` and `ucontext_t` to an
    // `SA_SIGINFO` handler, and they live for the duration of this call.
    unsafe { take_sample(info, context) };
    // SAFETY: as above.
    unsafe { *errno_ptr = saved_errno };
}

/// `si_code` values of a signal raised by file-descriptor I/O readiness
/// (`POLL_IN` ..= `POLL_HUP`): how a perf timer's overflow arrives when the
/// descriptor has `F_SETSIG`.
const POLL_CODES: core::ops::RangeInclusive<i32> = 1..=6;

/// # Safety
/// `info` and `context` must be the handler's arguments.
unsafe fn take_sample(info: *const libc::siginfo_t, context: *const libc::c_void) {
    if info.is_null() || context.is_null() {
        return;
    }
    // SAFETY: non-null and provided by the kernel (see `on_signal`).
    let info = unsafe { &*info };
    let claimed = if info.si_code == libc::SI_QUEUE {
        // SAFETY: si_pid and si_value are valid for SI_QUEUE signals.
        let (pid, value) = unsafe { (info.si_pid(), info.si_value().sival_ptr as usize) };
        if pid == OWN_PID.load(Relaxed) && value & dump_slot::DUMP_MARK != 0 {
            // A one-shot capture's request: its own slot, not a sample's.
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            unsafe { dump_slot::on_dump_signal(value, context) };
            return;
        }
        if pid != OWN_PID.load(Relaxed) {
            STRAY_SIGNALS.fetch_add(1, Relaxed);
            None
        } else {
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            let pc = registers(unsafe { &*(context as *const libc::ucontext_t) }).pc;
            claim_armed(value, pc)
        }
    } else if POLL_CODES.contains(&info.si_code) {
        // SAFETY: a poll-band signal carries `si_band` and `si_fd`.
        let fd = unsafe { poll_fd(info) };
        if dump_slot::is_request_fd(fd) {
            // A one-shot capture's request, raised by a perf event.
            // SAFETY: `context` is the kernel's `ucontext_t` for this
            // delivery (checked non-null above).
            unsafe { dump_slot::on_perf_request(context) };
            return;
        }
        if info.si_signo == dump_slot::capture_signal() {
            // A capture's request that fired before the capture gave up on
            // its thread (it did not run in time) and closed it: queued,
            // then taken now. The capture's business, not a sample and not
            // a profiler's stray signal; dropped.
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
        // SAFETY: `context` is the kernel's `ucontext_t` for this delivery
        // (checked non-null above).
        unsafe { dump_slot::on_dump_signal(dump_slot::DUMP_MARK | generation as usize, context) };
        return;
    } else if let Some(value) = timer_values::requested_slot(info) {
        // The sampler's request for one sample of a running thread, raised
        // by a one-shot CPU timer (see `PosixTimer::open_request`).
        // SAFETY: `context` is the kernel's `ucontext_t` for this delivery
        // (checked non-null above).
        let pc = registers(unsafe { &*(context as *const libc::ucontext_t) }).pc;
        claim_armed(value, pc)
    } else if let Some(index) = timer_values::wake_index(info) {
        // An idle thread ran again: the sampler looks at it from its next
        // wakeup (see `wake_notices`).
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
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery, and
    // we own `slot` in `Writing` for `generation`.
    unsafe { walk_into(slot, generation, max_depth, context) };
}

/// Tests only: spends [`HANDLER_TEST_DELAY_NS`] of CPU time if this is the
/// thread a test chose.
#[cfg(feature = "test-hooks")]
fn test_delay() {
    let delay = HANDLER_TEST_DELAY_NS.load(Relaxed);
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    if delay != 0 && HANDLER_TEST_DELAY_TID.load(Relaxed) == unsafe { libc::gettid() } {
        let until = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).saturating_add(delay);
        while clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) < until {
            core::hint::spin_loop();
        }
    }
}

/// The slot a queued signal's `si_value` names, claimed `Armed -> Writing`
/// (counted as stray if there is none). A late signal (judged with `pc`,
/// where it interrupted the thread) publishes the slot `Done` and marked
/// late at once, and returns `None`.
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
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    slot.tid.store(unsafe { libc::gettid() }, Relaxed);
    let max_depth = (slot.max_depth.load(Relaxed) as usize).min(MAX_DEPTH);
    let sent = slot.sent_ns.load(Relaxed);
    let late = sent != 0 && {
        // Wall time since the sampler's reading, less the CPU time this
        // thread got meanwhile: how long it waited for a CPU.
        let waited = clock_ns(libc::CLOCK_MONOTONIC)
            .saturating_sub(sent)
            .saturating_sub(
                clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
                    .saturating_sub(slot.sent_cpu_ns.load(Relaxed)),
            );
        // See `SYSCALL_EXIT_LATE_NS`: only a wait that ends at a system
        // call's exit is given up. A thread that was running in the call
        // when the signal came takes it there at once.
        waited > SYSCALL_EXIT_LATE_NS && after_system_call(pc)
    };
    slot.late.store(u32::from(late), Relaxed);
    if late {
        slot.state.store(state(generation, DONE), Release);
        return None;
    }
    Some((slot, generation, max_depth))
}

/// Whether the instruction just before `pc` is a system call (x86_64
/// `syscall`, aarch64 `svc #0`): the thread is returning from the kernel.
/// Reads code with the fault-safe copy; unreadable means no.
/// Async-signal-safe.
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
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_ne_bytes());
    bytes[8..].copy_from_slice(&words[1].to_ne_bytes());
    let mut code = 0u32;
    for i in (0..LEN as usize).rev() {
        code = code << 8 | u32::from(bytes[at + i]);
    }
    code == CODE
}

/// `clock` in nanoseconds. Async-signal-safe (`clock_gettime` is).
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The first `Idle` slot, claimed `Idle -> Writing` with a fresh
/// generation, for a timer sample; counts the sample lost if every slot
/// is taken.
///
/// The lowest free slot, not one further round each time: a slot's pages
/// are the program's data until first written, and the first write of
/// each copies the page and flushes it from every CPU the process runs on
/// (an interrupt to each). Taken round the table, a handler paid that for
/// its first 256 samples, most of a short run's; taken lowest first, only
/// the few slots ever in use at once are.
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
            // SAFETY: gettid has no preconditions and is async-signal-safe.
            slot.tid.store(unsafe { libc::gettid() }, Relaxed);
            slot.late.store(0, Relaxed);
            let max_depth = (TIMER_MAX_DEPTH.load(Relaxed) as usize).min(MAX_DEPTH);
            return Some((slot, generation, max_depth));
        }
    }
    NO_FREE_SLOT.fetch_add(1, Relaxed);
    None
}

/// The `si_fd` of a poll-band signal: on 64-bit Linux the `_sigpoll`
/// member (`long si_band; int si_fd;`) starts at byte 16 of `siginfo_t`.
///
/// # Safety
/// `info` must be a signal whose `si_code` is a poll band.
unsafe fn poll_fd(info: &libc::siginfo_t) -> i32 {
    const SI_FD_AT: usize = 16 + core::mem::size_of::<libc::c_long>();
    // SAFETY: `siginfo_t` is 128 bytes; byte 24 holds `si_fd` for poll-band
    // signals, which the caller checked.
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
/// `context` must be the handler's `ucontext_t`, and the caller must have
/// won `slot` into `Writing` for `generation`.
unsafe fn walk_into(slot: &Slot, generation: u64, max_depth: usize, context: *const libc::c_void) {
    // SAFETY: `context` is the kernel's `ucontext_t` for this delivery.
    let regs = unsafe { registers(&*(context as *const libc::ucontext_t)) };
    // The snapshot bounds the walk where it knows the stack's mapping.
    // Where it does not (a thread or mapping newer than it, or more
    // mappings than it holds), the walk is bounded by a span above sp
    // instead of being cut to the leaf: every read is fault-safe
    // ([`CheckedMemory`](super::checked_memory::CheckedMemory)), so the bound only limits how far a corrupt chain
    // can wander, and the sampler is told to refresh the snapshot.
    let region = stack_regions::region_containing(regs.sp);
    let high = match region {
        Some((_, high)) => high,
        None => {
            MISSING_REGIONS.fetch_add(1, Relaxed);
            regs.sp.saturating_add(UNKNOWN_STACK_SPAN)
        }
    };
    let own_top = region.and_then(|region| own_stack::readable_top(regs.sp, region));
    let bounds = Some(StackBounds { low: regs.sp, high });
    // SAFETY: we won `-> Writing`, so we are the slot's only writer and the
    // sampler does not read it until we store `Done`.
    let frames = unsafe { &mut (&mut *slot.frames.0.get())[..max_depth] };
    // SAFETY: as above, the window is ours until we store `Done`.
    let window = unsafe { &mut *slot.window.0.get() };
    // Bounds come from a snapshot, which proves nothing about now: every
    // read outside the thread's own stack goes through the kernel's
    // fault-safe copy. The copy of the stack top it starts with is kept
    // for CFI unwinding in the sampler thread.
    // SAFETY: we won `-> Writing`: the slot's copy is ours too.
    let mut memory = unsafe { slot.copy.capture(&regs, high, own_top, window) };
    let walk = walker::walk(Arch::host(), &regs, bounds, &mut memory, frames);
    slot.depth.store(walk.depth as u32, Relaxed);
    slot.lr.store(walk.lr, Relaxed);
    slot.end.store(walk.end as u32, Relaxed);
    slot.state.store(state(generation, DONE), Release);
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
        // Every alignment, so the instruction straddles a word boundary too.
        let mut buffer = [0u8; 64];
        for offset in 0..16 {
            buffer.fill(0x90);
            buffer[offset..offset + code.len()].copy_from_slice(code);
            // Read through the kernel, which the compiler cannot see.
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
