//! The CFI half of a sample's unwinding on recorded aarch64 data: the
//! registers and stack top of a frameless call chain, and the program's
//! `.eh_frame_hdr` and `.eh_frame`, all from
//! `fixtures/aarch64_frameless/` (its `rec.c` says how they were made).
//! A ring sample hands the walker the same parts: its registers and its
//! stack copy.
//!
//! The sections' file addresses and the executable segment's span are
//! the program's (`readelf -lS rec`); the sections are its bytes
//! (`objcopy -O binary --only-section=.eh_frame rec eh_frame.bin`, and
//! so for `.eh_frame_hdr`).

use super::modules::{Found, ModuleList, Sections};
use super::CfiWalker;
use crate::linux::signal::stack_copy::CopiedStack;
use crate::walker::{Registers, WalkEnd};

const SAMPLE: &str = include_str!("fixtures/aarch64_frameless/sample.txt");
const EH_FRAME_HDR: &[u8] = include_bytes!("fixtures/aarch64_frameless/eh_frame_hdr.bin");
const EH_FRAME: &[u8] = include_bytes!("fixtures/aarch64_frameless/eh_frame.bin");
const EH_FRAME_HDR_SVMA: u64 = 0xafc;
const EH_FRAME_SVMA: u64 = 0xb58;
/// The executable segment, from file address 0.
const CODE_BYTES: u64 = 0xc80;

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

fn recorded() -> Recorded {
    let mut lines = SAMPLE.lines();
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

fn program(bias: u64) -> ModuleList {
    ModuleList::fixed(vec![Found {
        key: (bias, bias + EH_FRAME_HDR_SVMA),
        name: "rec".to_owned(),
        code: bias..bias + CODE_BYTES,
        bias,
        sections: Some(Sections {
            hdr_svma: EH_FRAME_HDR_SVMA..EH_FRAME_HDR_SVMA + EH_FRAME_HDR.len() as u64,
            hdr: EH_FRAME_HDR.to_vec(),
            eh_frame_svma: EH_FRAME_SVMA..EH_FRAME_SVMA + EH_FRAME.len() as u64,
            eh_frame: EH_FRAME.to_vec(),
        }),
    }])
}

/// No function of the chain keeps a frame record, so the frame pointer
/// gives none of its callers and only CFI does: `inner` and `middle` save
/// their return addresses at offsets only their CFI gives.
#[test]
fn a_frameless_chain_is_unwound_by_cfi() {
    let rec = recorded();
    let [into_middle, into_outer, into_main] = rec.returns;
    // The data is what the test says: each return address saved in the
    // copy, none in a frame record x29 leads to.
    for ret in [into_middle, into_outer, into_main] {
        assert!(rec.stack.contains(&ret), "{ret:#x} is not in the copy");
    }
    let fp_at = (rec.regs.fp - rec.regs.sp) as usize / 8;
    assert!(
        !rec.returns.contains(&rec.stack[fp_at + 1]),
        "x29 leads to a record of the chain"
    );
    let copy = CopiedStack::from_parts(rec.regs, rec.regs.sp, &rec.stack);
    let mut walker = CfiWalker::with_modules(program(rec.bias));
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
