//! The seeded generator of every test input (splitmix64: the library's
//! [`floe::text::SplitMix`], which the unit tests, benches and examples use
//! too), and the `key,timestamp_ms,value` lines the CLI window tests feed
//! `floe run window`. Included by `tests/common/mod.rs`,
//! `tests/cli_common/mod.rs` and the test files that need only this.

#![allow(dead_code)]

/// splitmix64, the library's one seeded generator ([`floe::text::SplitMix`]).
pub use floe::text::SplitMix;

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
