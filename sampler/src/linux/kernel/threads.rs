//! The threads of this process: listing, CPU clocks and names.
//!
//! Listing runs every tick, so it reuses one open `/proc/self/task`
//! directory and one buffer (`lseek` + `getdents64`) instead of opening and
//! allocating each time.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Lists thread ids of this process.
pub(crate) struct TaskList {
    dir: OwnedFd,
    buf: Vec<u8>,
}

impl TaskList {
    pub fn open() -> io::Result<Self> {
        // SAFETY: a NUL-terminated path and valid flags.
        let fd = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TaskList {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            buf: vec![0; 32 * 1024],
        })
    }

    /// How many threads the process has now, from one `fstat` of the
    /// directory: procfs gives a process's task directory a link count of
    /// two plus its number of threads. Far cheaper than [`Self::read`],
    /// which looks up every entry, so it can tell whether a listing could
    /// find anything new.
    pub fn count(&self) -> io::Result<u64> {
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `dir` is an open descriptor and `st` a valid `stat` to
        // write.
        if unsafe { libc::fstat(self.dir.as_raw_fd(), &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // `nlink_t` is 32 bits on some architectures.
        #[allow(clippy::useless_conversion)]
        let links = u64::from(st.st_nlink);
        Ok(links.saturating_sub(2))
    }

    /// Replaces `out` with the current thread ids.
    pub fn read(&mut self, out: &mut Vec<i32>) -> io::Result<()> {
        out.clear();
        let fd = self.dir.as_raw_fd();
        // SAFETY: rewinding an open directory fd re-reads it from the start.
        if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            // SAFETY: the buffer is valid for `len` bytes; getdents64 writes
            // at most that many.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd,
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                return Ok(());
            }
            parse_dirents(&self.buf[..n as usize], out);
        }
    }
}

/// Appends the numeric names in a `getdents64` buffer.
///
/// Each record is `d_ino: u64, d_off: i64, d_reclen: u16, d_type: u8`,
/// then a NUL-terminated name.
fn parse_dirents(mut records: &[u8], out: &mut Vec<i32>) {
    const NAME_AT: usize = 19;
    while records.len() >= NAME_AT {
        let reclen = usize::from(u16::from_ne_bytes([records[16], records[17]]));
        if reclen < NAME_AT || reclen > records.len() {
            return;
        }
        let name = &records[NAME_AT..reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if let Some(tid) = parse_tid(name) {
            out.push(tid);
        }
        records = &records[reclen..];
    }
}

fn parse_tid(name: &[u8]) -> Option<i32> {
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name).ok()?.parse().ok()
}

/// The calling thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Reads `clock` in nanoseconds, or `None` if it does not exist (a thread
/// CPU clock of a thread that exited). Async-signal-safe.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time consumed by thread `tid` of this process, in nanoseconds, or
/// `None` if the thread is gone.
pub(crate) fn thread_cpu_ns(tid: i32) -> Option<u64> {
    // The per-thread scheduler CPU clock, as glibc's pthread_getcpuclockid
    // builds it from a tid: ((~tid) << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED.
    clock_ns((!tid << 3) | 4 | 2)
}

/// The CPUs the kernel is configured for: at most this many of the
/// process's threads run at once, whatever their affinity.
pub(crate) fn configured_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    u64::try_from(cpus).unwrap_or(1).max(1)
}

/// The calling thread's CPU time in nanoseconds.
/// Whether thread `tid` is one of this process's now (signal 0 only looks
/// the thread up and sends nothing).
pub(crate) fn thread_exists(tid: i32) -> bool {
    // SAFETY: tgkill with signal 0 has no effect beyond the lookup.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) == 0 }
}

pub(crate) fn own_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// A thread name this long (in bytes) may have been cut: the kernel keeps
/// 15 bytes of it (`TASK_COMM_LEN` less its NUL).
pub(crate) const NAME_CUT_LEN: usize = 15;

/// The state letter of `/proc/PROC/task/TID/stat` (`PROC` a pid, or
/// `self`), `None` if the thread is gone.
pub(crate) fn state_code(proc: &str, tid: i32) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/{proc}/task/{tid}/stat")).ok()?;
    // `pid (comm) S ...`: comm may hold spaces and parentheses.
    let after = stat.iter().rposition(|&b| b == b')')?;
    stat.get(after + 2).copied()
}

/// The thread's name (`comm`), or `None` if it exited.
pub(crate) fn thread_name(tid: i32) -> Option<String> {
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_owned())
}

/// Whether thread `tid` has `signal` blocked (its `SigBlk` mask in
/// `/proc`), or `None` if it exited.
pub(crate) fn blocks_signal(tid: i32, signal: libc::c_int) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())?;
    Some(mask & (1u64 << (signal - 1)) != 0)
}

/// Whether a thread is running user code or blocked in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Running or runnable (`R` in `/proc`): interrupting it interrupts
    /// user code (or a system call that is not blocking).
    Running,
    /// Sleeping, in uninterruptible wait, stopped or traced: interrupting
    /// it would make a blocking call fail with `EINTR`.
    Blocked,
}

/// What a thread's state file says: its state, and its name (`comm`, as
/// `/proc/self/task/TID/comm` has it; `None` if not UTF-8, or read from a
/// file that does not give it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat<'a> {
    pub state: RunState,
    pub name: Option<&'a str>,
}

/// The state and name of thread `tid` (fields 2 and 3 of
/// `/proc/self/task/TID/stat`) read into `buf`, or `None` if it exited.
pub(crate) fn stat(tid: i32, buf: &mut [u8; 512]) -> Option<Stat<'_>> {
    parse_stat(read_small(&stat_path(tid), buf)?)
}

fn stat_path(tid: i32) -> String {
    format!("/proc/self/task/{tid}/stat\0")
}

/// A `/proc` file of one thread kept open to tell its run state again and
/// again: the sampler-thread clock reads one before each signal it sends,
/// and reading it again with `pread` costs a third of opening, reading and
/// closing it (7 against 20 µs here). Once the thread is gone the read
/// fails, as the path would.
///
/// Two files say whether the thread runs. Its stat file also gives its
/// name, which a young thread may have changed since it was listed; its
/// `syscall` file says only `running` or the call it is blocked in, and
/// costs far less to read (the kernel formats one word instead of 52
/// fields: 0.9 against 2.6 µs a read of a running thread on this
/// project's VM). Both read `R` alike: on a CPU or waiting for one.
pub(crate) struct StateFile {
    fd: OwnedFd,
    names: bool,
}

/// State files open at once: at most a sixteenth of the descriptor limit,
/// so that the program keeps its own; threads beyond it are read by path.
static OPEN_STATE_FILES: AtomicUsize = AtomicUsize::new(0);
const STATE_FILES_MOST: usize = 1024;

impl StateFile {
    /// Opens thread `tid`'s stat file, which gives its name too, or `None`
    /// when the thread is gone or the budget spent.
    pub(crate) fn open_stat(tid: i32) -> Option<StateFile> {
        Self::open(&stat_path(tid), true)
    }

    /// Opens thread `tid`'s `syscall` file, the cheaper one, or `None`
    /// when the thread is gone, the budget spent or the kernel does not
    /// show the file to this process.
    pub(crate) fn open_syscall(tid: i32) -> Option<StateFile> {
        Self::open(&format!("/proc/self/task/{tid}/syscall\0"), false)
    }

    /// Asked again at each read of a thread beyond the budget, so the
    /// budget is worked out once, not with a system call each time.
    fn open(path: &str, names: bool) -> Option<StateFile> {
        static BUDGET: OnceLock<usize> = OnceLock::new();
        let budget = *BUDGET.get_or_init(|| STATE_FILES_MOST.min(nofile_limit() / 16));
        if OPEN_STATE_FILES.fetch_add(1, Ordering::Relaxed) >= budget {
            OPEN_STATE_FILES.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let file = open_proc(path).map(|fd| StateFile { fd, names });
        if file.is_none() {
            OPEN_STATE_FILES.fetch_sub(1, Ordering::Relaxed);
        }
        file
    }

    /// The thread's state now, and its name from a stat file.
    pub(crate) fn read<'a>(&self, buf: &'a mut [u8; 512]) -> Option<Stat<'a>> {
        // SAFETY: `buf` is valid for its length; the descriptor is ours.
        let n = unsafe { libc::pread(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let text = buf.get(..usize::try_from(n).ok().filter(|&n| n > 0)?)?;
        if self.names {
            parse_stat(text)
        } else {
            Some(Stat {
                state: parse_syscall_state(text),
                name: None,
            })
        }
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        OPEN_STATE_FILES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The run state in the text of a `syscall` file: `running` for a thread
/// on a CPU or waiting for one; otherwise the number of the call it is
/// blocked in, or `-1` when it is blocked outside one (stopped, or gone
/// with its stack).
fn parse_syscall_state(text: &[u8]) -> RunState {
    if text.starts_with(b"running") {
        RunState::Running
    } else {
        RunState::Blocked
    }
}

/// The process's soft limit on descriptors (1024 if it cannot be read).
pub(crate) fn nofile_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into our local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    }
}

/// The state and name in the text of a stat file.
fn parse_stat(stat: &[u8]) -> Option<Stat<'_>> {
    // `pid (comm) S ...`: comm may hold spaces and parentheses; it starts
    // after the first '(' and the state follows the last ')'.
    let open = stat.iter().position(|&b| b == b'(')?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let state = if *stat.get(close + 2)? == b'R' {
        RunState::Running
    } else {
        RunState::Blocked
    };
    let name = stat
        .get(open + 1..close)
        .and_then(|n| std::str::from_utf8(n).ok());
    Some(Stat { state, name })
}

/// The pc of the system call thread `tid` is blocked in (the last field
/// of `/proc/self/task/TID/syscall`), or `None` if it is running or gone.
pub(crate) fn blocked_syscall_pc(tid: i32) -> Option<u64> {
    let mut buf = [0u8; 256];
    let text = read_small(&format!("/proc/self/task/{tid}/syscall\0"), &mut buf)?;
    let text = std::str::from_utf8(text).ok()?;
    let last = text.split_ascii_whitespace().last()?;
    u64::from_str_radix(last.strip_prefix("0x")?, 16).ok()
}

/// Opens a `/proc` file for reading. `path` must end with a NUL.
fn open_proc(path: &str) -> Option<OwnedFd> {
    // SAFETY: `path` is NUL-terminated (the callers add it).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: `fd` was just opened and is owned by nothing else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads a small `/proc` file into `buf` with one open, read and close
/// (no allocation beyond the path). `path` must end with a NUL.
fn read_small<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let fd = open_proc(path)?;
    // SAFETY: `buf` is valid for its length; `fd` is ours (closed on drop).
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n > 0).then(|| &buf[..n as usize])
}

/// What a thread's `/proc` status says about one signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignalStatus {
    /// In its `SigBlk` mask.
    pub blocked: bool,
    /// Queued for it and not yet taken (`SigPnd`, thread-directed).
    pub pending: bool,
}

/// Thread `tid`'s mask and pending set for `signal`, or `None` if it exited.
pub(crate) fn signal_status(tid: i32, signal: libc::c_int) -> Option<SignalStatus> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    };
    let bit = 1u64 << (signal - 1);
    Some(SignalStatus {
        blocked: field("SigBlk:")? & bit != 0,
        pending: field("SigPnd:")? & bit != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count from the directory's link count is the number of entries
    /// a listing finds. Other tests start and end threads meanwhile, and a
    /// listing can catch one thread's exit and another's birth both under
    /// way, so only some of the tries need to agree.
    #[test]
    fn the_count_is_the_number_of_threads_listed() {
        let mut tasks = TaskList::open().unwrap();
        let mut tids = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..200 {
            let before = tasks.count().unwrap();
            tasks.read(&mut tids).unwrap();
            let after = tasks.count().unwrap();
            if before == after && before == tids.len() as u64 {
                return;
            }
            seen.push((before, tids.len(), after));
        }
        panic!("count, listed, count again never agreed: {seen:?}");
    }

    /// A kept-open state file, of either kind, tells a blocked thread from
    /// a running one each time it is read, and fails once the thread is
    /// gone; the stat file gives the name the thread has then.
    #[test]
    fn a_state_file_follows_its_thread() {
        for names in [true, false] {
            let open = |tid| match names {
                true => StateFile::open_stat(tid),
                false => StateFile::open_syscall(tid),
            };
            let (tx, rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let t = std::thread::Builder::new()
                .name("btp st) (x".into())
                .spawn(move || {
                    tx.send(gettid()).unwrap();
                    go_rx.recv().ok();
                })
                .unwrap();
            let tid = rx.recv().unwrap();
            let file = open(tid).expect("its state file");
            let mut buf = [0u8; 512];
            let state = |file: &StateFile, buf: &mut [u8; 512]| file.read(buf).map(|s| s.state);
            // Blocked in `recv` (soon, if not yet).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while state(&file, &mut buf) != Some(RunState::Blocked) {
                assert!(std::time::Instant::now() < deadline, "never blocked");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // A name may hold spaces and parentheses.
            let name = file.read(&mut buf).and_then(|s| s.name);
            assert_eq!(name, names.then_some("btp st) (x"));
            // The reading thread itself is inside `pread`: its stat file
            // says `R`, its `syscall` file that call (the sampler never
            // reads its own; a spinning thread reads as running in both,
            // below).
            if names {
                assert_eq!(
                    open(gettid()).and_then(|f| state(&f, &mut buf)),
                    Some(RunState::Running)
                );
            }
            go_tx.send(()).unwrap();
            t.join().unwrap();
            while file.read(&mut buf).is_some() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "still read after exit"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    /// A thread that spins in user code reads as running through its
    /// `syscall` file, as through its stat file, while it runs.
    #[test]
    fn a_spinning_thread_reads_as_running_in_both_files() {
        if crate::emulation::not_checked_under_qemu(
            "a spinning thread's state in /proc",
            "the emulator's host thread waits on the emulator's own locks (code \
             translation) while the guest thread spins",
        ) {
            return;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                tx.send(gettid()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let tid = rx.recv().unwrap();
        let mut buf = [0u8; 512];
        let files = [StateFile::open_stat(tid), StateFile::open_syscall(tid)];
        let running = files.map(|f| {
            let f = f.expect("its state file");
            (0..200)
                .filter(|_| f.read(&mut buf).map(|s| s.state) == Some(RunState::Running))
                .count()
        });
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        // Beside busy processes it waits for a CPU at times: still `R`.
        assert_eq!(running, [200, 200], "reads as running, of 200");
    }

    #[test]
    fn lists_own_and_new_threads() {
        let mut tasks = TaskList::open().unwrap();
        let mut tids = Vec::new();
        tasks.read(&mut tids).unwrap();
        assert!(tids.contains(&gettid()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("btprof-t-list".into())
            .spawn(move || {
                tx.send(gettid()).unwrap();
                done_rx.recv().ok();
            })
            .unwrap();
        let other = rx.recv().unwrap();
        tasks.read(&mut tids).unwrap();
        assert!(tids.contains(&other), "{other} not in {tids:?}");
        assert_eq!(thread_name(other).as_deref(), Some("btprof-t-list"));
        assert!(thread_cpu_ns(other).is_some());
        done_tx.send(()).unwrap();
        t.join().unwrap();
        // `join` returns when the kernel clears the thread's tid, in its
        // exit but before it leaves the thread group: a listing right after
        // may still hold it for a moment (it did beside two CPU hogs).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            tasks.read(&mut tids).unwrap();
            if !tids.contains(&other) || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            !tids.contains(&other),
            "{other} still listed 5 s after join"
        );
        assert_eq!(thread_cpu_ns(other), None);
    }

    #[test]
    fn cpu_clock_advances_while_spinning() {
        let tid = gettid();
        let before = thread_cpu_ns(tid).unwrap();
        let mut x = 0u64;
        while thread_cpu_ns(tid).unwrap() < before + 2_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(own_cpu_ns() >= before + 2_000_000);
    }

    #[test]
    fn dirent_parser_skips_dot_entries() {
        let mut buf = Vec::new();
        for name in [".", "..", "42", "7"] {
            let reclen = (19 + name.len() + 1).next_multiple_of(8);
            let start = buf.len();
            buf.resize(start + reclen, 0);
            buf[start + 16..start + 18].copy_from_slice(&(reclen as u16).to_ne_bytes());
            buf[start + 19..start + 19 + name.len()].copy_from_slice(name.as_bytes());
        }
        let mut out = Vec::new();
        parse_dirents(&buf, &mut out);
        assert_eq!(out, vec![42, 7]);
    }
}
