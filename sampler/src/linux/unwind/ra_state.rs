//! aarch64 CFI of functions that sign their return address, made readable to the unwinder
//! (docs/aarch64.md): gimli under framehop fails a whole entry on
//! `DW_CFA_AARCH64_negate_ra_state` and its `_with_pc` form, and btprof strips code addresses
//! itself, so [`clear_ra_state`] rewrites both to `DW_CFA_nop` in the unwinder's copy. One
//! byte for one, so no offset moves and `.eh_frame_hdr` stays right. Entries it cannot follow
//! (64-bit DWARF, an unknown augmentation or opcode) are left as they are from there on.

const DW_CFA_NOP: u8 = 0x00;
const NEGATE_RA_STATE_WITH_PC: u8 = 0x2c;
const NEGATE_RA_STATE: u8 = 0x2d;

/// Rewrites the return-address signing opcodes of every entry of `eh_frame` to `DW_CFA_nop`;
/// returns how many it rewrote.
pub(crate) fn clear_ra_state(eh_frame: &mut [u8]) -> usize {
    let mut cies: Vec<(usize, Cie)> = Vec::new();
    let mut cleared = 0;
    let mut at = 0;
    while let Some(length) = read_u32(eh_frame, at) {
        // A zero length ends the section; 64-bit DWARF is not followed.
        if length == 0 || length == u32::MAX {
            break;
        }
        let start = at + 4;
        let Some(end) = start
            .checked_add(length as usize)
            .filter(|&end| end <= eh_frame.len())
        else {
            break;
        };
        let body = Cursor {
            bytes: &eh_frame[..end],
            at: start,
        };
        if let Some((instructions, pointer)) = entry_instructions(body, at, &mut cies) {
            cleared += clear_in(&mut eh_frame[instructions..end], pointer);
        }
        at = end;
    }
    cleared
}

/// What an FDE needs of its CIE.
#[derive(Clone, Copy)]
struct Cie {
    /// The size of an encoded address (`DW_CFA_set_loc`, the FDE's range).
    pointer: Option<usize>,
    /// Whether entries carry augmentation data (`z`).
    has_data: bool,
}

/// Where the instructions of the entry at `at` begin, and the size of an encoded address in
/// them; records a CIE in `cies`.
fn entry_instructions(
    mut c: Cursor<'_>,
    at: usize,
    cies: &mut Vec<(usize, Cie)>,
) -> Option<(usize, Option<usize>)> {
    let id_at = c.at;
    let id = c.u32()?;
    if id == 0 {
        let cie = read_cie(&mut c)?;
        cies.push((at, cie));
        return Some((c.at, cie.pointer));
    }
    // An FDE: `id` is the distance back to its CIE from the id itself.
    let cie_at = id_at.checked_sub(id as usize)?;
    let cie = cies
        .binary_search_by_key(&cie_at, |(offset, _)| *offset)
        .ok()
        .map(|i| cies[i].1)?;
    c.skip(2 * cie.pointer?)?; // the initial location and the range
    if cie.has_data {
        let n = c.uleb()?;
        c.skip(usize::try_from(n).ok()?)?;
    }
    Some((c.at, cie.pointer))
}

fn read_cie(c: &mut Cursor<'_>) -> Option<Cie> {
    let version = c.u8()?;
    let augmentation = c.cstr()?;
    if augmentation.windows(2).any(|w| w == b"eh") {
        c.skip(8)?;
    }
    c.uleb()?; // code alignment
    c.uleb()?; // data alignment (signed: the same bytes to skip)
    if version == 1 {
        c.u8()?;
    } else {
        c.uleb()?;
    }
    let Some(letters) = augmentation.strip_prefix(b"z") else {
        // No augmentation data: addresses are absolute and 8 bytes.
        let plain = augmentation.is_empty() || augmentation == b"eh";
        return plain.then_some(Cie {
            pointer: Some(8),
            has_data: false,
        });
    };
    let n = usize::try_from(c.uleb()?).ok()?;
    let data_end = c.at.checked_add(n)?;
    let mut data = Cursor {
        bytes: c.bytes.get(..data_end)?,
        at: c.at,
    };
    let mut pointer = Some(8);
    for letter in letters {
        match letter {
            b'R' => pointer = pointer_size(data.u8()?),
            b'L' => data.skip(1)?,
            b'P' => {
                let encoding = data.u8()?;
                data.skip(pointer_size(encoding)?)?;
            }
            b'S' | b'B' | b'G' => {}
            // Unknown layout: its data's length still finds the instructions.
            _ => break,
        }
    }
    c.at = data_end;
    Some(Cie {
        pointer,
        has_data: true,
    })
}

/// The size of an address in pointer encoding `encoding`; `None` for variable-length ones.
fn pointer_size(encoding: u8) -> Option<usize> {
    match encoding & 0x0f {
        0x00 | 0x04 | 0x0c => Some(8),
        0x02 | 0x0a => Some(2),
        0x03 | 0x0b => Some(4),
        _ => None,
    }
}

/// Rewrites the signing opcodes among `instructions`; stops at an opcode it does not know,
/// whose operands it cannot step over.
fn clear_in(instructions: &mut [u8], pointer: Option<usize>) -> usize {
    let mut cleared = 0;
    let mut at = 0;
    while let Some(next) = after_instruction(instructions, at, pointer) {
        if matches!(instructions[at], NEGATE_RA_STATE | NEGATE_RA_STATE_WITH_PC) {
            instructions[at] = DW_CFA_NOP;
            cleared += 1;
        }
        at = next;
    }
    cleared
}

/// Where the instruction at `at` ends; `None` at the end, or where its opcode is unknown or
/// its operands run past the end.
fn after_instruction(instructions: &[u8], at: usize, pointer: Option<usize>) -> Option<usize> {
    let op = *instructions.get(at)?;
    let mut c = Cursor {
        bytes: instructions,
        at: at + 1,
    };
    match op >> 6 {
        // advance_loc and restore keep their operand in the opcode.
        1 | 3 => {}
        // offset: a factored offset follows.
        2 => drop(c.uleb()?),
        _ => match op {
            DW_CFA_NOP | 0x0a | 0x0b | NEGATE_RA_STATE | NEGATE_RA_STATE_WITH_PC => {}
            0x01 => c.skip(pointer?)?,
            0x02 => c.skip(1)?,
            0x03 => c.skip(2)?,
            0x04 => c.skip(4)?,
            0x06 | 0x07 | 0x08 | 0x0d | 0x0e | 0x13 | 0x2e => drop(c.uleb()?),
            0x05 | 0x09 | 0x0c | 0x11 | 0x12 | 0x14 | 0x15 | 0x2f => {
                c.uleb()?;
                c.uleb()?;
            }
            0x0f => c.block()?,
            0x10 | 0x16 => {
                c.uleb()?;
                c.block()?;
            }
            _ => return None,
        },
    }
    Some(c.at)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(word.try_into().ok()?))
}

/// Reads forward through `bytes`, never past its end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        let v = read_u32(self.bytes, self.at)?;
        self.at += 4;
        Some(v)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        let to = self.at.checked_add(n)?;
        (to <= self.bytes.len()).then(|| self.at = to)
    }

    /// An unsigned LEB128 number (a signed one has the same bytes); `None` past 64 bits.
    fn uleb(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A LEB128 length and that many bytes.
    fn block(&mut self) -> Option<()> {
        let n = usize::try_from(self.uleb()?).ok()?;
        self.skip(n)
    }

    fn cstr(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        self.at += len + 1;
        Some(&rest[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.eh_frame` of `fixtures/aarch64_frameless/rec.c` with `-mbranch-protection=standard`
    /// and without.
    const SIGNED: &[u8] = include_bytes!("fixtures/aarch64_pac/eh_frame.bin");
    const PLAIN: &[u8] = include_bytes!("fixtures/aarch64_frameless/eh_frame.bin");

    /// Eight opcodes, as `readelf -wf` lists them, and not one other byte changed.
    #[test]
    fn every_signing_opcode_of_a_real_section_is_cleared_and_nothing_else() {
        let mut copy = SIGNED.to_vec();
        assert_eq!(clear_ra_state(&mut copy), 8);
        let changed: Vec<(u8, u8)> = SIGNED
            .iter()
            .zip(&copy)
            .filter(|(a, b)| a != b)
            .map(|(&a, &b)| (a, b))
            .collect();
        assert_eq!(changed, vec![(NEGATE_RA_STATE, DW_CFA_NOP); 8]);
        let mut plain = PLAIN.to_vec();
        assert_eq!(clear_ra_state(&mut plain), 0);
        assert_eq!(plain, PLAIN);
    }

    /// A CIE (`zR`, pc-relative 4-byte addresses) and an FDE whose instructions hold 0x2d as
    /// an operand and then as an opcode.
    fn section() -> Vec<u8> {
        let cie = [
            0, 0, 0, 0, // CIE id
            1, b'z', b'R', 0, // version, augmentation
            4, 0x78, 30, // code and data alignment, return address column
            1, 0x1b, // augmentation data: pc-relative sdata4
            0x0c, 31, 0, // def_cfa sp, 0
        ];
        let mut s = Vec::new();
        s.extend_from_slice(&(cie.len() as u32).to_le_bytes());
        s.extend_from_slice(&cie);
        let fde_at = s.len();
        let mut fde = Vec::new();
        fde.extend_from_slice(&((fde_at + 4) as u32).to_le_bytes()); // back to the CIE
        fde.extend_from_slice(&[0; 8]); // initial location and range
        fde.push(0); // no augmentation data
        fde.extend_from_slice(&[0x0e, 0x2d]); // def_cfa_offset 45
        fde.push(NEGATE_RA_STATE);
        fde.extend_from_slice(&[0x9e, 0x2d]); // offset x30 at cfa - 45 * 8
        s.extend_from_slice(&(fde.len() as u32).to_le_bytes());
        s.extend_from_slice(&fde);
        s.extend_from_slice(&[0; 4]);
        s
    }

    #[test]
    fn an_operand_that_looks_like_the_opcode_is_left_alone() {
        let before = section();
        let mut after = before.clone();
        assert_eq!(clear_ra_state(&mut after), 1);
        let changed: Vec<usize> = (0..before.len())
            .filter(|&i| before[i] != after[i])
            .collect();
        assert_eq!(changed.len(), 1);
        assert_eq!(
            before[changed[0] - 1..changed[0] + 2],
            [0x2d, NEGATE_RA_STATE, 0x9e]
        );
    }

    /// Cut anywhere, or with any byte wrong, the section is read up to where it holds, nothing
    /// panics, and a byte changes only from a signing opcode's value to `DW_CFA_nop`.
    #[test]
    fn a_cut_or_broken_section_is_read_safely() {
        let whole = section();
        let check = |before: &[u8]| {
            let mut after = before.to_vec();
            clear_ra_state(&mut after);
            for (a, b) in before.iter().zip(&after) {
                assert!(
                    a == b || (matches!(*a, NEGATE_RA_STATE | NEGATE_RA_STATE_WITH_PC) && *b == 0),
                    "{a:#x} became {b:#x}"
                );
            }
        };
        for end in 0..whole.len() {
            check(&whole[..end]);
        }
        for at in 0..whole.len() {
            for value in [0x00, 0x2d, 0x80, 0xff] {
                let mut bad = whole.clone();
                bad[at] = value;
                check(&bad);
            }
        }
    }
}
