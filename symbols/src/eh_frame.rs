//! Function extents from `.eh_frame`: every FDE (frame description entry) covers one
//! function's code, named or not, so a stripped module still knows where its functions start
//! and end. The resolver names an address in such a function `module+0x<start>`, one frame
//! per function rather than one per address.

use addr2line::gimli::{self, BaseAddresses, CieOrFde, EhFrame, UnwindSection};
use object::{Object, ObjectSection};

/// `(runtime start, length)` of every function an FDE of `file`'s `.eh_frame` describes,
/// with `bias` added to link-time addresses. Empty when there is no `.eh_frame` or it is
/// malformed; entries read before a malformed one are kept.
pub(crate) fn function_ranges(file: &object::File<'_>, bias: u64) -> Vec<(u64, u64)> {
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    if data.is_empty() {
        // `objcopy --only-keep-debug` keeps the header of `.eh_frame` but not its bytes.
        return Vec::new();
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let mut eh_frame = EhFrame::new(data, endian);
    eh_frame.set_address_size(if file.is_64() { 8 } else { 4 });
    // Pointer encodings in FDEs are relative to `.eh_frame` itself (pcrel), or, rarely, to
    // `.text` or the GOT.
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut ranges = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) =
            partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
        else {
            continue;
        };
        let (start, len) = (fde.initial_address(), fde.len());
        // Zero-length FDEs and ones at address 0 (discarded COMDAT copies) describe nothing.
        if len != 0 && start != 0 {
            ranges.push((start.wrapping_add(bias), len));
        }
    }
    ranges
}
