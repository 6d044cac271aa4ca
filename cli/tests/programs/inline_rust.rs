//! A Rust program the record tests build outside the workspace, with
//! frame pointers and debug info: a hot `#[inline(always)]` function that
//! exists only as inline code in its `#[inline(never)]` caller, run until
//! the thread used the CPU seconds given as the first argument (its own
//! CPU clock, so a busy machine only makes the run longer).

use std::hint::black_box;

extern "C" {
    fn clock_gettime(clock: i32, time: *mut [i64; 2]) -> i32;
}

/// `CLOCK_THREAD_CPUTIME_ID` on Linux.
const THREAD_CPU: i32 = 3;

fn thread_cpu_seconds() -> f64 {
    let mut t = [0i64; 2];
    // SAFETY: a valid clock id and a `timespec`-shaped out-pointer.
    unsafe { clock_gettime(THREAD_CPU, &mut t) };
    t[0] as f64 + t[1] as f64 * 1e-9
}

#[inline(always)]
fn inlined_hot(x: u64) -> u64 {
    let mut x = x;
    for i in 0..10_000 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
    }
    x
}

#[inline(never)]
fn outer_caller(cpu_seconds: f64) -> u64 {
    let mut x = 1;
    while thread_cpu_seconds() < cpu_seconds {
        x = inlined_hot(x);
    }
    x
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    println!("{}", outer_caller(seconds));
}
