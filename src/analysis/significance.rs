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
}
