//! A perf event's ring buffer and its records: the kernel writes records up
//! to `data_head` of a shared mapping (a metadata page, then a power-of-two
//! data area), and the reader publishes `data_tail` to free what it read.

use std::borrow::Cow;
use std::io;
use std::sync::atomic::{fence, Ordering};

use crate::walker::{Arch, Registers};

/// Offsets of `data_head` and `data_tail` in `perf_event_mmap_page`.
const DATA_HEAD_OFFSET: usize = 1024;
const DATA_TAIL_OFFSET: usize = 1032;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_EXIT: u32 = 4;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_READ: u32 = 8;
const PERF_RECORD_SAMPLE: u32 = 9;
/// Call-chain entries at or above this are context markers, not addresses.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// `sample_regs_user` for `arch`: bits are `PERF_REG_*` numbers, values
/// come in bit order. Both compiled everywhere, to test aarch64 on x86_64.
pub(crate) const fn user_regs_mask(arch: Arch) -> u64 {
    match arch {
        // `PERF_REG_X86_BP` (6), `_SP` (7), `_IP` (8).
        Arch::X86_64 => (1 << 6) | (1 << 7) | (1 << 8),
        // `PERF_REG_ARM64_X29` (29), `_LR` (30), `_SP` (31), `_PC` (32).
        Arch::Aarch64 { .. } => (1 << 29) | (1 << 30) | (1 << 31) | (1 << 32),
    }
}

/// A sample's registers from the values of [`user_regs_mask`], raw
/// (pointer-authentication bits are stripped where a walk uses them).
fn unpack_user_regs(arch: Arch, v: &[u64; 4]) -> Registers {
    match arch {
        Arch::X86_64 => Registers {
            pc: v[2],
            fp: v[0],
            sp: v[1],
            lr: 0,
        },
        Arch::Aarch64 { .. } => Registers {
            pc: v[3],
            fp: v[0],
            sp: v[2],
            lr: v[1],
        },
    }
}

/// `sample_regs_user` for the registers [`Record::Sample`] carries.
pub(crate) const USER_REGS_MASK: u64 = user_regs_mask(Arch::host());

/// One record, borrowed from the ring (or the reader's copy of it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Sample {
        tid: i32,
        time: u64,
        /// Return addresses, pc first, without context markers; borrowed
        /// where possible, so taking a sample allocates nothing.
        callchain: Cow<'a, [u64]>,
        regs: Option<Registers>,
        /// The top of the user stack from `regs.sp` up: the valid bytes.
        stack: &'a [u8],
    },
    /// A thread started: `tid`, created by `ptid`, of process `pid`.
    Fork {
        pid: i32,
        tid: i32,
        ptid: i32,
        time: u64,
    },
    /// Thread `tid` exited.
    Exit { tid: i32, time: u64 },
    /// Thread `tid` is now called `name`.
    Comm { tid: i32, name: String, time: u64 },
    /// An inherited event's final count, as its thread `tid` exited.
    Read { tid: i32, value: u64, time: u64 },
    /// The ring was full: `lost` records were dropped.
    Lost { lost: u64 },
    /// A kind btprof did not ask for.
    Other,
}

impl Record<'_> {
    /// The record's time (`CLOCK_MONOTONIC` ns), where it carries one.
    pub(crate) fn time(&self) -> Option<u64> {
        match self {
            Record::Sample { time, .. }
            | Record::Fork { time, .. }
            | Record::Exit { time, .. }
            | Record::Comm { time, .. }
            | Record::Read { time, .. } => Some(*time),
            Record::Lost { .. } | Record::Other => None,
        }
    }
}

/// Reads native-endian words from a record; `None` past its end, so a
/// malformed record is skipped, never read beyond.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn u64(&mut self) -> Option<u64> {
        let b = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }

    /// Two u32 (pid and tid) in one word.
    fn pair(&mut self) -> Option<(i32, i32)> {
        let b = self.bytes.get(self.at..self.at + 8)?;
        self.at += 8;
        let first = i32::from_ne_bytes(b[..4].try_into().ok()?);
        let second = i32::from_ne_bytes(b[4..].try_into().ok()?);
        Some((first, second))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }
}

fn frames_of(words: impl Iterator<Item = u64>) -> Vec<u64> {
    words.filter(|&ip| ip < PERF_CONTEXT_MAX).collect()
}

/// `bytes` as native-endian words without copying, if 8-aligned and whole
/// words (always in the ring; a wrapped record's copy may not be).
pub(crate) fn words_in_place(bytes: &[u8]) -> Option<&[u64]> {
    // SAFETY: every bit pattern is a valid u64, and `align_to` only puts
    // properly aligned, in-bounds bytes in the middle slice.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    (head.is_empty() && tail.is_empty()).then_some(words)
}

/// A sample record's thread id and time, without parsing the rest.
pub(crate) fn sample_tid_time(bytes: &[u8]) -> Option<(i32, u64)> {
    if u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?) != PERF_RECORD_SAMPLE {
        return None;
    }
    let mut f = Fields { bytes, at: 8 };
    let (_pid, tid) = f.pair()?;
    Some((tid, f.u64()?))
}

impl<'a> Record<'a> {
    /// Parses one record (header included) of sample type `TID | TIME |
    /// CALLCHAIN | REGS_USER | STACK_USER`, registers [`USER_REGS_MASK`],
    /// `sample_id_all`. `None` for one shorter than its contents.
    pub(crate) fn parse(bytes: &'a [u8]) -> Option<Record<'a>> {
        Record::parse_for(Arch::host(), bytes)
    }

    /// [`Record::parse`] for a kernel of `arch` ([`user_regs_mask`]`(arch)`).
    fn parse_for(arch: Arch, bytes: &'a [u8]) -> Option<Record<'a>> {
        let kind = u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
        let mut f = Fields { bytes, at: 8 };
        // With sample_id_all, non-sample records end with (pid, tid), time.
        let trailer_time = || -> Option<u64> {
            let at = bytes.len().checked_sub(8)?;
            Some(u64::from_ne_bytes(bytes.get(at..)?.try_into().ok()?))
        };
        Some(match kind {
            PERF_RECORD_SAMPLE => {
                let (_pid, tid) = f.pair()?;
                let time = f.u64()?;
                let nr = usize::try_from(f.u64()?).ok()?;
                let chain = f.take(nr.checked_mul(8)?)?;
                let callchain = match words_in_place(chain) {
                    Some(words) => {
                        let lead = words.iter().take_while(|&&ip| ip >= PERF_CONTEXT_MAX);
                        let frames = &words[lead.count()..];
                        match frames.iter().all(|&ip| ip < PERF_CONTEXT_MAX) {
                            true => Cow::Borrowed(frames),
                            false => Cow::Owned(frames_of(frames.iter().copied())),
                        }
                    }
                    None => Cow::Owned(frames_of(
                        chain
                            .chunks_exact(8)
                            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes"))),
                    )),
                };
                let abi = f.u64()?;
                let regs = if abi != 0 {
                    let mut v = [0u64; 4];
                    let count = user_regs_mask(arch).count_ones() as usize;
                    for r in &mut v[..count] {
                        *r = f.u64()?;
                    }
                    Some(unpack_user_regs(arch, &v))
                } else {
                    None
                };
                let size = usize::try_from(f.u64()?).ok()?;
                let data = f.take(size)?;
                let stack = if size > 0 {
                    let dyn_size = usize::try_from(f.u64()?).ok()?;
                    &data[..dyn_size.min(size)]
                } else {
                    &[]
                };
                Record::Sample {
                    tid,
                    time,
                    callchain,
                    regs,
                    stack,
                }
            }
            PERF_RECORD_FORK | PERF_RECORD_EXIT => {
                let (pid, _ppid) = f.pair()?;
                let (tid, ptid) = f.pair()?;
                let time = f.u64()?;
                if kind == PERF_RECORD_FORK {
                    Record::Fork {
                        pid,
                        tid,
                        ptid,
                        time,
                    }
                } else {
                    Record::Exit { tid, time }
                }
            }
            PERF_RECORD_COMM => {
                let (_pid, tid) = f.pair()?;
                // The name, NUL-padded to 8 bytes, then the 16-byte trailer.
                let name_end = bytes.len().checked_sub(16)?;
                let raw = bytes.get(16..name_end)?;
                let len = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                Record::Comm {
                    tid,
                    name: String::from_utf8_lossy(&raw[..len]).into_owned(),
                    time: trailer_time()?,
                }
            }
            PERF_RECORD_READ => {
                let (_pid, tid) = f.pair()?;
                let value = f.u64()?;
                Record::Read {
                    tid,
                    value,
                    time: trailer_time()?,
                }
            }
            PERF_RECORD_LOST => {
                let _id = f.u64()?;
                Record::Lost { lost: f.u64()? }
            }
            _ => Record::Other,
        })
    }
}

/// One event's mapped ring buffer; unmapped and closed on drop.
pub(crate) struct PerfRing {
    fd: libc::c_int,
    base: *mut u8,
    map_len: usize,
    data_size: u64,
    /// A wrapped record, made contiguous.
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value and only read through it; the
// kernel side is synchronised by the head/tail protocol in `read`.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// Maps `data_pages` (a power of two) pages of ring for event `fd`,
    /// which it owns from now on, closing it on failure.
    pub(crate) fn map(fd: libc::c_int, data_pages: usize) -> io::Result<PerfRing> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of our own perf descriptor, of the
        // length the perf ABI asks for (one page plus 2^n pages).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: closing the descriptor we were given.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        Ok(PerfRing {
            fd,
            base: base.cast(),
            map_len,
            data_size: (page * data_pages) as u64,
            scratch: Vec::new(),
        })
    }

    pub(crate) fn data_size(&self) -> u64 {
        self.data_size
    }

    /// The event's descriptor (for `PERF_EVENT_IOC_SET_OUTPUT`).
    pub(crate) fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// Hands every record written so far to `each`, contiguous, and frees it.
    pub(crate) fn read(&mut self, mut each: impl FnMut(&[u8])) {
        // SAFETY: `base` maps the metadata page; data_head is read volatile
        // and the fence, pairing with the kernel's release, orders the
        // record reads after it.
        let head =
            unsafe { std::ptr::read_volatile(self.base.add(DATA_HEAD_OFFSET).cast::<u64>()) };
        fence(Ordering::Acquire);
        // SAFETY: data_tail is ours to read and write.
        let mut tail =
            unsafe { std::ptr::read_volatile(self.base.add(DATA_TAIL_OFFSET).cast::<u64>()) };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: the data area starts one page in and is `data_size` long.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(page), self.data_size as usize) };
        while head.wrapping_sub(tail) >= 8 {
            let at = (tail % self.data_size) as usize;
            let mut header = [0u8; 8];
            for (i, b) in header.iter_mut().enumerate() {
                *b = data[(at + i) % data.len()];
            }
            let size = u16::from_ne_bytes([header[6], header[7]]) as usize;
            if size < 8 || head.wrapping_sub(tail) < size as u64 {
                break;
            }
            if at + size <= data.len() {
                each(&data[at..at + size]);
            } else {
                let first = data.len() - at;
                self.scratch.clear();
                self.scratch.extend_from_slice(&data[at..]);
                self.scratch.extend_from_slice(&data[..size - first]);
                each(&self.scratch);
            }
            tail = tail.wrapping_add(size as u64);
        }
        fence(Ordering::Release);
        // SAFETY: the fence orders our record reads before publishing the
        // tail, so the kernel never overwrites what we still read.
        unsafe { std::ptr::write_volatile(self.base.add(DATA_TAIL_OFFSET).cast::<u64>(), tail) };
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping and closing our descriptor.
        unsafe {
            libc::munmap(self.base.cast(), self.map_len);
            libc::close(self.fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::signal::stack_copy::CopiedStack;
    use crate::walker::{walk, StackBounds, StackMemory, WalkEnd};

    /// A record of `kind` around `body`: the header says its size.
    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut v = kind.to_ne_bytes().to_vec();
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    fn words(v: &mut Vec<u8>, w: &[u64]) {
        for x in w {
            v.extend_from_slice(&x.to_ne_bytes());
        }
    }

    fn pair(a: i32, b: i32) -> u64 {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&a.to_ne_bytes());
        bytes[4..].copy_from_slice(&b.to_ne_bytes());
        u64::from_ne_bytes(bytes)
    }

    #[test]
    fn a_sample_gives_its_chain_registers_and_stack() {
        let mut body = Vec::new();
        let user = (-512i64) as u64; // PERF_CONTEXT_USER
        words(
            &mut body,
            &[pair(10, 11), 5_000, 4, user, 0x1000, 0x2000, 0x3000],
        );
        words(&mut body, &[2]); // abi 64
        words(&mut body, &vec![0u64; USER_REGS_MASK.count_ones() as usize]);
        words(&mut body, &[16, 7, 8, 12]); // 16 bytes of stack, 12 valid
        let rec = record(PERF_RECORD_SAMPLE, &body);
        let Some(Record::Sample {
            tid,
            time,
            callchain,
            regs,
            stack,
        }) = Record::parse(&rec)
        else {
            panic!("not a sample");
        };
        assert_eq!((tid, time), (11, 5_000));
        assert_eq!(callchain, vec![0x1000, 0x2000, 0x3000]);
        assert!(
            matches!(callchain, Cow::Borrowed(_)),
            "copied: {callchain:?}"
        );
        assert!(regs.is_some());
        assert_eq!(stack.len(), 12);
        // Cut short: no record, no panic.
        assert_eq!(Record::parse(&rec[..rec.len() - 9]), None);
        // Not 8-aligned (a wrapped record's copy may not be): the same.
        let mut shifted = vec![0u8; rec.len() + 4];
        shifted[4..].copy_from_slice(&rec);
        let Some(Record::Sample { callchain, .. }) = Record::parse(&shifted[4..]) else {
            panic!("not a sample");
        };
        assert_eq!(callchain, vec![0x1000, 0x2000, 0x3000]);
    }

    /// A pointer-authentication signature (bits 48-54, 56-63; 55 clear).
    const PAC: u64 = 0x3a17_0000_0000_0000;

    struct FromCopy<'a>(&'a CopiedStack<'a>);

    impl StackMemory for FromCopy<'_> {
        fn read_record(&mut self, addr: u64) -> Option<[u64; 2]> {
            Some([self.0.read(addr)?, self.0.read(addr + 8)?])
        }
    }

    /// A leaf without its frame record: the walk gives the kernel's chain and
    /// the stripped link register for frame 1 (`docs/architecture.md`, rule 3).
    #[test]
    fn an_aarch64_sample_is_unwound_from_its_registers_and_stack_copy() {
        let arch = Arch::AARCH64_LINUX;
        let leaf = 0xaaaa_c000_1208u64; // pc, in the leaf
        let into_caller = 0xaaaa_c000_2044u64; // lr: not saved anywhere
        let into_outer = 0xaaaa_c000_3010u64; // the caller's record
        let into_main = 0xaaaa_c000_4100u64; // the outer function's record
        let sp = 0xffff_f7ff_e000u64;
        // Frame records at sp + 0x20, + 0x60 and (ending the chain) + 0x80.
        let mut stack = [0x5a5a_5a5a_5a5a_5a5au64; 20];
        stack[4..6].copy_from_slice(&[sp + 0x60, into_outer | PAC]);
        stack[12..14].copy_from_slice(&[sp + 0x80, into_main | PAC]);
        stack[16..18].copy_from_slice(&[0, 0]);
        let fp = sp + 0x20;

        let user = (-512i64) as u64; // PERF_CONTEXT_USER
        let mut body = Vec::new();
        words(
            &mut body,
            &[pair(10, 11), 7_000, 4, user, leaf, into_outer, into_main],
        );
        words(&mut body, &[2]); // PERF_SAMPLE_REGS_ABI_64
        words(&mut body, &[fp, into_caller | PAC, sp, leaf]); // x29, lr, sp, pc
        let size = 8 * stack.len() as u64;
        words(&mut body, &[size]);
        words(&mut body, &stack);
        words(&mut body, &[size]); // dyn_size: all of it valid
        let rec = record(PERF_RECORD_SAMPLE, &body);
        assert_eq!(
            user_regs_mask(arch).count_ones(),
            4,
            "the sample asks for x29, lr, sp, pc"
        );

        let Some(Record::Sample {
            callchain,
            regs: Some(regs),
            stack: copied,
            ..
        }) = Record::parse_for(arch, &rec)
        else {
            panic!("not a sample with registers");
        };
        let signed_lr = into_caller | PAC;
        assert_eq!(
            regs,
            Registers {
                pc: leaf,
                fp,
                sp,
                lr: signed_lr
            }
        );
        assert_eq!(copied.len(), stack.len() * 8);

        let copied = words_in_place(copied).expect("the record's words are aligned");
        let copy = CopiedStack::from_parts(regs, regs.sp, copied);
        let bounds = StackBounds {
            low: sp,
            high: copy.end(),
        };
        let mut out = [0u64; 16];
        let w = walk(arch, &regs, Some(bounds), &mut FromCopy(&copy), &mut out);
        assert_eq!(w.end, WalkEnd::Complete);
        assert_eq!(out[..w.depth], [leaf, into_outer, into_main]);
        assert_eq!(out[..w.depth], callchain[..], "the kernel's chain");
        assert_eq!(w.lr, into_caller, "the leaf's caller, beside the walk");
        assert_eq!(regs.link_register(arch), into_caller);
    }

    #[test]
    fn context_markers_anywhere_in_a_chain_are_left_out() {
        let mut body = Vec::new();
        let user = (-512i64) as u64; // PERF_CONTEXT_USER
        words(
            &mut body,
            &[pair(10, 11), 5_000, 5, user, 0x1000, user, 0x2000, 0x3000],
        );
        words(&mut body, &[0, 0]); // no registers, no stack
        let rec = record(PERF_RECORD_SAMPLE, &body);
        let Some(Record::Sample { callchain, .. }) = Record::parse(&rec) else {
            panic!("not a sample");
        };
        assert_eq!(callchain, vec![0x1000, 0x2000, 0x3000]);
    }

    #[test]
    fn task_records_parse() {
        let mut body = Vec::new();
        words(
            &mut body,
            &[pair(10, 10), pair(12, 11), 99, pair(10, 12), 99],
        );
        let rec = record(PERF_RECORD_FORK, &body);
        assert_eq!(
            Record::parse(&rec),
            Some(Record::Fork {
                pid: 10,
                tid: 12,
                ptid: 11,
                time: 99
            })
        );
        let mut body = Vec::new();
        words(&mut body, &[pair(10, 12)]);
        body.extend_from_slice(b"worker-1\0\0\0\0\0\0\0\0");
        words(&mut body, &[pair(10, 12), 77]);
        let rec = record(PERF_RECORD_COMM, &body);
        assert_eq!(
            Record::parse(&rec),
            Some(Record::Comm {
                tid: 12,
                name: "worker-1".into(),
                time: 77
            })
        );
        let mut body = Vec::new();
        words(&mut body, &[pair(10, 12), 1_234_567, pair(10, 12), 88]);
        let rec = record(PERF_RECORD_READ, &body);
        assert_eq!(
            Record::parse(&rec),
            Some(Record::Read {
                tid: 12,
                value: 1_234_567,
                time: 88
            })
        );
    }
}
