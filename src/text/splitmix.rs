//! The one seeded generator of the repository's synthetic inputs: the unit
//! and integration tests, the benches and the examples draw from it (the
//! tests through `tests/common/rng.rs`), so a seed means the same stream
//! everywhere. Not for production randomness (the random partitioner and
//! [`mix64`](super::mix64) keep their own).

/// splitmix64: a small seeded generator, so generated inputs are
/// reproducible. The field is the state; `SplitMix(seed)` starts a stream.
///
/// # Examples
/// ```
/// use floe::text::SplitMix;
///
/// let (mut a, mut b) = (SplitMix(7), SplitMix(7));
/// assert_eq!(a.next(), b.next());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    // A generator, not an iterator: callers want the bits, never `None`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u64) -> bool {
        self.below(1000) < permille
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo) as u64 + 1) as i64
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// One of `keys` keys `k0`, `k1`, ...
    pub fn key(&mut self, keys: u64) -> String {
        format!("k{}", self.below(keys))
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix;

    /// The reference splitmix64 outputs for seed 1234567 (from the
    /// algorithm's published C code): a change to the stream shows here.
    #[test]
    fn the_stream_is_splitmix64() {
        let mut r = SplitMix(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| r.next()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }
}
