//! The CFI half of a sample's unwinding on recorded aarch64 data: the registers and stack top
//! of a frameless call chain and the program's `.eh_frame_hdr` and `.eh_frame`, from
//! `fixtures/aarch64_frameless/` (its `rec.c` says how they were made), and the same built with
//! `-mbranch-protection=standard`, whose return addresses are signed (`fixtures/aarch64_pac/`).
//! Addresses and spans are from `readelf -lS rec`, the sections from `objcopy -O binary`.

use super::modules::{Found, ModuleList, Sections};
use super::CfiWalker;
use crate::linux::signal::stack_copy::CopiedStack;
use crate::walker::{Arch, Registers, WalkEnd};

/// One recorded program and sample.
struct Fixture {
    sample: &'static str,
    eh_frame_hdr: &'static [u8],
    eh_frame: &'static [u8],
    eh_frame_hdr_svma: u64,
    eh_frame_svma: u64,
    /// The executable segment's size, from file address 0.
    code_bytes: u64,
}

const PLAIN: Fixture = Fixture {
    sample: include_str!("fixtures/aarch64_frameless/sample.txt"),
    eh_frame_hdr: include_bytes!("fixtures/aarch64_frameless/eh_frame_hdr.bin"),
    eh_frame: include_bytes!("fixtures/aarch64_frameless/eh_frame.bin"),
    eh_frame_hdr_svma: 0xafc,
    eh_frame_svma: 0xb58,
    code_bytes: 0xc80,
};

const SIGNED: Fixture = Fixture {
    sample: include_str!("fixtures/aarch64_pac/sample.txt"),
    eh_frame_hdr: include_bytes!("fixtures/aarch64_pac/eh_frame_hdr.bin"),
    eh_frame: include_bytes!("fixtures/aarch64_pac/eh_frame.bin"),
    eh_frame_hdr_svma: 0xb2c,
    eh_frame_svma: 0xb88,
    code_bytes: 0xcc0,
};

/// What `rec` printed.
struct Recorded {
    bias: u64,
    regs: Registers,
    /// `inner`'s, `middle`'s and `outer`'s own return addresses.
    returns: [u64; 3],
    stack: Vec<u64>,
}

fn hex(word: &str) -> u64 {
    u64::from_str_radix(word.trim_start_matches("0x"), 16).expect("a hex word")
}

/// The hex words after each of `names` in `line`.
fn fields<const N: usize>(line: &str, names: [&str; N]) -> [u64; N] {
    let words: Vec<&str> = line.split_whitespace().collect();
    names.map(|name| {
        let at = words.iter().position(|w| *w == name).expect(name);
        hex(words[at + 1])
    })
}

fn recorded(fixture: &Fixture) -> Recorded {
    let mut lines = fixture.sample.lines();
    let [bias] = fields(lines.next().unwrap(), ["bias"]);
    let [pc, sp, fp, lr] = fields(lines.next().unwrap(), ["pc", "sp", "fp", "lr"]);
    let returns = fields(
        lines.next().unwrap(),
        ["inner->middle", "middle->outer", "outer->main"],
    );
    lines.next(); // the symbols
    let stack = lines.flat_map(str::split_whitespace).map(hex).collect();
    Recorded {
        bias,
        regs: Registers { pc, fp, sp, lr },
        returns,
        stack,
    }
}

fn program(fixture: &Fixture, bias: u64) -> ModuleList {
    let (hdr, eh_frame) = (fixture.eh_frame_hdr, fixture.eh_frame);
    ModuleList::fixed(vec![Found {
        key: (bias, bias + fixture.eh_frame_hdr_svma),
        name: "rec".to_owned(),
        code: bias..bias + fixture.code_bytes,
        bias,
        sections: Some(Sections {
            hdr_svma: fixture.eh_frame_hdr_svma..fixture.eh_frame_hdr_svma + hdr.len() as u64,
            hdr: hdr.to_vec(),
            eh_frame_svma: fixture.eh_frame_svma..fixture.eh_frame_svma + eh_frame.len() as u64,
            eh_frame: eh_frame.to_vec(),
        }),
    }])
}

/// The walk of `rec`'s sample, which must give each function's own return address.
fn check_unwound(fixture: &Fixture, rec: &Recorded) {
    let [into_middle, into_outer, into_main] = rec.returns;
    let copy = CopiedStack::from_parts(rec.regs, rec.regs.sp, &rec.stack);
    let mut walker = CfiWalker::with_modules(program(fixture, rec.bias));
    // The handler's walk: the pc alone, as x29 is not this chain's.
    let done = walker.complete(&copy, &[rec.regs.pc], WalkEnd::Unreadable, 16);
    assert!(
        done.frames
            .starts_with(&[rec.regs.pc, into_middle, into_outer, into_main]),
        "{:x?}, ended {:?}",
        done.frames,
        done.end
    );
    assert!(done.sources.cfi >= 3, "{:?}", done.sources);
}

/// No function of the chain keeps a frame record, so only CFI gives its callers.
#[test]
fn a_frameless_chain_is_unwound_by_cfi() {
    let rec = recorded(&PLAIN);
    // Each return address is in the copy, none in a frame record x29 leads to.
    for ret in rec.returns {
        assert!(rec.stack.contains(&ret), "{ret:#x} is not in the copy");
    }
    let fp_at = (rec.regs.fp - rec.regs.sp) as usize / 8;
    assert!(
        !rec.returns.contains(&rec.stack[fp_at + 1]),
        "x29 leads to a record of the chain"
    );
    check_unwound(&PLAIN, &rec);
}

/// The same chain signing its return addresses: each saved one is stripped before lookup.
#[test]
fn a_frameless_chain_with_signed_return_addresses_is_unwound_by_cfi() {
    let rec = recorded(&SIGNED);
    let strip = |a: u64| Arch::AARCH64_LINUX.strip_code_address(a);
    // Signed in the copy, plain from `__builtin_return_address`.
    for ret in rec.returns {
        assert_eq!(strip(ret), ret, "{ret:#x}");
        assert!(
            rec.stack.iter().any(|&w| w != ret && strip(w) == ret),
            "{ret:#x} is not saved signed in the copy"
        );
    }
    check_unwound(&SIGNED, &rec);
}
