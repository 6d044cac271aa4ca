//! Seeded synthetic profiles for testing and benchmarking the diff: a
//! small deterministic PRNG and a "program" whose functions have known
//! shares, sampled like a profiler would.

/// SplitMix64: tiny, fast, and good enough to draw samples; seeded so a
/// failing trial can be replayed.
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose draws are fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: unbiased enough for test data.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A program: distinct stacks (folded, root first) with the probability
/// that a sample lands in each.
pub struct Program {
    /// Each stack, folded (`a;b;c`), with its probability.
    pub stacks: Vec<(String, f64)>,
}

impl Program {
    /// `leaves` leaf functions spread over a few callers and two threads.
    /// The first three leaves are dominant (about 30%, 20% and 10% of
    /// samples), the rest share what is left with decaying weights, like a
    /// real profile's long tail.
    pub fn typical(leaves: usize) -> Program {
        let mut weights: Vec<f64> = vec![0.30, 0.20, 0.10];
        let tail: Vec<f64> = (0..leaves.saturating_sub(3))
            .map(|i| 1.0 / (i as f64 + 2.0))
            .collect();
        let tail_sum: f64 = tail.iter().sum();
        weights.extend(tail.iter().map(|w| w / tail_sum * 0.40));
        let stacks = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let thread = if i % 2 == 0 { "worker-0" } else { "worker-1" };
                let caller = format!("app::module_{}::dispatch", i % 5);
                (format!("{thread};main;app::run;{caller};app::leaf_{i}"), w)
            })
            .collect();
        Program { stacks }
    }

    /// The same program with the stack at `index` taking `share` of the
    /// samples and the others scaled to make room.
    pub fn with_share(&self, index: usize, share: f64) -> Program {
        let others: f64 = self
            .stacks
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != index)
            .map(|(_, (_, w))| w)
            .sum();
        let stacks = self
            .stacks
            .iter()
            .enumerate()
            .map(|(i, (s, w))| {
                let w = if i == index {
                    share
                } else {
                    w / others * (1.0 - share)
                };
                (s.clone(), w)
            })
            .collect();
        Program { stacks }
    }

    /// `samples` independent samples as folded text (one line per stack
    /// that was hit).
    pub fn sample(&self, samples: u64, rng: &mut SplitMix64) -> String {
        let mut cumulative = Vec::with_capacity(self.stacks.len());
        let mut sum = 0.0;
        for (_, w) in &self.stacks {
            sum += w;
            cumulative.push(sum);
        }
        let last = self.stacks.len() - 1;
        let mut counts = vec![0u64; self.stacks.len()];
        for _ in 0..samples {
            let x = rng.next_f64() * sum;
            // Rounding can leave `x` at the very top: clamp to the last.
            let i = cumulative.partition_point(|&c| c <= x).min(last);
            counts[i] += 1;
        }
        let mut out = String::new();
        for ((stack, _), n) in self.stacks.iter().zip(counts) {
            if n > 0 {
                out.push_str(&format!("{stack} {n}\n"));
            }
        }
        out
    }
}
