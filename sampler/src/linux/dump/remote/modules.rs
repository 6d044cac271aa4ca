//! Another process's loaded objects and their unwind information. Each mapping at file offset 0
//! with an ELF header is an object. The sections are copied from the process's memory, not the
//! files, which also covers the vDSO and replaced files. Nothing here stops a thread.

use crate::linux::unwind::modules::{
    code_and_hdr, eh_frame_address, eh_frame_len, Found, Sections, MAX_EH_FRAME_BYTES,
};

use super::read_memory;

/// A sanity bound on `.eh_frame_hdr` (8 bytes per function).
const MAX_HDR_BYTES: u64 = 16 << 20;

/// One program header of a 64-bit ELF object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Phdr {
    kind: u32,
    flags: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
}

/// The objects `maps` (`/proc/PID/maps`) lists, with copies of their unwind sections; those
/// without readable headers are left out.
pub(crate) fn objects(pid: i32, maps: &str) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    for (start, name) in object_starts(maps) {
        if let Some(object) = describe(pid, start, name) {
            if !found.iter().any(|f| f.key == object.key) {
                found.push(object);
            }
        }
    }
    found
}

/// `(start, name)` of each readable offset-0 mapping of a file or vDSO.
fn object_starts(maps: &str) -> impl Iterator<Item = (u64, &str)> {
    maps.lines().filter_map(|line| {
        let mut fields = line.splitn(6, ' ');
        let range = fields.next()?;
        let perms = fields.next()?;
        let offset = fields.next()?;
        let _dev = fields.next()?;
        let _inode = fields.next()?;
        let name = fields.next().unwrap_or("").trim_start();
        if !perms.starts_with('r') || u64::from_str_radix(offset, 16).ok()? != 0 {
            return None;
        }
        if !(name.starts_with('/') || name == "[vdso]") {
            return None;
        }
        let start = u64::from_str_radix(range.split_once('-')?.0, 16).ok()?;
        Some((start, name))
    })
}

/// Reads the object whose ELF header is at `start` in process `pid`.
fn describe(pid: i32, start: u64, name: &str) -> Option<Found> {
    let header = read_exact(pid, start, 64)?;
    let phdrs = parse_header(&header).and_then(|(phoff, entsize, count)| {
        let table = read_exact(pid, start.checked_add(phoff)?, entsize * count)?;
        Some(parse_phdrs(&table, entsize))
    })?;
    // The mapping at offset 0 holds the segment that starts the file.
    let first = phdrs
        .iter()
        .filter(|p| p.kind == libc::PT_LOAD)
        .min_by_key(|p| p.offset)?;
    let bias = start.wrapping_sub(first.vaddr.wrapping_sub(first.offset));
    let (code, hdr) = code_and_hdr(
        bias,
        phdrs.iter().map(|p| (p.kind, p.flags, p.vaddr, p.memsz)),
    )?;
    let hdr_len = hdr.end.checked_sub(hdr.start)?;
    if !(8..=MAX_HDR_BYTES).contains(&hdr_len) {
        return None;
    }
    let hdr_bytes = read_exact(pid, hdr.start, hdr_len)?;
    let eh_frame_start = eh_frame_address(&hdr_bytes, hdr.start)?;
    // `.eh_frame` ends at most with its segment's file-backed part.
    let segment_end = phdrs
        .iter()
        .filter(|p| p.kind == libc::PT_LOAD && p.flags & libc::PF_R != 0)
        .map(|p| {
            let s = bias.wrapping_add(p.vaddr);
            s..s.wrapping_add(p.filesz)
        })
        .find(|r| r.contains(&eh_frame_start))?
        .end;
    let room = (segment_end - eh_frame_start).min(MAX_EH_FRAME_BYTES as u64 + 4);
    let mut rest = vec![0u8; room as usize];
    let got = read_memory(pid, eh_frame_start, &mut rest);
    let len = eh_frame_len(&rest[..got]);
    if len == 0 || len > MAX_EH_FRAME_BYTES {
        return None;
    }
    rest.truncate(len);
    Some(Found {
        key: (bias, hdr.start),
        name: name.to_owned(),
        code,
        bias,
        sections: Some(Sections {
            hdr_svma: hdr.start - bias..hdr.end - bias,
            hdr: hdr_bytes,
            eh_frame_svma: eh_frame_start - bias..eh_frame_start - bias + len as u64,
            eh_frame: rest,
        }),
    })
}

/// `len` bytes at `addr` of process `pid`, if all readable.
fn read_exact(pid: i32, addr: u64, len: u64) -> Option<Vec<u8>> {
    let mut out = vec![0u8; usize::try_from(len).ok()?];
    (read_memory(pid, addr, &mut out) == out.len()).then_some(out)
}

/// `(e_phoff, e_phentsize, e_phnum)` of a 64-bit little-endian ELF header.
fn parse_header(h: &[u8]) -> Option<(u64, u64, u64)> {
    if h.get(..4)? != b"\x7fELF" || h.get(4) != Some(&2) || h.get(5) != Some(&1) {
        return None;
    }
    let phoff = u64::from_le_bytes(h.get(32..40)?.try_into().ok()?);
    let entsize = u64::from(u16::from_le_bytes(h.get(54..56)?.try_into().ok()?));
    let count = u64::from(u16::from_le_bytes(h.get(56..58)?.try_into().ok()?));
    (entsize >= 56 && count > 0).then_some((phoff, entsize, count))
}

/// The program headers in `table`, `entsize` bytes apart.
fn parse_phdrs(table: &[u8], entsize: u64) -> Vec<Phdr> {
    let u32_at =
        |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
    let u64_at =
        |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    table
        .chunks_exact(entsize as usize)
        .map(|p| Phdr {
            kind: u32_at(p, 0),
            flags: u32_at(p, 4),
            offset: u64_at(p, 8),
            vaddr: u64_at(p, 16),
            filesz: u64_at(p, 32),
            memsz: u64_at(p, 40),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_starts_are_offset_zero_file_or_vdso_mappings() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123                        /usr/bin/my prog
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 123                        /usr/bin/my prog
7f0000000000-7f0000001000 rw-p 00000000 00:00 0                          [heap]
7f0000002000-7f0000003000 ---p 00000000 08:01 9                          /lib/libx.so
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                                  [vdso]
";
        let starts: Vec<_> = object_starts(maps).collect();
        assert_eq!(
            starts,
            vec![
                (0x55d0_c000_0000, "/usr/bin/my prog"),
                (0x7ffd_1000, "[vdso]")
            ]
        );
    }

    /// This process read as another.
    #[test]
    fn reads_this_process_as_another() {
        if crate::emulation::not_checked_under_qemu(
            "this process read as another",
            "/proc/PID/maps shows the emulator's host mappings, not the guest's",
        ) {
            return;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let found = objects(pid, &maps);
        let here = reads_this_process_as_another as *const () as u64;
        let memcpy = libc::memcpy as *const () as u64;
        for addr in [here, memcpy] {
            let object = found.iter().find(|f| f.code.contains(&addr));
            let object = object.unwrap_or_else(|| panic!("{addr:#x} in no object"));
            let s = object.sections.as_ref().unwrap();
            assert!(
                !s.eh_frame.is_empty() && !s.hdr.is_empty(),
                "{}",
                object.name
            );
        }
    }
}
