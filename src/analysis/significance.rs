//! Is a change in a function's share more than sampling noise?
//!
//! A profile of `n` samples in which a function was seen `k` times
//! estimates its share as `k / n`; if samples were independent draws, `k`
//! would be binomial. Two runs are compared with the pooled two-proportion
//! z-test: under "both runs have the same share", the difference of the
//! two estimates divided by its standard error is close to a standard
//! normal, and the one-sided p-value is the normal upper tail.
//!
//! Samples of a real program are not independent (a long call is hit by
//! several consecutive ticks), which makes the test overconfident when a
//! program's phases vary from run to run; the diff's threshold in
//! percentage points is the guard against that (see [`super`]).
//!
//! With several runs per side the spread between runs is measured instead
//! of assumed: [`welch_t`] compares the per-run shares of the two sides
//! without assuming they vary alike, and [`student_t_upper_tail`] turns
//! its statistic into a p-value.

/// The pooled two-proportion z statistic of `new_hits / new_n` against
/// `base_hits / base_n`: positive when the share grew.
///
/// 0 when either run has no samples or the pooled share is 0 or 1 (no
/// variation, so no evidence of a change).
pub fn two_proportion_z(base_hits: u64, base_n: u64, new_hits: u64, new_n: u64) -> f64 {
    if base_n == 0 || new_n == 0 {
        return 0.0;
    }
    let (n1, n2) = (base_n as f64, new_n as f64);
    let (p1, p2) = (base_hits as f64 / n1, new_hits as f64 / n2);
    let pooled = (base_hits as f64 + new_hits as f64) / (n1 + n2);
    let variance = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2);
    if variance <= 0.0 {
        return 0.0;
    }
    (p2 - p1) / variance.sqrt()
}

/// `P(Z >= z)` for a standard normal `Z`: the one-sided p-value of `z`.
pub fn normal_upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function, to a relative error under 1.2e-7
/// everywhere, small tails included (Chebyshev fit of `erfc(x) e^(x^2)`,
/// Numerical Recipes' `erfcc`). Relative accuracy in the tail matters: the
/// regression gate compares p-values with levels like 1e-5.
fn erfc(x: f64) -> f64 {
    let ax = x.abs();
    let t = 1.0 / (1.0 + 0.5 * ax);
    const C: [f64; 10] = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    // Horner's rule over the coefficients, highest power first.
    let poly = C.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    let tail = t * (-ax * ax + poly).exp();
    if x >= 0.0 {
        tail
    } else {
        2.0 - tail
    }
}

/// Welch's t statistic of the mean of `new` against the mean of `base`
/// (positive when it grew) and its Welch-Satterthwaite degrees of freedom,
/// or `None` with fewer than two values on a side.
///
/// Welch's form rather than Student's pooled one: a function's spread
/// differs between the sides exactly when a change makes it noisier (a
/// new lock, a cache that now misses), and the pooled test is wrong then.
/// When neither side varies at all (beyond rounding) the statistic is
/// infinite (either sign) if the means differ and 0 if they do not, with
/// `n - 2` degrees of freedom.
pub fn welch_t(base: &[f64], new: &[f64]) -> Option<(f64, f64)> {
    if base.len() < 2 || new.len() < 2 {
        return None;
    }
    let (mb, vb) = mean_and_variance(base);
    let (mn, vn) = mean_and_variance(new);
    let (nb, nn) = (base.len() as f64, new.len() as f64);
    let (sb, sn) = (vb / nb, vn / nn);
    let se2 = sb + sn;
    let difference = mn - mb;
    // Equal shares can differ in their last bits once averaged (0.1 three
    // times has a mean a hair above 0.1): below a millionth of a
    // millionth of the values, a spread is rounding, not runs varying.
    let rounding = mb.abs().max(mn.abs()) * 1e-12;
    if se2 <= rounding * rounding {
        let df = nb + nn - 2.0;
        return Some(if difference == 0.0 {
            (0.0, df)
        } else {
            (f64::INFINITY.copysign(difference), df)
        });
    }
    let df = se2 * se2 / (sb * sb / (nb - 1.0) + sn * sn / (nn - 1.0));
    Some((difference / se2.sqrt(), df))
}

/// The mean and the sample variance (divided by `n - 1`) of `values`,
/// which holds at least two.
pub fn mean_and_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let squares: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    (mean, squares / (n - 1.0).max(1.0))
}

/// `P(T >= t)` for Student's t distribution with `df` degrees of freedom
/// (`df` need not be whole, as Welch's are not): the one-sided p-value
/// of `t`.
///
/// Through the regularized incomplete beta function,
/// `P(|T| >= t) = I_x(df/2, 1/2)` with `x = df / (df + t^2)`, which keeps
/// its relative accuracy far into the tail, where the gate's levels are.
pub fn student_t_upper_tail(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t == f64::INFINITY {
        return 0.0;
    }
    if t == f64::NEG_INFINITY {
        return 1.0;
    }
    let x = df / (df + t * t);
    let both_tails = regularized_incomplete_beta(0.5 * df, 0.5, x);
    if t >= 0.0 {
        0.5 * both_tails
    } else {
        1.0 - 0.5 * both_tails
    }
}

/// `I_x(a, b)`, the regularized incomplete beta function, for `a, b > 0`
/// and `0 <= x <= 1`: by its continued fraction (modified Lentz), on the
/// side of `x` where that converges fast (Numerical Recipes' `betai`).
fn regularized_incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of the incomplete beta function, evaluated by
/// the modified Lentz method until a term changes it by under 1e-15.
fn beta_continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let clamp = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / clamp(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / clamp(1.0 + even * d);
        c = clamp(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / clamp(1.0 + odd * d);
        c = clamp(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// `ln Γ(x)` for `x > 0`, to about 1e-15 relative (Lanczos, g = 7, nine
/// terms; reflection is not needed: the t tail only asks for positive
/// arguments).
fn ln_gamma(x: f64) -> f64 {
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
    let x = x - 1.0;
    let mut sum = C[0];
    for (i, &c) in C.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        ((got - want) / want).abs() < 1e-6
    }

    #[test]
    fn upper_tail_matches_tables() {
        // (z, P(Z >= z)) from standard normal tables.
        let table = [
            (0.0, 0.5),
            (1.0, 0.158_655_253_931_457_05),
            (1.959_963_984_540_054, 0.025),
            (3.090_232_306_167_813_6, 0.001),
            (4.264_890_793_922_825, 1e-5),
            (6.0, 9.865_876_450_376_98e-10),
            (-1.644_853_626_951_472_2, 0.95),
        ];
        for (z, p) in table {
            let got = normal_upper_tail(z);
            assert!(close(got, p), "P(Z >= {z}) = {got:e}, want {p:e}");
        }
        assert_eq!(normal_upper_tail(f64::INFINITY), 0.0);
        assert!(normal_upper_tail(40.0) < 1e-300);
    }

    #[test]
    fn z_is_the_difference_over_its_pooled_standard_error() {
        // 10% of 5000 against 20% of 5000: pooled 15%,
        // se = sqrt(0.15 * 0.85 * 2 / 5000) = 0.0071414.
        let z = two_proportion_z(500, 5000, 1000, 5000);
        assert!((z - 0.1 / 0.007_141_428_4).abs() < 1e-4, "{z}");
        assert!(two_proportion_z(1000, 5000, 500, 5000) < 0.0);
        // Same share, different run lengths: no change.
        assert_eq!(two_proportion_z(100, 1000, 300, 3000), 0.0);
    }

    #[test]
    fn no_variation_is_no_evidence() {
        assert_eq!(two_proportion_z(0, 100, 0, 100), 0.0);
        assert_eq!(two_proportion_z(100, 100, 50, 50), 0.0);
        assert_eq!(two_proportion_z(0, 0, 5, 10), 0.0);
    }

    #[test]
    fn t_upper_tail_matches_values_computed_independently() {
        // (t, df, P(T >= t)), from mpmath's betainc at 40 digits.
        let table = [
            (1.0, 1.0, 0.25),
            (2.5, 4.0, 0.03338327240599407),
            (7.173_182, 4.0, 0.0010000001151678286),
            (10.0, 2.0, 0.004926228511662845),
            (3.1, 2.7, 0.030_640_885_265_177_15),
            (-1.5, 3.3, 0.8887484016403541),
            (0.5, 30.0, 0.31036150244256366),
            (50.0, 4.0, 4.78722682848485e-07),
            (4.0, 1000.0, 3.400495960439079e-05),
        ];
        for (t, df, p) in table {
            let got = student_t_upper_tail(t, df);
            assert!(close(got, p), "P(T_{df} >= {t}) = {got:e}, want {p:e}");
        }
        assert_eq!(student_t_upper_tail(0.0, 3.0), 0.5);
        assert_eq!(student_t_upper_tail(f64::INFINITY, 2.0), 0.0);
        assert_eq!(student_t_upper_tail(f64::NEG_INFINITY, 2.0), 1.0);
        assert!(student_t_upper_tail(1.0, 0.0).is_nan());
    }

    #[test]
    fn welch_t_matches_values_computed_independently() {
        // (base, new, t, df, P(T >= t)), from mpmath at 40 digits.
        // (base, new, t, df, p)
        type Case<'a> = (&'a [f64], &'a [f64], f64, f64, f64);
        let cases: [Case; 3] = [
            (
                &[0.20, 0.21, 0.19],
                &[0.23, 0.22, 0.235],
                3.9000674757995517,
                3.740932642487046,
                0.00995516981735741,
            ),
            (
                &[10.0, 11.0, 13.0, 9.0],
                &[12.0, 15.0, 14.0],
                2.3759548165574573,
                4.733990147783251,
                0.033174816580639886,
            ),
            // One side without spread: all of it is the other side's.
            (
                &[0.1, 0.1, 0.1],
                &[0.12, 0.13, 0.14],
                5.196152422706627,
                2.0,
                0.017549359322992356,
            ),
        ];
        for (base, new, t, df, p) in cases {
            let (got_t, got_df) = welch_t(base, new).unwrap();
            assert!(close(got_t, t), "{base:?} {new:?}: t {got_t}, want {t}");
            assert!(
                close(got_df, df),
                "{base:?} {new:?}: df {got_df}, want {df}"
            );
            let got_p = student_t_upper_tail(got_t, got_df);
            assert!(close(got_p, p), "{base:?} {new:?}: p {got_p:e}, want {p:e}");
            // Swapping the sides flips the sign, not the degrees of freedom.
            let (back, back_df) = welch_t(new, base).unwrap();
            assert!(close(-back, t) && close(back_df, df));
        }
    }

    #[test]
    fn welch_t_without_spread_or_runs() {
        assert_eq!(welch_t(&[0.1], &[0.2, 0.3]), None);
        assert_eq!(welch_t(&[0.1, 0.1], &[0.1, 0.1]), Some((0.0, 2.0)));
        assert_eq!(
            welch_t(&[0.1, 0.1, 0.1], &[0.2, 0.2, 0.2]),
            Some((f64::INFINITY, 4.0))
        );
        assert_eq!(
            welch_t(&[0.2, 0.2], &[0.1, 0.1]),
            Some((f64::NEG_INFINITY, 2.0))
        );
    }

    #[test]
    fn ln_gamma_matches_factorials_and_half_integers() {
        for (x, want) in [
            (1.0, 0.0),
            (0.5, std::f64::consts::PI.sqrt().ln()),
            (5.0, 24f64.ln()),
            (10.5, 1133278.3889487851f64.ln()),
        ] {
            let got = ln_gamma(x);
            assert!((got - want).abs() < 1e-12, "ln Γ({x}) = {got}, want {want}");
        }
    }
}
