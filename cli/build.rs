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
//! On macOS the library is universal: built for arm64 and x86_64 and
//! joined into one file (`build/universal.rs`), because dyld kills a
//! process whose inserted library has no slice for its architecture, and
//! a command on Apple silicon may start x86_64 programs (Intel Homebrew
//! under `/usr/local`, older tools). Where the other architecture's
//! standard library is not installed, the build says so in a warning and
//! embeds the host's alone; `btprof record` then refuses an x86_64
//! command and warns that x86_64 children would be killed. (arm64e, which
//! Apple's own programs run as, needs a nightly compiler's `build-std`:
//! not built.)
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

#[path = "build/universal.rs"]
mod universal;

/// The Apple targets the universal library is built for.
const APPLE_TARGETS: [&str; 2] = ["aarch64-apple-darwin", "x86_64-apple-darwin"];

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
    let built = |triple: Option<&str>| {
        let mut dir = target_dir.clone();
        if let Some(triple) = triple {
            dir.push(triple);
        }
        dir.join(if release { "release" } else { "debug" })
            .join(file)
    };
    if !target.contains("apple") {
        nested_build(workspace, &target_dir, release, &[]).unwrap_or_else(|e| panic!("{e}"));
        return Some(built(None));
    }
    if let Err(e) = nested_build(workspace, &target_dir, release, &APPLE_TARGETS) {
        let first = e
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("")
            .to_owned();
        println!(
            "cargo:warning=the preload library was not built for both arm64 and x86_64 ({first}); \
             embedding the {target} one alone, so `btprof record` cannot profile programs of \
             the other architecture (rustup target add {} and rebuild)",
            APPLE_TARGETS.join(" ")
        );
        nested_build(workspace, &target_dir, release, &[&target]).unwrap_or_else(|e| panic!("{e}"));
        return Some(built(Some(&target)));
    }
    let slices: Vec<Vec<u8>> = APPLE_TARGETS
        .iter()
        .map(|t| {
            let path = built(Some(t));
            fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect();
    let joined = universal::universal(&slices).unwrap_or_else(|e| panic!("{e}"));
    let lib = out.join(file);
    fs::write(&lib, joined).expect("write into OUT_DIR");
    Some(lib)
}

/// Builds the library in `target_dir`, for `targets` (the host when
/// empty); the error is cargo's output.
fn nested_build(
    workspace: &Path,
    target_dir: &Path,
    release: bool,
    targets: &[&str],
) -> Result<(), String> {
    let profile = if release { "RELEASE" } else { "DEV" };
    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .args(["build", "--lib", "-p", "btprof-preload", "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env(format!("CARGO_PROFILE_{profile}_DEBUG"), "false")
        .env(format!("CARGO_PROFILE_{profile}_STRIP"), "debuginfo")
        .env("CARGO_INCREMENTAL", "0")
        // A plain build, whatever wraps the outer one.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR");
    for target in targets {
        cargo.args(["--target", target]);
    }
    if release {
        cargo.arg("--release");
    }
    let output = cargo.output().expect("run cargo for the preload library");
    if !output.status.success() {
        return Err(format!(
            "building the preload library failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// FNV-1a, 64 bits: names the extracted copy by its content.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
