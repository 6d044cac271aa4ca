//! Linux module discovery for the current process (`dl_iterate_phdr`) and access to the
//! in-memory vDSO image.

use std::ffi::{c_int, c_void, CStr, OsStr};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{LoadedModule, Source};

/// What the loader reports for one module, copied out inside the callback so that all
/// further work (readlink, reading `/proc`) happens after the loader lock is released.
struct LoadedObject {
    /// `dlpi_name` bytes; empty for the main executable.
    name: Vec<u8>,
    bias: u64,
    /// Runtime ranges of the `PT_LOAD` segments.
    ranges: Vec<Range<u64>>,
}

/// `dl_iterate_phdr` callback: appends one [`LoadedObject`] per module to the `Vec` passed
/// as `data`. Must not unwind (it is called from C); nothing in it can panic except on
/// allocation failure, which aborts.
unsafe extern "C" fn collect(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `&mut Vec<LoadedObject>` that `loaded_objects` passed to
    // `dl_iterate_phdr`, which is exclusively borrowed for the duration of the call.
    let objects = unsafe { &mut *data.cast::<Vec<LoadedObject>>() };
    // SAFETY: the loader passes a valid `dl_phdr_info` for the duration of the callback.
    let Some(info) = (unsafe { info.as_ref() }) else {
        return 0;
    };
    let name = if info.dlpi_name.is_null() {
        Vec::new()
    } else {
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader and
        // valid during the callback; we copy it out.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_bytes()
            .to_vec()
    };
    let phdrs = if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        &[][..]
    } else {
        // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers of the module, mapped
        // for as long as the module is loaded, which includes the callback.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let bias = widen(info.dlpi_addr);
    let mut ranges: Vec<Range<u64>> = phdrs
        .iter()
        .filter(|ph| ph.p_type == libc::PT_LOAD && ph.p_memsz != 0)
        .map(|ph| {
            let start = bias.wrapping_add(widen(ph.p_vaddr));
            start..start.saturating_add(widen(ph.p_memsz))
        })
        .collect();
    ranges.sort_unstable_by_key(|r| r.start);
    objects.push(LoadedObject { name, bias, ranges });
    0
}

/// Lists the modules the dynamic loader currently has loaded, in loader order.
fn loaded_objects() -> Vec<LoadedObject> {
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: `collect` matches the callback signature, only accesses `data` as the
    // `Vec<LoadedObject>` we pass here, and does not unwind. `dl_iterate_phdr` calls it
    // synchronously, so the borrow of `objects` outlives every call.
    unsafe {
        libc::dl_iterate_phdr(Some(collect), (&raw mut objects).cast::<c_void>());
    }
    objects
}

/// `dl_iterate_phdr` callback: stores the loader's `(dlpi_adds, dlpi_subs)` in the
/// `Option<(u64, u64)>` passed as `data` and stops at the first module. Must not unwind.
unsafe extern "C" fn read_generation(
    info: *mut libc::dl_phdr_info,
    size: libc::size_t,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `&mut Option<(u64, u64)>` that `loader_generation` passed to
    // `dl_iterate_phdr`, exclusively borrowed for the duration of the call.
    let generation = unsafe { &mut *data.cast::<Option<(u64, u64)>>() };
    // A loader older than the two counters passes a smaller structure: no generation then.
    let has_counters = size
        >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs)
            + std::mem::size_of::<libc::c_ulonglong>();
    // SAFETY: the loader passes a valid `dl_phdr_info` of `size` bytes for the duration of
    // the callback, and the counters are read only when `size` covers them.
    if let (true, Some(info)) = (has_counters, unsafe { info.as_ref() }) {
        *generation = Some((widen(info.dlpi_adds), widen(info.dlpi_subs)));
    }
    1
}

/// The dynamic loader's counts of objects added and removed so far (`dlpi_adds`,
/// `dlpi_subs`: glibc bumps them on every `dlopen` that maps an object and every `dlclose`
/// that unmaps one; musl bumps the first and never unloads). Equal counts mean the list
/// [`current_modules`] would report is the one it reported then, so a refresh can skip
/// the rescan, whose `/proc/self/maps` read (for the vDSO's extent) costs tens of
/// microseconds each time: a profiler refreshes before every window it symbolises.
/// `None` when the loader does not report them.
pub(crate) fn loader_generation() -> Option<(u64, u64)> {
    let mut generation: Option<(u64, u64)> = None;
    // SAFETY: `read_generation` matches the callback signature, only accesses `data` as the
    // `Option<(u64, u64)>` passed here, and does not unwind; `dl_iterate_phdr` calls it
    // synchronously, so the borrow of `generation` outlives every call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(read_generation),
            (&raw mut generation).cast::<c_void>(),
        );
    }
    generation
}

/// Snapshot of the current process's modules, ready for the resolver.
pub(crate) fn current_modules() -> Vec<LoadedModule> {
    let vdso = vdso_mapping();
    loaded_objects()
        .into_iter()
        .enumerate()
        .filter(|(_, o)| !o.ranges.is_empty())
        .map(|(index, o)| to_module(index, o, vdso.as_ref()))
        .collect()
}

/// Decides the display name and symbol source of one loaded object.
fn to_module(index: usize, object: LoadedObject, vdso: Option<&Range<u64>>) -> LoadedModule {
    let contains = |addr: u64| object.ranges.iter().any(|r| r.contains(&addr));
    let (name, source, path): (Arc<str>, Source, Option<PathBuf>) = match vdso {
        // The vDSO is reported with a name ("linux-vdso.so.1") but has no file.
        Some(image) if contains(image.start) => (
            display_name(&object.name, "[vdso]"),
            Source::Memory {
                start: image.start,
                len: image.end - image.start,
            },
            None,
        ),
        // glibc reports the main executable first, with an empty name.
        _ if object.name.is_empty() && index == 0 => {
            let exe = std::fs::read_link("/proc/self/exe").ok();
            let shown = exe.as_deref().unwrap_or(Path::new(""));
            (
                display_name(shown.as_os_str().as_bytes(), "[exe]"),
                Source::File(PathBuf::from("/proc/self/exe")),
                exe,
            )
        }
        _ if object.name.is_empty() => (Arc::from("[anonymous]"), Source::None, None),
        _ => {
            let path = PathBuf::from(OsStr::from_bytes(&object.name));
            (
                display_name(&object.name, "[anonymous]"),
                Source::File(path.clone()),
                Some(path),
            )
        }
    };
    LoadedModule::new(name, source, object.bias, object.ranges).with_path(path)
}

/// The last path component of `path`, or `fallback` when there is none.
fn display_name(path: &[u8], fallback: &str) -> Arc<str> {
    Path::new(OsStr::from_bytes(path))
        .file_name()
        .map(|n| Arc::from(n.to_string_lossy().as_ref()))
        .unwrap_or_else(|| Arc::from(fallback))
}

/// Address range of the vDSO mapping: it starts at `AT_SYSINFO_EHDR`, and its extent comes
/// from `/proc/self/maps` because the image (section headers included, which `object` needs
/// to find `.dynsym`) can extend past what the program headers describe.
fn vdso_mapping() -> Option<Range<u64>> {
    let ehdr = vdso_header()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(parse_maps_range)
        .find(|r| r.contains(&ehdr))
        .map(|r| ehdr..r.end)
}

/// Address of the vDSO's ELF header (`AT_SYSINFO_EHDR`), if the kernel provided one.
pub(crate) fn vdso_header() -> Option<u64> {
    // SAFETY: `getauxval` only reads the auxiliary vector; it returns 0 when the entry is
    // absent.
    let ehdr = widen(unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) });
    (ehdr != 0).then_some(ehdr)
}

/// Widens an ELF address field or `c_ulong` to `u64`. They are `u32` on 32-bit targets and
/// already `u64` on 64-bit ones, where a plain `u64::from` would trip `useless_conversion`.
fn widen(value: impl Into<u64>) -> u64 {
    value.into()
}

/// Parses the `start-end` field at the beginning of a `/proc/PID/maps` line.
fn parse_maps_range(line: &str) -> Option<Range<u64>> {
    let field = line.split_ascii_whitespace().next()?;
    let (start, end) = field.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    (start < end).then_some(start..end)
}

/// Runs `f` on an image that lives in this process's memory (the vDSO).
pub(crate) fn with_memory_image<T>(start: u64, len: u64, f: impl FnOnce(&[u8]) -> T) -> T {
    let (Ok(addr), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
        return f(&[]);
    };
    // SAFETY: `start..start + len` is the vDSO mapping found by `vdso_mapping` (from
    // `AT_SYSINFO_EHDR` and `/proc/self/maps`). The kernel maps it readable for the whole
    // life of the process and nothing writes to it, so the slice is valid and immutable for
    // the duration of `f`.
    let image = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    f(image)
}

/// Snapshot of another process's modules, from its `/proc/PID/maps`: every ELF file mapped
/// from offset 0, and its vDSO (copied out of its memory with `process_vm_readv`).
pub(crate) fn process_modules(pid: u32) -> std::io::Result<Vec<LoadedModule>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut modules: Vec<LoadedModule> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(_perms), Some(offset)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let name = fields.nth(2).unwrap_or("").trim_start();
        let (Some(range), Ok(0)) = (parse_maps_range(range), u64::from_str_radix(offset, 16))
        else {
            continue;
        };
        let module = if name == "[vdso]" {
            copied_vdso(pid, range)
        } else if name.starts_with('/') {
            let path = PathBuf::from(name);
            // The executable through its link, which stays valid if the file was replaced.
            let read = match &exe {
                Some(exe) if *exe == path => PathBuf::from(format!("/proc/{pid}/exe")),
                _ => path.clone(),
            };
            mapped_file(&read, path, range.start)
        } else {
            None
        };
        if let Some(module) = module {
            if !modules.iter().any(|m| m.ranges == module.ranges) {
                modules.push(module);
            }
        }
    }
    Ok(modules)
}

/// The module of the ELF file at `read` (shown and searched for debug files as `path`) whose
/// file offset 0 is mapped at `start`.
fn mapped_file(read: &Path, path: PathBuf, start: u64) -> Option<LoadedModule> {
    use object::{Object, ObjectSegment};
    let data = crate::mapped_file::FileBytes::open(read).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let first = file
        .segments()
        .filter(|s| s.size() != 0)
        .min_by_key(|s| s.file_range().0)?;
    let (offset, _) = first.file_range();
    let bias = start.wrapping_sub(first.address().wrapping_sub(offset));
    let ranges = crate::platform::segment_ranges(&file, bias);
    let name = display_name(path.as_os_str().as_bytes(), "[anonymous]");
    Some(LoadedModule::new(name, Source::File(read.to_owned()), bias, ranges).with_path(Some(path)))
}

/// Another process's vDSO, mapped at `range`, copied out of its memory.
fn copied_vdso(pid: u32, range: Range<u64>) -> Option<LoadedModule> {
    use object::{Object, ObjectSegment};
    let mut image = vec![0u8; usize::try_from(range.end - range.start).ok()?];
    let local = libc::iovec {
        iov_base: image.as_mut_ptr().cast(),
        iov_len: image.len(),
    };
    let remote = libc::iovec {
        iov_base: range.start as *mut c_void,
        iov_len: image.len(),
    };
    // SAFETY: one local iovec valid for writes of `image.len()` bytes; the remote one is only
    // read by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if usize::try_from(n).ok()? != image.len() {
        return None;
    }
    let image: Arc<[u8]> = image.into();
    let (bias, ranges) = {
        let file = object::File::parse(&*image).ok()?;
        let first = file.segments().min_by_key(|s| s.file_range().0)?;
        let bias = range.start.wrapping_sub(first.address());
        (bias, crate::platform::segment_ranges(&file, bias))
    };
    Some(LoadedModule::new(
        Arc::from("linux-vdso.so.1"),
        Source::Copied(image),
        bias,
        ranges,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process, read as another process would be, has its executable, the C library
    /// and its vDSO.
    #[test]
    fn reads_this_process_as_another() {
        let modules = process_modules(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let own = current_modules();
        let main = modules
            .iter()
            .find(|m| m.path.as_deref() == Some(&*exe))
            .unwrap();
        assert_eq!(main.bias, own[0].bias);
        assert!(modules.iter().any(|m| m.name.contains("libc")));
        if vdso_header().is_some() {
            assert!(modules
                .iter()
                .any(|m| matches!(m.source, Source::Copied(_))));
        }
    }

    #[test]
    fn parses_maps_lines() {
        assert_eq!(
            parse_maps_range("7ffd1000-7ffd3000 r-xp 00000000 00:00 0    [vdso]"),
            Some(0x7ffd_1000..0x7ffd_3000)
        );
        assert_eq!(parse_maps_range("garbage"), None);
        assert_eq!(parse_maps_range(""), None);
    }

    #[test]
    fn finds_main_executable_and_libc() {
        let modules = current_modules();
        assert!(matches!(&modules[0].source, Source::File(p) if p == Path::new("/proc/self/exe")));
        assert!(modules.iter().any(|m| m.name.contains("libc")));
    }

    #[test]
    fn vdso_has_symbols_when_present() {
        let Some(vdso) = vdso_mapping() else {
            return;
        };
        let table = with_memory_image(vdso.start, vdso.end - vdso.start, |image| {
            crate::elf_symbols::table_from_image(image, 0)
        });
        assert!(
            !table.is_empty(),
            "vDSO image parsed but had no function symbols"
        );
    }
}
