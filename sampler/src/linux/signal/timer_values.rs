//! The values one-shot CPU timers (`kernel::cpu_timers`) carry in `si_value`, and the
//! handler's decoding of them. The tags in the high bits are never set in a canonical x86_64
//! or aarch64 pointer.

/// A sample request (`PosixTimer::open_request`).
pub(crate) const REQUEST_TAG: u64 = 0xb7b6 << 48;
/// A one-shot capture's request (`PosixTimer::open_dump_request`).
pub(crate) const DUMP_REQUEST_TAG: u64 = 0xb7b5 << 48;
/// A wake notice's timer (`PosixTimer::open_wake`).
pub(crate) const WAKE_TAG: u64 = 0xb7b4 << 48;
/// The bits below a tag.
pub(crate) const VALUE_MASK: u64 = (1 << 48) - 1;

/// The `si_value` of a request's timer for an armed slot's `value`.
pub(crate) fn request_value(value: usize) -> u64 {
    REQUEST_TAG | value as u64
}

/// The armed slot's value of a request timer's signal. Async-signal-safe.
pub(crate) fn requested_slot(info: &libc::siginfo_t) -> Option<usize> {
    tagged(info, REQUEST_TAG).map(|value| value as usize)
}

/// The notice index of a wake timer's signal. Async-signal-safe.
pub(crate) fn wake_index(info: &libc::siginfo_t) -> Option<usize> {
    tagged(info, WAKE_TAG).map(|value| value as usize)
}

/// The generation of a capture's request timer. Async-signal-safe.
pub(crate) fn requested_dump(info: &libc::siginfo_t) -> Option<u64> {
    tagged(info, DUMP_REQUEST_TAG)
}

/// The bits below `tag` of an `SI_TIMER` signal's `si_value`, if it carries `tag`.
fn tagged(info: &libc::siginfo_t, tag: u64) -> Option<u64> {
    if info.si_code != libc::SI_TIMER {
        return None;
    }
    // On 64-bit Linux `si_value` follows `_timer`'s `int si_tid; int si_overrun;` at byte 16.
    let base = (info as *const libc::siginfo_t).cast::<u8>();
    // SAFETY: `SI_TIMER` fills this offset of the 128-byte `siginfo_t`; an unaligned read.
    let value = unsafe { base.add(24).cast::<u64>().read_unaligned() };
    (value & !VALUE_MASK == tag).then_some(value & VALUE_MASK)
}
