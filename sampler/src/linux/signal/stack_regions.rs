//! The `rw` mappings of this process, which bound the handler's walk: a handler cannot ask for
//! stack bounds (`pthread_getattr_np` allocates), so the sampler thread publishes them here
//! before a new thread is first signalled. They prove nothing at the moment of a read
//! ([`super::checked_memory`]). A static double buffer with reader counts: the writer only
//! rewrites the buffer no handler reads.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

/// Mappings kept per snapshot; beyond it, stacks sample as `NoBounds`.
pub(crate) const MAX_REGIONS: usize = 8192;

struct RegionBuf {
    len: AtomicUsize,
    starts: [AtomicU64; MAX_REGIONS],
    ends: [AtomicU64; MAX_REGIONS],
}

impl RegionBuf {
    const fn new() -> Self {
        RegionBuf {
            len: AtomicUsize::new(0),
            starts: [const { AtomicU64::new(0) }; MAX_REGIONS],
            ends: [const { AtomicU64::new(0) }; MAX_REGIONS],
        }
    }
}

static BUFS: [RegionBuf; 2] = [RegionBuf::new(), RegionBuf::new()];
/// Whether the snapshot was read after the running sampler last listed a new thread, so each
/// thread it signals had its stack block mapped then ([`super::own_stack`] relies on it).
static COVERS_LISTED: AtomicBool = AtomicBool::new(false);
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static READERS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Finds the published mapping containing `addr`. Async-signal-safe.
pub(crate) fn region_containing(addr: u64) -> Option<(u64, u64)> {
    let index = loop {
        let i = CURRENT.load(SeqCst);
        READERS[i].fetch_add(1, SeqCst);
        if CURRENT.load(SeqCst) == i {
            break i;
        }
        // The writer flipped before our claim and may rewrite this buffer.
        READERS[i].fetch_sub(1, SeqCst);
    };
    let buf = &BUFS[index];
    let len = buf.len.load(SeqCst).min(MAX_REGIONS);
    // Last region whose start is <= addr.
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if buf.starts[mid].load(SeqCst) <= addr {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let found = lo.checked_sub(1).and_then(|i| {
        let (start, end) = (buf.starts[i].load(SeqCst), buf.ends[i].load(SeqCst));
        (addr < end).then_some((start, end))
    });
    READERS[index].fetch_sub(1, SeqCst);
    found
}

/// Whether the snapshot is newer than every listed thread. Async-signal-safe.
pub(crate) fn covers_listed() -> bool {
    COVERS_LISTED.load(SeqCst)
}

/// Sampler thread only: `true` right after a snapshot read once every thread was listed;
/// `false` when a listing finds a new thread or the sampler stops.
pub(crate) fn set_covers_listed(covers: bool) {
    COVERS_LISTED.store(covers, SeqCst);
}

/// In a forked child: forgets the readers (parent threads inside [`region_containing`] do not
/// exist there) and [`covers_listed`]. Async-signal-safe.
pub(crate) fn reset_after_fork() {
    for readers in &READERS {
        readers.store(0, SeqCst);
    }
    COVERS_LISTED.store(false, SeqCst);
}

/// Publishes sorted, disjoint `regions`; `false`, changing nothing, while a handler holds the
/// spare buffer. Sampler thread only.
pub(crate) fn publish(regions: &[(u64, u64)]) -> bool {
    let spare = 1 - CURRENT.load(SeqCst);
    if READERS[spare].load(SeqCst) != 0 {
        return false;
    }
    let buf = &BUFS[spare];
    let n = regions.len().min(MAX_REGIONS);
    for (i, &(start, end)) in regions[..n].iter().enumerate() {
        buf.starts[i].store(start, SeqCst);
        buf.ends[i].store(end, SeqCst);
    }
    buf.len.store(n, SeqCst);
    CURRENT.store(spare, SeqCst);
    true
}

/// Parses the `rw` mappings out of `/proc/self/maps` text, sorted.
pub(crate) fn parse_rw_regions(maps: &str, out: &mut Vec<(u64, u64)>) {
    out.clear();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with("rw") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            out.push((start, end));
        }
    }
    out.sort_unstable();
}

/// The `rw` regions now, for the caller alone: a test must not look for its own mapping in
/// the published snapshot, which other tests refresh.
#[cfg(test)]
pub(crate) fn rw_regions_now() -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut regions = Vec::new();
    parse_rw_regions(&maps, &mut regions);
    regions
}

/// Reads `/proc/self/maps` and publishes its `rw` mappings.
pub(crate) fn refresh(scratch: &mut Vec<(u64, u64)>) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    parse_rw_regions(&maps, scratch);
    publish(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_rw_mappings() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /bin/x
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 123 /bin/x
55d0c0003000-55d0c0004000 rw-p 00003000 08:01 123 /bin/x
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000001000-7f0000801000 rw-p 00000000 00:00 0
";
        let mut out = Vec::new();
        parse_rw_regions(maps, &mut out);
        assert_eq!(
            out,
            vec![
                (0x55d0c0003000, 0x55d0c0004000),
                (0x7f0000001000, 0x7f0000801000),
                (0x7ffd00000000, 0x7ffd00021000),
            ]
        );
    }

    #[test]
    fn lookup_finds_this_threads_stack() {
        // Only its own stack, which no other test's snapshot lacks.
        let mut scratch = Vec::new();
        assert!(refresh(&mut scratch));
        let local = 0u64;
        let sp = &local as *const u64 as u64;
        let (start, end) = region_containing(sp).expect("own stack is mapped rw");
        assert!(start <= sp && sp < end);
        assert_eq!(region_containing(0), None);
    }
}
