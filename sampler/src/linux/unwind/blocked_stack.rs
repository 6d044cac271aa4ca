//! The stack of a thread blocked in a system call, read from outside it: a signal could end
//! its call with `EINTR`. Its sp and pc come from `/proc/self/task/TID/syscall`, its stack is
//! copied, its frame pointer recovered ([`super::blocked`]) and the copy unwound; it must then
//! still be blocked at the same sp and pc.

use crate::walker::{self, Arch, StackBounds};

use super::super::signal::checked_memory::{self, CheckedMemory, WINDOW_WORDS};
use super::super::signal::stack_copy::{CopiedStack, CopyThenChecked};
use super::super::signal::{stack_bounds, stack_regions};
use super::super::MAX_DEPTH;
use super::{CfiWalker, Completed};

pub(crate) use super::super::signal::dump_slot::COPY_WORDS;

/// What reading a blocked thread's stack came to.
pub(crate) enum BlockedRead<'a> {
    /// Its frames; it was still blocked where it was read.
    Read(Completed<'a>),
    Moved,
    Gone,
}

pub(crate) struct BlockedStackReader {
    /// This process's `rw` mappings, sorted: a stack ends with its mapping.
    regions: Vec<(u64, u64)>,
    copy: Vec<u64>,
    window: Vec<u64>,
    fp_frames: Vec<u64>,
}

impl BlockedStackReader {
    pub(crate) fn new() -> Self {
        let mut reader = BlockedStackReader {
            regions: Vec::new(),
            copy: vec![0; COPY_WORDS],
            window: vec![0; WINDOW_WORDS],
            fp_frames: vec![0; MAX_DEPTH],
        };
        reader.refresh_regions();
        reader
    }

    /// Re-reads the mappings, for stacks mapped since.
    pub(crate) fn refresh_regions(&mut self) {
        if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
            stack_regions::parse_rw_regions(&maps, &mut self.regions);
        }
    }

    /// Reads thread `tid`, blocked in system call `nr` at `sp` and `pc`.
    pub(crate) fn read<'a>(
        &mut self,
        tid: i32,
        cfi: &'a mut CfiWalker,
        nr: i64,
        sp: u64,
        pc: u64,
    ) -> BlockedRead<'a> {
        let high = match region_of(&self.regions, sp) {
            Some(high) => high,
            None => {
                // A stack mapped since the mappings were read.
                self.refresh_regions();
                region_of(&self.regions, sp)
                    .unwrap_or(sp.saturating_add(stack_bounds::UNKNOWN_STACK_SPAN))
            }
        };
        let base = sp & !7;
        let room = (high.saturating_sub(base) / 8).min(COPY_WORDS as u64) as usize;
        let len = checked_memory::copy_words(base, &mut self.copy[..room]);
        let regs = cfi.registers_at_syscall(pc, sp, base, &self.copy[..len]);
        let mut memory = CopyThenChecked::new(
            base,
            &self.copy[..len],
            CheckedMemory::new(&mut self.window, sp, high),
        );
        let bounds = Some(StackBounds { low: sp, high });
        let walk = walker::walk(
            Arch::host(),
            &regs,
            bounds,
            &mut memory,
            &mut self.fp_frames,
        );
        // Still blocked where it was read: the copy is of that stack.
        match read_syscall(tid) {
            Some(now) if now == (Syscall::At { nr, sp, pc }) => {}
            None => return BlockedRead::Gone,
            _ => return BlockedRead::Moved,
        }
        let copy = CopiedStack::from_parts(regs, base, &self.copy[..len]);
        BlockedRead::Read(cfi.complete(&copy, &self.fp_frames[..walk.depth], walk.end, MAX_DEPTH))
    }
}

/// The end of the mapping among sorted `regions` that holds `addr`.
pub(crate) fn region_of(regions: &[(u64, u64)], addr: u64) -> Option<u64> {
    let i = regions.partition_point(|&(start, _)| start <= addr);
    let (start, end) = *regions.get(i.checked_sub(1)?)?;
    (start..end).contains(&addr).then_some(end)
}

/// What a thread's `syscall` file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Syscall {
    Running,
    /// Blocked in call `nr` (-1: outside one), with user sp and pc.
    At {
        nr: i64,
        sp: u64,
        pc: u64,
    },
}

pub(crate) fn read_syscall(tid: i32) -> Option<Syscall> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    parse_syscall(&text)
}

/// Parses `nr arg1 .. arg6 sp pc`, `-1 sp pc` or `running`.
pub(crate) fn parse_syscall(text: &str) -> Option<Syscall> {
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    if fields.first() == Some(&"running") {
        return Some(Syscall::Running);
    }
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    let nr: i64 = fields.first()?.parse().ok()?;
    let [.., sp, pc] = fields.as_slice() else {
        return None;
    };
    if fields.len() < 3 {
        return None;
    }
    Some(Syscall::At {
        nr,
        sp: hex(sp)?,
        pc: hex(pc)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_lines_parse() {
        let at = |nr| {
            Some(Syscall::At {
                nr,
                sp: 0x7ffc10,
                pc: 0x7f1234,
            })
        };
        assert_eq!(parse_syscall("running\n"), Some(Syscall::Running));
        assert_eq!(
            parse_syscall("0 0x3 0x7f00 0x1 0x0 0x0 0x0 0x7ffc10 0x7f1234\n"),
            at(0)
        );
        assert_eq!(parse_syscall("-1 0x7ffc10 0x7f1234\n"), at(-1));
        assert_eq!(parse_syscall(""), None);
        assert_eq!(parse_syscall("0 0x1"), None);
    }

    #[test]
    fn regions_are_found_by_address() {
        let regions = [(0x1000, 0x2000), (0x5000, 0x8000)];
        assert_eq!(region_of(&regions, 0x1000), Some(0x2000));
        assert_eq!(region_of(&regions, 0x7fff), Some(0x8000));
        assert_eq!(region_of(&regions, 0x2000), None);
        assert_eq!(region_of(&regions, 0x0fff), None);
    }
}
