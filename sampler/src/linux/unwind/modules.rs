//! The loaded modules' unwind information, for CFI unwinding, built by the sampler thread
//! from `dl_iterate_phdr`. The sections are *copied* under the loader lock, so a later
//! `dlclose` never leaves an unwind reading unmapped memory. The list is rebuilt only when
//! `dlpi_adds` / `dlpi_subs` change, copying only new objects.

use std::ffi::CStr;
use std::ops::Range;

use framehop::{ExplicitModuleSectionInfo, MayAllocateDuringUnwind, Module, Unwinder};
use hashbrown::HashMap;

/// The framehop unwinder for this architecture over owned section copies.
pub(crate) type NativeUnwinder = framehop::UnwinderNative<Vec<u8>, MayAllocateDuringUnwind>;

/// Beyond this `.eh_frame` is not copied; frame pointers walk the code.
pub(crate) const MAX_EH_FRAME_BYTES: usize = 64 << 20;

/// Objects already copied, by (load bias, `.eh_frame_hdr` address).
type Known = HashMap<(u64, u64), (ModuleInfo, Module<Vec<u8>>)>;

/// One object's contribution, from `dl_iterate_phdr` or another process's memory.
pub(crate) struct Found {
    pub key: (u64, u64),
    pub name: String,
    /// The executable segments' mapped span.
    pub code: Range<u64>,
    /// Load bias (`dlpi_addr`).
    pub bias: u64,
    /// Section addresses and copies; `None` if already known.
    pub sections: Option<Sections>,
}

/// Copies of one object's unwind sections and their file addresses.
pub(crate) struct Sections {
    pub hdr_svma: Range<u64>,
    pub hdr: Vec<u8>,
    pub eh_frame_svma: Range<u64>,
    pub eh_frame: Vec<u8>,
}

/// A loaded object's name and code range, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// The loader's path (empty for the main program).
    pub name: String,
    /// Mapped executable range.
    pub code: Range<u64>,
}

/// The unwinder over every loaded object with `.eh_frame_hdr`. Sampler thread only.
pub(crate) struct ModuleList {
    adds: u64,
    subs: u64,
    known: Known,
    unwinder: NativeUnwinder,
    /// The known objects' code ranges, sorted, for [`ModuleList::covers`].
    ranges: Vec<Range<u64>>,
    /// Times the list was rebuilt, for tests.
    rebuilds: u64,
    /// Another process's objects: [`ModuleList::refresh`] leaves them.
    fixed: bool,
}

impl ModuleList {
    /// An empty list; [`ModuleList::refresh`] fills it.
    pub fn new() -> Self {
        ModuleList {
            adds: u64::MAX,
            subs: u64::MAX,
            known: HashMap::new(),
            unwinder: NativeUnwinder::new(),
            ranges: Vec::new(),
            rebuilds: 0,
            fixed: false,
        }
    }

    /// Another process's objects, never refreshed.
    pub fn fixed(found: Vec<Found>) -> Self {
        let mut list = ModuleList::new();
        list.install(found);
        list.fixed = true;
        list
    }

    pub fn unwinder(&self) -> &NativeUnwinder {
        &self.unwinder
    }

    /// Whether `addr` lies in the code of an object in the list.
    pub fn covers(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.start <= addr);
        i > 0 && self.ranges[i - 1].contains(&addr)
    }

    #[cfg(test)]
    pub fn modules(&self) -> impl Iterator<Item = &ModuleInfo> {
        self.known.values().map(|(info, _)| info)
    }

    #[cfg(test)]
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Rebuilds the list if the loader's objects changed; returns whether it did. Takes the
    /// loader lock: never from a signal handler.
    pub fn refresh(&mut self) -> bool {
        if self.fixed {
            return false;
        }
        let (adds, subs) = loader_counters();
        if (adds, subs) == (self.adds, self.subs) && adds != u64::MAX {
            return false;
        }
        let mut found = Vec::new();
        let mut cx = IterateCx {
            known: &self.known,
            found: &mut found,
            counters: None,
        };
        // SAFETY: the callback reads only the object it is handed.
        unsafe {
            libc::dl_iterate_phdr(Some(collect_object), &mut cx as *mut IterateCx as *mut _);
        }
        let counters = cx.counters.unwrap_or((adds, subs));
        self.install(found);
        (self.adds, self.subs) = counters;
        self.rebuilds += 1;
        true
    }

    /// Makes `found` the list, keeping known objects' modules.
    fn install(&mut self, found: Vec<Found>) {
        let mut next = HashMap::with_capacity(found.len());
        for f in found {
            let entry = match f.sections {
                #[cfg_attr(not(target_arch = "aarch64"), allow(unused_mut))]
                Some(mut s) => {
                    // Readable CFI for functions that sign their return address.
                    #[cfg(target_arch = "aarch64")]
                    super::ra_state::clear_ra_state(&mut s.eh_frame);
                    let info = ModuleInfo {
                        name: f.name.clone(),
                        code: f.code.clone(),
                    };
                    let module = Module::new(
                        f.name,
                        f.code.clone(),
                        f.bias,
                        ExplicitModuleSectionInfo {
                            base_svma: 0,
                            text_svma: Some(f.code.start - f.bias..f.code.end - f.bias),
                            eh_frame_hdr_svma: Some(s.hdr_svma),
                            eh_frame_hdr: Some(s.hdr),
                            eh_frame_svma: Some(s.eh_frame_svma),
                            eh_frame: Some(s.eh_frame),
                            ..Default::default()
                        },
                    );
                    (info, module)
                }
                None => match self.known.remove(&f.key) {
                    Some(entry) => entry,
                    None => continue,
                },
            };
            next.insert(f.key, entry);
        }
        let mut unwinder = NativeUnwinder::new();
        for (_, module) in next.values() {
            unwinder.add_module(module.clone());
        }
        self.ranges = next.values().map(|(info, _)| info.code.clone()).collect();
        self.ranges.sort_unstable_by_key(|r| r.start);
        self.known = next;
        self.unwinder = unwinder;
    }
}

/// State passed through `dl_iterate_phdr` to [`collect_object`].
struct IterateCx<'a> {
    known: &'a Known,
    found: &'a mut Vec<Found>,
    counters: Option<(u64, u64)>,
}

/// `(dlpi_adds, dlpi_subs)`, or `u64::MAX` for both where missing (every refresh rebuilds).
fn loader_counters() -> (u64, u64) {
    let mut counters = (u64::MAX, u64::MAX);
    // SAFETY: the callback reads only its info and stops after one.
    unsafe {
        libc::dl_iterate_phdr(
            Some(read_counters),
            &mut counters as *mut (u64, u64) as *mut _,
        );
    }
    counters
}

/// Whether `info` (of `size` bytes) carries `dlpi_adds` and `dlpi_subs`.
fn has_counters(size: usize) -> bool {
    let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs)
        + std::mem::size_of::<libc::c_ulonglong>();
    size >= end
}

unsafe extern "C" fn read_counters(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `info` is valid for `size` bytes; `data` is `loader_counters`'s pair.
    unsafe {
        if has_counters(size) {
            *(data as *mut (u64, u64)) = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
    }
    1
}

unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is `refresh`'s `IterateCx`; `info` is valid for `size` bytes.
    let (cx, info) = unsafe { (&mut *(data as *mut IterateCx), &*info) };
    if cx.counters.is_none() && has_counters(size) {
        cx.counters = Some((info.dlpi_adds, info.dlpi_subs));
    }
    // SAFETY: as above; the headers belong to the loaded object.
    if let Some(found) = unsafe { describe(info, cx.known) } {
        cx.found.push(found);
    }
    0
}

/// Reads one object's headers and, if new, copies its unwind sections.
///
/// # Safety
/// `info` must be an entry `dl_iterate_phdr` is handing out right now.
unsafe fn describe(info: &libc::dl_phdr_info, known: &Known) -> Option<Found> {
    if info.dlpi_phdr.is_null() {
        return None;
    }
    let bias = info.dlpi_addr;
    // SAFETY: the loader's program headers for this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let (code, hdr) = code_and_hdr(
        bias,
        phdrs
            .iter()
            .map(|ph| (ph.p_type, ph.p_flags, ph.p_vaddr, ph.p_memsz)),
    )?;
    let key = (bias, hdr.start);
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: the loader's NUL-terminated name for this object.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    if known.contains_key(&key) {
        return Some(Found {
            key,
            name,
            code,
            bias,
            sections: None,
        });
    }
    let readable = |addr: u64| {
        phdrs
            .iter()
            .filter(|ph| ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_R != 0)
            .map(|ph| {
                let s = bias.wrapping_add(ph.p_vaddr);
                s..s.wrapping_add(ph.p_filesz)
            })
            .find(|r| r.contains(&addr))
    };
    let segment = readable(hdr.start)?;
    if hdr.end > segment.end || hdr.end - hdr.start < 8 {
        return None;
    }
    // SAFETY: `hdr` lies inside a readable loaded segment of the object.
    let hdr_bytes = unsafe {
        std::slice::from_raw_parts(hdr.start as *const u8, (hdr.end - hdr.start) as usize)
    };
    let eh_frame_start = eh_frame_address(hdr_bytes, hdr.start)?;
    let segment = readable(eh_frame_start)?;
    // SAFETY: `[eh_frame_start, segment.end)` is a loaded segment's file-backed part.
    let rest = unsafe {
        std::slice::from_raw_parts(
            eh_frame_start as *const u8,
            (segment.end - eh_frame_start) as usize,
        )
    };
    let len = eh_frame_len(rest);
    if len == 0 || len > MAX_EH_FRAME_BYTES {
        return None;
    }
    Some(Found {
        key,
        name,
        code,
        bias,
        sections: Some(Sections {
            hdr_svma: hdr.start - bias..hdr.end - bias,
            hdr: hdr_bytes.to_vec(),
            eh_frame_svma: eh_frame_start - bias..eh_frame_start - bias + len as u64,
            eh_frame: rest[..len].to_vec(),
        }),
    })
}

/// The span of an object's executable segments and of its `.eh_frame_hdr`, from its program
/// headers as `(type, flags, vaddr, memsz)`, loaded at `bias`.
pub(crate) fn code_and_hdr(
    bias: u64,
    phdrs: impl Iterator<Item = (u32, u32, u64, u64)>,
) -> Option<(Range<u64>, Range<u64>)> {
    let (mut code, mut hdr): (Option<Range<u64>>, _) = (None, None);
    for (kind, flags, vaddr, memsz) in phdrs {
        let start = bias.wrapping_add(vaddr);
        let end = start.wrapping_add(memsz);
        if kind == libc::PT_LOAD && flags & libc::PF_X != 0 {
            code = Some(code.map_or(start..end, |c| c.start.min(start)..c.end.max(end)));
        } else if kind == libc::PT_GNU_EH_FRAME {
            hdr = Some(start..end);
        }
    }
    Some((code?, hdr?))
}

/// Decodes `.eh_frame_hdr`'s `eh_frame_ptr`, given its mapped address.
pub(crate) fn eh_frame_address(hdr: &[u8], hdr_addr: u64) -> Option<u64> {
    const ABSPTR: u8 = 0x00;
    const UDATA4: u8 = 0x03;
    const UDATA8: u8 = 0x04;
    const SDATA4: u8 = 0x0b;
    const SDATA8: u8 = 0x0c;
    const PCREL: u8 = 0x10;
    const DATAREL: u8 = 0x30;
    if hdr.first() != Some(&1) {
        return None;
    }
    let enc = *hdr.get(1)?;
    let field = hdr.get(4..)?;
    let value: i64 = match enc & 0x0f {
        ABSPTR | UDATA8 | SDATA8 => i64::from_le_bytes(field.get(..8)?.try_into().ok()?),
        UDATA4 => i64::from(u32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
        SDATA4 => i64::from(i32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
        _ => return None,
    };
    match enc & 0x70 {
        0 => Some(value as u64),
        PCREL => Some((hdr_addr + 4).wrapping_add(value as u64)),
        DATAREL => Some(hdr_addr.wrapping_add(value as u64)),
        _ => None,
    }
}

/// The length of the `.eh_frame` records at the start of `bytes`, through the terminator or
/// the last whole record.
pub(crate) fn eh_frame_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    loop {
        let Some(len) = bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
        else {
            return at;
        };
        if len == 0 {
            return at + 4;
        }
        let (header, body) = if len == u32::MAX {
            let Some(b) = bytes.get(at + 4..at + 12) else {
                return at;
            };
            (12, u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        } else {
            (4, u64::from(len))
        };
        let Some(next) = usize::try_from(body)
            .ok()
            .and_then(|b| (at + header).checked_add(b))
            .filter(|&n| n <= bytes.len())
        else {
            return at;
        };
        at = next;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The loader's counters are process-wide: such tests take turns.
    pub(in crate::linux::unwind) static LOADER: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Loads the C test library without frame pointers; its handle.
    pub(in crate::linux::unwind) fn dlopen_noframes() -> *mut libc::c_void {
        let Some(path) = option_env!("BTPROF_NOFRAMES_LIB") else {
            panic!("the C test library was not built (see the build script's warning)");
        };
        let c_path = std::ffi::CString::new(path).unwrap();
        // SAFETY: loading our own test library, which has no initialisers.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {path}");
        handle
    }

    #[test]
    fn finds_this_program_and_the_c_library() {
        let _turn = LOADER.lock().unwrap_or_else(|e| e.into_inner());
        let mut list = ModuleList::new();
        let started = std::time::Instant::now();
        assert!(list.refresh());
        println!(
            "measured: reading {} modules' unwind information took {:?}",
            list.modules().count(),
            started.elapsed()
        );
        let here = finds_this_program_and_the_c_library as *const () as u64;
        assert!(
            list.modules().any(|m| m.code.contains(&here)),
            "this test's own code is in a listed module"
        );
        let memcpy = libc::memcpy as *const () as u64;
        let libc = list
            .modules()
            .find(|m| m.code.contains(&memcpy))
            .expect("the C library has .eh_frame_hdr");
        assert!(libc.name.contains("libc"), "{}", libc.name);
        // Nothing changed: no rebuild.
        assert!(!list.refresh());
        assert_eq!(list.rebuilds(), 1);
    }

    /// `dlopen` adds an object's unwind information, `dlclose` removes it.
    #[test]
    fn follows_dlopen_and_dlclose() {
        let _turn = LOADER.lock().unwrap_or_else(|e| e.into_inner());
        let mut list = ModuleList::new();
        list.refresh();
        let listed = |list: &ModuleList| {
            list.modules()
                .any(|m| m.name.ends_with("libbtprof_noframes.so"))
        };
        assert!(!listed(&list));
        let handle = dlopen_noframes();
        assert!(list.refresh(), "a dlopen changes the loader's counters");
        assert!(listed(&list));
        // SAFETY: nothing from the library is in use.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
        assert!(list.refresh());
        assert!(!listed(&list), "unloaded objects leave the list");
    }

    #[test]
    fn eh_frame_pointer_encodings() {
        // version 1, pcrel|sdata4, then -0x100 relative to hdr+4.
        let mut hdr = vec![1u8, 0x1b, 0x03, 0x3b];
        hdr.extend_from_slice(&(-0x100i32).to_le_bytes());
        assert_eq!(eh_frame_address(&hdr, 0x10_000), Some(0x10_004 - 0x100));
        let mut abs = vec![1u8, 0x00, 0x03, 0x3b];
        abs.extend_from_slice(&0x1234_5678u64.to_le_bytes());
        assert_eq!(eh_frame_address(&abs, 0), Some(0x1234_5678));
        assert_eq!(eh_frame_address(&[2, 0x1b, 0, 0, 0, 0, 0, 0], 0), None);
    }

    #[test]
    fn eh_frame_length_stops_at_the_terminator() {
        let mut b = Vec::new();
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&[0xff; 16]); // whatever follows the section
        assert_eq!(eh_frame_len(&b), 16);
        // A record running past the end is not counted.
        let mut t = Vec::new();
        t.extend_from_slice(&100u32.to_le_bytes());
        t.extend_from_slice(&[0; 8]);
        assert_eq!(eh_frame_len(&t), 0);
    }
}
