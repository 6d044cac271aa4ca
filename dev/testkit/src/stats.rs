//! Bars for tests that assert a count, a rate or a share of random
//! samples, each with a stated false-failure probability, and the rule
//! for a run whose machine was too starved to judge.
//!
//! A sampling profiler's counts are random: which period a sample falls
//! in, which frame it lands in, whether a busy machine delays the
//! sampler. A bar picked by eye either fails by chance on a loaded CI
//! runner or is too loose to catch the loss it guards. So a test states
//! the distribution its count follows and takes its bar from here, at
//! [`ALPHA`] unless it says why not; the derivation sits in a short
//! comment at the assertion. Exact tails (summed in log space) rather
//! than normal approximations: the counts are often small, where the
//! normal approximation's tail is far off.

use std::io::Write;

/// The false-failure probability the suite allows each statistical
/// assertion: 1 in 10,000. With a few hundred such assertions, each at
/// its bar, a suite run would fail by chance at most about once in
/// thirty; most counts sit well inside their bars, so far less often.
pub const ALPHA: f64 = 1e-4;

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, nine terms: about 15 digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// `P(X = k)` for `X ~ Binomial(n, p)`.
pub fn binomial_pmf(n: u64, p: f64, k: u64) -> f64 {
    if k > n {
        return 0.0;
    }
    if p <= 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return if k == n { 1.0 } else { 0.0 };
    }
    let (n, k) = (n as f64, k as f64);
    (ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
        + k * p.ln()
        + (n - k) * (1.0 - p).ln())
    .exp()
}

/// `P(X = k)` for `X ~ Poisson(mean)`.
pub fn poisson_pmf(mean: f64, k: u64) -> f64 {
    if mean <= 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    let k = k as f64;
    (k * mean.ln() - mean - ln_gamma(k + 1.0)).exp()
}

/// The largest `k` with `P(X < k) <= alpha` where `P(X = i) = pmf(i)` on
/// `0..=last`: a count below it happens by chance at most `alpha` of the
/// time.
fn lower_tail_bound(last: u64, alpha: f64, pmf: impl Fn(u64) -> f64) -> u64 {
    let mut below = 0.0;
    for k in 0..=last {
        below += pmf(k);
        if below > alpha {
            return k;
        }
    }
    last
}

/// The smallest `k` with `P(X > k) <= alpha` (see [`lower_tail_bound`]),
/// summing the upper tail from `last` down (`last` far enough out that
/// the mass beyond it is negligible).
fn upper_tail_bound(last: u64, alpha: f64, pmf: impl Fn(u64) -> f64) -> u64 {
    let mut above = 0.0;
    for k in (0..=last).rev() {
        above += pmf(k);
        if above > alpha {
            return k;
        }
    }
    0
}

/// The least count `k` a `Binomial(n, p)` count reaches but with
/// probability at most `alpha`: assert `count >= binomial_lower_bound(..)`.
/// For `n` independent samples each landing where the test looks with
/// probability `p` (a function's share, a thread's share).
pub fn binomial_lower_bound(n: u64, p: f64, alpha: f64) -> u64 {
    lower_tail_bound(n, alpha, |k| binomial_pmf(n, p, k))
}

/// The most a `Binomial(n, p)` count exceeds but with probability at
/// most `alpha`: assert `count <= binomial_upper_bound(..)`.
pub fn binomial_upper_bound(n: u64, p: f64, alpha: f64) -> u64 {
    upper_tail_bound(n, alpha, |k| binomial_pmf(n, p, k))
}

/// The least count a `Poisson(mean)` count reaches but with probability
/// at most `alpha`: for events that come at random moments at a known
/// average (signals at random times, samples of threads whose CPU the
/// test cannot split into whole periods).
pub fn poisson_lower_bound(mean: f64, alpha: f64) -> u64 {
    lower_tail_bound(poisson_last(mean), alpha, |k| poisson_pmf(mean, k))
}

/// The most a `Poisson(mean)` count exceeds but with probability at most
/// `alpha`.
pub fn poisson_upper_bound(mean: f64, alpha: f64) -> u64 {
    upper_tail_bound(poisson_last(mean), alpha, |k| poisson_pmf(mean, k))
}

/// A count past which a `Poisson(mean)` tail holds under 1e-300 of
/// the mass.
fn poisson_last(mean: f64) -> u64 {
    (mean + 40.0 * mean.sqrt() + 100.0).ceil() as u64
}

/// `z` with `P(Z > z) = alpha` for a standard normal `Z` (`alpha` in
/// `(0, 0.5]`), by bisection on the complementary error function.
pub fn normal_upper_quantile(alpha: f64) -> f64 {
    assert!(alpha > 0.0 && alpha <= 0.5, "alpha {alpha} out of (0, 0.5]");
    let (mut lo, mut hi) = (0.0f64, 40.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if normal_upper_tail(mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// `P(Z > z)` for a standard normal `Z` and `z >= 0`: the density
/// integrated below 1, the Mills ratio's continued fraction above
/// (which converges slowly near 0).
fn normal_upper_tail(z: f64) -> f64 {
    if z < 1.0 {
        // Small z: integrate the density with Simpson's rule.
        let steps = 2000;
        let h = z / steps as f64;
        let density = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let mut sum = density(0.0) + density(z);
        for i in 1..steps {
            let w = if i % 2 == 1 { 4.0 } else { 2.0 };
            sum += w * density(i as f64 * h);
        }
        return 0.5 - sum * h / 3.0;
    }
    // Mills ratio R(z) = 1 / (z + 1 / (z + 2 / (z + 3 / (z + ...)))).
    let mut fraction = z;
    for k in (1..=200).rev() {
        fraction = z + k as f64 / fraction;
    }
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt() / fraction
}

/// How far a share measured from `n` independent samples may stray from
/// its true value `p`, either way, with probability at most `alpha`
/// (normal approximation of the binomial: `n p (1 - p)` should be 10 or
/// more). In share units (0.03 is three points).
pub fn share_tolerance(n: u64, p: f64, alpha: f64) -> f64 {
    normal_upper_quantile(alpha / 2.0) * (p * (1.0 - p) / n as f64).sqrt()
}

/// What one attempt of a test that needs CPU time found.
pub enum Attempt<T> {
    /// The run got enough to judge: the test asserts on this.
    Judge(T),
    /// The machine was too starved to judge (the reason, with what was
    /// measured): the attempt is thrown away and the test runs again.
    Starved(String),
}

/// Attempts a test may make before a machine that stays too starved
/// fails it: the first, and two more.
pub const ATTEMPTS: u32 = 3;

/// Runs `attempt` (given its number, from 1) until it finds enough CPU
/// to judge, at most [`ATTEMPTS`] times, and returns what it measured.
/// Each starved attempt is printed with its reason and appended to the
/// file `BTPROF_RERUN_LOG` names (the suite counts them in its summary);
/// a machine starved every time fails the test, never passes it
/// silently.
pub fn judge<T>(what: &str, attempt: impl FnMut(u32) -> Attempt<T>) -> T {
    judge_logging_to(what, attempt, record_rerun)
}

/// [`judge`], with each starved attempt's line handed to `log`.
fn judge_logging_to<T>(
    what: &str,
    mut attempt: impl FnMut(u32) -> Attempt<T>,
    mut log: impl FnMut(&str),
) -> T {
    let mut reasons = Vec::new();
    for n in 1..=ATTEMPTS {
        match attempt(n) {
            Attempt::Judge(measured) => return measured,
            Attempt::Starved(reason) => {
                let line =
                    format!("{what}: attempt {n} of {ATTEMPTS} too starved to judge: {reason}");
                println!("RERUN {line}");
                eprintln!("RERUN {line}");
                log(&line);
                reasons.push(reason);
            }
        }
    }
    panic!(
        "{what}: the machine stayed too starved to judge in {ATTEMPTS} attempts: {}",
        reasons.join("; ")
    );
}

/// Appends `line` to the suite's rerun log, if it keeps one.
fn record_rerun(line: &str) {
    let Some(path) = std::env::var_os("BTPROF_RERUN_LOG") else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_gamma_matches_factorials() {
        let mut factorial = 1.0f64;
        for n in 1..30u32 {
            factorial *= n as f64;
            let got = ln_gamma(n as f64 + 1.0);
            assert!((got - factorial.ln()).abs() < 1e-9, "ln {n}! = {got}");
        }
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }

    #[test]
    fn binomial_bounds_match_exact_tails() {
        // Binomial(100, 0.5): P(X <= 31) = 9.16e-5, P(X <= 32) = 2.04e-4
        // (exact sums), and the same tails above 68 and 67.
        assert_eq!(binomial_lower_bound(100, 0.5, 1e-4), 32);
        assert_eq!(binomial_upper_bound(100, 0.5, 1e-4), 68);
        let below: f64 = (0..=31).map(|k| binomial_pmf(100, 0.5, k)).sum();
        assert!((below - 9.157e-5).abs() < 0.001e-5, "{below}");
        // The edges.
        assert_eq!(binomial_lower_bound(10, 1.0, 1e-4), 10);
        assert_eq!(binomial_lower_bound(10, 0.0, 1e-4), 0);
    }

    #[test]
    fn poisson_bounds_match_exact_tails() {
        // Poisson(10): P(X <= 1) = 5.0e-4 > 1e-4 >= P(X <= 0) = 4.5e-5.
        assert_eq!(poisson_lower_bound(10.0, 1e-4), 1);
        // P(X > 23) = 1.2e-4, P(X > 24) = 4.7e-5.
        assert_eq!(poisson_upper_bound(10.0, 1e-4), 24);
        // Poisson(120): P(X <= 80) <= 1e-4 < P(X <= 81).
        assert_eq!(poisson_lower_bound(120.0, ALPHA), 81);
    }

    #[test]
    fn normal_quantiles_are_the_tabled_ones() {
        for (alpha, z) in [
            (0.5, 0.0),
            (0.025, 1.959_964),
            (1e-4, 3.719_016),
            (5e-5, 3.890_592),
        ] {
            let got = normal_upper_quantile(alpha);
            assert!((got - z).abs() < 1e-5, "z({alpha}) = {got}, not {z}");
        }
        // Binomial(10_000, 0.2): sd 0.004 of share; two-sided 1e-4 is
        // 3.89 sd.
        let t = share_tolerance(10_000, 0.2, 1e-4);
        assert!((t - 0.015_562).abs() < 1e-5, "{t}");
    }

    #[test]
    fn a_starved_machine_runs_again_then_fails() {
        // Not `judge`: this test's starved attempts are not the suite's.
        let mut logged = Vec::new();
        let got = judge_logging_to(
            "two starved, then judged",
            |n| {
                if n < 3 {
                    Attempt::Starved(format!("attempt {n}"))
                } else {
                    Attempt::Judge(n * 10)
                }
            },
            |line| logged.push(line.to_owned()),
        );
        assert_eq!(got, 30);
        assert_eq!(logged.len(), 2, "{logged:?}");
        assert!(logged[1].contains("attempt 2 of 3"), "{logged:?}");
        let always = std::panic::catch_unwind(|| {
            judge_logging_to::<()>(
                "always starved",
                |_| Attempt::Starved("no CPU".into()),
                |_| {},
            )
        });
        assert!(always.is_err(), "a machine that stays starved must fail");
    }
}
