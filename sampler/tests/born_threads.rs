//! Threads born while sampling are sampled from birth: threads that live 2 ms have at least 90% of their CPU time captured.
//!
//! A thread used to be sampled only once a listing of the threads (every
//! 10 ms) found it and its timer opened, so 18-29% of the CPU time of 2 ms
//! threads was captured. On the per-thread timer path the threads alive at
//! start now carry inherited task-clock events whose copies sample every
//! thread they create, from its first instruction, into ring buffers.
//!
//! Checked here on that path, beside whatever load the machine has (the
//! count is per CPU time, so a busy machine changes nothing): short
//! threads, one after another, each spinning 2 ms of CPU in
//! `born_threads_spin`. Their samples times the period must come to
//! 90-110% of the CPU time they measured on their own clocks (on the perf
//! clock, widened by the time the host stole meanwhile), their CPU time
//! must be in the stats, and their stacks must hold the spin function
//! and reach the thread's entry.
//!
//! The sampler-thread fallback (no perf events) is held to the same (but
//! for kernel time in the threads' teardown, see the test) for every
//! thread it saw: it has no way to see a thread before a listing finds
//! it, so it lists the threads early when the process's CPU clock runs
//! ahead of the threads it knows (`unseen_cpu`), and counts what a thread
//! used after its last sample on that stack when it exits, from its debt
//! and the process's CPU clock (`exit_tails`). Without those it captured
//! 2-7% of these threads' time; with early listings alone, 20-48%. A
//! thread that comes and goes while the sampler thread waits for a CPU is
//! not seen at all: beside two busy processes its wakeups came 3-8 ms late
//! at times, and up to 27 of the 300 threads went unseen in a run. Those
//! must be few (a sixth at most), and their CPU time must be said: in the
//! stats' estimate of what no sample covered (checked on its own by
//! `unsampled_cpu.rs`).
#![cfg(target_os = "linux")]

use std::thread;
use std::time::Duration;

use btprof_sampler::{
    Mode, RawProfile, SampleClock, Sampler, SamplerConfig, FORCE_SAMPLER_THREAD_ENV,
};
use btprof_symbols::Resolver;

mod support;
use btprof_testkit::{spin_cpu, steal_time_all_cpus, thread_cpu, with_watchdog};
use support::frame_names;

/// Short threads, run one after another.
const THREADS: usize = 300;
/// CPU time each short thread spins.
const WORK: Duration = Duration::from_millis(2);
const NAME: &str = "born-short";
const HZ: u32 = 1000;

#[inline(never)]
fn born_threads_spin() -> u64 {
    // The clock is read every ~20 µs: its system calls are kernel time,
    // which cpu mode does not sample (user code only).
    spin_cpu(WORK, 20_000)
}

/// Runs one short thread; returns its id and the CPU time it used.
fn short_thread() -> (u64, Duration) {
    thread::Builder::new()
        .name(NAME.into())
        .spawn(|| {
            std::hint::black_box(born_threads_spin());
            (btprof_sampler::current_thread_id(), thread_cpu())
        })
        .unwrap()
        .join()
        .unwrap()
}

struct Capture {
    clock: SampleClock,
    /// The short threads' own CPU time.
    cpu: Duration,
    /// Their samples times the period.
    sampled: Duration,
    /// Their CPU time as the stats have it.
    in_stats: Duration,
    /// The threads the sampler never saw (none of their CPU time is in the
    /// stats), their CPU time, and the stats' estimate of the CPU time no
    /// sample covered.
    unseen: usize,
    unseen_cpu: Duration,
    unsampled: Duration,
    /// The CPU time of the threads it saw, and their samples times the
    /// period.
    seen_cpu: Duration,
    seen_sampled: Duration,
    samples: u64,
    /// Samples whose stack holds the spin function, and of those, the ones
    /// that reach the thread's entry.
    in_spin: u64,
    complete: u64,
    born_samples: u64,
    exit_samples: u64,
    timer_threads: u64,
    /// The time the host stole from all CPUs while the threads ran: the
    /// most by which the task clock can have counted more (or its timer
    /// skipped more) than the threads' CPU clocks.
    stolen: Duration,
}

fn run() -> Capture {
    let sampler = Sampler::start(SamplerConfig {
        hz: HZ,
        mode: Mode::Cpu,
        ..SamplerConfig::default()
    })
    .expect("start");
    let stolen_before = steal_time_all_cpus().unwrap_or_default();
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        threads.push(short_thread());
    }
    let stolen = steal_time_all_cpus()
        .unwrap_or_default()
        .saturating_sub(stolen_before);
    let raw = sampler.stop().expect("stop");
    tally(&raw, &threads, stolen)
}

fn tally(raw: &RawProfile, threads: &[(u64, Duration)], stolen: Duration) -> Capture {
    let mut resolver = Resolver::for_current_process().unwrap();
    let (mut samples, mut in_spin, mut complete) = (0, 0, 0);
    let mut of_thread: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for (key, count) in raw.table.iter() {
        let thread = &raw.threads[key.thread as usize];
        if thread.name != NAME {
            continue;
        }
        samples += count;
        *of_thread.entry(thread.tid).or_insert(0) += count;
        let names = frame_names(&mut resolver, key.frames);
        if names.iter().any(|n| n.ends_with("born_threads_spin")) {
            in_spin += count;
            if names
                .iter()
                .any(|n| n.contains("start_thread") || n.contains("clone"))
            {
                complete += count;
            }
        }
    }
    let period = Duration::from_secs(1) / HZ;
    let (seen, unseen): (Vec<&(u64, Duration)>, Vec<_>) = threads
        .iter()
        .partition(|&&(tid, _)| raw.stats.cpu_of(tid).is_some());
    let seen_samples: u64 = seen.iter().filter_map(|t| of_thread.get(&t.0)).sum();
    Capture {
        unseen: unseen.len(),
        unseen_cpu: unseen.iter().map(|t| t.1).sum(),
        unsampled: raw.stats.unsampled_cpu(),
        seen_cpu: seen.iter().map(|t| t.1).sum(),
        seen_sampled: period * seen_samples as u32,
        clock: raw.stats.clock,
        cpu: threads.iter().map(|t| t.1).sum(),
        sampled: period * samples as u32,
        in_stats: threads
            .iter()
            .filter_map(|&(tid, _)| raw.stats.cpu_of(tid))
            .sum(),
        samples,
        in_spin,
        complete,
        born_samples: raw.stats.born_samples,
        exit_samples: raw.stats.exit_samples,
        timer_threads: raw.stats.timer_threads,
        stolen,
    }
}

fn report(path: &str, c: &Capture) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "measured ({path}, {:?}): {THREADS} threads of {} ms CPU, {:.1} ms in all: \
         {} samples = {:.1} ms ({:.1}%), {:.1} ms of their time in the stats ({:.1}%); \
         {} samples in the spin function, {} of them reaching the thread's entry; \
         born samples {}, counted at exit {}, threads on a timer of their own {}; \
         {} threads never seen, {:.1} ms of CPU, of {:.1} ms no sample covered; \
         {:.0} ms stolen from all CPUs meanwhile",
        c.clock,
        WORK.as_millis(),
        ms(c.cpu),
        c.samples,
        ms(c.sampled),
        100.0 * c.sampled.as_secs_f64() / c.cpu.as_secs_f64(),
        ms(c.in_stats),
        100.0 * c.in_stats.as_secs_f64() / c.cpu.as_secs_f64(),
        c.in_spin,
        c.complete,
        c.born_samples,
        c.exit_samples,
        c.timer_threads,
        c.unseen,
        ms(c.unseen_cpu),
        ms(c.unsampled),
        ms(c.stolen),
    );
}

/// Runs the short threads on one path and checks what was captured; at
/// least `in_spin_percent` of the samples must hold the spin function.
fn check(path: &str, want: SampleClock, in_spin_percent: u64) {
    let c = run();
    report(path, &c);
    if c.clock != want {
        println!("NOT CHECKED: {path} are not available here (perf events refused)");
        return;
    }
    // On the rings every thread is sampled from birth; the sampler-thread
    // clock answers for the threads it saw, and says what the rest used.
    let (sampled, cpu) = match want {
        SampleClock::SamplerThread => {
            assert!(
                c.unseen * 6 <= THREADS,
                "{path}: {} of {THREADS} threads never seen",
                c.unseen
            );
            // What they used is said: their samples and the estimate of
            // what no sample covered (part of which the exits of threads
            // it saw take, on their last stacks) add up to their time.
            assert!(
                (c.sampled + c.unsampled).as_secs_f64() >= 0.9 * c.cpu.as_secs_f64(),
                "{path}: {:?} of samples and {:?} reported as covered by no sample, for {:?} \
                 of CPU time ({:?} of it on threads never seen)",
                c.sampled,
                c.unsampled,
                c.cpu,
                c.unseen_cpu
            );
            (c.seen_sampled, c.seen_cpu)
        }
        _ => (c.sampled, c.cpu),
    };
    let share = sampled.as_secs_f64() / cpu.as_secs_f64();
    // The rings are paced by the task clock, which counts the time the host
    // stole while a thread was on its CPU (`steal_time_all_cpus`); the CPU clock
    // leaves that out, and the timer skips the periods a long pause
    // overran. At most what all CPUs lost so meanwhile can have moved the
    // share either way. The sampler thread paces by the CPU clock itself.
    let allowance = match want {
        SampleClock::Perf => c.stolen.as_secs_f64() / cpu.as_secs_f64(),
        _ => 0.0,
    };
    // Not random sampling: each thread's samples are its whole periods,
    // and its last fraction of one a sample with that probability (at most
    // 0.25 of variance a thread: sd 8.7 of 600 for 300 threads, 1.4%, so
    // 3.9 sd either way, 1 in 10,000, is 5.6%). The 10% leaves 4.4 points
    // for periods a busy VM's task clock skips (a thread short one period
    // is 0.17% here; 8-20% of threads were seen so, 1.3-3.3%).
    if allowance > 0.5 {
        println!(
            "NOT CHECKED: {path}: the share of CPU time sampled, as the host took {:.0}% \
             of the threads' CPU time meanwhile",
            allowance * 100.0
        );
    } else {
        let (low, high) = (0.9 - allowance, 1.1 + allowance);
        assert!(
            (low..=high).contains(&share),
            "{path}: short threads' samples stand for {:.1}% of their CPU time, not {:.1}-{:.1}% \
             (90-110%, widened by the time stolen meanwhile)",
            share * 100.0,
            low * 100.0,
            high * 100.0
        );
    }
    assert!(
        c.in_stats.as_secs_f64() >= 0.9 * cpu.as_secs_f64(),
        "{path}: only {:?} of the short threads' {:?} of CPU time is in the stats",
        c.in_stats,
        cpu
    );
    // A bias bar, not a noise one: the samples outside the spin are the
    // threads' start and teardown, a share that load moves (see the
    // test's percentages), far beyond the noise of a share of 600.
    assert!(
        c.in_spin * 100 >= c.samples * in_spin_percent,
        "{path}: {} of {} samples hold the spin function, under {in_spin_percent}%",
        c.in_spin,
        c.samples
    );
    assert!(
        c.complete * 10 >= c.in_spin * 9,
        "{path}: {} of {} spin samples reach the thread's entry",
        c.complete,
        c.in_spin
    );
    // Every thread here is born under the inherited events, including one
    // a listing finds before its birth is read from the rings: none may be
    // handed to a signal timer of its own.
    if want == SampleClock::Perf {
        assert_eq!(
            c.timer_threads, 0,
            "{path}: threads born under the events were put on signal timers"
        );
    }
}

#[test]
fn threads_born_while_sampling_are_sampled_from_birth() {
    with_watchdog(
        &format!("{THREADS} short threads"),
        Duration::from_secs(120),
        || {
            check("per-thread timers", SampleClock::Perf, 90);
            // This binary runs this one test, and the sampler reads the
            // variable when it starts.
            std::env::set_var(FORCE_SAMPLER_THREAD_ENV, "1");
            // The fallback samples kernel time too (a thread's CPU clock
            // counts it), at the system call's return: a thread's teardown
            // (`munmap` of its signal stack, slow beside busy CPUs) took up
            // to 9% of the samples beside three CPU hogs. That time is not
            // in the CPU the threads measured before their end.
            check("sampler thread", SampleClock::SamplerThread, 85);
        },
    );
}
