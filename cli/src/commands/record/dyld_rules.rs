//! Whether dyld will load btprof's library into a program, decided from
//! the program's Mach-O file before it runs (`macho.rs` reads it): which
//! of its slices the kernel runs, whether the library has that
//! architecture (dyld kills a process whose inserted library it cannot
//! load), and whether its code signature makes dyld ignore
//! `DYLD_INSERT_LIBRARIES` (the hardened runtime) or refuse a library of
//! another team (library validation). Pure rules over bytes, so they are
//! tested on every system; `preflight.rs` runs them on macOS.

use super::macho::{self, Arch, Signature, CS_REQUIRE_LV, CS_RESTRICT, CS_RUNTIME};

/// The entitlement without which dyld ignores `DYLD_*` variables in a
/// hardened-runtime program.
pub const ALLOW_DYLD_ENV: &str = "com.apple.security.cs.allow-dyld-environment-variables";
/// The entitlement that turns library validation off.
pub const NO_LIBRARY_VALIDATION: &str = "com.apple.security.cs.disable-library-validation";

/// The slice of a program with `archs` the kernel runs on a Mac whose
/// CPU is `host` (arm64 or x86_64): on Apple silicon the arm64e slice of
/// Apple's own binaries (`platform`), else arm64, else arm64e, else
/// x86_64 under Rosetta 2; on an Intel Mac only x86_64.
pub fn running(archs: &[Arch], host: Arch, platform: bool) -> Option<Arch> {
    let has = |a| archs.contains(&a);
    let order: &[Arch] = match (host, platform) {
        (Arch::X86_64, _) => &[Arch::X86_64],
        (_, true) => &[Arch::Arm64e, Arch::Arm64, Arch::X86_64],
        (_, false) => &[Arch::Arm64, Arch::Arm64e, Arch::X86_64],
    };
    order.iter().copied().find(|&a| has(a))
}

/// The architectures of btprof's library (a universal file or a thin
/// one); none when it is not Mach-O.
pub fn library_archs(file: &[u8]) -> Vec<Arch> {
    match macho::slices(file) {
        Ok(Some(slices)) => slices.iter().map(|s| s.arch).collect(),
        _ => Vec::new(),
    }
}

fn names(archs: &[Arch]) -> String {
    let names: Vec<String> = archs.iter().map(|a| a.name()).collect();
    names.join(", ")
}

/// What `btprof record` needs to know about the program `shown` (its
/// path, for messages) whose file is `file`, on a Mac whose CPU is
/// `host`, with a library of `library` architectures: `Err` with why and
/// what to do when dyld would not load the library into it (or would
/// kill it for trying); else lines to print first (possibly none).
/// `following`: the processes it starts are preloaded too;
/// `allow_rosetta`: `BTPROF_ALLOW_ROSETTA=1`.
pub fn check_program(
    shown: &str,
    file: &[u8],
    library: &[Arch],
    host: Arch,
    following: bool,
    allow_rosetta: bool,
) -> Result<Vec<String>, String> {
    // Not Mach-O, or damaged: the system runs it or says why.
    let Ok(Some(slices)) = macho::slices(file) else {
        return Ok(Vec::new());
    };
    let archs: Vec<Arch> = slices.iter().map(|s| s.arch).collect();
    let signature_of = |arch: Arch| {
        slices
            .iter()
            .find(|s| s.arch == arch)
            .and_then(|s| macho::signature(s.data).ok().flatten())
    };
    let platform = signature_of(Arch::Arm64e).is_some_and(|s| s.platform != 0);
    let Some(runs) = running(&archs, host, platform) else {
        return Err(format!(
            "{shown} is built for {}, none of which this Mac runs",
            names(&archs)
        ));
    };
    if !library.contains(&runs) {
        return Err(arch_refusal(shown, runs, platform, library));
    }
    if let Some(signature) = signature_of(runs) {
        check_signature(shown, &signature)?;
    }
    let mut notes = Vec::new();
    if runs == Arch::X86_64 && host != Arch::X86_64 && !allow_rosetta {
        notes.push(format!(
            "{shown} is an x86_64 program and runs under Rosetta 2, where btprof does not sample \
             (suspending a translated thread can hang it; BTPROF_ALLOW_ROSETTA=1 samples anyway): \
             its own process is not profiled, the arm64 processes it starts are"
        ));
    }
    let other = match host {
        Arch::X86_64 => None,
        _ => Some(Arch::X86_64),
    };
    if let Some(other) = other.filter(|a| following && !library.contains(a)) {
        notes.push(format!(
            "btprof's library has no {} slice ({}), so dyld would kill any {} process {shown} \
             starts; --no-follow avoids that (docs/macos.md says how to build the universal \
             library)",
            other.name(),
            names(library),
            other.name()
        ));
    }
    Ok(notes)
}

/// Why the library cannot be loaded into a process running `runs`.
fn arch_refusal(shown: &str, runs: Arch, platform: bool, library: &[Arch]) -> String {
    let has = names(library);
    match runs {
        Arch::Arm64e if platform => format!(
            "{shown} is one of Apple's own programs (an arm64e platform binary), which load only \
             arm64e libraries; btprof's library is {has} (stable Rust cannot build arm64e), so \
             dyld would refuse it and kill the program. btprof record cannot profile Apple's \
             programs: profile a program you built, or one installed apart from the system"
        ),
        Arch::Arm64e => format!(
            "{shown} runs as arm64e, which loads only arm64e libraries; btprof's library is \
             {has} (stable Rust cannot build arm64e), so dyld would refuse it and kill the \
             program. Build it for arm64 to profile it"
        ),
        Arch::X86_64 => format!(
            "{shown} is an x86_64 program and btprof's library has no x86_64 slice ({has}), so \
             dyld would kill it at launch. Build btprof with both Apple targets (rustup target \
             add x86_64-apple-darwin, then rebuild: its library is then universal), or profile \
             an arm64 build of the program"
        ),
        _ => format!(
            "{shown} runs as {}, and btprof's library is {has}, so dyld would kill it at \
             launch. Run the btprof built for this Mac's own architecture",
            runs.name()
        ),
    }
}

/// Refuses a program whose signature makes dyld ignore
/// `DYLD_INSERT_LIBRARIES` (hardened runtime without the entitlement, or
/// a restricted one) or refuse btprof's library (library validation:
/// btprof's library is signed ad hoc, by no team).
pub fn check_signature(shown: &str, signature: &Signature) -> Result<(), String> {
    let check = format!("check with: codesign -dv --entitlements - {shown}");
    let hardened = signature.flags & CS_RUNTIME != 0;
    if signature.flags & CS_RESTRICT != 0 || (hardened && !signature.entitled(ALLOW_DYLD_ENV)) {
        let why = if hardened {
            format!(
                "is signed with the hardened runtime and without the {ALLOW_DYLD_ENV} entitlement"
            )
        } else {
            "is signed as restricted".to_owned()
        };
        return Err(format!(
            "{shown} {why}, so dyld ignores DYLD_INSERT_LIBRARIES in it and btprof record \
             cannot profile it ({check}). A build of your own can be profiled signed without the \
             hardened runtime (codesign -f -s - on a copy signs it ad hoc) or with that \
             entitlement"
        ));
    }
    let validates = hardened || signature.flags & CS_REQUIRE_LV != 0;
    if validates && !signature.entitled(NO_LIBRARY_VALIDATION) {
        return Err(format!(
            "{shown} requires its libraries to be signed by its own team (library validation, \
             on under the hardened runtime without the {NO_LIBRARY_VALIDATION} entitlement), \
             and btprof's library is signed ad hoc, so dyld would refuse it and kill the \
             program ({check}). A build of your own can be profiled signed ad hoc \
             (codesign -f -s - on a copy) or with that entitlement"
        ));
    }
    Ok(())
}

/// What to say for a `#!` script whose interpreter cannot be profiled:
/// the script itself is not the problem, so run its interpreter directly
/// (`btprof record -- python3 script.py`). `interpreter` is the `#!`
/// line's program and `argument` its first argument (`env`'s program),
/// `direct` the program to run instead where one that can be profiled is
/// known (the one `env` would find in `PATH`), `why` what is wrong with
/// the interpreter.
pub fn script_refusal(
    script: &str,
    interpreter: &str,
    argument: Option<&str>,
    direct: Option<&str>,
    why: &str,
) -> String {
    let line = match argument {
        Some(a) => format!("{interpreter} {a}"),
        None => interpreter.to_owned(),
    };
    let head = format!(
        "{script} is a script run by `{line}` (its #! line), and its interpreter cannot be \
         profiled: {why}"
    );
    if let Some(direct) = direct {
        return format!("{head}. Run the interpreter directly: btprof record -- {direct} {script}");
    }
    let program = argument
        .filter(|_| interpreter.ends_with("/env"))
        .unwrap_or_else(|| interpreter.rsplit('/').next().unwrap_or(interpreter));
    format!(
        "{head}. Run the script with an interpreter of your own instead (one installed apart \
         from the system, by Homebrew say): btprof record -- /path/to/{program} {script}"
    )
}

#[cfg(test)]
mod tests {
    use super::super::macho::fixtures::*;
    use super::*;

    const BOTH: &[Arch] = &[Arch::Arm64, Arch::X86_64];
    const ARM: &[Arch] = &[Arch::Arm64];

    fn check(file: &[u8], library: &[Arch], host: Arch) -> Result<Vec<String>, String> {
        check_program("/p", file, library, host, true, false)
    }

    #[test]
    fn the_kernel_runs_the_native_slice_and_arm64e_for_apples_binaries() {
        let all = [Arch::X86_64, Arch::Arm64, Arch::Arm64e];
        assert_eq!(running(&all, Arch::Arm64, false), Some(Arch::Arm64));
        assert_eq!(running(&all, Arch::Arm64, true), Some(Arch::Arm64e));
        assert_eq!(running(&all, Arch::X86_64, true), Some(Arch::X86_64));
        assert_eq!(
            running(&[Arch::X86_64], Arch::Arm64, false),
            Some(Arch::X86_64)
        );
        assert_eq!(running(&[Arch::Arm64], Arch::X86_64, false), None);
    }

    #[test]
    fn the_universal_library_has_both_architectures() {
        let universal = fat(&[thin(Arch::Arm64, None), thin(Arch::X86_64, None)]);
        assert_eq!(library_archs(&universal), BOTH);
        assert_eq!(library_archs(&thin(Arch::Arm64, None)), ARM);
        assert_eq!(library_archs(b"\x7fELF"), []);
    }

    #[test]
    fn a_program_the_library_has_no_slice_for_is_refused_before_it_runs() {
        let intel = thin(Arch::X86_64, None);
        // The universal library loads into it (a note about Rosetta).
        let notes = check(&intel, BOTH, Arch::Arm64).unwrap();
        assert!(
            notes.len() == 1 && notes[0].contains("Rosetta 2"),
            "{notes:?}"
        );
        // An arm64-only library would have it killed: refused, saying how
        // to build the universal one.
        let err = check(&intel, ARM, Arch::Arm64).unwrap_err();
        assert!(
            err.contains("no x86_64 slice") && err.contains("rustup target add"),
            "{err}"
        );
        // On an Intel Mac x86_64 is native: no Rosetta note.
        assert_eq!(
            check(&intel, BOTH, Arch::X86_64).unwrap(),
            Vec::<String>::new()
        );
        // A universal program runs its arm64 slice, which the library has.
        let both = fat(&[thin(Arch::X86_64, None), thin(Arch::Arm64, None)]);
        assert_eq!(
            check(&both, BOTH, Arch::Arm64).unwrap(),
            Vec::<String>::new()
        );
        // Not Mach-O: left to the system.
        assert_eq!(
            check(b"#!/bin/sh\n", ARM, Arch::Arm64).unwrap(),
            Vec::<String>::new()
        );
        // An arm64 program and an x86_64-only library (btprof's x86_64
        // build on Apple silicon).
        let err = check(&thin(Arch::Arm64, None), &[Arch::X86_64], Arch::Arm64).unwrap_err();
        assert!(err.contains("runs as arm64"), "{err}");
    }

    #[test]
    fn apples_arm64e_binaries_are_refused_without_the_copy_advice() {
        let apple = fat(&[
            thin(Arch::X86_64, Some((0, 14, None))),
            thin(Arch::Arm64e, Some((0, 14, None))),
        ]);
        let err = check(&apple, BOTH, Arch::Arm64).unwrap_err();
        assert!(err.contains("Apple's own programs"), "{err}");
        assert!(!err.contains("cp ") && !err.contains("copy"), "{err}");
        // On an Intel Mac its x86_64 slice runs.
        assert!(check(&apple, BOTH, Arch::X86_64).is_ok());
    }

    #[test]
    fn following_with_a_library_of_one_architecture_warns_of_the_other() {
        let arm = thin(Arch::Arm64, None);
        let notes = check(&arm, ARM, Arch::Arm64).unwrap();
        assert!(
            notes.len() == 1 && notes[0].contains("--no-follow"),
            "{notes:?}"
        );
        let quiet = check_program("/p", &arm, ARM, Arch::Arm64, false, false).unwrap();
        assert_eq!(quiet, Vec::<String>::new());
    }

    #[test]
    fn the_hardened_runtime_without_the_entitlement_is_refused_with_codesign() {
        let hardened = |xml: Option<&str>| thin(Arch::Arm64, Some((CS_RUNTIME, 0, xml)));
        let err = check(&hardened(None), BOTH, Arch::Arm64).unwrap_err();
        assert!(err.contains("ignores DYLD_INSERT_LIBRARIES"), "{err}");
        assert!(
            err.contains(&format!("without the {ALLOW_DYLD_ENV}")),
            "{err}"
        );
        assert!(err.contains("codesign -dv --entitlements - /p"), "{err}");
        // The entitlement alone: dyld reads the variable, but library
        // validation refuses btprof's library.
        let env_only = plist(&[ALLOW_DYLD_ENV]);
        let err = check(&hardened(Some(&env_only)), BOTH, Arch::Arm64).unwrap_err();
        assert!(err.contains("library validation"), "{err}");
        // Both entitlements: profiled.
        let both = plist(&[ALLOW_DYLD_ENV, NO_LIBRARY_VALIDATION]);
        assert!(check(&hardened(Some(&both)), BOTH, Arch::Arm64).is_ok());
        // Signed ad hoc without the runtime (what cc and cargo make).
        let adhoc = thin(Arch::Arm64, Some((0x2 | 0x2_0000, 0, None)));
        assert!(check(&adhoc, BOTH, Arch::Arm64).is_ok());
        // Library validation without the runtime, and a restricted one.
        let lv = thin(Arch::Arm64, Some((CS_REQUIRE_LV, 0, None)));
        assert!(check(&lv, BOTH, Arch::Arm64)
            .unwrap_err()
            .contains("library validation"));
        let restricted = thin(Arch::Arm64, Some((CS_RESTRICT, 0, None)));
        assert!(check(&restricted, BOTH, Arch::Arm64)
            .unwrap_err()
            .contains("restricted"));
    }

    #[test]
    fn a_script_is_told_to_run_its_interpreter_directly() {
        let why = "it is protected by System Integrity Protection";
        let env = script_refusal(
            "./s.py",
            "/usr/bin/env",
            Some("python3"),
            Some("/opt/homebrew/bin/python3"),
            why,
        );
        assert!(env.contains("`/usr/bin/env python3`"), "{env}");
        assert!(env.ends_with("directly: btprof record -- /opt/homebrew/bin/python3 ./s.py"));
        // None that can be profiled: one of the user's own, by name.
        let unknown = script_refusal("./s.py", "/usr/bin/env", Some("python3"), None, why);
        assert!(
            unknown.ends_with("btprof record -- /path/to/python3 ./s.py"),
            "{unknown}"
        );
        let sh = script_refusal("./s.sh", "/bin/sh", None, None, why);
        assert!(sh.ends_with("btprof record -- /path/to/sh ./s.sh"), "{sh}");
        assert!(!sh.contains("cp "), "{sh}");
    }
}
