//! The keyed-state test suite, written once over the `StateBackend` trait and
//! instantiated for every backend (heap and redb).
//!
//! Each primitive runs a seeded random sequence of operations over many keys
//! and compares every read with an oracle kept in plain `HashMap`s. TTL tests
//! drive a `ManualClock`; snapshot tests check the round trip, the
//! copy-on-write capture (writes after the synchronous part are not in the
//! bytes), redistribution of key groups to 3 subtasks, and schema checks.

use crate::rng;
use floe::state::{
    AggregatingStateDescriptor, KeyGroupBytes, KeyScope, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateBackend, StateError, StateTtlConfig, TtlUpdateType,
    ValueStateDescriptor,
};
use floe::time::{Clock, ManualClock};
use floe::window::function::AggregateFunction;
use floe_actors::keygroup::{key_group, key_group_range, subtask_for_key_group};
use rng::SplitMix;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

const MAXP: u32 = 128;

/// Makes a backend of operator "op" owning `range` of `MAXP` key groups.
trait Make<B>: Fn(Arc<dyn Clock>, Range<u32>) -> B {}
impl<B, F: Fn(Arc<dyn Clock>, Range<u32>) -> B> Make<B> for F {}

fn full<B>(make: &impl Make<B>) -> (B, ManualClock) {
    let clock = ManualClock::new(0);
    (make(Arc::new(clock.clone()), 0..MAXP), clock)
}

/// Average of i64 values as (sum, count).
struct Average;

impl AggregateFunction<i64, (i64, u64), f64> for Average {
    fn create_accumulator(&self) -> (i64, u64) {
        (0, 0)
    }
    fn add(&self, value: &i64, acc: &mut (i64, u64)) {
        acc.0 += value;
        acc.1 += 1;
    }
    fn get_result(&self, acc: &(i64, u64)) -> f64 {
        acc.0 as f64 / acc.1 as f64
    }
    fn merge(&self, a: (i64, u64), b: (i64, u64)) -> (i64, u64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

fn value<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut oracle: HashMap<String, u64> = HashMap::new();
    let mut rng = SplitMix(1);
    for _ in 0..5000 {
        let k = rng.key(300);
        let mut s = KeyScope::new(&mut b, &k).value_state(&desc).unwrap();
        assert_eq!(s.value().unwrap(), oracle.get(&k).copied(), "key {k}");
        match rng.below(10) {
            0 => {
                s.clear().unwrap();
                oracle.remove(&k);
            }
            _ => {
                let v = rng.next();
                s.update(v).unwrap();
                oracle.insert(k, v);
            }
        }
    }
    assert_eq!(b.entries("v"), oracle.len());
}

fn list<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let desc = ListStateDescriptor::<u32>::new("l");
    let mut oracle: HashMap<String, Vec<u32>> = HashMap::new();
    let mut rng = SplitMix(2);
    for _ in 0..5000 {
        let k = rng.key(200);
        let mut s = KeyScope::new(&mut b, &k).list_state(&desc).unwrap();
        let want = oracle.get(&k).cloned().unwrap_or_default();
        assert_eq!(s.get().unwrap(), want, "key {k}");
        let entry = oracle.entry(k.clone()).or_default();
        match rng.below(8) {
            0 => {
                s.clear().unwrap();
                entry.clear();
            }
            1 => {
                let vs: Vec<u32> = (0..rng.below(4)).map(|i| i as u32).collect();
                s.update(vs.clone()).unwrap();
                *entry = vs;
            }
            2 => {
                let vs: Vec<u32> = (0..rng.below(4)).map(|i| 100 + i as u32).collect();
                s.add_all(vs.clone()).unwrap();
                entry.extend(vs);
            }
            _ => {
                let v = rng.below(1000) as u32;
                s.add(v).unwrap();
                entry.push(v);
            }
        }
    }
    let non_empty = oracle.values().filter(|v| !v.is_empty()).count();
    assert_eq!(b.entries("l"), non_empty, "empty lists are not stored");
}

fn map<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let desc = MapStateDescriptor::<u16, i64>::new("m");
    let mut oracle: HashMap<String, HashMap<u16, i64>> = HashMap::new();
    let mut rng = SplitMix(3);
    for _ in 0..5000 {
        let k = rng.key(100);
        let uk = rng.below(20) as u16;
        let mut s = KeyScope::new(&mut b, &k).map_state(&desc).unwrap();
        let want = oracle.entry(k.clone()).or_default();
        assert_eq!(s.get(&uk).unwrap(), want.get(&uk).copied());
        assert_eq!(s.contains(&uk).unwrap(), want.contains_key(&uk));
        assert_eq!(s.is_empty().unwrap(), want.is_empty());
        let got: HashMap<u16, i64> = s.iter().unwrap().map(|(a, b)| (*a, *b)).collect();
        assert_eq!(&got, want);
        let mut keys: Vec<u16> = s.keys().unwrap().copied().collect();
        keys.sort();
        let mut want_keys: Vec<u16> = want.keys().copied().collect();
        want_keys.sort();
        assert_eq!(keys, want_keys);
        let sum: i64 = s.values().unwrap().sum();
        assert_eq!(sum, want.values().sum::<i64>());
        match rng.below(10) {
            0 => {
                s.clear().unwrap();
                want.clear();
            }
            1..=3 => assert_eq!(s.remove(&uk).unwrap(), want.remove(&uk)),
            _ => {
                let v = rng.below(1_000_000) as i64;
                s.put(uk, v).unwrap();
                want.insert(uk, v);
            }
        }
    }
}

fn reducing_and_aggregating<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let max = ReducingStateDescriptor::<i64>::new("max", |a: i64, b: i64| a.max(b));
    let avg = AggregatingStateDescriptor::new("avg", Average);
    let mut values: HashMap<String, Vec<i64>> = HashMap::new();
    let mut rng = SplitMix(4);
    for step in 0..4000 {
        let k = rng.key(50);
        let v = rng.below(2000) as i64 - 1000;
        let vs = values.entry(k.clone()).or_default();
        if step % 97 == 0 {
            KeyScope::new(&mut b, &k)
                .reducing_state(&max)
                .unwrap()
                .clear()
                .unwrap();
            KeyScope::new(&mut b, &k)
                .aggregating_state(&avg)
                .unwrap()
                .clear()
                .unwrap();
            vs.clear();
        }
        vs.push(v);
        let mut r = KeyScope::new(&mut b, &k).reducing_state(&max).unwrap();
        r.add(v).unwrap();
        assert_eq!(r.get().unwrap(), vs.iter().copied().max());
        let mut a = KeyScope::new(&mut b, &k).aggregating_state(&avg).unwrap();
        a.add(v).unwrap();
        let want = vs.iter().sum::<i64>() as f64 / vs.len() as f64;
        assert_eq!(a.get().unwrap(), Some(want));
    }
    let k = "never".to_string();
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .reducing_state(&max)
            .unwrap()
            .get()
            .unwrap(),
        None
    );
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .aggregating_state(&avg)
            .unwrap()
            .get()
            .unwrap(),
        None
    );
}

fn ttl_on_create_and_write<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, clock) = full(make);
    let desc = ValueStateDescriptor::<u32>::new("t")
        .with_ttl(StateTtlConfig::new(Duration::from_millis(100)));
    let k = "a".to_string();
    KeyScope::new(&mut b, &k)
        .value_state(&desc)
        .unwrap()
        .update(1)
        .unwrap();
    clock.set(99);
    // Reads do not refresh with OnCreateAndWrite.
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap(),
        Some(1)
    );
    clock.set(100);
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap(),
        None
    );
    assert_eq!(b.entries("t"), 0, "expired on access means removed");
    // A write refreshes.
    KeyScope::new(&mut b, &k)
        .value_state(&desc)
        .unwrap()
        .update(2)
        .unwrap();
    clock.set(150);
    KeyScope::new(&mut b, &k)
        .value_state(&desc)
        .unwrap()
        .update(3)
        .unwrap();
    clock.set(249);
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap(),
        Some(3)
    );
    clock.set(250);
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .value()
            .unwrap(),
        None
    );
}

fn ttl_on_read_and_write<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, clock) = full(make);
    let cfg =
        StateTtlConfig::new(Duration::from_millis(100)).update_type(TtlUpdateType::OnReadAndWrite);
    let desc = ListStateDescriptor::<u32>::new("t").with_ttl(cfg);
    let k = "a".to_string();
    KeyScope::new(&mut b, &k)
        .list_state(&desc)
        .unwrap()
        .add(1)
        .unwrap();
    for t in [60, 120, 180, 240] {
        clock.set(t);
        assert_eq!(
            KeyScope::new(&mut b, &k)
                .list_state(&desc)
                .unwrap()
                .get()
                .unwrap(),
            vec![1]
        );
    }
    clock.set(340);
    assert_eq!(
        KeyScope::new(&mut b, &k)
            .list_state(&desc)
            .unwrap()
            .get()
            .unwrap(),
        Vec::<u32>::new()
    );
}

fn ttl_sweep_bounds_state<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, clock) = full(make);
    let desc = ValueStateDescriptor::<u64>::new("t")
        .with_ttl(StateTtlConfig::new(Duration::from_millis(10)).cleanup_per_access(4));
    // Keys written once and never accessed again.
    for i in 0..1000u64 {
        let k = format!("old{i}");
        KeyScope::new(&mut b, &k)
            .value_state(&desc)
            .unwrap()
            .update(i)
            .unwrap();
    }
    assert_eq!(b.entries("t"), 1000);
    clock.set(1_000);
    // Accesses of one live key sweep the expired ones: 4 entries each, plus one
    // step per key group passed.
    let live = "live".to_string();
    for i in 0..((1000 + MAXP as u64) / 4 + 10) {
        KeyScope::new(&mut b, &live)
            .value_state(&desc)
            .unwrap()
            .update(i)
            .unwrap();
    }
    assert_eq!(b.entries("t"), 1, "only the live key remains");
}

/// Per key: the last value, the list of values, their sum.
type Oracle = HashMap<String, (u64, Vec<u32>, i64)>;

/// Fills every primitive with random data; returns the oracle of values.
fn fill<B: StateBackend<String>>(b: &mut B, seed: u64) -> Oracle {
    let v = ValueStateDescriptor::<u64>::new("v");
    let l = ListStateDescriptor::<u32>::new("l");
    let r = ReducingStateDescriptor::<i64>::new("r", |a: i64, b: i64| a + b);
    let mut rng = SplitMix(seed);
    let mut oracle: Oracle = HashMap::new();
    for _ in 0..3000 {
        let k = rng.key(500);
        let x = rng.below(1000);
        KeyScope::new(b, &k)
            .value_state(&v)
            .unwrap()
            .update(x)
            .unwrap();
        KeyScope::new(b, &k)
            .list_state(&l)
            .unwrap()
            .add(x as u32)
            .unwrap();
        KeyScope::new(b, &k)
            .reducing_state(&r)
            .unwrap()
            .add(x as i64)
            .unwrap();
        let e = oracle.entry(k).or_default();
        e.0 = x;
        e.1.push(x as u32);
        e.2 += x as i64;
    }
    oracle
}

fn check<B: StateBackend<String>>(b: &mut B, oracle: &Oracle) {
    let v = ValueStateDescriptor::<u64>::new("v");
    let l = ListStateDescriptor::<u32>::new("l");
    let r = ReducingStateDescriptor::<i64>::new("r", |a: i64, b: i64| a + b);
    for (k, (x, xs, sum)) in oracle {
        assert_eq!(
            KeyScope::new(b, k)
                .value_state(&v)
                .unwrap()
                .value()
                .unwrap(),
            Some(*x)
        );
        assert_eq!(
            &KeyScope::new(b, k).list_state(&l).unwrap().get().unwrap(),
            xs
        );
        assert_eq!(
            KeyScope::new(b, k)
                .reducing_state(&r)
                .unwrap()
                .get()
                .unwrap(),
            Some(*sum)
        );
    }
    assert_eq!(b.entries("v"), oracle.len());
}

fn snapshot_round_trip<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let oracle = fill(&mut b, 5);
    let snap = b.snapshot();
    // Writes after the synchronous part are not in the snapshot.
    let after = fill(&mut b, 6);
    let bytes = snap.serialize().unwrap();
    assert_eq!(bytes.len(), MAXP as usize, "one entry per key group");
    let (mut restored, _) = full(make);
    restored.restore(&bytes).unwrap();
    check(&mut restored, &oracle);
    // The live backend has the later writes.
    let v = ValueStateDescriptor::<u64>::new("v");
    for (k, (x, _, _)) in &after {
        assert_eq!(
            KeyScope::new(&mut b, k)
                .value_state(&v)
                .unwrap()
                .value()
                .unwrap(),
            Some(*x)
        );
    }
    // A snapshot of a restored backend whose states were never registered
    // carries them unchanged.
    let (mut lazy, _) = full(make);
    lazy.restore(&bytes).unwrap();
    let again = lazy.snapshot().serialize().unwrap();
    assert_eq!(again, bytes);
}

fn redistribute<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let oracle = fill(&mut b, 7);
    let bytes = b.snapshot().serialize().unwrap();
    let p = 3;
    let mut parts: Vec<B> = (0..p)
        .map(|s| {
            let range = key_group_range(s, MAXP, p);
            let mine: Vec<KeyGroupBytes> = bytes
                .iter()
                .filter(|g| range.contains(&g.key_group))
                .cloned()
                .collect();
            let mut part = make(Arc::new(ManualClock::new(0)), range);
            part.restore(&mine).unwrap();
            part
        })
        .collect();
    let mut per_part: Vec<Oracle> = vec![HashMap::new(); 3];
    for (k, e) in &oracle {
        let s = subtask_for_key_group(key_group(k, MAXP), MAXP, p) as usize;
        per_part[s].insert(k.clone(), e.clone());
    }
    for (part, want) in parts.iter_mut().zip(&per_part) {
        check(part, want);
    }
    // A key group outside a backend's range is refused.
    let err = parts[0].restore(&bytes).unwrap_err();
    assert!(
        matches!(err, StateError::KeyGroupOutOfRange { .. }),
        "{err}"
    );
}

fn schema_mismatch<B: StateBackend<String>>(make: &impl Make<B>) {
    let (mut b, _) = full(make);
    let k = "a".to_string();
    let as_u64 = ValueStateDescriptor::<u64>::new("count");
    let as_string = ValueStateDescriptor::<String>::new("count");
    KeyScope::new(&mut b, &k)
        .value_state(&as_u64)
        .unwrap()
        .update(1)
        .unwrap();
    // Same backend, other type.
    let err = KeyScope::new(&mut b, &k)
        .value_state(&as_string)
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(matches!(err, StateError::SchemaMismatch { .. }), "{msg}");
    assert!(msg.contains("'count'") && msg.contains("'op'"), "{msg}");
    // Same type, other kind.
    let as_list = ListStateDescriptor::<u64>::new("count");
    assert!(KeyScope::new(&mut b, &k).list_state(&as_list).is_err());
    let bytes = b.snapshot().serialize().unwrap();
    // Restored, then registered with another type: fails at first use.
    let (mut r, _) = full(make);
    r.restore(&bytes).unwrap();
    let err = KeyScope::new(&mut r, &k)
        .value_state(&as_string)
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("'count'") && msg.contains("'op'") && msg.contains("u64"),
        "{msg}"
    );
    // Registered, then restored: fails at restore.
    let (mut r, _) = full(make);
    KeyScope::new(&mut r, &k)
        .value_state(&as_string)
        .unwrap()
        .update("x".into())
        .unwrap();
    let err = r.restore(&bytes).unwrap_err();
    assert!(matches!(err, StateError::SchemaMismatch { .. }), "{err}");
    // The matching type restores fine.
    let (mut r, _) = full(make);
    r.restore(&bytes).unwrap();
    assert_eq!(
        KeyScope::new(&mut r, &k)
            .value_state(&as_u64)
            .unwrap()
            .value()
            .unwrap(),
        Some(1)
    );
}

macro_rules! suite {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn value_state() {
                value(&$make)
            }
            #[test]
            fn list_state() {
                list(&$make)
            }
            #[test]
            fn map_state() {
                map(&$make)
            }
            #[test]
            fn reducing_and_aggregating_state() {
                reducing_and_aggregating(&$make)
            }
            #[test]
            fn ttl_create_and_write() {
                ttl_on_create_and_write(&$make)
            }
            #[test]
            fn ttl_read_and_write() {
                ttl_on_read_and_write(&$make)
            }
            #[test]
            fn ttl_sweep() {
                ttl_sweep_bounds_state(&$make)
            }
            #[test]
            fn snapshot_restore() {
                snapshot_round_trip(&$make)
            }
            #[test]
            fn redistribute_key_groups() {
                redistribute(&$make)
            }
            #[test]
            fn schema_mismatch_fails() {
                schema_mismatch(&$make)
            }
        }
    };
}

suite!(heap, |clock: Arc<dyn Clock>, range: Range<u32>| {
    floe::state::HeapStateBackend::<String>::new("op", MAXP, range).with_clock(clock)
});

suite!(redb, |clock: Arc<dyn Clock>, range: Range<u32>| {
    floe::state::RedbStateBackend::<String>::temp("op", MAXP, range)
        .unwrap()
        .with_clock(clock)
});

/// A snapshot of either backend restores into the other.
#[test]
fn snapshots_restore_across_backends() {
    let heap = |range: Range<u32>| floe::state::HeapStateBackend::<String>::new("op", MAXP, range);
    let redb = |range: Range<u32>| {
        floe::state::RedbStateBackend::<String>::temp("op", MAXP, range).unwrap()
    };
    let mut h = heap(0..MAXP);
    let oracle = fill(&mut h, 8);
    let bytes = h.snapshot().serialize().unwrap();
    let mut r = redb(0..MAXP);
    r.restore(&bytes).unwrap();
    check(&mut r, &oracle);
    let back = r.snapshot().serialize().unwrap();
    let mut h2 = heap(0..MAXP);
    h2.restore(&back).unwrap();
    check(&mut h2, &oracle);
}
