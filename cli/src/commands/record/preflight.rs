//! What no preload can reach, refused before anything runs: a statically
//! linked program (no dynamic loader reads `LD_PRELOAD`), a setuid or
//! setgid one (the loader ignores `LD_PRELOAD` for them), a 32-bit one
//! (a 64-bit library cannot load into it), and on macOS a program that
//! System Integrity Protection covers (dyld strips
//! `DYLD_INSERT_LIBRARIES` for it).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The program `command` runs (searched in `PATH` as the shell would),
/// checked; the error says why it cannot be profiled and what to do.
pub fn check(command: &OsStr) -> Result<PathBuf, String> {
    let path = resolve(command)
        .ok_or_else(|| format!("{}: command not found", command.to_string_lossy()))?;
    check_file(&path, 0)?;
    Ok(path)
}

/// The file `command` names: itself when it has a `/`, else the first
/// executable of that name in `PATH`.
fn resolve(command: &OsStr) -> Option<PathBuf> {
    let path = Path::new(command);
    if command.to_string_lossy().contains('/') {
        return path.is_file().then(|| path.to_path_buf());
    }
    let dirs = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(path))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn check_file(path: &Path, depth: u32) -> Result<(), String> {
    let shown = path.display();
    let meta = fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.permissions().mode() & 0o6000 != 0 {
        return Err(format!(
            "{shown} is setuid or setgid: the dynamic loader ignores LD_PRELOAD for it, so it \
             cannot be profiled this way. Profile a copy without the bit (cp {shown} /tmp/ \
             and run that) if it works without its privileges"
        ));
    }
    #[cfg(target_os = "macos")]
    check_sip(path)?;
    let mut head = [0u8; 256];
    let mut file = fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let n = read_up_to(&mut file, &mut head).map_err(|e| format!("{shown}: {e}"))?;
    let head = &head[..n];
    if let Some(interpreter) = shebang(head) {
        // A script: what runs is its interpreter (one level is enough for
        // `#!/usr/bin/env python3`, whose `env` then runs the real one,
        // itself checked by nothing but usually dynamic).
        if depth > 2 {
            return Ok(());
        }
        return check_file(&interpreter, depth + 1);
    }
    #[cfg(target_os = "linux")]
    check_elf(path, head)?;
    Ok(())
}

fn read_up_to(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The interpreter of a `#!` script.
fn shebang(head: &[u8]) -> Option<PathBuf> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let interpreter = line.split_whitespace().next()?;
    Some(PathBuf::from(interpreter))
}

/// Refuses a 32-bit or statically linked ELF executable. Anything else
/// (not ELF at all) is left to the system to run or refuse.
#[cfg(target_os = "linux")]
fn check_elf(path: &Path, head: &[u8]) -> Result<(), String> {
    const PT_INTERP: u32 = 3;
    if !head.starts_with(b"\x7fELF") || head.len() < 64 {
        return Ok(());
    }
    let shown = path.display();
    if head[4] != 2 {
        return Err(format!(
            "{shown} is a 32-bit program: btprof's preload library is 64-bit and cannot be \
             loaded into it"
        ));
    }
    if head[5] != 1 {
        return Ok(()); // big-endian: not for this machine anyway
    }
    let u16_at = |at: usize| u16::from_le_bytes([head[at], head[at + 1]]);
    let mut phoff_bytes = [0u8; 8];
    phoff_bytes.copy_from_slice(&head[0x20..0x28]);
    let phoff = u64::from_le_bytes(phoff_bytes);
    let (phentsize, phnum) = (u64::from(u16_at(0x36)), u64::from(u16_at(0x38)));
    let data = fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    let has_interp = (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        usize::try_from(at)
            .ok()
            .and_then(|at| data.get(at..at + 4))
            .is_some_and(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) == PT_INTERP)
    });
    if has_interp {
        return Ok(());
    }
    Err(format!(
        "{shown} is statically linked: no dynamic loader runs in it to load btprof's sampler, \
         so `btprof record` cannot profile it. Link it dynamically (the default for C, C++ and \
         Rust on glibc), or embed btprof (the btprof crate's Profiler) in it"
    ))
}

/// Refuses a program that System Integrity Protection covers.
#[cfg(target_os = "macos")]
fn check_sip(path: &Path) -> Result<(), String> {
    let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let protected = ["/System/", "/usr/", "/bin/", "/sbin/"]
        .iter()
        .any(|p| real.starts_with(p))
        && !real.starts_with("/usr/local/");
    if protected {
        return Err(format!(
            "{} is protected by System Integrity Protection: macOS strips \
             DYLD_INSERT_LIBRARIES from its environment, so nothing can be preloaded into it. \
             Copy it elsewhere (cp {} /tmp/ and run that; a copy is not protected, though a \
             copy signed with the hardened runtime is not profiled either) or build the \
             program yourself",
            real.display(),
            real.display()
        ));
    }
    Ok(())
}
