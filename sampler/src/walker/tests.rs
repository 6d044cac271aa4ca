//! The walker's tests: frame chains laid out in memory, then walked.

use super::*;

/// A synthetic stack: a byte buffer standing at a chosen address.
struct FakeStack {
    base: u64,
    words: Vec<u64>,
}

impl FakeStack {
    fn new(base: u64, len_words: usize) -> Self {
        FakeStack {
            base,
            words: vec![0; len_words],
        }
    }
    fn addr(&self, word: usize) -> u64 {
        self.base + 8 * word as u64
    }
    /// Writes a frame record at word index `at`.
    fn record(&mut self, at: usize, next_fp: u64, ret: u64) {
        self.words[at] = next_fp;
        self.words[at + 1] = ret;
    }
    fn bounds_from(&self, sp: u64) -> StackBounds {
        StackBounds {
            low: sp,
            high: self.base + 8 * self.words.len() as u64,
        }
    }
}

impl StackMemory for &FakeStack {
    fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
        assert_eq!(addr % 8, 0, "walker asked for a misaligned read");
        let i = usize::try_from((addr - self.base) / 8).ok()?;
        Some([*self.words.get(i)?, *self.words.get(i + 1)?])
    }
}

const BASE: u64 = 0x7fff_0000_0000;

/// leaf pc, then three frames: word 4 -> word 10 -> word 20 -> end.
fn three_frames() -> (FakeStack, Registers) {
    let mut s = FakeStack::new(BASE, 64);
    let (f1, f2, f3) = (s.addr(4), s.addr(10), s.addr(20));
    s.record(4, f2, 0x1111);
    s.record(10, f3, 0x2222);
    s.record(20, 0, 0x3333);
    let regs = Registers {
        pc: 0x1000,
        fp: f1,
        sp: s.addr(2),
        lr: 0,
    };
    (s, regs)
}

fn run(arch: Arch, s: &FakeStack, regs: &Registers, cap: usize) -> (Vec<u64>, Walk) {
    let mut out = vec![0; cap];
    let w = walk(arch, regs, Some(s.bounds_from(regs.sp)), &mut &*s, &mut out);
    out.truncate(w.depth);
    (out, w)
}

#[test]
fn valid_chain_is_complete_with_pc_first() {
    let (s, regs) = three_frames();
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
    assert_eq!(w.end, WalkEnd::Complete);
    assert!(!w.end.is_truncated());
    assert_eq!(w.lr, 0);
}

#[test]
fn cycle_stops_as_not_increasing() {
    let (mut s, regs) = three_frames();
    let f1 = s.addr(4);
    s.record(20, f1, 0x3333); // top frame points back to the first
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
    assert_eq!(w.end, WalkEnd::NotIncreasing);
    assert!(w.end.is_truncated());
}

/// [`three_frames`] with the third record linking to `link(stack)`:
/// the walk keeps the three frames and ends with `end`.
fn third_link_stops(link: impl Fn(&FakeStack) -> u64, end: WalkEnd) {
    let (mut s, regs) = three_frames();
    let next = link(&s);
    s.record(10, next, 0x2222);
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222]);
    assert_eq!(w.end, end);
}

#[test]
fn self_loop_stops() {
    third_link_stops(|s| s.addr(10), WalkEnd::NotIncreasing);
}

#[test]
fn pointer_going_down_stops() {
    // Above sp but below the current record at 10.
    third_link_stops(|s| s.addr(6), WalkEnd::NotIncreasing);
}

#[test]
fn misaligned_pointer_stops() {
    third_link_stops(|s| s.addr(20) + 4, WalkEnd::Misaligned);
}

#[test]
fn pointer_outside_stack_stops_without_reading() {
    // Far above the stack.
    third_link_stops(|_| BASE + 0x10_0000, WalkEnd::OutOfBounds);

    // A first frame pointer below sp is outside the live stack too.
    let (s, mut regs) = three_frames();
    regs.fp = s.addr(0);
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000]);
    assert_eq!(w.end, WalkEnd::OutOfBounds);
}

#[test]
fn record_straddling_the_top_is_out_of_bounds() {
    let (mut s, regs) = three_frames();
    let last = s.addr(63); // record would need words 63 and 64
    s.record(20, last, 0x3333);
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
    assert_eq!(w.end, WalkEnd::OutOfBounds);
}

#[test]
fn depth_cap_marks_truncation() {
    let (s, regs) = three_frames();
    let (frames, w) = run(Arch::X86_64, &s, &regs, 2);
    assert_eq!(frames, vec![0x1000, 0x1111]);
    assert_eq!(w.end, WalkEnd::DepthCap);
    assert!(w.end.is_truncated());

    // Exactly enough room is not truncation.
    let (frames, w) = run(Arch::X86_64, &s, &regs, 4);
    assert_eq!(frames.len(), 4);
    assert_eq!(w.end, WalkEnd::Complete);
}

#[test]
fn zero_return_address_ends_the_chain() {
    let (mut s, regs) = three_frames();
    let f3 = s.addr(20);
    s.record(10, f3, 0); // a runtime's outermost frame
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111]);
    assert_eq!(w.end, WalkEnd::Complete);
}

#[test]
fn no_bounds_keeps_only_the_pc() {
    let (s, regs) = three_frames();
    let mut out = [0u64; 8];
    let w = walk(Arch::X86_64, &regs, None, &mut &s, &mut out);
    assert_eq!((w.depth, out[0], w.end), (1, 0x1000, WalkEnd::NoBounds));
}

#[test]
fn zero_frame_pointer_is_a_complete_leaf() {
    let (s, mut regs) = three_frames();
    regs.fp = 0;
    let (frames, w) = run(Arch::X86_64, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000]);
    assert_eq!(w.end, WalkEnd::Complete);
}

const MAC_ARM: Arch = Arch::Aarch64 {
    code_mask: (1 << 47) - 1,
};
/// A plausible PAC signature in the bits above the 47-bit address.
const PAC: u64 = 0x002d_8000_0000_0000;

#[test]
fn aarch64_strips_pac_from_pc_lr_and_return_addresses() {
    let (mut s, mut regs) = three_frames();
    let (f2, f3) = (s.addr(10), s.addr(20));
    s.record(4, f2, 0x1111 | PAC);
    s.record(10, f3, 0x2222 | PAC);
    s.record(20, 0, 0x3333 | (PAC << 1));
    regs.pc = 0x1000 | PAC;
    regs.lr = 0x1111 | PAC;
    let (frames, w) = run(MAC_ARM, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
    assert_eq!(w.lr, 0x1111);
    assert_eq!(w.end, WalkEnd::Complete);
}

/// Linux signs return addresses in bits 48 to 54 and 56 to 63 (with
/// 48-bit addresses): every one of them is stripped, from the pc, the
/// link register and the saved return addresses.
#[test]
fn aarch64_linux_strips_every_signature_bit() {
    let (mut s, mut regs) = three_frames();
    let (f2, f3) = (s.addr(10), s.addr(20));
    let all_signature_bits = 0xff7f_0000_0000_0000u64;
    s.record(4, f2, 0x1111 | all_signature_bits);
    s.record(10, f3, 0x2222 | 0x3a17_0000_0000_0000);
    s.record(20, 0, 0x3333 | 0x0001_0000_0000_0000);
    regs.pc = 0x1000;
    regs.lr = 0x4444 | 0x8000_0000_0000_0000;
    let (frames, w) = run(Arch::AARCH64_LINUX, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111, 0x2222, 0x3333]);
    assert_eq!(w.lr, 0x4444);
    assert_eq!(regs.link_register(Arch::AARCH64_LINUX), 0x4444);
    assert_eq!(regs.link_register(Arch::X86_64), 0);
    // The highest user code address keeps all its bits.
    let top = (1u64 << 48) - 4;
    assert_eq!(Arch::AARCH64_LINUX.strip_code_address(top | PAC), top);
}

#[test]
fn aarch64_pac_only_return_address_counts_as_zero() {
    let (mut s, regs) = three_frames();
    let f3 = s.addr(20);
    s.record(10, f3, PAC); // signed null: end of chain
    let (frames, w) = run(MAC_ARM, &s, &regs, 32);
    assert_eq!(frames, vec![0x1000, 0x1111]);
    assert_eq!(w.end, WalkEnd::Complete);
}

#[test]
fn aarch64_cycle_and_bounds_rules_match_x86_64() {
    let (mut s, regs) = three_frames();
    let f1 = s.addr(4);
    s.record(20, f1, 0x3333);
    let (_, w) = run(MAC_ARM, &s, &regs, 32);
    assert_eq!(w.end, WalkEnd::NotIncreasing);
    s.record(20, BASE - 16, 0x3333); // below sp: outside the live stack
    let (_, w) = run(MAC_ARM, &s, &regs, 32);
    assert_eq!(w.end, WalkEnd::OutOfBounds);
}

#[test]
fn x86_64_does_not_touch_high_bits() {
    assert_eq!(Arch::X86_64.strip_code_address(PAC | 5), PAC | 5);
}

#[test]
fn empty_buffer_is_a_depth_cap() {
    let (s, regs) = three_frames();
    let w = walk(Arch::X86_64, &regs, None, &mut &s, &mut []);
    assert_eq!((w.depth, w.end), (0, WalkEnd::DepthCap));
}

#[test]
fn walk_end_round_trips_through_u8() {
    for end in WalkEnd::ALL {
        assert_eq!(WalkEnd::from_u8(end as u8), end);
    }
}

/// The top of the calling thread's stack.
#[cfg(target_vendor = "apple")]
fn own_stack_top() -> u64 {
    // SAFETY: the calling thread's own pthread; on macOS the stack
    // address is the stack's highest address.
    unsafe { libc::pthread_get_stackaddr_np(libc::pthread_self()) as u64 }
}

/// The top of the calling thread's stack.
#[cfg(target_os = "linux")]
fn own_stack_top() -> u64 {
    // SAFETY: an attribute object filled in for the calling thread,
    // read and destroyed.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let (mut addr, mut size) = (std::ptr::null_mut(), 0);
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        addr as u64 + size as u64
    }
}

// Each does something after its call, so that the call is not made a
// tail call: the caller's frame must still be there to be walked.
#[inline(never)]
fn calls_the_walk(top: u64, out: &mut [u64]) -> Walk {
    let walk = walk_calling_thread(top, out);
    std::hint::black_box(out.as_ptr());
    walk
}

#[inline(never)]
fn one_frame_up(top: u64, out: &mut [u64]) -> Walk {
    let walk = calls_the_walk(top, out);
    std::hint::black_box(out.as_ptr());
    walk
}

#[test]
fn the_calling_thread_walks_its_own_callers() {
    let mut out = [0u64; 64];
    let walk = one_frame_up(own_stack_top(), &mut out);
    // Frame 0 returns into calls_the_walk (or, where the walk's own
    // frame was not set up yet, into one_frame_up); one_frame_up's
    // caller, this test, comes next, and the chain goes on up to the
    // thread's start.
    let starts = [
        (calls_the_walk as *const () as u64, "calls_the_walk"),
        (one_frame_up as *const () as u64, "one_frame_up"),
        (
            the_calling_thread_walks_its_own_callers as *const () as u64,
            "test",
        ),
    ];
    // The function an address returns into: the known start nearest
    // below it (these are small, and the test's call is near its top).
    let owner = |addr: u64| {
        starts
            .iter()
            .filter(|&&(start, _)| start < addr && addr - start < 4096)
            .max_by_key(|&&(start, _)| start)
            .map_or("?", |&(_, name)| name)
    };
    let frames = &out[..walk.depth];
    let names: Vec<&str> = frames.iter().map(|&a| owner(a)).collect();
    let report = format!("{frames:#x?} {names:?} {starts:#x?}");
    let from = usize::from(names.first() == Some(&"calls_the_walk"));
    assert_eq!(
        names.get(from..from + 2),
        Some(&["one_frame_up", "test"][..]),
        "{report}"
    );
    assert!(walk.depth >= from + 3, "{report}");
}
