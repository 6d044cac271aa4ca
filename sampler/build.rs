//! Builds the test fixture `tests/c/noframes.c` into a shared library
//! without frame pointers, for the CFI walking tests, and tells them where
//! it is (`BTPROF_NOFRAMES_LIB`). Linux only. The library itself does not
//! use it: if no C compiler is found the build goes on with a warning, and
//! the tests that need the fixture fail saying so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=tests/c/noframes.c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lib = out.join("libbtprof_noframes.so");
    match build(&lib) {
        Ok(()) => println!("cargo:rustc-env=BTPROF_NOFRAMES_LIB={}", lib.display()),
        Err(e) => println!("cargo:warning=the CFI test library was not built: {e}"),
    }
}

fn build(lib: &std::path::Path) -> Result<(), String> {
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .try_get_compiler()
        .map_err(|e| e.to_string())?;
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-fomit-frame-pointer",
        // .eh_frame for every function, as distributions build.
        "-fasynchronous-unwind-tables",
        "-o",
    ])
    .arg(lib)
    .arg("tests/c/noframes.c");
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} exited with {status}"))
    }
}
