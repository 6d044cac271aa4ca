//! The values one-shot CPU timers carry in `si_value`, and the handler's
//! reading of them: which armed slot a sample request is for, which
//! capture a capture's request belongs to, which idle thread woke. The
//! timers themselves are `kernel::cpu_timers`.

/// The high bits of a sample request's timer value
/// (`PosixTimer::open_request`): apart from any pointer (not canonical on
/// x86_64 or aarch64).
pub(crate) const REQUEST_TAG: u64 = 0xb7b6 << 48;
/// The high bits of a one-shot capture's request
/// (`PosixTimer::open_dump_request`), apart from a sample request's.
pub(crate) const DUMP_REQUEST_TAG: u64 = 0xb7b5 << 48;
/// The high bits of a wake notice's timer value (`PosixTimer::open_wake`).
pub(crate) const WAKE_TAG: u64 = 0xb7b4 << 48;
/// The bits below a tag.
pub(crate) const VALUE_MASK: u64 = (1 << 48) - 1;

/// The `si_value` of a request's timer for an armed slot's `value`.
pub(crate) fn request_value(value: usize) -> u64 {
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
