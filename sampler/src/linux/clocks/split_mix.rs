//! Sebastiano Vigna's SplitMix64: well-mixed 64-bit values for tick jitter
//! and random rounding. Not for anything that needs secrecy.

#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in (0, 1] from 53 bits: never 0, so its log is finite.
    pub(crate) fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `part / whole` (always when `part >= whole`):
    /// a fraction of a period counts as a whole sample on average.
    pub(crate) fn chance(&mut self, part: u64, whole: u64) -> bool {
        self.next() % whole.max(1) < part
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chance_comes_out_at_its_fraction() {
        let mut rng = SplitMix64::new(1);
        let hits = (0..100_000).filter(|_| rng.chance(300, 1000)).count();
        assert!((29_000..31_000).contains(&hits), "{hits} of 100000");
        assert!(rng.chance(5, 5));
        assert!(!rng.chance(0, 5));
    }
}
