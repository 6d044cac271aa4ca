//! Which compilation units an address needs, and a `.debug_info` holding only those.
//!
//! `addr2line::Context` parses the header, abbreviations, root entry and line-program header
//! of every unit when it is built: 866 units in a small Rust benchmark (about 10 ms), 2063 in
//! Debian's libc (about 18 ms, after inflating its whole 5.8 MB `.debug_info`). A profile's
//! addresses fall in a handful of them. So a context is built per address's units instead:
//!
//! - [`ArangeIndex`]: `.debug_aranges` says which unit holds each address range (compilers
//!   list every unit that has code: GCC and rustc/LLVM do; a module without the section
//!   falls back to one context over all units);
//! - [`UnitSet`]: those units plus every unit they reference by section offset
//!   (`DW_FORM_ref_addr`: an inlined function's abstract origin in another unit, as
//!   crate-local ThinLTO leaves them), followed transitively;
//! - [`subset_info`]: a `.debug_info` of the same length as far as the last of those units,
//!   each at its own offset (so every offset — aranges, references — means what it means in
//!   the file), the bytes between them replaced by filler type units, which `addr2line`
//!   skips without parsing.
//!
//! `addr2line` run over such a subset finds for an address what it finds over the whole
//! section: the units covering the address are all there, in the same order, with what they
//! refer to.

use std::collections::BTreeMap;

use addr2line::gimli;

use crate::mapped_file::FileBytes;

/// The address ranges `.debug_aranges` gives each unit.
#[derive(Debug, Default)]
pub(crate) struct ArangeIndex {
    /// `(begin, end, unit offset)`, sorted by `begin`.
    ranges: Vec<(u64, u64, usize)>,
    /// `reach[i]`: the greatest `end` among `ranges[..=i]`, so that a search for the ranges
    /// containing an address knows where to stop looking back.
    reach: Vec<u64>,
    /// The offsets of the units the section lists, sorted.
    listed: Vec<usize>,
}

impl ArangeIndex {
    /// The index of `aranges`; `None` when the section is empty or does not parse.
    pub(crate) fn parse<R: gimli::Reader<Offset = usize>>(
        aranges: &gimli::DebugAranges<R>,
    ) -> Option<ArangeIndex> {
        let mut index = ArangeIndex::default();
        let mut headers = aranges.headers();
        while let Some(header) = headers.next().ok()? {
            let unit = header.debug_info_offset().0;
            index.listed.push(unit);
            let mut entries = header.entries();
            // As `addr2line` reads them: entries that do not parse (an address that
            // overflows) are skipped, empty ones ignored.
            while let Some(entry) = entries.next().transpose() {
                if let Ok(entry) = entry {
                    let range = entry.range();
                    if range.begin < range.end {
                        index.ranges.push((range.begin, range.end, unit));
                    }
                }
            }
        }
        if index.listed.is_empty() {
            return None;
        }
        index.listed.sort_unstable();
        index.listed.dedup();
        index.ranges.sort_unstable();
        let mut reach = 0;
        index.reach = index
            .ranges
            .iter()
            .map(|&(_, end, _)| {
                reach = reach.max(end);
                reach
            })
            .collect();
        Some(index)
    }

    /// The units whose ranges contain `probe`, sorted by offset.
    pub(crate) fn covering(&self, probe: u64) -> Vec<usize> {
        let after = self.ranges.partition_point(|&(begin, _, _)| begin <= probe);
        let mut units: Vec<usize> = (0..after)
            .rev()
            .take_while(|&i| self.reach[i] > probe)
            .filter(|&i| probe < self.ranges[i].1)
            .map(|i| self.ranges[i].2)
            .collect();
        units.sort_unstable();
        units.dedup();
        units
    }

    /// Whether the section lists the unit at `offset`.
    pub(crate) fn lists(&self, offset: usize) -> bool {
        self.listed.binary_search(&offset).is_ok()
    }
}

/// The start of every unit up to some offset, found by stepping from header to header.
#[derive(Debug, Default)]
pub(crate) struct UnitStarts {
    starts: Vec<usize>,
    /// Where the next header is (all units before it are in `starts`).
    next: usize,
}

impl UnitStarts {
    /// Steps through the headers in `info` until the unit containing `offset` (or, with
    /// `offset == usize::MAX`, every unit in `info`) is known. `info` must begin at the
    /// section's start.
    pub(crate) fn walk(&mut self, info: &[u8], endian: gimli::RunTimeEndian, offset: usize) {
        while self.next <= offset && self.next < info.len() {
            let Some(next) = unit_length(info, self.next, endian)
                .and_then(|length| self.next.checked_add(length))
            else {
                break;
            };
            self.starts.push(self.next);
            self.next = next;
        }
    }

    /// The start of the unit containing `offset`, if [`UnitStarts::walk`] reached it.
    pub(crate) fn containing(&self, offset: usize) -> Option<usize> {
        if offset >= self.next {
            return None;
        }
        let after = self.starts.partition_point(|&start| start <= offset);
        self.starts.get(after.checked_sub(1)?).copied()
    }

    /// Every unit start found so far.
    pub(crate) fn all(&self) -> &[usize] {
        &self.starts
    }
}

/// The length of the unit at `start` of `info`, its length field included, from that field
/// alone (12 bytes at most): the rest of the unit need not be there yet.
pub(crate) fn unit_length(
    info: &[u8],
    start: usize,
    endian: gimli::RunTimeEndian,
) -> Option<usize> {
    use gimli::Reader;
    let mut field = gimli::EndianSlice::new(info.get(start..)?, endian);
    let (length, format) = field.read_initial_length().ok()?;
    length.checked_add(usize::from(format.initial_length_size()))
}

/// A set of units, each as its `start..end` in `.debug_info`.
#[derive(Debug, Default)]
pub(crate) struct UnitSet {
    units: BTreeMap<usize, usize>,
}

impl UnitSet {
    /// Whether the unit starting at `start` is in the set.
    pub(crate) fn contains(&self, start: usize) -> bool {
        self.units.contains_key(&start)
    }

    /// Adds the unit at `start` of `info` (which must hold all of it), returning the units
    /// it references by section offset (`DW_FORM_ref_addr`); `None` when it does not parse.
    pub(crate) fn add(
        &mut self,
        info: &[u8],
        abbrev: &gimli::DebugAbbrev<gimli::EndianSlice<'_, gimli::RunTimeEndian>>,
        endian: gimli::RunTimeEndian,
        start: usize,
    ) -> Option<Vec<usize>> {
        let section = gimli::DebugInfo::new(info, endian);
        let header = section
            .header_from_offset(gimli::DebugInfoOffset(start))
            .ok()?;
        let end = start.checked_add(header.length_including_self())?;
        if end > info.len() {
            return None;
        }
        self.units.insert(start, end);
        references(&header, abbrev).ok()
    }

    /// The offset just past the last unit.
    pub(crate) fn end(&self) -> usize {
        self.units.last_key_value().map_or(0, |(_, &end)| end)
    }
}

/// Whether `addr2line` could find code in the unit at `start` of `info` (which must hold
/// all of it): its root entry has an address range, or it has none and its line program is
/// not empty (`addr2line` then takes the unit's ranges from the line program). Reads the
/// root entry and the line program's header only; `true` when they do not parse, so that
/// `addr2line` decides.
pub(crate) fn may_have_code<R: gimli::Reader<Offset = usize>>(
    info: &gimli::DebugInfo<R>,
    abbrev: &gimli::DebugAbbrev<R>,
    line: &gimli::DebugLine<R>,
    start: usize,
) -> bool {
    let root = || -> gimli::Result<bool> {
        let header = info.header_from_offset(gimli::DebugInfoOffset(start))?;
        let abbreviations = header.abbreviations(abbrev)?;
        let mut entries = header.entries_raw(&abbreviations, None)?;
        let Some(root) = entries.read_abbreviation()? else {
            return Ok(false);
        };
        let mut program = None;
        for spec in root.attributes() {
            let attribute = entries.read_attribute(*spec)?;
            match (attribute.name(), attribute.value()) {
                (gimli::DW_AT_low_pc | gimli::DW_AT_high_pc | gimli::DW_AT_ranges, _) => {
                    return Ok(true)
                }
                (gimli::DW_AT_stmt_list, gimli::AttributeValue::DebugLineRef(offset)) => {
                    program = Some(offset);
                }
                _ => {}
            }
        }
        Ok(match program {
            Some(offset) => {
                let program = line.program(offset, header.address_size(), None, None)?;
                !program.header().raw_program_buf().is_empty()
            }
            None => false,
        })
    };
    root().unwrap_or(true)
}

/// The section offsets (`DW_FORM_ref_addr`) the entries of a unit refer to.
fn references<R: gimli::Reader<Offset = usize>>(
    header: &gimli::UnitHeader<R>,
    abbrev: &gimli::DebugAbbrev<R>,
) -> gimli::Result<Vec<usize>> {
    let abbreviations = header.abbreviations(abbrev)?;
    let mut targets = Vec::new();
    let mut entries = header.entries_raw(&abbreviations, None)?;
    while !entries.is_empty() {
        let Some(abbreviation) = entries.read_abbreviation()? else {
            continue;
        };
        let specs = abbreviation.attributes();
        // Most entries hold no section offset: skip their attributes without decoding them.
        let may_refer = specs.iter().any(|spec| {
            matches!(
                spec.form(),
                gimli::DW_FORM_ref_addr | gimli::DW_FORM_indirect
            )
        });
        if !may_refer {
            entries.skip_attributes(specs)?;
            continue;
        }
        for spec in specs {
            if let gimli::AttributeValue::DebugInfoRef(target) =
                entries.read_attribute(*spec)?.value()
            {
                targets.push(target.0);
            }
        }
    }
    targets.sort_unstable();
    targets.dedup();
    Ok(targets)
}

/// Size of a filler unit's header: a DWARF 5 type unit (32-bit format), the smallest unit
/// `addr2line` skips without reading its entries or abbreviations.
const FILLER_HEADER: usize = 24;

/// A `.debug_info` of length [`UnitSet::end`] holding the units of `set` copied from
/// `info` at their own offsets; each gap between them is one filler type unit (or, when too
/// small for a header, the file's own bytes). Pages no unit or filler header lands on are
/// never touched, so a few units near the end of a large section cost a few pages.
pub(crate) fn subset_info(
    info: &[u8],
    set: &UnitSet,
    endian: gimli::RunTimeEndian,
) -> Option<FileBytes> {
    let len = set.end();
    if len > info.len() {
        return None;
    }
    let write = |out: &mut [u8], at: usize, bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
    };
    let u16_bytes = |v: u16| match endian {
        gimli::RunTimeEndian::Little => v.to_le_bytes(),
        gimli::RunTimeEndian::Big => v.to_be_bytes(),
    };
    let u32_bytes = |v: u32| match endian {
        gimli::RunTimeEndian::Little => v.to_le_bytes(),
        gimli::RunTimeEndian::Big => v.to_be_bytes(),
    };
    FileBytes::zeroed(len, |out| {
        let mut at = 0;
        for (&start, &end) in &set.units {
            // A 32-bit unit length stays below 0xffff_fff0 (the values above it are
            // reserved, one marks the 64-bit format).
            let length = start
                .checked_sub(at + 4)
                .and_then(|length| u32::try_from(length).ok())
                .filter(|&length| length < 0xffff_fff0);
            match length {
                Some(length) if start - at >= FILLER_HEADER => {
                    // unit_length, version 5, DW_UT_type, address size 8; the abbreviation
                    // offset, type signature and type offset stay zero.
                    write(out, at, &u32_bytes(length));
                    write(out, at + 4, &u16_bytes(5));
                    write(out, at + 6, &[gimli::DW_UT_type.0, 8]);
                }
                _ => write(out, at, &info[at..start]),
            }
            write(out, start, &info[start..end]);
            at = end;
        }
    })
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_finds_every_range_that_contains_the_probe() {
        let mut index = ArangeIndex {
            ranges: vec![(0x100, 0x1000, 10), (0x200, 0x300, 20), (0x400, 0x500, 30)],
            listed: vec![10, 20, 30],
            ..ArangeIndex::default()
        };
        index.reach = vec![0x1000, 0x1000, 0x1000];
        assert_eq!(index.covering(0x250), [10, 20]);
        assert_eq!(index.covering(0x450), [10, 30]);
        assert_eq!(index.covering(0x350), [10]);
        assert_eq!(index.covering(0x1000), Vec::<usize>::new());
        assert_eq!(index.covering(0xff), Vec::<usize>::new());
        assert!(index.lists(20) && !index.lists(25));
    }

    /// A DWARF 4 compile unit of `len` bytes (little-endian, 32-bit): header, then zeros.
    fn unit(len: usize) -> Vec<u8> {
        let mut bytes = u32::try_from(len - 4).unwrap().to_le_bytes().to_vec();
        bytes.extend_from_slice(&4u16.to_le_bytes()); // version
        bytes.extend_from_slice(&0u32.to_le_bytes()); // abbreviation offset
        bytes.push(8); // address size
        bytes.resize(len, 0);
        bytes
    }

    #[test]
    fn a_subset_keeps_its_units_at_their_offsets_and_hides_the_rest() {
        let endian = gimli::RunTimeEndian::Little;
        let info: Vec<u8> = [unit(40), unit(12), unit(30), unit(64), unit(50)].concat();
        let mut starts = UnitStarts::default();
        starts.walk(&info, endian, usize::MAX);
        assert_eq!(starts.all(), [0, 40, 52, 82, 146]);
        assert_eq!(starts.containing(60), Some(52));
        // Two units: the gap before the first is large enough for a filler, the one between
        // them (the 12-byte unit at 40 alone would be too small) is 82 - 52 = 30 bytes.
        let mut set = UnitSet::default();
        set.units.insert(52, 82);
        set.units.insert(146, 196);
        let subset = subset_info(&info, &set, endian).unwrap();
        assert_eq!(subset.len(), 196);
        assert_eq!(subset[52..82], info[52..82]);
        assert_eq!(subset[146..196], info[146..196]);
        let mut headers = gimli::DebugInfo::new(&subset[..], endian).units();
        let mut seen = Vec::new();
        while let Some(header) = headers.next().unwrap() {
            let offset = header.offset().as_debug_info_offset().unwrap().0;
            seen.push((
                offset,
                matches!(header.type_(), gimli::UnitType::Type { .. }),
            ));
        }
        assert_eq!(seen, [(0, true), (52, false), (82, true), (146, false)]);
        // A gap too small for a filler keeps the file's bytes (the 12-byte unit).
        let mut set = UnitSet::default();
        set.units.insert(0, 40);
        set.units.insert(52, 82);
        let subset = subset_info(&info, &set, endian).unwrap();
        assert_eq!(subset[..], info[..82]);
    }
}
