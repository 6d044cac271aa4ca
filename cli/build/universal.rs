//! Joins thin 64-bit Mach-O files into one universal ("fat") file, as
//! `lipo -create` does, so that one preload library loads into arm64 and
//! x86_64 processes alike: dyld kills a process whose inserted library
//! has no slice for its architecture. Shared by `cli/build.rs` and the
//! CLI's tests (`commands/record/macho.rs`), which read the result back;
//! written here rather than run through `lipo`, which only a Mac has.
//!
//! Each slice is copied unchanged (its code signature covers the slice
//! alone, so it stays valid), at an offset aligned to 16 KiB, the page
//! size of arm64 macOS and what `lipo` uses for it.

/// The fat header's magic number (big-endian, like the whole header).
const FAT_MAGIC: u32 = 0xcafe_babe;
/// A thin 64-bit Mach-O file's magic number, little-endian.
const MH_MAGIC_64: u32 = 0xfeed_facf;
/// log2 of each slice's alignment.
const ALIGN_LOG2: u32 = 14;

/// The universal file holding `slices`, each a thin 64-bit little-endian
/// Mach-O file, in that order.
pub fn universal(slices: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let mut header = Vec::new();
    let count = u32::try_from(slices.len()).map_err(|_| "too many slices")?;
    header.extend_from_slice(&FAT_MAGIC.to_be_bytes());
    header.extend_from_slice(&count.to_be_bytes());
    let align = 1usize << ALIGN_LOG2;
    let mut offset = (8 + 20 * slices.len()).next_multiple_of(align);
    let mut placed = Vec::new();
    for (i, slice) in slices.iter().enumerate() {
        let word = |at: usize| {
            slice
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if word(0) != Some(MH_MAGIC_64) {
            return Err(format!("slice {i} is not a thin 64-bit Mach-O file"));
        }
        let (cputype, subtype) = (word(4).unwrap_or(0), word(8).unwrap_or(0));
        let size = u32::try_from(slice.len()).map_err(|_| format!("slice {i} is too big"))?;
        let at = u32::try_from(offset).map_err(|_| "the universal file is too big")?;
        for field in [cputype, subtype, at, size, ALIGN_LOG2] {
            header.extend_from_slice(&field.to_be_bytes());
        }
        placed.push(offset);
        offset = (offset + slice.len()).next_multiple_of(align);
    }
    let mut out = header;
    for (slice, at) in slices.iter().zip(placed) {
        out.resize(at, 0);
        out.extend_from_slice(slice);
    }
    Ok(out)
}
