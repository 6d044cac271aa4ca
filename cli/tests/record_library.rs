//! Where `btprof record` finds the library it preloads: the file
//! `BTPROF_PRELOAD` names, else the copy embedded in the executable,
//! extracted to a cache directory (else one beside the executable, for a
//! build without the embedded copy). Each case is read from the command's
//! own `/proc/PID/maps`: the library the loader really mapped.
//!
//! `cargo install --path cli` installs the executable alone; a copy of
//! the test's `btprof` alone in an empty directory, with an empty cache
//! and no `BTPROF_PRELOAD`, is that case.

#![cfg(target_os = "linux")]

mod record_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use record_support::*;

/// The command the tests profile: a shell that prints its own maps.
const PRINT_MAPS: &str = "cat /proc/$$/maps";

/// Runs `btprof record -- sh -c PRINT_MAPS` with executable `btprof`,
/// the cache in `cache`, and `BTPROF_PRELOAD` set to `preload` if given
/// (else removed).
fn record_maps(scratch: &Scratch, btprof: &Path, cache: &Path, preload: Option<&Path>) -> Output {
    let mut cmd = Command::new(btprof);
    cmd.current_dir(&scratch.0)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("BTPROF_PRELOAD")
        .args(["record", "--", "sh", "-c", PRINT_MAPS])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(preload) = preload {
        cmd.env("BTPROF_PRELOAD", preload);
    }
    wait_limited(spawn_copied(&mut cmd), Duration::from_secs(60))
}

/// Spawns `cmd`, whose program may be a copy this test binary just wrote.
/// Another test's child forked while the copy was open for writing holds
/// it open until that child execs, and exec then fails with "Text file
/// busy" (`ETXTBSY`) for that moment: retried, up to a second.
fn spawn_copied(cmd: &mut Command) -> std::process::Child {
    for _ in 0..100 {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(10));
            }
            spawned => return spawned.unwrap(),
        }
    }
    cmd.spawn().unwrap()
}

/// The preload libraries the profiled shell had mapped (file paths of
/// its maps whose name contains `preload`), each once.
fn mapped_preloads(out: &Output) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("preload"))
        .map(PathBuf::from)
        .collect();
    paths.dedup();
    paths
}

/// The run worked and profiled the shell (and `cat`).
fn profiled(out: &Output) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("profiled 2 processes ("),
        "{stdout}{stderr}"
    );
    assert!(stdout.contains("sh ("), "{stdout}{stderr}");
    assert!(!stderr.contains("btprof: sh ("), "{stderr}");
}

/// A copy of the test's `btprof` alone in `dir`, as `cargo install`
/// leaves it.
fn lone_copy(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let copy = dir.join("btprof");
    std::fs::copy(BIN, &copy).unwrap();
    copy
}

#[test]
fn an_installed_btprof_alone_records_with_its_embedded_library() {
    let scratch = Scratch::new("lib-embedded");
    let btprof = lone_copy(&scratch.path("bin"));
    let cache = scratch.path("cache");
    let out = record_maps(&scratch, &btprof, &cache, None);
    profiled(&out);
    let mapped = mapped_preloads(&out);
    println!("mapped: {mapped:?}");
    assert_eq!(mapped.len(), 1, "{mapped:?}");
    let extracted = &mapped[0];
    // $XDG_CACHE_HOME/btprof/HASH/libbtprof_preload.so, private.
    assert_eq!(extracted.file_name().unwrap(), "libbtprof_preload.so");
    let hash_dir = extracted.parent().unwrap();
    assert_eq!(hash_dir.parent().unwrap(), cache.join("btprof"));
    let hash = hash_dir.file_name().unwrap().to_str().unwrap();
    assert!(
        hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hash}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(hash_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");

    // A cached copy that is not the embedded library (damaged, or from
    // another build that hashed alike) is replaced before use.
    let good = std::fs::read(extracted).unwrap();
    std::fs::write(extracted, b"not a library").unwrap();
    let out = record_maps(&scratch, &btprof, &cache, None);
    profiled(&out);
    assert_eq!(mapped_preloads(&out), mapped);
    assert_eq!(std::fs::read(extracted).unwrap(), good);
}

#[test]
fn btprof_preload_names_the_library_and_a_missing_one_stops_the_run() {
    let scratch = Scratch::new("lib-env");
    // A copy of the library, from the embedded one.
    let out = record_maps(&scratch, Path::new(BIN), &scratch.path("cache"), None);
    profiled(&out);
    let custom = scratch.path("elsewhere/custom-preload.so");
    std::fs::create_dir_all(custom.parent().unwrap()).unwrap();
    std::fs::copy(&mapped_preloads(&out)[0], &custom).unwrap();

    let unused_cache = scratch.path("unused-cache");
    let out = record_maps(&scratch, Path::new(BIN), &unused_cache, Some(&custom));
    profiled(&out);
    assert_eq!(mapped_preloads(&out), std::slice::from_ref(&custom));
    assert!(
        !unused_cache.exists(),
        "the embedded copy was extracted too"
    );

    // A path that names nothing: said, with the path, before anything
    // runs.
    let missing = scratch.path("no/such/libbtprof_preload.so");
    let marker = scratch.path("ran");
    let out = Command::new(BIN)
        .current_dir(&scratch.0)
        .env("BTPROF_PRELOAD", &missing)
        .args(["record", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    println!("{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "BTPROF_PRELOAD={}: no such file",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// The embedded copy is the library this very executable was built
/// with, so it comes before one that merely lies beside the executable
/// (in `target/debug` a library from an older build of the workspace
/// can): the one beside it is for builds without an embedded copy
/// (`BTPROF_EMBED_PRELOAD=0`, cross-compiled), whose `btprof` this test
/// cannot build cheaply.
#[test]
fn the_embedded_library_comes_before_one_beside_the_executable() {
    let scratch = Scratch::new("lib-beside");
    let out = record_maps(&scratch, Path::new(BIN), &scratch.path("cache"), None);
    profiled(&out);
    let btprof = lone_copy(&scratch.path("bin"));
    let beside = scratch.path("bin/libbtprof_preload.so");
    std::fs::copy(&mapped_preloads(&out)[0], &beside).unwrap();
    let cache = scratch.path("cache2");
    let out = record_maps(&scratch, &btprof, &cache, None);
    profiled(&out);
    let mapped = mapped_preloads(&out);
    assert_eq!(mapped.len(), 1, "{mapped:?}");
    assert!(mapped[0].starts_with(&cache), "{mapped:?}");
}
