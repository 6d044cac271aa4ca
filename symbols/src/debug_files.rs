//! Separate debug files: where the symbols and DWARF of a stripped module live.
//!
//! Linux distributions strip their libraries and ship the symbols apart (Debian's `-dbg` and
//! `-dbgsym` packages, Fedora's `debuginfo`), and some keep a small symbol table inside the
//! binary itself (Fedora's MiniDebugInfo). On macOS the DWARF of a build is in a `.dSYM`
//! bundle beside the binary. The search follows gdb's and perf's order:
//!
//! 1. `<root>/.build-id/xx/yyyy….debug` by the module's GNU build id (`root` is
//!    `/usr/lib/debug` unless [`DebugSearch`] says otherwise);
//! 2. the `.gnu_debuglink` name, beside the binary, in its `.debug/` directory, and under
//!    `<root>/<binary's directory>/`, accepted only when its CRC-32 matches;
//! 3. debuginfod's local client cache, `<cache>/<build id>/debuginfo` (never the network);
//!
//! and, when none is found, the `.gnu_debugdata` section (an xz-compressed ELF holding a
//! function symbol table), decoded with the pure-Rust `lzma-rs`.
//!
//! A file found by build id must carry the same build id; a file found by debuglink must
//! match its CRC (or the build id, when both carry one). Anything else is ignored, so a
//! stale debug file never renames functions.
//!
//! On macOS only the `.dSYM` case is handled. Cargo's default there
//! (`split-debuginfo = "unpacked"`) leaves the DWARF in the object files its debug map names:
//! `N_OSO` stab entries in the executable's symbol table give each object file's path (and
//! mtime; `.a` members as `lib.a(member.o)`), and `N_FUN`/`N_STSYM` entries give, per
//! function, its address in the final image. Reading that case needs: the stabs of the
//! image (from `__LINKEDIT`, which `MachImage` already reads), the object files (which may
//! have moved or been rebuilt since: check the mtime), and a per-object address map from the
//! object's own function addresses to the image's, through which every DWARF lookup is
//! translated (what `wholesym`/samply and lldb do). Until then `split-debuginfo = "packed"`
//! (cargo runs `dsymutil`) gives a `.dSYM` that is used.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

use crate::mapped_file::FileBytes;

/// Where separate debug files are looked for. The default is the system's: `/usr/lib/debug`
/// and debuginfod's client cache of the current user. Tests inject their own directories.
///
/// ```
/// use btprof_symbols::DebugSearch;
///
/// // Only a test's own directory, no debuginfod cache.
/// let search = DebugSearch {
///     roots: vec!["/tmp/my-debug-root".into()],
///     debuginfod_cache: None,
/// };
/// assert_eq!(search.roots.len(), 1);
/// assert_eq!(DebugSearch::default().roots, [std::path::PathBuf::from("/usr/lib/debug")]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugSearch {
    /// Global debug directories, searched by build id (`<root>/.build-id/xx/yyyy.debug`)
    /// and for `.gnu_debuglink` names (`<root>/<binary's directory>/<name>`), in order.
    pub roots: Vec<PathBuf>,
    /// debuginfod's client cache (`<cache>/<build id in hex>/debuginfo`), if any.
    pub debuginfod_cache: Option<PathBuf>,
}

impl Default for DebugSearch {
    /// `/usr/lib/debug`, and debuginfod's cache at `$DEBUGINFOD_CACHE_PATH`, else
    /// `$XDG_CACHE_HOME/debuginfod_client`, else `$HOME/.cache/debuginfod_client` (the
    /// client library's own order), when that directory exists.
    fn default() -> DebugSearch {
        let env = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let cache = env("DEBUGINFOD_CACHE_PATH")
            .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("debuginfod_client")))
            .or_else(|| env("HOME").map(|h| h.join(".cache/debuginfod_client")))
            .filter(|c| c.is_dir());
        DebugSearch {
            roots: vec![PathBuf::from("/usr/lib/debug")],
            debuginfod_cache: cache,
        }
    }
}

impl DebugSearch {
    /// No global directories and no cache: only a `.gnu_debuglink` file beside the binary
    /// (or in its `.debug/`) is used.
    pub fn beside_binary_only() -> DebugSearch {
        DebugSearch {
            roots: Vec::new(),
            debuginfod_cache: None,
        }
    }
}

/// A separate debug file that matched its binary: its path and bytes.
pub(crate) struct DebugFile {
    pub(crate) path: PathBuf,
    pub(crate) data: FileBytes,
}

/// Finds the separate debug file of `file` (an ELF image read from `binary`), in the order
/// of the module documentation. `binary` is the module's real path (for debuglink's
/// directories); without it only the build-id and debuginfod lookups run.
pub(crate) fn find(
    binary: Option<&Path>,
    file: &object::File<'_>,
    search: &DebugSearch,
) -> Option<DebugFile> {
    let build_id = file.build_id().ok().flatten().filter(|id| id.len() >= 2);
    if let Some(id) = build_id {
        let hex = to_hex(id);
        for root in &search.roots {
            let path = root
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            if let Some(found) = read_if(&path, |data| has_build_id(data, id)) {
                return Some(found);
            }
        }
    }
    if let Some((name, crc)) = file.gnu_debuglink().ok().flatten() {
        let name = Path::new(std::str::from_utf8(name).ok()?);
        let dir = binary
            .and_then(|b| std::fs::canonicalize(b).ok())
            .and_then(|b| b.parent().map(Path::to_path_buf));
        let mut candidates = Vec::new();
        if let Some(dir) = &dir {
            candidates.push(dir.join(name));
            candidates.push(dir.join(".debug").join(name));
            for root in &search.roots {
                let relative = dir.strip_prefix("/").unwrap_or(dir);
                candidates.push(root.join(relative).join(name));
            }
        }
        let canonical_binary = binary.and_then(|b| std::fs::canonicalize(b).ok());
        for path in candidates {
            if canonical_binary.is_some() && std::fs::canonicalize(&path).ok() == canonical_binary {
                continue; // a debuglink naming the binary itself
            }
            let matches = |data: &[u8]| match build_id {
                Some(id) if build_id_of(data).is_some() => has_build_id(data, id),
                _ => crc32(data) == crc,
            };
            if let Some(found) = read_if(&path, matches) {
                return Some(found);
            }
        }
    }
    if let (Some(id), Some(cache)) = (build_id, &search.debuginfod_cache) {
        let path = cache.join(to_hex(id)).join("debuginfo");
        if let Some(found) = read_if(&path, |data| has_build_id(data, id)) {
            return Some(found);
        }
    }
    None
}

/// The decompressed ELF image in `file`'s `.gnu_debugdata` section (MiniDebugInfo), if it
/// has one that decodes.
pub(crate) fn mini_debuginfo(file: &object::File<'_>) -> Option<Vec<u8>> {
    let section = file.section_by_name(".gnu_debugdata")?;
    let compressed = section.data().ok()?;
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::Cursor::new(compressed), &mut out).ok()?;
    Some(out)
}

/// Where a `.dSYM` bundle beside `binary` keeps its DWARF file:
/// `<binary>.dSYM/Contents/Resources/DWARF/<binary's file name>`.
pub(crate) fn dsym_dwarf_path(binary: &Path) -> Option<PathBuf> {
    let file_name = binary.file_name()?;
    let mut bundle = binary.as_os_str().to_owned();
    bundle.push(".dSYM");
    Some(
        PathBuf::from(bundle)
            .join("Contents/Resources/DWARF")
            .join(file_name),
    )
}

/// Reads the `.dSYM` DWARF file of `binary` when it exists and its `LC_UUID` is `uuid` (a
/// bundle left over from another build would misname everything).
pub(crate) fn find_dsym(binary: &Path, uuid: [u8; 16]) -> Option<DebugFile> {
    let path = dsym_dwarf_path(binary)?;
    read_if(&path, |data| {
        object::File::parse(data)
            .ok()
            .and_then(|f| f.mach_uuid().ok().flatten())
            == Some(uuid)
    })
}

/// Reads `path` and keeps it if `accept` approves of its bytes.
fn read_if(path: &Path, accept: impl FnOnce(&[u8]) -> bool) -> Option<DebugFile> {
    let data = FileBytes::open(path).ok()?;
    accept(&data).then(|| DebugFile {
        path: path.to_owned(),
        data,
    })
}

fn build_id_of(data: &[u8]) -> Option<Vec<u8>> {
    let file = object::File::parse(data).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

fn has_build_id(data: &[u8], id: &[u8]) -> bool {
    build_id_of(data).as_deref() == Some(id)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The CRC-32 `.gnu_debuglink` records (the zlib/IEEE polynomial).
fn crc32(data: &[u8]) -> u32 {
    crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_the_one_gnu_debuglink_uses() {
        // zlib's crc32("123456789").
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn dsym_layout() {
        assert_eq!(
            dsym_dwarf_path(Path::new("/a/b/hello")),
            Some(PathBuf::from(
                "/a/b/hello.dSYM/Contents/Resources/DWARF/hello"
            ))
        );
    }

    #[test]
    fn hex() {
        assert_eq!(to_hex(&[0x0a, 0xbc, 0xde]), "0abcde");
    }
}
