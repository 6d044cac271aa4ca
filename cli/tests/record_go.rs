//! A Go program under `btprof record`: Go programs that use cgo (any that
//! imports `net`, by default) are linked dynamically, so the sampler is
//! preloaded into them. Their runtime ends the process with `exit_group`
//! itself, past the C library's `exit`, so the profile is written at
//! `--duration`; their goroutines' stacks end at `runtime.goexit`, a
//! complete walk; and their runtime installs its own handler for every
//! signal, which costs nothing on the ring clock, where none is sent.

#![cfg(target_os = "linux")]

mod record_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use record_support::*;

/// Builds `programs/go_spin.go` into `scratch` with cgo; `None` (said on
/// stdout and stderr) where Go or a C compiler is missing.
fn go_spin(scratch: &Scratch) -> Option<std::path::PathBuf> {
    let go_works = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !go_works || !has("cc") {
        let why = "go or cc is not installed (apt-get install golang-go gcc): a Go program \
                   under btprof record was NOT checked";
        println!("NOT CHECKED: {why}");
        eprintln!("NOT CHECKED: {why}");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/go_spin.go");
    let exe = scratch.path("go_spin");
    let mut build = Command::new("go");
    // Go needs a build cache; without a home directory, a scratch one.
    if ["GOCACHE", "XDG_CACHE_HOME", "HOME"]
        .iter()
        .all(|v| std::env::var_os(v).is_none())
    {
        build.env("GOCACHE", scratch.path("go-cache"));
    }
    let out = build
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .env("CGO_ENABLED", "1")
        .env("GO111MODULE", "off")
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build failed: {}",
        text(&out.stderr)
    );
    Some(exe)
}

#[test]
fn a_dynamically_linked_go_program_is_profiled_to_its_deadline() {
    let scratch = Scratch::new("go-spin");
    let Some(exe) = go_spin(&scratch) else {
        return;
    };
    let exe = exe.to_str().unwrap();
    let (out, lines) = record_folded(
        &scratch,
        &["--duration", "1s", "--", exe],
        Duration::from_secs(120),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}{stderr}");
    assert!(stdout.contains("go_spin done true"), "{stdout}");
    let (a, b) = (
        samples_in(&lines, "main.spinA"),
        samples_in(&lines, "main.spinB"),
    );
    let all = total(&lines);
    // Each sample lands in a spin by its share of a round: none in spinB has
    // P (1-s)^n <= e^(-ns), under 1e-4 once its expected count n*s is 9.2.
    assert!(a > 0 && b > 0, "spinA {a}, spinB {b} of {all}");
    // Go stacks end at runtime.goexit: complete, not truncated.
    let spins = samples_where(&lines, |f| f.starts_with("main.spin"));
    let cut = lines
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f.starts_with("main.spin")))
        .filter(|(frames, _)| frames.iter().any(|f| f == "[btprof: truncated]"))
        .map(|(_, n)| n)
        .sum::<u64>();
    // Not random: Go keeps frame pointers, so a walk reaches goexit from any
    // sample; chance failures, Binomial(n, q): 1% of 1,000 has P under 1e-4
    // while q <= 0.27% (0.078% at 300). A walker lost in Go's stacks cuts all.
    assert!(
        cut * 100 <= spins,
        "{cut} of {spins} spin samples truncated"
    );
    if stdout.contains("perf events: kernel ring records per thread (")
        && stdout.contains(" 0 on timers of their own)")
    {
        // Go's runtime replaced the profiling signal's handler; on the
        // rings no signal was sent, so no sample was lost to it.
        assert!(!stderr.contains("installed its own handler"), "{stderr}");
    }
}
