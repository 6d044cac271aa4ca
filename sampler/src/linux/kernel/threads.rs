//! The threads of this process: listing (every tick, so through one open `/proc/self/task`),
//! CPU clocks, names and states.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

pub(crate) use crate::linux::signal::safe_calls::{gettid, try_clock_ns as clock_ns};

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

    /// How many threads the process has now: the task directory's link count less two.
    pub fn count(&self) -> io::Result<u64> {
        // SAFETY: an all-zero `stat` is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `dir` is open and `st` a valid `stat` to write.
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
            // SAFETY: getdents64 writes at most `len` bytes to the buffer.
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

/// Thread `tid`'s CPU clock: glibc's `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`.
pub(crate) fn thread_clock(tid: i32) -> libc::clockid_t {
    (!tid << 3) | 6
}

/// CPU time of thread `tid` in nanoseconds; `None` if it is gone.
pub(crate) fn thread_cpu_ns(tid: i32) -> Option<u64> {
    clock_ns(thread_clock(tid))
}

/// The configured CPUs: at most this many threads run at once.
pub(crate) fn configured_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    u64::try_from(cpus).unwrap_or(1).max(1)
}

/// Whether thread `tid` is one of this process's now.
pub(crate) fn thread_exists(tid: i32) -> bool {
    // SAFETY: tgkill with signal 0 only looks the thread up.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) == 0 }
}

pub(crate) fn own_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// A thread name this long may have been cut (`TASK_COMM_LEN` less NUL).
pub(crate) const NAME_CUT_LEN: usize = 15;

/// The state letter of `/proc/PROC/task/TID/stat`, `None` if gone.
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

/// Whether thread `tid` has `signal` in `SigBlk`; `None` if it exited.
pub(crate) fn blocks_signal(tid: i32, signal: libc::c_int) -> Option<bool> {
    let [blocked] = status_masks(tid, ["SigBlk:"])?;
    Some(blocked & (1u64 << (signal - 1)) != 0)
}

/// The hex masks `fields` of thread `tid`'s status file; `None` if it exited.
fn status_masks<const N: usize>(tid: i32, fields: [&str; N]) -> Option<[u64; N]> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let mask = |name: &str| {
        let hex = status.lines().find_map(|l| l.strip_prefix(name))?;
        u64::from_str_radix(hex.trim(), 16).ok()
    };
    let mut masks = [0; N];
    for (to, name) in masks.iter_mut().zip(fields) {
        *to = mask(name)?;
    }
    Some(masks)
}

/// Whether a thread runs user code or is blocked in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunState {
    /// `R` in `/proc`: on a CPU or waiting for one.
    Running,
    /// Anything else: a signal could end a blocking call with `EINTR`.
    Blocked,
}

/// A state file's run state, and `comm` (`None` if not UTF-8 or absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat<'a> {
    pub state: RunState,
    pub name: Option<&'a str>,
}

/// The state and name of thread `tid` from its stat file, read into `buf`.
pub(crate) fn stat(tid: i32, buf: &mut [u8; 512]) -> Option<Stat<'_>> {
    parse_stat(read_small(&stat_path(tid), buf)?)
}

fn stat_path(tid: i32) -> String {
    format!("/proc/self/task/{tid}/stat\0")
}

/// A thread's `/proc` state file kept open for cheap `pread`s; fails once the thread is gone.
/// The stat file also gives the name; the `syscall` file is cheaper for the kernel to format.
pub(crate) struct StateFile {
    fd: OwnedFd,
    names: bool,
}

/// State files open at once: at most a sixteenth of the descriptor limit, leaving the program
/// its own; threads beyond are read by path.
static OPEN_STATE_FILES: AtomicUsize = AtomicUsize::new(0);
const STATE_FILES_MOST: usize = 1024;

impl StateFile {
    /// Opens thread `tid`'s stat file; `None` if gone or over budget.
    pub(crate) fn open_stat(tid: i32) -> Option<StateFile> {
        Self::open(&stat_path(tid), true)
    }

    /// Opens thread `tid`'s `syscall` file; `None` if gone, over budget or not shown to us.
    pub(crate) fn open_syscall(tid: i32) -> Option<StateFile> {
        Self::open(&format!("/proc/self/task/{tid}/syscall\0"), false)
    }

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

/// The run state in a `syscall` file's text (`running` or a call number).
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

/// The state and name in the text of a stat file, `pid (comm) S ...`, whose comm may hold
/// spaces and parentheses.
fn parse_stat(stat: &[u8]) -> Option<Stat<'_>> {
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

/// The pc of the system call thread `tid` is blocked in; `None` if it runs or is gone.
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

/// Reads a small `/proc` file into `buf`. `path` must end with a NUL.
fn read_small<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let fd = open_proc(path)?;
    // SAFETY: `buf` is valid for its length; `fd` is ours (closed on drop).
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n > 0).then(|| &buf[..n as usize])
}

/// A thread's `SigBlk` and (thread-directed) `SigPnd` bit for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignalStatus {
    pub blocked: bool,
    pub pending: bool,
}

/// Thread `tid`'s [`SignalStatus`] for `signal`; `None` if it exited.
pub(crate) fn signal_status(tid: i32, signal: libc::c_int) -> Option<SignalStatus> {
    let [blocked, pending] = status_masks(tid, ["SigBlk:", "SigPnd:"])?;
    let bit = 1u64 << (signal - 1);
    Some(SignalStatus {
        blocked: blocked & bit != 0,
        pending: pending & bit != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// Waits up to 5 s for `done`, else fails with `what`.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A thread named `name`, its tid, and the sender that lets it exit.
    fn waiting_thread(name: &str) -> (i32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                tx.send(gettid()).unwrap();
                go_rx.recv().ok();
            })
            .unwrap();
        (rx.recv().unwrap(), go_tx, thread)
    }

    /// The link count matches the listing (some tries may race threads).
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

    /// A kept-open state file tells blocked from running and fails once the thread is gone;
    /// stat gives the name, which may hold spaces and parentheses.
    #[test]
    fn a_state_file_follows_its_thread() {
        for names in [true, false] {
            let open = |tid| match names {
                true => StateFile::open_stat(tid),
                false => StateFile::open_syscall(tid),
            };
            let (tid, go, t) = waiting_thread("btp st) (x");
            let file = open(tid).expect("its state file");
            let mut buf = [0u8; 512];
            let state = |file: &StateFile, buf: &mut [u8; 512]| file.read(buf).map(|s| s.state);
            wait_for("never blocked", || {
                state(&file, &mut buf) == Some(RunState::Blocked)
            });
            let name = file.read(&mut buf).and_then(|s| s.name);
            assert_eq!(name, names.then_some("btp st) (x"));
            // The reading thread is in `pread`, yet its stat file says `R`.
            if names {
                assert_eq!(
                    open(gettid()).and_then(|f| state(&f, &mut buf)),
                    Some(RunState::Running)
                );
            }
            go.send(()).unwrap();
            t.join().unwrap();
            wait_for("still read after exit", || file.read(&mut buf).is_none());
        }
    }

    /// A spinning thread reads as running through both files.
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
        let (tx, rx) = mpsc::channel();
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
        // Waiting for a CPU is `R` too.
        assert_eq!(running, [200, 200], "reads as running, of 200");
    }

    #[test]
    fn lists_own_and_new_threads() {
        let mut tasks = TaskList::open().unwrap();
        let mut tids = Vec::new();
        tasks.read(&mut tids).unwrap();
        assert!(tids.contains(&gettid()));
        let (other, done, t) = waiting_thread("btprof-t-list");
        tasks.read(&mut tids).unwrap();
        assert!(tids.contains(&other), "{other} not in {tids:?}");
        assert_eq!(thread_name(other).as_deref(), Some("btprof-t-list"));
        assert!(thread_cpu_ns(other).is_some());
        done.send(()).unwrap();
        t.join().unwrap();
        // `join` returns before the thread leaves the group.
        wait_for("still listed 5 s after join", || {
            tasks.read(&mut tids).unwrap();
            !tids.contains(&other)
        });
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
