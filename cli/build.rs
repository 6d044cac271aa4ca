//! Embeds the preloadable sampler (`libbtprof_preload.so`, `.dylib` on
//! macOS) into `btprof`, so that `cargo install --path cli` installs a
//! working `btprof record`: cargo installs binaries only, never a
//! library beside them.
//!
//! The library is built by a nested `cargo build -p btprof-preload` with
//! its own target directory (`<target>/<profile>/btprof-preload`): the
//! outer build holds the lock of its target directory for as long as it
//! runs, so a nested build there would wait for it forever. That build
//! compiles the sampler and its dependencies a second time, so it makes
//! no debug information (the library's own frames are never in a
//! profile), strips the standard library's, and is not incremental (a
//! fresh build of optimised crates gains nothing from it): a quarter
//! less time than a plain dev build, and a smaller executable.
//!
//! Nothing is embedded (and `btprof record` looks for the library beside
//! the executable or in `BTPROF_PRELOAD`) when cross-compiling (there may
//! be no linker for the nested build; `scripts/check-macos` only checks
//! that the macOS code type-checks and links), under clippy, outside the
//! workspace (no `preload/` source), or with `BTPROF_EMBED_PRELOAD=0`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BTPROF_EMBED_PRELOAD");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let embedded = out.join("preload.bin");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest
        .parent()
        .expect("cli/ is in the workspace")
        .to_path_buf();
    match build_preload(&workspace, &out) {
        Some(lib) => {
            let bytes = fs::read(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
            println!("cargo:rustc-env=BTPROF_PRELOAD_HASH={:016x}", fnv1a(&bytes));
            fs::write(&embedded, bytes).expect("write into OUT_DIR");
        }
        None => {
            println!("cargo:rustc-env=BTPROF_PRELOAD_HASH=");
            fs::write(&embedded, b"").expect("write into OUT_DIR");
        }
    }
}

/// Builds the library and returns its path, or `None` where nothing is
/// embedded (see the module documentation).
fn build_preload(workspace: &Path, out: &Path) -> Option<PathBuf> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let (target, host) = (var("TARGET"), var("HOST"));
    let clippy = var("RUSTC_WORKSPACE_WRAPPER").contains("clippy");
    let preload = workspace.join("preload");
    if target != host
        || clippy
        || var("BTPROF_EMBED_PRELOAD") == "0"
        || !preload.join("Cargo.toml").exists()
    {
        return None;
    }
    let file = if target.contains("apple") {
        "libbtprof_preload.dylib"
    } else if target.contains("linux") {
        "libbtprof_preload.so"
    } else {
        return None;
    };
    for dir in ["preload", "src", "sampler", "symbols"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    for file in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(file).display());
    }
    // OUT_DIR is <target>/<profile>/build/btprof-cli-<hash>/out.
    let profile_dir = out.ancestors().nth(3)?;
    let target_dir = profile_dir.join("btprof-preload");
    let release = var("PROFILE") == "release";
    let profile = if release { "RELEASE" } else { "DEV" };
    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .args(["build", "--lib", "-p", "btprof-preload", "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env(format!("CARGO_PROFILE_{profile}_DEBUG"), "false")
        .env(format!("CARGO_PROFILE_{profile}_STRIP"), "debuginfo")
        .env("CARGO_INCREMENTAL", "0")
        // A plain build, whatever wraps the outer one.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR");
    if release {
        cargo.arg("--release");
    }
    let output = cargo.output().expect("run cargo for the preload library");
    if !output.status.success() {
        panic!(
            "building the preload library failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let lib = target_dir
        .join(if release { "release" } else { "debug" })
        .join(file);
    Some(lib)
}

/// FNV-1a, 64 bits: names the extracted copy by its content.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
