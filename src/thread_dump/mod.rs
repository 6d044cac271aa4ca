//! "What is this thread doing right now?": the backtrace of every thread
//! ([`ThreadDump::capture`]) or of one ([`backtrace`]), on demand, with no
//! profiler running (or beside one, without disturbing it).
//!
//! The stacks are taken by the sampler's one-shot capture
//! ([`btprof_sampler::one_shot`]): each thread is held only for a copy of
//! its registers and stack top, a thread blocked in a system call is read
//! without being interrupted (so a dump never makes a `read` or a
//! `nanosleep` fail with `EINTR`), and symbols are resolved afterwards by
//! the same resolver the profiles use. See `docs/thread-dumps.md`.

mod output;
mod thread;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use btprof_sampler::one_shot::{self, CapturedThread, RunState, Taken};
use btprof_sampler::stack_table::StackKey;
use btprof_sampler::walker::{Arch, WalkEnd};
use btprof_symbols::Resolver;

use crate::record::symbolize::{outermost_symbol, resolve_stack, ResolvedAddress};
use crate::record::{thread_names, walk_ends};
use crate::{Error, Symbolize};

pub use thread::{backtrace, Thread};
pub(crate) use thread::{capture, symbolize_captured};

/// Every thread of the process (btprof's own left out) at one moment.
#[derive(Clone, Debug)]
pub struct ThreadDump {
    threads: Vec<ThreadBacktrace>,
}

/// One thread's backtrace: who it is, what the OS says it is doing, and
/// its frames, innermost first.
#[derive(Clone, Debug)]
pub struct ThreadBacktrace {
    name: String,
    tid: u64,
    state: ThreadState,
    syscall: Option<i64>,
    frames: Vec<Frame>,
    complete: bool,
    end: WalkEnd,
    taken: Taken,
    held: Option<Duration>,
}

/// What the OS says a thread was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThreadState {
    /// On a CPU, or (on Linux, which does not tell the two apart) waiting
    /// for one.
    Running,
    /// Ready to run but not on a CPU (macOS only).
    Runnable,
    /// Waiting in the kernel; [`ThreadBacktrace::syscall`] says in which
    /// system call where the OS reports it.
    Blocked,
    /// Stopped by a signal or a debugger.
    Stopped,
    /// The thread exited while it was being captured: no frames.
    Gone,
}

/// One frame of a backtrace.
///
/// A machine frame whose code has functions inlined into it gives one
/// `Frame` per function, innermost first, all with the same
/// [`Frame::address`]; every one but the outermost has
/// [`Frame::inlined`] `true` (it was inlined into the frame after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    address: u64,
    /// The resolver's name: the function, or `module+0x<offset>`.
    label: Arc<str>,
    function: Option<Arc<str>>,
    module: Option<Arc<str>>,
    file: Option<Arc<str>>,
    line: Option<u32>,
    inlined: bool,
}

impl ThreadDump {
    /// Takes the backtrace of every thread of this process except
    /// btprof's own (the calling thread included).
    ///
    /// A thread that exits during the capture is listed as
    /// [`ThreadState::Gone`], not reported as an error. Fails only if the
    /// threads cannot be listed, the capture signal cannot be installed
    /// (Linux: another handler owns it), or the process runs translated
    /// by Rosetta 2 without `BTPROF_ALLOW_ROSETTA=1` (macOS: the
    /// sampler's refusal, [`btprof_sampler::Error::Rosetta`]).
    pub fn capture() -> Result<ThreadDump, Error> {
        let raw = one_shot::capture_threads()?;
        let threads = symbolize(&raw)?;
        Ok(ThreadDump { threads })
    }

    /// Takes the backtrace of every thread of another process, `pid`
    /// (Linux; `btprof dump --pid`), in the same form as
    /// [`ThreadDump::capture`].
    ///
    /// A running thread is stopped with `ptrace` only for its register
    /// read and stack copy and let go at once; a thread blocked in the
    /// kernel is read without being stopped, so no blocking call of the
    /// process fails with `EINTR`. Unwinding (with the process's own
    /// `.eh_frame`) and symbols (its files on disk, their debug files)
    /// come after every thread runs again. Thread names are the kernel's
    /// (15 bytes). See `docs/thread-dumps.md`.
    ///
    /// Fails with [`btprof_sampler::Error::NoSuchProcess`],
    /// [`btprof_sampler::Error::TraceRefused`] (the message says why:
    /// the same-user rule, `kernel.yama.ptrace_scope`, `CAP_SYS_PTRACE`)
    /// or [`btprof_sampler::Error::OwnProcess`] (use
    /// [`ThreadDump::capture`]), inside [`Error::Sampler`]; on other
    /// platforms than Linux with [`btprof_sampler::Error::Unsupported`].
    pub fn capture_process(pid: u32) -> Result<ThreadDump, Error> {
        let raw = one_shot::capture_process(pid)?;
        let mut resolver = process_resolver(pid)?;
        let mut resolved = Vec::new();
        let threads = raw
            .iter()
            .map(|thread| {
                let mut t = symbolize_one(thread, &mut resolver, &mut resolved);
                // Another process's threads registered no names here.
                t.name.clone_from(&thread.name);
                t
            })
            .collect();
        Ok(ThreadDump { threads })
    }

    /// The threads, in the order the OS listed them.
    pub fn threads(&self) -> &[ThreadBacktrace] {
        &self.threads
    }
}

impl ThreadBacktrace {
    /// The thread's name: the full Rust name where the thread registered
    /// one ([`crate::register_current_thread`]), else the OS's (15 bytes
    /// on Linux).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The OS thread id (the kernel tid on Linux, the 64-bit thread id on
    /// macOS).
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// What the OS says the thread was doing.
    pub fn state(&self) -> ThreadState {
        self.state
    }

    /// The system call the thread is blocked in, by name (`read`,
    /// `nanosleep`, …; `syscall 123` for one without a name here), where
    /// the OS says.
    pub fn syscall(&self) -> Option<String> {
        self.syscall.map(output::syscall_name)
    }

    /// The frames, innermost first (see [`Frame`] for inlined functions).
    /// Empty when the stack could not be read ([`ThreadBacktrace::not_read`]).
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Whether the walk reached the thread's entry (its start function, or
    /// the end of the frame chain in the C library's thread start). A
    /// backtrace that stopped short is never passed off as complete.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Why the walk stopped short, `None` when [`ThreadBacktrace::complete`].
    pub fn stop_reason(&self) -> Option<&'static str> {
        if self.complete {
            return None;
        }
        Some(match self.taken {
            Taken::NotTaken(why) => output::not_read_reason(why),
            _ => output::walk_end_reason(self.end),
        })
    }

    /// Why the stack was not read at all (`None` when it was): the thread
    /// blocks the capture signal, exited, or did not answer.
    pub fn not_read(&self) -> Option<&'static str> {
        match self.taken {
            Taken::NotTaken(why) => Some(output::not_read_reason(why)),
            _ => None,
        }
    }

    /// Whether the thread was interrupted for the capture (`false`: read
    /// from outside while blocked, or not read).
    pub fn interrupted(&self) -> bool {
        self.taken == Taken::Interrupted
    }

    /// How long the thread was kept from running for this capture (from
    /// the handler's entry to its exit on Linux, suspend to resume on
    /// macOS; for another process, from its reported ptrace stop to the
    /// detach); `None` when it was not interrupted.
    pub fn held(&self) -> Option<Duration> {
        self.held
    }
}

impl Frame {
    /// The code address: the pc for the innermost machine frame, a return
    /// address for the others (the call is just before it).
    pub fn address(&self) -> u64 {
        self.address
    }

    /// The function (demangled), or `None` where no symbol covers the
    /// address.
    pub fn function(&self) -> Option<&str> {
        self.function.as_deref()
    }

    /// The module (executable or library file name) holding the code.
    pub fn module(&self) -> Option<&str> {
        self.module.as_deref()
    }

    /// The source file, where debug information covers the address.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// The source line in [`Frame::file`]: for the innermost function of a
    /// machine frame the line of the address, for an outer one the line
    /// of the inlined call.
    pub fn line(&self) -> Option<u32> {
        self.line
    }

    /// Whether this function was inlined into the next frame (its caller).
    pub fn inlined(&self) -> bool {
        self.inlined
    }
}

/// The resolver dumps share, kept between dumps: building one reads the
/// symbol tables of every module, and its cache makes the next dump cheap.
static RESOLVER: Mutex<Option<Resolver>> = Mutex::new(None);

/// Makes the first resolver build of a process take as long as
/// [`SLOW_RESOLVER_ENV`] says, in milliseconds: how a test on Linux, whose
/// few modules load in milliseconds, stands in for a Mac's slow first
/// symbol load.
fn slow_first_build_for_tests() {
    if let Some(ms) = std::env::var(SLOW_RESOLVER_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// See [`slow_first_build_for_tests`].
pub(crate) const SLOW_RESOLVER_ENV: &str = "BTPROF_TEST_SLOW_RESOLVER_MS";

/// A resolver over process `pid`'s modules.
#[cfg(target_os = "linux")]
fn process_resolver(pid: u32) -> Result<Resolver, Error> {
    Resolver::for_process(pid).map_err(Error::Symbols)
}

/// Only Linux reads another process's modules (and captures its threads).
#[cfg(not(target_os = "linux"))]
fn process_resolver(_pid: u32) -> Result<Resolver, Error> {
    Err(Error::Sampler(btprof_sampler::Error::Unsupported))
}

/// Symbolises captured threads, after every one of them runs again. The
/// first call in a process builds the resolver: on a Mac, symbol tables
/// and debug maps of hundreds of images.
pub(crate) fn symbolize(raw: &[CapturedThread]) -> Result<Vec<ThreadBacktrace>, Error> {
    let mut guard = RESOLVER.lock().unwrap_or_else(|e| e.into_inner());
    let resolver = match guard.as_mut() {
        Some(resolver) => {
            resolver.refresh();
            resolver
        }
        None => {
            slow_first_build_for_tests();
            guard.insert(Resolver::for_current_process().map_err(Error::Symbols)?)
        }
    };
    let mut resolved = Vec::new();
    Ok(raw
        .iter()
        .map(|thread| symbolize_one(thread, resolver, &mut resolved))
        .collect())
}

fn symbolize_one(
    raw: &CapturedThread,
    resolver: &mut Resolver,
    resolved: &mut Vec<ResolvedAddress>,
) -> ThreadBacktrace {
    let key = StackKey {
        thread: 0,
        frames: &raw.frames,
        lr: raw.lr,
        end: raw.end,
        labels: btprof_sampler::labels::NO_LABELS,
    };
    resolve_stack(Arch::host(), &key, resolver, Symbolize::default(), resolved);
    let mut frames = Vec::new();
    for (i, (address, chain)) in resolved.iter().enumerate() {
        // The lookup address is a return address minus one; report the
        // address itself.
        let address = if i == 0 { *address } else { address + 1 };
        for f in chain.iter().rev() {
            frames.push(Frame {
                address,
                function: (!is_unnamed(&f.name, f.module.as_deref())).then(|| f.name.clone()),
                label: f.name.clone(),
                module: f.module.clone(),
                file: f.file.clone(),
                line: f.line,
                inlined: f.inlined,
            });
        }
    }
    let complete = match raw.taken {
        Taken::NotTaken(_) => false,
        _ if raw.frames.is_empty() => false,
        _ => {
            let names = resolved
                .iter()
                .flat_map(|(_, chain)| chain.iter().map(|f| f.name.clone()));
            !walk_ends::is_truncated(raw.end, names, &outermost_symbol(&key, resolver))
        }
    };
    ThreadBacktrace {
        name: thread_names::full_name(raw.tid, &raw.name),
        tid: raw.tid,
        state: match raw.state {
            RunState::Running => ThreadState::Running,
            RunState::Runnable => ThreadState::Runnable,
            RunState::Blocked => ThreadState::Blocked,
            RunState::Stopped => ThreadState::Stopped,
            RunState::Gone => ThreadState::Gone,
        },
        syscall: raw.syscall,
        frames,
        complete,
        end: raw.end,
        taken: raw.taken,
        held: raw.held_ns.map(Duration::from_nanos),
    }
}

/// Whether the resolver's `name` stands for an address no symbol covers
/// (`module+0x<offset>` or `[unknown]+0x<address>`).
fn is_unnamed(name: &str, module: Option<&str>) -> bool {
    let Some((prefix, hex)) = name.rsplit_once("+0x") else {
        return false;
    };
    hex.bytes().all(|b| b.is_ascii_hexdigit()) && (prefix == "[unknown]" || Some(prefix) == module)
}
