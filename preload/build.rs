//! Turns on the `execl`, `execlp` and `execle` entry points where the
//! compiler can build them.
//!
//! They are variadic, which stable Rust cannot define; they are written
//! as naked functions instead (a few instructions that lay the argument
//! registers out beside the arguments the caller put on the stack), and
//! naked functions are stable from Rust 1.88. btprof builds with 1.85, so
//! older compilers build the library without them (`docs/record.md` says
//! what that loses).

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(btprof_naked_exec)");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // `rustc 1.95.0 (59807616e 2026-04-14)`
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    if minor >= 88 {
        println!("cargo:rustc-cfg=btprof_naked_exec");
    }
}
