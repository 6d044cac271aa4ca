//! The cases, one per way a profiled program could notice btprof.

use std::mem::MaybeUninit;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use btprof_sampler::walker::WalkEnd;
use btprof_sampler::{
    default_signal, Error, Mode, RawProfile, SampleClock, Sampler, SamplerConfig,
};

use crate::watchdog::Case;
use btprof_testkit::thread_cpu;

pub const ALL: &[Case] = &[
    Case {
        name: "exec_while_profiling_never_kills_the_new_program",
        limit: Duration::from_secs(240),
        body: exec_while_profiling_never_kills_the_new_program,
    },
    Case {
        name: "forked_child_starts_clean",
        limit: Duration::from_secs(60),
        body: forked_child_starts_clean,
    },
    Case {
        name: "stop_leaves_a_handler_installed_later",
        limit: Duration::from_secs(60),
        body: stop_leaves_a_handler_installed_later,
    },
    Case {
        name: "stale_mapping_under_a_coroutine_stack_never_faults",
        limit: Duration::from_secs(60),
        body: stale_mapping_under_a_coroutine_stack_never_faults,
    },
    Case {
        name: "a_coroutine_stack_beside_a_new_threads_own_never_faults",
        limit: Duration::from_secs(60),
        body: crate::side_stack::run,
    },
    Case {
        name: "blocking_calls_never_fail_with_eintr",
        limit: Duration::from_secs(60),
        body: blocking_calls_never_fail_with_eintr,
    },
    Case {
        name: "threads_blocking_the_signal_are_counted_not_queued",
        limit: Duration::from_secs(60),
        body: threads_blocking_the_signal_are_counted_not_queued,
    },
    Case {
        name: "a_thread_inside_the_handler_is_not_taken_for_one_blocking_the_signal",
        limit: Duration::from_secs(90),
        body: a_thread_inside_the_handler_is_not_taken_for_one_blocking_the_signal,
    },
    Case {
        name: "wall_mode_samples_every_one_of_300_idle_threads",
        limit: Duration::from_secs(60),
        body: wall_mode_samples_every_one_of_300_idle_threads,
    },
    Case {
        name: "many_threads_and_mappings_keep_stacks_and_rate",
        limit: Duration::from_secs(120),
        body: many_threads_and_mappings_keep_stacks_and_rate,
    },
    Case {
        name: "small_stacks_survive_sampling",
        limit: Duration::from_secs(60),
        body: small_stacks_survive_sampling,
    },
];

/// Roles this binary plays as a grandchild of the runner.
pub fn run_role(args: &[String]) {
    match args.first().map(String::as_str) {
        Some("exec-trial") => exec_trial(
            args.get(1).and_then(|s| s.parse().ok()),
            args.iter().any(|a| a == "wall"),
        ),
        other => panic!("unknown role {other:?}"),
    }
}

fn config(hz: u32, mode: Mode) -> SamplerConfig {
    SamplerConfig {
        hz,
        mode,
        ..SamplerConfig::default()
    }
}

/// Burns CPU until `stop` is set.
#[inline(never)]
fn spin_until(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// Burns `cpu` of this thread's own CPU time (not wall time: the machine
/// may be busy).
#[inline(never)]
fn spin_cpu(cpu: Duration) -> u64 {
    let end = thread_cpu() + cpu;
    let mut x = 1u64;
    while thread_cpu() < end {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// The handler address of `signal`'s current action.
fn disposition(signal: libc::c_int) -> usize {
    let mut old = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: querying into a valid out-pointer.
    let rc = unsafe { libc::sigaction(signal, std::ptr::null(), old.as_mut_ptr()) };
    assert_eq!(rc, 0);
    // SAFETY: filled in by sigaction.
    unsafe { old.assume_init() }.sa_sigaction
}

/// Checks that a cpu-mode profile ran on the clock this case's run asked
/// for, and says so; a host that refuses perf events says that instead of
/// passing silently on the other path.
pub fn check_clock(raw: &RawProfile) {
    let forced = btprof_sampler::clock_from_env().expect("a known clock");
    let clock = raw.stats.clock;
    if let Some(forced) = forced {
        assert_eq!(clock, forced);
    } else if clock != SampleClock::Perf {
        println!("measured: perf events refused here: this run used the sampler thread too");
    }
    println!("measured: clock {clock:?}");
}

/// Whether this run forces the sampler-thread clock.
fn on_sampler_thread() -> bool {
    btprof_sampler::clock_from_env().ok().flatten() == Some(SampleClock::SamplerThread)
}

fn samples(raw: &RawProfile) -> u64 {
    raw.table.iter().map(|(_, c)| c).sum()
}

// ---------------------------------------------------------------- exec

/// Trials in total, and how many run at once.
const EXEC_TRIALS: usize = 1000;
const EXEC_PARALLEL: usize = 4;

/// `exec` while profiling: a signal still queued for a thread that calls
/// `execve` survives into the new program, whose default action for a
/// real-time signal is to terminate. 1000 processes start the profiler
/// at 5 kHz in cpu mode (on the sampler thread: a busy thread signalled
/// every 0.2 ms of its CPU, so many an exec has a signal in flight; on
/// the per-thread timers), work, and exec `/bin/true`: none may die.
fn exec_while_profiling_never_kills_the_new_program() {
    // The trial can see the failure: on the sampler thread, which signals
    // threads wherever they are, a real-time signal (the old default)
    // kills some of the new programs. Per-thread timers raise the signal
    // only while their thread runs user code (exclude_kernel), so it is
    // taken before the thread enters execve: reported, not asserted.
    let rt = libc::SIGRTMAX() - 3;
    let rt_died = run_exec_trials(Some(rt), 200, false);
    println!("measured: exec while profiling with real-time signal {rt}: {rt_died} of 200 new programs died");
    if on_sampler_thread() {
        // Binomial(200, d), d a trial's chance to die: none die with P
        // (1-d)^200, under 1e-4 while d >= 4.5% (`default_signal`'s doc saw
        // 54 in 100). A check that the trial still sees the race.
        assert!(
            rt_died > 0,
            "the trial no longer catches a signal queued across exec"
        );
        // Wall mode asks for a running thread's sample with a one-shot
        // CPU timer, whose signal is raised on the way back to user space:
        // taken there, never carried into execve, even a real-time one.
        let wall_died = run_exec_trials(Some(rt), 200, true);
        println!("measured: the same in wall mode: {wall_died} of 200 new programs died");
        // Not random: the request's signal is taken on the way back to user
        // space, never carried into execve; one death is the bug.
        assert_eq!(wall_died, 0, "wall mode carried a signal across exec");
    }
    let died = run_exec_trials(None, EXEC_TRIALS, false);
    println!(
        "measured: exec while profiling with the default signal: {died} of {EXEC_TRIALS} new programs died"
    );
    // Not random: the default signal, SIGURG, is ignored by default, so one
    // carried across exec kills nothing; one death is the bug.
    assert_eq!(died, 0, "{died} of {EXEC_TRIALS} exec'd programs died");
}

/// Runs `trials` exec trials with `signal` (the default if `None`), in
/// wall mode or cpu mode, and returns how many of the exec'd programs died
/// by a signal.
pub fn run_exec_trials(signal: Option<i32>, trials: usize, wall: bool) -> usize {
    let exe = std::env::current_exe().unwrap();
    let mut died = 0;
    let mut other = Vec::new();
    let mut started = 0;
    let mut running = Vec::new();
    while started < trials || !running.is_empty() {
        while started < trials && running.len() < EXEC_PARALLEL {
            let mut cmd = Command::new(&exe);
            cmd.args(["--role", "exec-trial"]);
            cmd.arg(signal.map_or_else(|| "default".to_owned(), |s| s.to_string()));
            if wall {
                cmd.arg("wall");
            }
            running.push(cmd.spawn().expect("start a trial"));
            started += 1;
        }
        let child = running.remove(0);
        let status = child.wait_with_output().expect("wait for a trial").status;
        if status.signal().is_some() {
            died += 1;
        } else if !status.success() {
            other.push(status);
        }
    }
    assert!(other.is_empty(), "trials failed otherwise: {other:?}");
    died
}

/// One trial: profile this process (a busy thread and this one), work
/// 2 ms of CPU, then replace the process with `/bin/true`.
fn exec_trial(signal: Option<i32>, wall: bool) {
    let mode = if wall { Mode::Wall } else { Mode::Cpu };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        thread::spawn(move || spin_until(&stop));
    }
    let sampler = Sampler::start(SamplerConfig {
        signal,
        ..config(5000, mode)
    })
    .expect("start");
    spin_cpu(Duration::from_millis(2));
    std::mem::forget(sampler);
    let err = Command::new("/bin/true").exec();
    panic!("exec failed: {err}");
}

// ---------------------------------------------------------------- fork

/// `fork`: a child forked while a profiler runs gets back the handler it
/// had before btprof, can start (and stop) a profiler of its own, and
/// stopping the parent's profiler from the child returns an error at once
/// instead of waiting forever for a thread that only the parent has.
fn forked_child_starts_clean() {
    let signal = default_signal();
    let before = disposition(signal);
    assert_eq!(before, libc::SIG_DFL, "the test expects a fresh process");
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        thread::spawn(move || spin_until(&stop))
    };
    let parents = Sampler::start(config(1000, Mode::Cpu)).expect("start in the parent");
    spin_cpu(Duration::from_millis(30));
    assert_ne!(disposition(signal), before, "btprof's handler is installed");

    // SAFETY: the child calls only what a forked child of a glibc process
    // may (glibc resets malloc in the child), and ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fork_child(signal, before, parents)
        }))
        .map_or(2, |()| 0);
        // SAFETY: ends the child without running the parent's atexit
        // handlers or unwinding into the test runner.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the forked child failed (wait status {status:#x}); see its stderr above"
    );
    // The parent's profiler is unaffected by the child.
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
}

fn fork_child(signal: libc::c_int, before: usize, parents: Sampler) {
    assert_eq!(
        disposition(signal),
        before,
        "the forked child must get back the handler it had before btprof"
    );
    let own = Sampler::start(config(1000, Mode::Cpu))
        .expect("a forked child can start a profiler of its own");
    spin_cpu(Duration::from_millis(100));
    let raw = own.stop().expect("the child's own profiler stops");
    check_clock(&raw);
    // Any sample proves it runs (100 ms of a loop that keeps reading its
    // CPU clock gets few on the timers, which skip kernel time). A survival
    // check, not a rate: none means the child's profiler never sampled.
    let stats = &raw.stats;
    assert!(
        samples(&raw) > 0,
        "the child's profiler sampled it: 0 samples in {:?} ({:?} of the process's CPU, \
         {} timer threads, {} failed, {} signal-blocked, {} ticks)",
        stats.duration,
        stats.process_cpu,
        stats.timer_threads,
        stats.failed_samples,
        stats.signal_blocked_samples,
        stats.ticks,
    );
    assert_eq!(disposition(signal), before, "stop restored the child's");
    let started = Instant::now();
    match parents.stop() {
        Err(Error::ForkedChild) => {}
        other => panic!("stopping the parent's profiler in the child: {other:?}"),
    }
    // A wall-time cap, not a chance bar: the error comes at once; a stop
    // that waited for the parent's sampler thread would never return.
    assert!(started.elapsed() < Duration::from_secs(1));
    eprintln!("child: clean after fork");
}

// -------------------------------------------------------- signal owner

static THEIR_SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn their_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    THEIR_SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Signal ownership: the application installs a handler for the profiling signal
/// while btprof runs. `stop` must leave it in place (it replaces only its
/// own handler), and it must still work afterwards.
fn stop_leaves_a_handler_installed_later() {
    let signal = default_signal();
    assert_eq!(disposition(signal), libc::SIG_DFL);
    let sampler = Sampler::start(config(1000, Mode::Wall)).expect("start");
    thread::sleep(Duration::from_millis(30));
    // SAFETY: installing a valid SA_SIGINFO handler.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = their_handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
    }
    thread::sleep(Duration::from_millis(30));
    let _ = sampler.stop().expect("stop");
    assert_eq!(
        disposition(signal),
        their_handler as *const () as usize,
        "stop removed a handler the application installed after start"
    );
    let before = THEIR_SIGNALS.load(Ordering::Relaxed);
    // SAFETY: raising a signal that has a handler.
    unsafe { libc::raise(signal) };
    assert_eq!(THEIR_SIGNALS.load(Ordering::Relaxed), before + 1);
}

// ----------------------------------------------------- stale mapping

/// Stale memory maps: a coroutine runtime maps a stack, the profiler starts (and
/// snapshots the mappings), the runtime unmaps it and maps a smaller one
/// at the same address, and runs there with a frame pointer into the part
/// that is gone. The snapshot still says that part is stack; a walk that
/// trusts it faults inside the signal handler. The process must survive
/// and the samples must end their walks as unreadable. Where the kernel
/// samples the thread into a ring buffer (perf events allowed), it reads
/// the stack itself: then the thread must still be sampled there.
fn stale_mapping_under_a_coroutine_stack_never_faults() {
    const BIG: usize = 1 << 20;
    const SMALL: usize = 64 << 10;
    let go = Arc::new(AtomicBool::new(false));
    let base = Arc::new(AtomicU64::new(0));
    let worker = {
        let (go, base) = (go.clone(), base.clone());
        thread::Builder::new()
            .name("coroutine".into())
            .spawn(move || {
                while !go.load(Ordering::Acquire) {
                    thread::sleep(Duration::from_millis(1));
                }
                let base = base.load(Ordering::Acquire);
                let sp = base + SMALL as u64 / 2;
                let bad_fp = base + BIG as u64 / 2;
                let end = thread_cpu() + Duration::from_millis(300);
                while thread_cpu() < end {
                    // SAFETY: switches to the coroutine stack (mapped,
                    // SMALL bytes) for a loop that touches no memory, with
                    // the frame pointer into the unmapped part, then puts
                    // both back.
                    unsafe { run_on_stack_with_fp(sp, bad_fp, 2_000_000) };
                }
            })
            .unwrap()
    };
    // SAFETY: an anonymous private mapping anywhere.
    let big = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            BIG,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(big, libc::MAP_FAILED);
    let sampler = Sampler::start(config(1000, Mode::Cpu)).expect("start");
    // Let the sampler list every thread and then read the maps again, as
    // it does once the threads it found are new (at most every 250 ms):
    // the snapshot is then the last one, and stale from the remap on. A
    // fixed short wait let that read come after the remap on a busy
    // machine, which left no stale snapshot to test (every walk ended out
    // of bounds of the new mapping instead).
    let listed = Instant::now() + Duration::from_secs(10);
    while sampler.progress().listings.load(Ordering::Acquire) == 0 && Instant::now() < listed {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(600));
    // SAFETY: unmapping our own mapping, then mapping a smaller one at the
    // same address, where nothing else lives.
    unsafe {
        assert_eq!(libc::munmap(big, BIG), 0);
        let small = libc::mmap(
            big,
            SMALL,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        );
        assert_eq!(small, big, "remap at the same address");
    }
    base.store(big as u64, Ordering::Release);
    go.store(true, Ordering::Release);
    worker.join().unwrap();
    let raw = sampler.stop().expect("stop");
    check_clock(&raw);
    let coroutine: Vec<u32> = raw
        .threads
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name == "coroutine")
        .map(|(i, _)| i as u32)
        .collect();
    let on_coroutine: Vec<_> = raw
        .table
        .iter()
        .filter(|(k, _)| coroutine.contains(&k.thread) && k.frames.len() == 1)
        .collect();
    let unreadable: u64 = on_coroutine
        .iter()
        .filter(|(k, _)| k.end == WalkEnd::Unreadable)
        .map(|(_, c)| c)
        .sum();
    let on_ring = raw.stats.ring_threads > 0;
    let sampled: u64 = raw
        .table
        .iter()
        .filter(|(k, _)| coroutine.contains(&k.thread))
        .map(|(_, c)| c)
        .sum();
    println!(
        "measured: {sampled} samples of the coroutine thread, {unreadable} on its stack ended \
         unreadable, none faulted (sampled into a ring: {on_ring})"
    );
    if on_ring {
        assert_eq!(raw.stats.timer_threads, 0, "{:?}", raw.stats);
        // A survival check, not random: 300 ms of its CPU is ~300 whole
        // periods on its ring; the point is that none faulted.
        assert!(
            sampled > 10,
            "the coroutine thread was sampled {sampled} times"
        );
    } else {
        // Every sample came under the stale snapshot: most end unreadable
        // (a few are taken outside the loop, before the switch). Those are
        // Binomial(n, q), q the time outside the asm loop (a clock read per
        // 2,000,000 rounds): half of 300 has P under 1e-4 while q <= 39% (8% of 11).
        assert!(
            sampled > 10 && unreadable * 2 > sampled,
            "expected most of {sampled} samples on the coroutine stack ending unreadable, got \
             {on_coroutine:?}"
        );
    }
}

/// Runs `iterations` rounds of an empty loop with the stack pointer at
/// `sp` and the frame pointer at `fp`, then puts both back.
///
/// # Safety
/// `sp` must lie in a mapped stack with room below it for a signal frame.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub unsafe fn run_on_stack_with_fp(sp: u64, fp: u64, iterations: u64) {
    // SAFETY: the caller provides a mapped stack; the loop touches no
    // memory; rsp and rbp are restored before the block ends.
    unsafe {
        std::arch::asm!(
            "mov {saved}, rsp",
            "mov rsp, {sp}",
            "push rbp",
            "mov rbp, {fp}",
            "2:",
            "dec {n}",
            "jnz 2b",
            "pop rbp",
            "mov rsp, {saved}",
            saved = out(reg) _,
            sp = in(reg) sp,
            fp = in(reg) fp,
            n = inout(reg) iterations => _,
        );
    }
}

/// The same switch for aarch64: `sp` and the frame pointer `x29` are
/// set, the loop runs, and both are put back. `x29` cannot be an asm
/// operand (it is reserved as the frame pointer), so it is saved on the
/// new stack, as the x86_64 version saves `rbp`.
#[cfg(target_arch = "aarch64")]
#[inline(never)]
pub unsafe fn run_on_stack_with_fp(sp: u64, fp: u64, iterations: u64) {
    // SAFETY: the caller provides a mapped, 16-aligned stack; the loop
    // touches no memory; sp and x29 are restored before the block ends.
    unsafe {
        std::arch::asm!(
            "mov {saved}, sp",
            "mov sp, {new_sp}",
            "stp x29, x30, [sp, #-16]!",
            "mov x29, {fp}",
            "2:",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "ldp x29, x30, [sp], #16",
            "mov sp, {saved}",
            saved = out(reg) _,
            new_sp = in(reg) sp,
            fp = in(reg) fp,
            n = inout(reg) iterations => _,
        );
    }
}

// ------------------------------------------------------- small stacks

fn small_stacks_survive_sampling() {
    crate::small_stack::run();
}

// ------------------------------------------------------------ EINTR

/// What a loop of blocking calls saw.
#[derive(Debug, Default, Clone, Copy)]
struct CallResults {
    calls: u64,
    eintr: u64,
}

/// Blocking calls: a thread that works ~100 µs of CPU, then blocks in `poll`, in
/// `nanosleep`, or in a `recv` with a socket timeout, round after round
/// (after 20 ms of work).
/// Returns what the blocking calls returned.
fn blocking_loop(rounds: u32) -> CallResults {
    use std::net::UdpSocket;
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_millis(2)))
        .unwrap();
    let mut r = CallResults::default();
    let mut buf = [0u8; 16];
    // A first spell of work of many ticks: where a thread is sampled for
    // sure. Its 100 µs rounds alone can go unsampled on the sampler
    // thread under load (it signals only a thread it finds running user
    // code, and a round can fit between two ticks every time), and on
    // POSIX timers, which fire on a scheduler tick of the thread's running
    // (a 20 ms spell, opened late on a loaded machine, once got none).
    spin_cpu(Duration::from_millis(100));
    for round in 0..rounds {
        spin_cpu(Duration::from_micros(100));
        let interrupted = match round % 3 {
            0 => {
                // SAFETY: poll with no descriptors is a 2 ms sleep.
                let rc = unsafe { libc::poll(std::ptr::null_mut(), 0, 2) };
                rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            }
            1 => {
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 2_000_000,
                };
                // SAFETY: a valid timespec; no remainder wanted.
                let rc = unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            }
            _ => matches!(
                socket.recv(&mut buf),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted
            ),
        };
        r.calls += 1;
        r.eintr += u64::from(interrupted);
    }
    r
}

/// Runs the blocking loop on a thread of its own while `mode` profiles the
/// process (or nothing does), plus a busy thread beside it.
fn blocking_loop_under(mode: Option<Mode>, rounds: u32) -> (CallResults, Option<RawProfile>) {
    let sampler = mode.map(|m| Sampler::start(config(1000, m)).expect("start"));
    let results = thread::Builder::new()
        .name("blocking".into())
        .spawn(move || blocking_loop(rounds))
        .unwrap()
        .join()
        .unwrap();
    (results, sampler.map(|s| s.stop().expect("stop")))
}

/// Blocking calls: profiled or not, they return the
/// same: no `EINTR` in cpu mode (on either clock) or in wall mode. The
/// thread is still sampled where it works, and in wall mode it is counted
/// while blocked, without being interrupted.
fn blocking_calls_never_fail_with_eintr() {
    let (alone, _) = blocking_loop_under(None, 300);
    println!(
        "measured: without btprof: {} EINTR in {} blocking calls",
        alone.eintr, alone.calls
    );
    // Wall mode's thousands: its samples of a running thread are asked for
    // with a one-shot CPU timer, which fires only while the thread runs;
    // signalled straight after a look that found it running, 21 and 60 of
    // 3,000 calls failed beside two CPU hogs.
    for (mode, rounds) in [(Mode::Cpu, 300), (Mode::Wall, 3000)] {
        // Wall mode asks running threads from outside, beside two busy
        // processes: there a thread woken from its sleep waits for a CPU
        // inside the call, where a stray signal would end it with EINTR.
        // (Cpu mode runs without them: on POSIX timers, opened when a
        // listing finds the thread, its short spells once went unsampled.)
        let _hogs = (mode == Mode::Wall).then(|| btprof_testkit::hogs::Hogs::start(2));
        let (profiled, raw) = blocking_loop_under(Some(mode), rounds);
        let raw = raw.unwrap();
        let blocking = thread_keys(&raw, "blocking");
        let samples: u64 = raw
            .table
            .iter()
            .filter(|(k, _)| blocking.contains(&k.thread))
            .map(|(_, c)| c)
            .sum();
        let blocked: u64 = raw
            .table
            .iter()
            .filter(|(k, _)| blocking.contains(&k.thread) && k.end == WalkEnd::Blocked)
            .map(|(_, c)| c)
            .sum();
        println!(
            "measured: {mode:?} mode ({:?}): {} EINTR in {} blocking calls; the thread got {samples} \
             samples, {blocked} of them blocked (not interrupted), {} reused",
            raw.stats.clock, profiled.eintr, profiled.calls, raw.stats.reused_samples
        );
        if raw.stats.clock == SampleClock::Perf || mode == Mode::Wall {
            // Each thread's timer raises the signal only while it runs
            // user code (exclude_kernel): never inside a blocking call. In
            // wall mode a request's CPU timer fires on a tick of the
            // thread's running and raises its signal on the way back to
            // user space: never inside one either. Not a chance count: one
            // EINTR more than without the profiler is the bug.
            assert_eq!(
                profiled.eintr, alone.eintr,
                "{mode:?} mode: blocking calls failed with EINTR under the profiler"
            );
        } else {
            // The sampler thread signals only threads it finds running
            // (`R` in /proc), but a thread can enter a blocking call
            // between that look and the signal: what remains, documented
            // in docs/reliability.md. Without the look every call is
            // interrupted, so one in ten is far from chance. The EINTRs are
            // Binomial(300, e), e a call's chance to meet that race: 30 has P
            // under 1e-4 while e <= 4.9%.
            assert!(
                profiled.eintr <= alone.eintr + profiled.calls / 10,
                "{mode:?} mode on the sampler thread: {} of {} blocking calls failed with EINTR",
                profiled.eintr,
                profiled.calls
            );
        }
        // A survival check: the 100 ms spell before the rounds is ~100 whole
        // periods; none means the thread was not sampled.
        assert!(
            samples > 0,
            "{mode:?} mode: the blocking thread was sampled"
        );
        if mode == Mode::Wall {
            // Not random: each wall tick counts the thread off CPU, blocked 2
            // ms of each round for 3,000 rounds; none means they went uncounted.
            assert!(blocked + raw.stats.reused_samples > 0);
        }
    }
}

fn thread_keys(raw: &RawProfile, name: &str) -> Vec<u32> {
    raw.threads
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name == name)
        .map(|(i, _)| i as u32)
        .collect()
}

// ------------------------------------------------ signal blocked

/// The first number of `SigQ` in `/proc/self/status`: real-time signals
/// queued for this process's user.
fn queued_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("SigQ:")).unwrap();
    line[5..].trim().split('/').next().unwrap().parse().unwrap()
}

/// Signal masks: a thread that blocks the profiling signal (the daemon pattern:
/// everything blocked) is detected, never has more than one signal
/// outstanding, gets its lost samples counted (per thread), and the
/// process's queued-signal count does not grow. Where perf events are
/// allowed, no signal is involved: the kernel samples it into a ring
/// buffer like any other thread.
fn threads_blocking_the_signal_are_counted_not_queued() {
    for signal in [default_signal(), libc::SIGRTMAX() - 3] {
        let queued_before = queued_signals();
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU64::new(0));
        let blocker = {
            let (stop, tid) = (stop.clone(), tid.clone());
            thread::Builder::new()
                .name("blocks-all".into())
                .spawn(move || {
                    // SAFETY: blocking every signal in this thread.
                    unsafe {
                        let mut all = MaybeUninit::<libc::sigset_t>::zeroed();
                        libc::sigfillset(all.as_mut_ptr());
                        libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), std::ptr::null_mut());
                    }
                    tid.store(btprof_sampler::current_thread_id(), Ordering::Release);
                    spin_until(&stop);
                    // How many instances of the signal were queued for this
                    // thread: take them all (as a sigwait loop would).
                    let mut queued = 0u64;
                    // SAFETY: a set with the one signal, a zero timeout.
                    unsafe {
                        let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
                        libc::sigemptyset(set.as_mut_ptr());
                        libc::sigaddset(set.as_mut_ptr(), signal);
                        let zero = libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 0,
                        };
                        while libc::sigtimedwait(set.as_ptr(), std::ptr::null_mut(), &zero)
                            == signal
                        {
                            queued += 1;
                        }
                    }
                    queued
                })
                .unwrap()
        };
        while tid.load(Ordering::Acquire) == 0 {
            thread::yield_now();
        }
        let sampler = Sampler::start(SamplerConfig {
            signal: Some(signal),
            ..config(1000, Mode::Cpu)
        })
        .expect("start");
        let mut most_queued = 0;
        let end = Instant::now() + Duration::from_millis(600);
        while Instant::now() < end {
            most_queued = most_queued.max(queued_signals().saturating_sub(queued_before));
            thread::sleep(Duration::from_millis(20));
        }
        // Its queue is read before stop, which discards what is pending.
        stop.store(true, Ordering::Relaxed);
        let queued = blocker.join().unwrap();
        let raw = sampler.stop().expect("stop");
        let tid = tid.load(Ordering::Acquire);
        let lost = raw
            .stats
            .thread_cpu
            .iter()
            .find(|t| t.tid == tid)
            .map_or(0, |t| t.signal_blocked);
        let sampled: u64 = raw
            .table
            .iter()
            .filter(|(k, _)| raw.threads[k.thread as usize].tid == tid)
            .map(|(_, c)| c)
            .sum();
        println!(
            "measured: signal {signal}, {:?}: the thread blocking it lost {lost} samples (counted), \
             got {sampled}; {queued} queued for it (the user's queue grew by at most \
             {most_queued}, other processes included); {} failed samples",
            raw.stats.clock, raw.stats.failed_samples
        );
        if raw.stats.ring_threads > 0 {
            assert_eq!(lost, 0, "no signal, so none lost to its mask");
            // Not random: its whole periods as it spins through the 600 ms;
            // 50 needs 8% of a CPU. A survival bar: a ring thread unsampled.
            assert!(sampled > 50, "sampled into a ring: {sampled}");
        } else {
            // Not random: each period it runs is lost to its mask and counted;
            // 50 needs 8% of a CPU over the 600 ms; none means they went uncounted.
            assert!(lost > 50, "its lost samples are counted per thread: {lost}");
            assert_eq!(sampled, 0);
            assert!(raw.stats.signal_blocked_samples >= lost);
        }
        // Not random: the sampler never has two signals out for a thread,
        // and a real-time signal queues each send: two or more is the bug.
        assert!(
            queued <= 1,
            "{queued} signals were queued for the blocking thread"
        );
    }
}

/// Signal masks, the other way round: while btprof's handler runs, the kernel
/// blocks the profiling signal for that thread (the handler's `sa_mask`),
/// so its `SigBlk` looks like that of a thread that blocks the signal. A
/// thread looked at in that moment, after a spell without samples, must
/// not be taken for one: its timer was closed and its samples counted as
/// lost (tests of periodic dumps lost a fifth of their samples this way).
/// Here every handler of the busy thread takes 50 ms of CPU (a test hook standing in for a
/// slow walk), so the busy thread goes 50 periods between two samples and
/// is inside the handler nearly all the time. (Its timer fires again
/// during each handler, so it re-enters at once and makes no progress of
/// its own: it is stopped from outside, by its CPU clock.)
fn a_thread_inside_the_handler_is_not_taken_for_one_blocking_the_signal() {
    use std::os::unix::thread::JoinHandleExt;
    const HANDLER_CPU: Duration = Duration::from_millis(50);
    const WORK_CPU: Duration = Duration::from_millis(1500);
    let tid = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = Sampler::start(config(1000, Mode::Cpu)).expect("start");
    let worker = {
        let (tid, stop) = (tid.clone(), stop.clone());
        thread::Builder::new()
            .name("in-handler".into())
            .spawn(move || {
                let me = btprof_sampler::current_thread_id();
                // Only this thread's handlers are slow (others, such as the
                // main thread, must go on to end the test).
                btprof_sampler::test_hooks::set_handler_delay(me, HANDLER_CPU);
                tid.store(me, Ordering::Release);
                spin_until(&stop)
            })
            .unwrap()
    };
    // Its CPU time, handler included: a busy machine only makes this take
    // longer.
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is alive until joined below; valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(worker.as_pthread_t(), &mut clock) };
    assert_eq!(rc, 0);
    let worker_cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and out-pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    };
    // (Or 10 s: in its handler loop the thread spends most of its time in
    // the kernel, and its clock can lag behind its timer's count.)
    let give_up = Instant::now() + Duration::from_secs(10);
    while worker_cpu() < WORK_CPU && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(20));
    }
    btprof_sampler::test_hooks::set_handler_delay(0, Duration::ZERO);
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let raw = sampler.stop().expect("stop");
    check_clock(&raw);
    let tid = tid.load(Ordering::Acquire);
    let lost = raw
        .stats
        .thread_cpu
        .iter()
        .find(|t| t.tid == tid)
        .map_or(0, |t| t.signal_blocked);
    let sampled: u64 = raw
        .table
        .iter()
        .filter(|(k, _)| raw.threads[k.thread as usize].tid == tid)
        .map(|(_, c)| c)
        .sum();
    let cpu = raw.stats.cpu_of(tid).unwrap_or_default();
    println!(
        "measured: a thread inside a {} ms handler for {:.0} ms of CPU: {sampled} samples, \
         {lost} counted as lost to a blocked signal ({} in all)",
        HANDLER_CPU.as_millis(),
        cpu.as_secs_f64() * 1e3,
        raw.stats.signal_blocked_samples
    );
    assert_eq!(
        lost, 0,
        "a thread inside btprof's handler was taken for one blocking the signal"
    );
    assert_eq!(raw.stats.signal_blocked_samples, 0);
    // A sample per handler visit on the timers (WORK_CPU / HANDLER_CPU =
    // 30, less the visit cut off by the end): a closed timer would leave
    // far fewer. (The sampler thread weighs a sample by the periods owed.)
    // Whole 50 ms visits, not chance; half leaves room for the 10 s give-up.
    // A survival bar: `lost` above is what catches a closed timer.
    assert!(sampled >= 15, "only {sampled} samples");
}

// ------------------------------------------------ many idle threads

/// Many threads: in wall mode every thread of a process with 300 idle threads
/// gets its share of the samples, not the first ones every tick.
fn wall_mode_samples_every_one_of_300_idle_threads() {
    const THREADS: usize = 300;
    let _hogs = btprof_testkit::hogs::Hogs::start(2);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let started = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (rx, started) = (rx.clone(), started.clone());
            thread::Builder::new()
                .name(format!("idle-{i}"))
                .spawn(move || {
                    started.fetch_add(1, Ordering::Relaxed);
                    let _ = rx.lock().map(|r| r.recv());
                })
                .unwrap()
        })
        .collect();
    // A Rust thread names itself once it first runs: beside busy
    // processes one not yet scheduled when the sampler lists it is listed
    // under its creator's name (4 of 300 were, in a CI run). This case is
    // about how the samples spread, so every thread has run first.
    let since = Instant::now();
    while started.load(Ordering::Relaxed) < THREADS as u64 {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "threads never started"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let sampler = Sampler::start(config(200, Mode::Wall)).expect("start");
    thread::sleep(Duration::from_millis(600));
    let raw = sampler.stop().expect("stop");
    drop(tx);
    for h in handles {
        h.join().unwrap();
    }
    let mut per_thread = std::collections::HashMap::<u64, u64>::new();
    for (k, c) in raw.table.iter() {
        let t = &raw.threads[k.thread as usize];
        if t.name.starts_with("idle-") {
            *per_thread.entry(t.tid).or_default() += c;
        }
    }
    let mut counts: Vec<u64> = per_thread.values().copied().collect();
    counts.sort_unstable();
    let median = counts.get(counts.len() / 2).copied().unwrap_or(0);
    println!(
        "measured: {} of {THREADS} idle threads sampled; fewest {}, median {median}; {} slots-full, \
         {} reused, {} blocked marks",
        counts.len(),
        counts.first().copied().unwrap_or(0),
        raw.stats.slots_full,
        raw.stats.reused_samples,
        raw.stats.walk_ends[WalkEnd::Blocked as usize]
    );
    // Not random: each wall tick counts every idle thread off CPU, ~120
    // each at 200 Hz in 600 ms; a thread never counted is the bug.
    assert_eq!(counts.len(), THREADS, "every idle thread was sampled");
    // Not random, as above: all get the same ticks; half the median catches
    // the first threads taken each tick and the rest starved.
    assert!(
        counts[0] * 2 >= median,
        "the least sampled thread got under half the median: {} vs {median}",
        counts[0]
    );
}

// ------------------------------------------- many threads and mappings

/// Many threads and mappings: 5,000 idle threads and 4,000 more writable mappings (over
/// 9,000 in all, more than the 8,192 the region snapshot holds) beside 4
/// busy threads: the busy ones still get whole stacks (not just the leaf),
/// and the sampler thread stays under 10% of a core once it has listed
/// them all. Their rate per CPU-second is measured and printed.
/// `BTPROF_TEST_IDLE` and `BTPROF_TEST_MAPPINGS` scale it down by hand.
fn many_threads_and_mappings_keep_stacks_and_rate() {
    /// The busy threads' samples, whole walks and CPU time in `raw`.
    fn busy_samples(raw: &RawProfile) -> (u64, u64, Duration) {
        let busy_keys: Vec<u32> = (0..4)
            .flat_map(|i| thread_keys(raw, &format!("busy-{i}")))
            .collect();
        let (mut samples, mut whole) = (0u64, 0u64);
        for (k, c) in raw.table.iter() {
            if busy_keys.contains(&k.thread) {
                samples += c;
                if k.end == WalkEnd::Complete {
                    whole += c;
                }
            }
        }
        let mut busy_tids: Vec<u64> = busy_keys
            .iter()
            .map(|&k| raw.threads[k as usize].tid)
            .collect();
        busy_tids.dedup();
        let cpu = busy_tids.iter().filter_map(|&t| raw.stats.cpu_of(t)).sum();
        (samples, whole, cpu)
    }

    let scale = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let idle_threads = scale("BTPROF_TEST_IDLE", 5000);
    let mappings = scale("BTPROF_TEST_MAPPINGS", 4000);
    let page = 4096;
    // SAFETY: one anonymous reservation, then every other page made
    // readable and writable: `mappings` separate rw mappings (the
    // inaccessible page between two keeps the kernel from merging them).
    unsafe {
        let base = libc::mmap(
            std::ptr::null_mut(),
            2 * mappings * page,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        ) as *mut u8;
        assert_ne!(base as *mut libc::c_void, libc::MAP_FAILED);
        for i in 0..mappings {
            let p = base.add(2 * i * page);
            let rc = libc::mprotect(p.cast(), page, libc::PROT_READ | libc::PROT_WRITE);
            assert_eq!(rc, 0);
        }
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let idle: Vec<_> = (0..idle_threads)
        .map(|_| {
            let rx = rx.clone();
            thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let _ = rx.lock().map(|r| r.recv());
                })
                .unwrap()
        })
        .collect();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let rw = maps.lines().filter(|l| l.contains(" rw")).count();
    let sampler = Sampler::start(config(1000, Mode::Cpu)).expect("start");
    // User-mode loops (the per-thread timers exclude kernel time, so a
    // loop that keeps reading its clock, a system call, would get fewer
    // samples per CPU-second by design), until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..4)
        .map(|i| {
            let stop = stop.clone();
            thread::Builder::new()
                .name(format!("busy-{i}"))
                .spawn(move || spin_until(&stop))
                .unwrap()
        })
        .collect();
    // The sampler's first listing of 5,000 threads is a one-time cost;
    // what must stay under 10% of a core is the steady state: a new window
    // starts once it has listed them all, the busy ones and this one too.
    // (A listing that began before the busy threads existed does not have
    // them, and with 5,000 threads the next one comes about a second
    // later on the sampler-thread clock: the window measured then held a
    // second of their CPU time from before they were found, unsampled,
    // and it ended as that listing counted it: 11 samples in 1,183 ms.)
    let waited = Instant::now();
    let patience = Duration::from_secs(60);
    let every_thread = (idle_threads + busy.len() + 1) as u64;
    while sampler.progress().threads.load(Ordering::Relaxed) < every_thread
        && waited.elapsed() < patience
    {
        thread::sleep(Duration::from_millis(50));
    }
    // The sampler answers between ticks: on a loaded machine it may take
    // longer than `collect` waits.
    let first = loop {
        match sampler.collect(true) {
            Ok(window) => break Some(window),
            Err(_) if waited.elapsed() < patience => {}
            Err(_) => break None,
        }
    };
    // Then until the busy threads had 1.2 s of CPU between them, as the
    // sampler's clocks say (the machine may be busy).
    let cut = sampler.progress().sampled_cpu_ns.load(Ordering::Relaxed);
    while sampler.progress().sampled_cpu_ns.load(Ordering::Relaxed) < cut + 1_200_000_000
        && waited.elapsed() < patience
    {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        b.join().unwrap();
    }
    let raw = sampler.stop().expect("stop");
    drop(tx);
    for h in idle {
        h.join().unwrap();
    }
    check_clock(&raw);
    let (samples, whole, busy_cpu) = busy_samples(&raw);
    let rate = samples as f64 / busy_cpu.as_secs_f64();
    // The first window: while the sampler listed every thread. Timers are
    // opened for threads that run first, so the busy ones are sampled
    // before the idle ones have theirs.
    let (first_samples, _, first_cpu) = first.as_ref().map_or((0, 0, Duration::ZERO), busy_samples);
    let first_rate = first_samples as f64 / first_cpu.as_secs_f64().max(1e-9);
    println!(
        "measured: first window ({:.0} ms, while {} threads were listed): busy threads \
         {first_samples} samples, {first_rate:.0} samples per CPU-second of {:.0} ms",
        first
            .as_ref()
            .map_or(0.0, |w| w.stats.duration.as_secs_f64() * 1e3),
        idle_threads + 5,
        first_cpu.as_secs_f64() * 1e3,
    );
    let sampler_share = raw.stats.sampler_cpu.as_secs_f64() / raw.stats.duration.as_secs_f64();
    println!(
        "measured: {} threads, {rw} rw mappings: busy threads {samples} samples, {whole} whole \
         walks, {rate:.0} samples per CPU-second of {:.0} ms; sampler thread {:.1}% of a core \
         ({} ticks, {} missed)",
        idle_threads + 5,
        busy_cpu.as_secs_f64() * 1e3,
        sampler_share * 100.0,
        raw.stats.ticks,
        raw.stats.missed_ticks
    );
    if idle_threads >= 5000 && mappings >= 4000 {
        assert!(
            rw > 8192,
            "the test needs more rw mappings than the snapshot holds: {rw}"
        );
    }
    // A precondition, not random: 1.2 s of the busy threads' CPU is ~1,200
    // whole periods; 50 makes the share below judge something.
    assert!(samples > 50, "the busy threads were sampled: {samples}");
    // Not random: user loops with frame pointers, walked whole from any
    // sample; a snapshot that drops their stacks among the 9,000 mappings
    // (the bug) cuts every walk. 10% is slack, not a chance tail.
    assert!(
        whole * 10 >= samples * 9,
        "{whole} of {samples} walks whole"
    );
    // The rate is reported, not asserted: with 5,000 idle threads the
    // per-thread timers are opened for every thread at the first listing,
    // which takes the sampler thread seconds on a loaded machine (samples
    // that fill the slots meanwhile are lost), and the CPU of a thread
    // that exits between two listings is not all accounted. Left open.
    // Under 10% of a core on the per-thread timers. The sampler-thread
    // fallback ticks at the full rate and reads /proc for every due sample
    // (is the thread running?): in this debug build on a loaded machine it
    // measured 6-11%, so it is held to 20%. A cost, not a chance count: a
    // margin over that; reading every thread's clock each tick would cost
    // more than the period (see `signal_due_threads`).
    let limit = if raw.stats.clock == SampleClock::Perf {
        0.10
    } else {
        0.20
    };
    assert!(
        sampler_share < limit,
        "sampler thread used {:.1}% of a core",
        sampler_share * 100.0
    );
}
