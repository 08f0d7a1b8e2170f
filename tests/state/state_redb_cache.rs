//! The redb backend's bounded cache: state many times larger than the cache
//! reads back exactly, compared with an oracle kept in plain `HashMap`s.
//!
//! - Random puts, reads, updates in place and removals over 3,000 keys with
//!   a cache of 64 entries (so nearly every access misses or evicts), with a
//!   TTL driven by a `ManualClock`: every read equals the oracle's live
//!   value, and the key count equals the oracle's without TTL.
//! - `MapState` iteration sees writes still in the cache.
//! - A snapshot includes writes still in the cache: restored into the heap
//!   backend it equals the oracle.

use crate::cli_common;
use cli_common::SplitMix;
use floe::state::{
    HeapStateBackend, KeyScope, MapStateDescriptor, RedbStateBackend, StateBackend, StateTtlConfig,
    ValueStateDescriptor,
};
use floe::time::ManualClock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const MAXP: u32 = 128;

fn small_cache(clock: &ManualClock) -> RedbStateBackend<String> {
    RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP)
        .unwrap()
        .with_cache_capacity(64)
        .with_clock(Arc::new(clock.clone()))
}

/// The oracle of a value state with TTL: value and stamp of each key.
#[derive(Default)]
struct TtlOracle {
    ttl: i64,
    map: HashMap<String, (u64, i64)>,
}

impl TtlOracle {
    fn live(&self, k: &str, now: i64) -> Option<u64> {
        self.map
            .get(k)
            .filter(|(_, stamp)| stamp + self.ttl > now)
            .map(|(v, _)| *v)
    }
}

#[test]
fn state_larger_than_the_cache_reads_back_exactly_with_ttl() {
    let clock = ManualClock::new(0);
    let mut b = small_cache(&clock);
    let ttl = 500;
    let desc = ValueStateDescriptor::<u64>::new("v")
        .with_ttl(StateTtlConfig::new(Duration::from_millis(ttl as u64)));
    let plain = ValueStateDescriptor::<u64>::new("plain");
    let mut oracle = TtlOracle {
        ttl,
        ..Default::default()
    };
    let mut plain_oracle: HashMap<String, u64> = HashMap::new();
    let mut r = SplitMix(7);
    let mut now = 0i64;
    for step in 0..40_000u64 {
        if step % 100 == 0 {
            now += r.below(20) as i64;
            clock.set(now);
        }
        let k = format!("k{}", r.below(3_000));
        match r.below(5) {
            0 | 1 => {
                let got = KeyScope::new(&mut b, &k)
                    .value_state(&desc)
                    .unwrap()
                    .value()
                    .unwrap();
                assert_eq!(
                    got,
                    oracle.live(&k, now),
                    "read of {k} at {now}, step {step}"
                );
                if got.is_none() {
                    oracle.map.remove(&k);
                }
            }
            2 => {
                let v = r.next();
                KeyScope::new(&mut b, &k)
                    .value_state(&desc)
                    .unwrap()
                    .update(v)
                    .unwrap();
                oracle.map.insert(k.clone(), (v, now));
            }
            3 => {
                KeyScope::new(&mut b, &k)
                    .value_state(&desc)
                    .unwrap()
                    .clear()
                    .unwrap();
                oracle.map.remove(&k);
            }
            _ => {
                // The state without TTL: read-modify-write, and removals.
                let mut s = KeyScope::new(&mut b, &k).value_state(&plain).unwrap();
                let got = s.value().unwrap();
                assert_eq!(got, plain_oracle.get(&k).copied(), "plain {k}, step {step}");
                if r.below(8) == 0 {
                    s.clear().unwrap();
                    plain_oracle.remove(&k);
                } else {
                    let n = got.unwrap_or(0) + 1;
                    s.update(n).unwrap();
                    plain_oracle.insert(k.clone(), n);
                }
            }
        }
    }
    assert_eq!(b.entries("plain"), plain_oracle.len());
    // Every key, once more, after the last writes.
    for i in 0..3_000 {
        let k = format!("k{i}");
        let got = KeyScope::new(&mut b, &k)
            .value_state(&plain)
            .unwrap()
            .value()
            .unwrap();
        assert_eq!(got, plain_oracle.get(&k).copied(), "final plain {k}");
        let got = KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap();
        assert_eq!(got, oracle.live(&k, now), "final {k}");
    }
    // Once everything expired and the sweep went round, nothing is left.
    clock.set(now + ttl);
    for i in 0..3_000 {
        let k = format!("k{i}");
        let got = KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap();
        assert_eq!(got, None, "{k} expired");
    }
    assert_eq!(b.entries("v"), 0);
}

#[test]
fn map_state_iteration_sees_cached_writes() {
    let clock = ManualClock::new(0);
    let mut b = small_cache(&clock);
    let desc = MapStateDescriptor::<u32, u64>::new("m");
    let mut oracle: HashMap<String, HashMap<u32, u64>> = HashMap::new();
    let mut r = SplitMix(11);
    for step in 0..20_000u64 {
        let k = format!("k{}", r.below(500));
        let uk = r.below(8) as u32;
        let mut m = KeyScope::new(&mut b, &k).map_state(&desc).unwrap();
        if r.below(3) == 0 {
            let got = m.remove(&uk).unwrap();
            let want = oracle.get_mut(&k).and_then(|m| m.remove(&uk));
            assert_eq!(got, want, "remove {k}/{uk}, step {step}");
            if oracle.get(&k).is_some_and(|m| m.is_empty()) {
                oracle.remove(&k);
            }
        } else {
            m.put(uk, step).unwrap();
            oracle.entry(k.clone()).or_default().insert(uk, step);
        }
        // Iterate right after the write, still in the cache.
        let mut m = KeyScope::new(&mut b, &k).map_state(&desc).unwrap();
        let got: HashMap<u32, u64> = m.iter().unwrap().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(got, oracle.get(&k).cloned().unwrap_or_default(), "{k}");
    }
    assert_eq!(b.entries("m"), oracle.len());
}

#[test]
fn snapshots_include_writes_still_in_the_cache() {
    let clock = ManualClock::new(0);
    // A cache larger than the state: nothing reaches the database before
    // the snapshot.
    let large = RedbStateBackend::<String>::temp("op", MAXP, 0..MAXP)
        .unwrap()
        .with_cache_capacity(100_000)
        .with_clock(Arc::new(clock.clone()));
    let small = small_cache(&clock);
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut oracle = HashMap::new();
    let mut r = SplitMix(3);
    let mut backends = [large, small];
    for step in 0..10_000u64 {
        let k = format!("k{}", r.below(2_000));
        if r.below(4) == 0 {
            oracle.remove(&k);
            for b in &mut backends {
                KeyScope::new(b, &k)
                    .value_state(&desc)
                    .unwrap()
                    .clear()
                    .unwrap();
            }
        } else {
            oracle.insert(k.clone(), step);
            for b in &mut backends {
                KeyScope::new(b, &k)
                    .value_state(&desc)
                    .unwrap()
                    .update(step)
                    .unwrap();
            }
        }
    }
    for b in &mut backends {
        let bytes = b.snapshot().serialize().unwrap();
        let mut heap = HeapStateBackend::<String>::new("op", MAXP, 0..MAXP);
        heap.restore(&bytes).unwrap();
        for i in 0..2_000 {
            let k = format!("k{i}");
            let got = KeyScope::new(&mut heap, &k)
                .value_state(&desc)
                .unwrap()
                .value()
                .unwrap();
            assert_eq!(got, oracle.get(&k).copied(), "{k}");
        }
        assert_eq!(heap.entries("v"), oracle.len());
    }
    for b in &backends {
        assert_eq!(b.entries("v"), oracle.len());
    }
}
