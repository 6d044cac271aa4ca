//! `btprof dump --pid PID`: a one-shot thread dump of another process,
//! printed as `btprof --pid-self --dump-threads` prints btprof's own.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::fail;

/// Print what every thread of a running process is doing: btprof dump --pid PID
///
/// For each thread: its name, id and state (running, blocked in a named
/// system call, stopped), then its backtrace, innermost first: function,
/// source file and line where debug information says, inlined functions
/// as frames of their own, and module+offset where no symbol covers the
/// code. The same text (and --json) as `btprof --pid-self --dump-threads`.
///
/// Linux: a running thread is stopped with ptrace only to read its
/// registers and copy its stack, and let go at once; a thread blocked in
/// a system call is read without being stopped, so none of the
/// program's calls fail with EINTR. If btprof is killed mid-dump, the
/// kernel lets the thread go on. Tracing another process needs the same
/// user (where Yama is on, kernel.yama.ptrace_scope 0 too) or
/// CAP_SYS_PTRACE; a refusal says which applies. For btprof's own
/// threads use --pid-self --dump-threads.
///
/// macOS: refused. Reading another process there needs task_for_pid,
/// which takes root or the debugger entitlement; a program can dump its
/// own threads with the library (btprof::ThreadDump::capture).
/// See docs/thread-dumps.md.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(after_help = "Examples:
  btprof dump --pid 4242
  btprof dump --pid \"$(pidof my-server)\" --json > threads.json")]
pub struct DumpArgs {
    /// The process to dump.
    #[arg(long)]
    pub pid: u32,

    /// Print the dump as JSON ({"threads": [...]}) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Prints the dump: exit 0; 1 when the process cannot be traced; 2 for a
/// pid that is no process or is btprof's own.
pub fn run(args: &DumpArgs) -> ExitCode {
    if cfg!(not(target_os = "linux")) {
        return fail(
            "btprof dump is not supported on this platform: reading another process needs \
             task_for_pid, which takes root or the debugger entitlement on macOS; a program \
             can dump its own threads with the library (btprof::ThreadDump::capture), and \
             `btprof --pid-self --dump-threads` shows btprof's own",
        );
    }
    if args.pid == std::process::id() {
        return fail(format!(
            "pid {} is btprof itself: use `btprof --pid-self --dump-threads`",
            args.pid
        ));
    }
    let dump = match btprof::ThreadDump::capture_process(args.pid) {
        Ok(dump) => dump,
        Err(btprof::Error::Sampler(e @ btprof::SamplerError::NoSuchProcess(_))) => return fail(e),
        Err(e) => {
            eprintln!("btprof: cannot dump pid {}: {e}", args.pid);
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let written = if args.json {
        dump.write_json(&mut stdout).map_err(|e| e.to_string())
    } else {
        write!(stdout, "{dump}").map_err(|e| e.to_string())
    };
    match written.and_then(|()| stdout.flush().map_err(|e| e.to_string())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("btprof: cannot write the dump: {e}");
            ExitCode::FAILURE
        }
    }
}
