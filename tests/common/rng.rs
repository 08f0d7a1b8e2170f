//! The seeded generator of every test input: splitmix64, and the
//! `key,timestamp_ms,value` lines the CLI window tests feed `floe run
//! window`. One copy, included by `tests/common/mod.rs`,
//! `tests/cli_common/mod.rs` and the test files that need only this.

#![allow(dead_code)]

/// splitmix64: a small seeded generator so test inputs are reproducible.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
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

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// One of `keys` keys `k0`, `k1`, ...
    pub fn key(&mut self, keys: u64) -> String {
        format!("k{}", self.below(keys))
    }
}

/// The shape of a [`window_input`].
#[derive(Clone, Copy, Debug)]
pub struct WindowInput {
    /// Number of lines.
    pub lines: usize,
    /// The clock before the first line.
    pub start: i64,
    /// The clock advances by `0..step` ms per line.
    pub step: u64,
    /// A line's timestamp is the clock minus `0..jitter` ms.
    pub jitter: u64,
    /// Keys `k0..k{keys - 1}`.
    pub keys: u64,
    /// Values in `low..=high`.
    pub low: i64,
    pub high: i64,
}

/// Seeded `key,timestamp_ms,value` lines of `shape` (timestamps rising with
/// jitter), and their events.
pub fn window_input(seed: u64, shape: &WindowInput) -> (String, Vec<(String, i64, i64)>) {
    let mut rng = SplitMix(seed);
    let mut events = Vec::with_capacity(shape.lines);
    let mut text = String::new();
    let mut now = shape.start;
    for _ in 0..shape.lines {
        now += rng.below(shape.step) as i64;
        let ts = now - rng.below(shape.jitter) as i64;
        let key = rng.key(shape.keys);
        let value = rng.range(shape.low, shape.high);
        text.push_str(&format!("{key},{ts},{value}\n"));
        events.push((key, ts, value));
    }
    (text, events)
}
