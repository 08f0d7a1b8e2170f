//! Checking a keyed state backend's `ValueState<u64>` "v" against a
//! `HashMap` oracle, and cutting a snapshot to a key-group range (a
//! rescaled restore), for the state backend tests.

use floe::state::{KeyGroupBytes, KeyScope, StateBackend, ValueStateDescriptor};
use floe_actors::keygroup::key_group;
use std::collections::HashMap;
use std::ops::Range;

/// The expected count per key.
pub type Oracle = HashMap<String, u64>;

/// Max parallelism of the backends under test (their key groups).
pub const MAXP: u32 = 128;

/// Checks every key of `keys` whose key group is in `range` against the
/// oracle, and the key count.
pub fn check(b: &mut dyn StateBackend<String>, oracle: &Oracle, keys: u64, what: &str) {
    let desc = ValueStateDescriptor::<u64>::new("v");
    let range = b.key_group_range();
    let mut expected = 0;
    for i in 0..keys {
        let k = format!("k{i}");
        if !range.contains(&key_group(&k, MAXP)) {
            continue;
        }
        let want = oracle.get(&k).copied();
        expected += usize::from(want.is_some());
        let got = KeyScope::new(b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap();
        assert_eq!(got, want, "{what}: key {k}");
    }
    assert_eq!(b.entries("v"), expected, "{what}: key count");
}

pub fn only(groups: &[KeyGroupBytes], range: &Range<u32>) -> Vec<KeyGroupBytes> {
    groups
        .iter()
        .filter(|g| range.contains(&g.key_group))
        .cloned()
        .collect()
}
