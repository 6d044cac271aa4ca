//! Runs a child process with `perf_event_open` refused, as it is refused
//! in a container under the default seccomp profile (Docker's and
//! containerd's allow it only with `CAP_PERFMON` or `CAP_SYS_ADMIN`), or
//! for a normal user under a kernel with `perf_event_paranoid` at 3.
//!
//! A real seccomp filter, not a flag: the child, between `fork` and
//! `exec`, sets `PR_SET_NO_NEW_PRIVS` (which lets an unprivileged process
//! install a filter) and installs a classic BPF program with
//! `seccomp(SECCOMP_SET_MODE_FILTER)`. The program answers
//! `perf_event_open` with the chosen errno and allows every other system
//! call. The filter is inherited by every thread and child the process
//! creates and survives `exec`, so whatever runs in the child (the
//! sampler's clock detection included) meets the refusal for real.
//!

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `AUDIT_ARCH_*` of the architecture this is built for: the value the
/// kernel puts in `seccomp_data.arch` for a native system call
/// (`EM_X86_64` or `EM_AARCH64`, with the 64-bit and little-endian bits).
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: u32 = 0xc000_00b7;

/// On x86_64, system calls of the x32 ABI arrive with the native
/// `arch` value and this bit set in their number: the same call under
/// another number, which a filter matching numbers must refuse too.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets of `nr` and `arch` in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

/// Makes `cmd`'s child run with `perf_event_open` failing with `errno`
/// (`EACCES` as a paranoid kernel answers, `EPERM` as Docker's default
/// profile does for a system call it does not allow). The child fails to
/// start (the spawn returns the error) if the filter cannot be installed.
pub fn refuse_perf_event_open(cmd: &mut Command, errno: i32) -> &mut Command {
    let program = refusing_program(libc::SYS_perf_event_open as u32, errno);
    // SAFETY: the closure runs in the forked child before `exec`; it calls
    // only `prctl` and `seccomp` (async-signal-safe system calls) on the
    // program built above, before the fork, and allocates nothing.
    unsafe { cmd.pre_exec(move || install(&program)) }
}

/// The BPF program: a system call of another architecture kills the
/// process (its numbers mean other calls, so no rule here applies to it);
/// `nr` (and on x86_64 its x32 twin) fails with `errno`; everything else
/// is allowed.
fn refusing_program(nr: u32, errno: i32) -> Vec<libc::sock_filter> {
    #[cfg(target_arch = "x86_64")]
    let refused = [nr, nr | X32_SYSCALL_BIT];
    #[cfg(not(target_arch = "x86_64"))]
    let refused = [nr];
    let load = |offset| stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset);
    let mut program = vec![
        load(ARCH_OFFSET),
        jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            NATIVE_ARCH,
            1,
            0,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        load(NR_OFFSET),
    ];
    // Jump offsets count from the next instruction: a match skips the
    // remaining comparisons to the refusal, the last miss skips it.
    let n = refused.len();
    for (i, &nr) in refused.iter().enumerate() {
        let to_refusal = (n - 1 - i) as u8;
        let on_miss = u8::from(i == n - 1);
        program.push(jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            nr,
            to_refusal,
            on_miss,
        ));
    }
    program.push(stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA),
    ));
    program.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    program
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Installs `program` on the calling thread (and so on everything it
/// later creates or execs). Async-signal-safe.
fn install(program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at `program`, valid for the call; the kernel
    // copies and checks the program before it returns.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
