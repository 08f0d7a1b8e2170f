//! Rolling aggregations keyed by a field of the record keep their
//! accumulators in a table keyed by that field of the accumulators
//! themselves (no second copy of the key). A `sum` (`min`, `max`) whose
//! field is the key itself would move an accumulator to another key as it
//! writes the field; the operator sees that on the first record and keeps
//! the keys apart, as Flink does. Checked against oracles computed here
//! with a `HashMap` from the original key:
//!
//! - per-record `sum` of the key field: each output is the record with the
//!   field set to its key's running sum;
//! - `sum_at_end_of_input` of the key field: one record per key, its first
//!   record with the field set to the key's sum;
//! - the usual case, a `sum` of another field, over many batches.

use crate::rng;
use rng::SplitMix;
use std::collections::HashMap;

/// `(key, tag)` records over `keys` keys; the tag tells records apart.
fn records(seed: u64, n: u64, keys: u64) -> Vec<(u64, u64)> {
    let mut rng = SplitMix(seed);
    (0..n).map(|i| (1 + rng.below(keys), i)).collect()
}

fn env(parallelism: usize) -> floe::StreamExecutionEnvironment {
    let env = floe::StreamExecutionEnvironment::new();
    // Small batches: a key's accumulator is met again in later batches.
    env.set_parallelism(parallelism).set_batch_size(16);
    env
}

#[test]
fn sum_of_the_key_field_keeps_each_key_apart() {
    let input = records(5, 3_000, 40);
    // The running sum of the key field per original key.
    let mut running: HashMap<u64, u64> = HashMap::new();
    let mut expected: Vec<(u64, u64)> = input
        .iter()
        .map(|&(k, tag)| {
            let sum = running.entry(k).or_insert(0);
            *sum += k;
            (*sum, tag)
        })
        .collect();
    expected.sort_unstable();
    for parallelism in [1, 2] {
        let env = env(parallelism);
        let out = env
            .from_collection(input.clone())
            .key_by_field(|t: &(u64, u64)| &t.0)
            .sum(|t: &mut (u64, u64)| &mut t.0)
            .collect();
        env.execute().expect("job runs");
        let mut got = out.take();
        got.sort_unstable();
        assert_eq!(got, expected, "P={parallelism}");
    }
}

#[test]
fn sum_at_end_of_input_of_the_key_field_gives_one_record_per_key() {
    let input = records(6, 3_000, 40);
    // Per original key: its first record's tag and the sum of its key field.
    let mut acc: HashMap<u64, (u64, u64)> = HashMap::new();
    for &(k, tag) in &input {
        acc.entry(k).or_insert((0, tag)).0 += k;
    }
    let mut expected: Vec<(u64, u64)> = acc.into_values().collect();
    expected.sort_unstable();
    for parallelism in [1, 2] {
        let env = env(parallelism);
        let out = env
            .from_collection(input.clone())
            .key_by_field(|t: &(u64, u64)| &t.0)
            .sum_at_end_of_input(|t: &mut (u64, u64)| &mut t.0)
            .collect();
        env.execute().expect("job runs");
        let mut got = out.take();
        got.sort_unstable();
        assert_eq!(got, expected, "P={parallelism}");
    }
}

#[test]
fn sum_of_another_field_matches_a_hashmap() {
    let input = records(7, 20_000, 500);
    let mut sums: HashMap<u64, u64> = HashMap::new();
    for &(k, tag) in &input {
        *sums.entry(k).or_insert(0) += tag;
    }
    for parallelism in [1, 3] {
        let env = env(parallelism);
        let out = env
            .from_collection(input.clone())
            .key_by_field(|t: &(u64, u64)| &t.0)
            .sum_at_end_of_input(|t: &mut (u64, u64)| &mut t.1)
            .collect();
        env.execute().expect("job runs");
        let got = out.take();
        assert_eq!(got.len(), sums.len(), "P={parallelism}: one record per key");
        let got: HashMap<u64, u64> = got.into_iter().collect();
        assert_eq!(got, sums, "P={parallelism}");
    }
}
