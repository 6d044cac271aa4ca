//! The values one-shot CPU timers (`kernel::cpu_timers`) carry in
//! `si_value`, and the handler's decoding of them.

/// The high bits of a sample request's value (`PosixTimer::open_request`);
/// never set in a canonical x86_64 or aarch64 pointer.
pub(crate) const REQUEST_TAG: u64 = 0xb7b6 << 48;
/// The high bits of a one-shot capture's request
/// (`PosixTimer::open_dump_request`).
pub(crate) const DUMP_REQUEST_TAG: u64 = 0xb7b5 << 48;
/// The high bits of a wake notice's timer value (`PosixTimer::open_wake`).
pub(crate) const WAKE_TAG: u64 = 0xb7b4 << 48;
/// The bits below a tag.
pub(crate) const VALUE_MASK: u64 = (1 << 48) - 1;

/// The `si_value` of a request's timer for an armed slot's `value`.
pub(crate) fn request_value(value: usize) -> u64 {
    REQUEST_TAG | value as u64
}

/// The armed slot's value of a request timer's signal. Async-signal-safe.
pub(crate) fn requested_slot(info: &libc::siginfo_t) -> Option<usize> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == REQUEST_TAG).then_some((value & VALUE_MASK) as usize)
}

/// The notice index of a wake timer's signal. Async-signal-safe.
pub(crate) fn wake_index(info: &libc::siginfo_t) -> Option<usize> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == WAKE_TAG).then_some((value & VALUE_MASK) as usize)
}

/// The generation of a capture's request timer. Async-signal-safe.
pub(crate) fn requested_dump(info: &libc::siginfo_t) -> Option<u64> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    let value = timer_value(info);
    (value & !VALUE_MASK == DUMP_REQUEST_TAG).then_some(value & VALUE_MASK)
}

/// The `si_value` of an `SI_TIMER` signal: on 64-bit Linux, after `_timer`
/// (byte 16) holds `int si_tid; int si_overrun;`.
fn timer_value(info: &libc::siginfo_t) -> u64 {
    const VALUE_AT: usize = 24;
    let base = (info as *const libc::siginfo_t).cast::<u8>();
    // SAFETY: `SI_TIMER` fills this offset of the 128-byte `siginfo_t`;
    // an unaligned read.
    unsafe { base.add(VALUE_AT).cast::<u64>().read_unaligned() }
}
