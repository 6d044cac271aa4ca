//! What no preload can reach, refused before anything runs: a statically
//! linked program (no dynamic loader reads `LD_PRELOAD`), a setuid or
//! setgid one (the loader ignores `LD_PRELOAD` for them), a 32-bit one
//! (a 64-bit library cannot load into it), and on macOS a program that
//! System Integrity Protection covers (dyld strips
//! `DYLD_INSERT_LIBRARIES` for it), one whose architecture btprof's
//! library lacks (dyld would kill it) and one whose code signature makes
//! dyld ignore or refuse the library (`dyld_rules.rs` decides, from the
//! file). A `#!` script whose interpreter is refused is told to run the
//! interpreter directly, on macOS.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "macos")]
use super::dyld_rules;
#[cfg(target_os = "macos")]
use super::macho::Arch;

/// The program `command` runs (searched in `PATH` as the shell would),
/// checked for preloading `library` into it (and, `following`, into the
/// processes it starts); the error says why it cannot be profiled and
/// what to do. `Ok` holds lines to print before it runs (macOS: a
/// program under Rosetta 2, a library lacking an architecture).
pub fn check(command: &OsStr, library: &Path, following: bool) -> Result<Vec<String>, String> {
    let path = resolve(command)
        .ok_or_else(|| format!("{}: command not found", command.to_string_lossy()))?;
    let context = Context { library, following };
    check_file(&path, 0, &context)
}

/// What the checks of one program need besides its file.
struct Context<'a> {
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    library: &'a Path,
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    following: bool,
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

// Only the macOS checks read the context.
#[cfg_attr(not(target_os = "macos"), allow(clippy::only_used_in_recursion))]
fn check_file(path: &Path, depth: u32, context: &Context) -> Result<Vec<String>, String> {
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
    if let Some((interpreter, argument)) = shebang(head) {
        // A script: what runs is its interpreter (one level is enough for
        // `#!/usr/bin/env python3`, whose `env` then runs the real one,
        // itself checked by nothing but usually dynamic).
        if depth > 2 {
            return Ok(Vec::new());
        }
        let checked = check_file(&interpreter, depth + 1, context);
        #[cfg(target_os = "macos")]
        let checked = checked.map_err(|why| {
            script_refusal(
                path,
                &interpreter,
                argument.as_deref(),
                depth,
                context,
                &why,
            )
        });
        #[cfg(not(target_os = "macos"))]
        let _ = argument;
        return checked;
    }
    #[cfg(target_os = "linux")]
    check_elf(path, head)?;
    #[cfg(target_os = "macos")]
    return check_macho(path, context);
    #[cfg(not(target_os = "macos"))]
    Ok(Vec::new())
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

/// The interpreter of a `#!` script, and its first argument.
fn shebang(head: &[u8]) -> Option<(PathBuf, Option<String>)> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let interpreter = words.next()?;
    Some((PathBuf::from(interpreter), words.next().map(str::to_owned)))
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

/// Refuses a program that System Integrity Protection covers. A copy
/// would not help: Apple's programs are arm64e on Apple silicon (they
/// load only arm64e libraries, which stable Rust cannot build), and most
/// are signed with the hardened runtime.
#[cfg(target_os = "macos")]
fn check_sip(path: &Path) -> Result<(), String> {
    let real = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let protected = ["/System/", "/usr/", "/bin/", "/sbin/"]
        .iter()
        .any(|p| real.starts_with(p))
        && !real.starts_with("/usr/local/");
    if protected {
        return Err(format!(
            "{} is part of macOS, protected by System Integrity Protection: dyld ignores \
             DYLD_INSERT_LIBRARIES in it, so nothing can be preloaded into it, nor into a copy \
             (Apple's programs load only arm64e libraries on Apple silicon, and most are signed \
             with the hardened runtime). Profile a program you built, or one installed apart \
             from the system (by Homebrew, say)",
            real.display()
        ));
    }
    Ok(())
}

/// The Mach-O checks (`dyld_rules::check_program`) of the program at
/// `path`.
#[cfg(target_os = "macos")]
fn check_macho(path: &Path, context: &Context) -> Result<Vec<String>, String> {
    let shown = path.display().to_string();
    let file = fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    let library =
        fs::read(context.library).map_err(|e| format!("{}: {e}", context.library.display()))?;
    let library = dyld_rules::library_archs(&library);
    // The sampler's opt-in (btprof_sampler::ALLOW_ROSETTA_ENV), which the
    // command inherits.
    let allow_rosetta = std::env::var_os("BTPROF_ALLOW_ROSETTA").is_some_and(|v| v == "1");
    dyld_rules::check_program(
        &shown,
        &file,
        &library,
        host_arch(),
        context.following,
        allow_rosetta,
    )
}

/// This Mac's CPU: an x86_64 btprof may itself run under Rosetta 2.
#[cfg(target_os = "macos")]
fn host_arch() -> Arch {
    if cfg!(target_arch = "aarch64") {
        return Arch::Arm64;
    }
    let mut arm64: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>();
    // SAFETY: the name is NUL-terminated; the value is written into
    // `arm64`, whose size `len` gives.
    let rc = unsafe {
        libc::sysctlbyname(
            c"hw.optional.arm64".as_ptr(),
            (&raw mut arm64).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc == 0 && arm64 == 1 {
        Arch::Arm64
    } else {
        Arch::X86_64
    }
}

/// The refusal of the script at `path` whose interpreter was refused for
/// `why`, naming the program to run instead: for `#!/usr/bin/env NAME`,
/// the `NAME` in `PATH` when that one can be profiled.
#[cfg(target_os = "macos")]
fn script_refusal(
    path: &Path,
    interpreter: &Path,
    argument: Option<&str>,
    depth: u32,
    context: &Context,
    why: &str,
) -> String {
    let direct = argument
        .filter(|_| interpreter.ends_with("env"))
        .and_then(|name| resolve(OsStr::new(name)))
        .filter(|found| check_file(found, depth + 1, context).is_ok());
    dyld_rules::script_refusal(
        &path.display().to_string(),
        &interpreter.display().to_string(),
        argument,
        direct.as_ref().map(|p| p.display().to_string()).as_deref(),
        why,
    )
}
