//! Library-level checks of the DataStream API against oracles computed with
//! plain iterators and HashMaps:
//!
//! - map / filter / flat_map at parallelism 1 (order kept) and 3 (multiset);
//! - union of two and three streams, and of a stream with itself;
//! - keyed reduce / sum / min / max / min_by / max_by: the whole sequence of
//!   rolling values per key (so also the final value per key), and final values
//!   with a parallel source;
//! - rebalance / rescale / shuffle / broadcast / forward / partition_custom /
//!   key_by keep the multiset of records (broadcast multiplies it by the
//!   downstream parallelism) and send records where their contract says;
//! - chaining on, `disable_chaining` per operator and
//!   `env.disable_operator_chaining()` give the same results;
//! - process functions with side outputs, end-of-input hooks, keyed process
//!   functions that see the current key;
//! - zero buffer timeout with batch sizes 1 and 7, and a batch larger than the
//!   input with a buffer timeout that never fires;
//! - per-operator records in/out in the job result;
//! - invalid settings (parallelism, batch size, credits, arbiters of 0) fail
//!   with an error naming the setting; an environment runs its job only once.

use crate::cli_common;
use cli_common::SplitMix;
use floe::connectors::collect::Collected;
use floe::operators::process::ProcessContext;
use floe::operators::{Operator, Output};
use floe::{JobResult, OutputTag, Record, StreamExecutionEnvironment};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::mpsc;
use std::time::Duration;

// ---------------------------------------------------------------- helpers

fn random_i64s(seed: u64, n: usize) -> Vec<i64> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| rng.below(2001) as i64 - 1000).collect()
}

/// Upper bound on the run time of one job; only reached if it hangs.
const JOB_LIMIT: Duration = Duration::from_secs(60);

/// Runs the job, canceling it (and failing the test) if it does not finish
/// within [`JOB_LIMIT`], and aborting if even the cancel does not end it.
fn run(env: &StreamExecutionEnvironment) -> floe::Result<JobResult> {
    let handle = env.execute_async()?;
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(JOB_LIMIT) {
                eprintln!("job did not finish within {JOB_LIMIT:?}; canceling it");
                handle.cancel();
                if let Err(mpsc::RecvTimeoutError::Timeout) =
                    done_rx.recv_timeout(Duration::from_secs(10))
                {
                    eprintln!("job ignored the cancel; aborting");
                    std::process::abort();
                }
            }
        })
    };
    let result = futures::executor::block_on(handle.wait());
    drop(done_tx);
    watchdog.join().expect("watchdog thread");
    result
}

fn run_ok(env: &StreamExecutionEnvironment) -> JobResult {
    match run(env) {
        Ok(r) => r,
        Err(e) => panic!("job failed: {e}"),
    }
}

fn env_with(parallelism: usize) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism).set_arbiters(2);
    env
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn multiset<T: Hash + Eq>(items: impl IntoIterator<Item = T>) -> HashMap<T, usize> {
    let mut m = HashMap::new();
    for x in items {
        *m.entry(x).or_insert(0) += 1;
    }
    m
}

/// Tags every record with the index of the subtask that sees it.
#[derive(Clone)]
struct Tag {
    subtask: usize,
}

impl<T: Send + 'static> Operator<T, (usize, T)> for Tag {
    fn process_batch(
        &mut self,
        batch: Vec<Record<T>>,
        out: &mut Output<'_, (usize, T)>,
    ) -> floe::Result<()> {
        for r in batch {
            out.collect((self.subtask, r.value));
        }
        Ok(())
    }
}

// ------------------------------------------------- map / filter / flat_map

fn map_filter_flat_map_oracle(data: &[i64]) -> Vec<(i64, i64)> {
    data.iter()
        .map(|x| x * 3 - 7)
        .filter(|x| x % 5 != 0)
        .flat_map(|x| (0..x.rem_euclid(4)).map(move |i| (x, i)))
        .collect()
}

fn map_filter_flat_map(s: &floe::DataStream<i64>) -> Collected<(i64, i64)> {
    s.map(|x| x * 3 - 7)
        .filter(|x| x % 5 != 0)
        .flat_map(|x| (0..x.rem_euclid(4)).map(move |i| (x, i)))
        .collect()
}

#[test]
fn map_filter_flat_map_keep_order_at_parallelism_one() {
    let data = random_i64s(1, 20_000);
    let expected = map_filter_flat_map_oracle(&data);
    let env = env_with(1);
    let out = map_filter_flat_map(&env.from_collection(data));
    run_ok(&env);
    // One source subtask and one chain: the order is the input's.
    assert_eq!(out.take(), expected);
}

#[test]
fn map_filter_flat_map_at_parallelism_three() {
    let data = random_i64s(2, 20_000);
    let expected = sorted(map_filter_flat_map_oracle(&data));

    // A collection source (one subtask) rebalanced into three subtasks.
    let env = env_with(3);
    let out = map_filter_flat_map(&env.from_collection(data.clone()));
    run_ok(&env);
    assert_eq!(sorted(out.take()), expected);

    // A parallel generator source.
    let env = env_with(3);
    let shared = std::sync::Arc::new(data);
    let out =
        map_filter_flat_map(&env.from_generator(shared.len() as u64, move |i| shared[i as usize]));
    run_ok(&env);
    assert_eq!(sorted(out.take()), expected);
}

#[test]
fn generate_sequence_covers_the_range_at_any_parallelism() {
    for p in [1, 2, 3, 5] {
        let env = env_with(p);
        let out = env.generate_sequence(-50, 1234).collect();
        run_ok(&env);
        assert_eq!(
            sorted(out.take()),
            (-50..=1234).collect::<Vec<i64>>(),
            "p={p}"
        );
    }
    let env = env_with(2);
    let out = env.generate_sequence(10, 9).collect();
    run_ok(&env);
    assert!(out.take().is_empty());
}

#[test]
fn empty_collection_finishes_with_nothing() {
    let env = env_with(3);
    let out = env
        .from_collection(Vec::<u64>::new())
        .map(|x| x + 1)
        .rebalance()
        .filter(|_| true)
        .collect();
    run_ok(&env);
    assert!(out.take().is_empty());
}

// ------------------------------------------------------------------ union

#[test]
fn union_of_collections_keeps_every_record() {
    let a = random_i64s(10, 5_000);
    let b: Vec<i64> = random_i64s(11, 3_000).iter().map(|x| x + 10_000).collect();
    let c: Vec<i64> = (0..777).map(|x| x + 100_000).collect();
    for p in [1, 3] {
        let env = env_with(p);
        let sa = env.from_collection(a.clone());
        let sb = env.from_collection(b.clone());
        let sc = env.from_generator(c.len() as u64, |i| 100_000 + i as i64);
        let two = sa.union(&[&sb]).map(|x| x).collect();
        let three = sa.union(&[&sb, &sc]).collect();
        run_ok(&env);

        let two = two.take();
        let expected_two: Vec<i64> = a.iter().chain(&b).copied().collect();
        assert_eq!(sorted(two.clone()), sorted(expected_two), "p={p}");
        if p == 1 {
            // Each input's records keep their relative order.
            let from_a: Vec<i64> = two.iter().copied().filter(|x| *x < 5_000).collect();
            let from_b: Vec<i64> = two.iter().copied().filter(|x| *x >= 5_000).collect();
            assert_eq!(from_a, a);
            assert_eq!(from_b, b);
        }
        let expected_three: Vec<i64> = a.iter().chain(&b).chain(&c).copied().collect();
        assert_eq!(sorted(three.take()), sorted(expected_three), "p={p}");
    }
}

#[test]
fn union_with_itself_duplicates_records() {
    let data: Vec<u32> = (0..1000).collect();
    let env = env_with(2);
    let s = env.from_collection(data.clone());
    let out = s.union(&[&s]).collect();
    run_ok(&env);
    let expected: Vec<u32> = data.iter().chain(&data).copied().collect();
    assert_eq!(sorted(out.take()), sorted(expected));
}

// ------------------------------------------------------------------ keyed

/// (key, value, position in the input)
type Rec = (u32, i64, u32);

fn keyed_data(seed: u64, n: usize, keys: u64) -> Vec<Rec> {
    let mut rng = SplitMix(seed);
    (0..n)
        .map(|i| {
            (
                rng.below(keys) as u32,
                rng.below(41) as i64 - 20, // a small range: many ties
                i as u32,
            )
        })
        .collect()
}

/// The records emitted per key, in emission order.
fn per_key(records: Vec<Rec>) -> BTreeMap<u32, Vec<Rec>> {
    let mut m: BTreeMap<u32, Vec<Rec>> = BTreeMap::new();
    for r in records {
        m.entry(r.0).or_default().push(r);
    }
    m
}

/// Compares two sequences, reporting the first difference only.
fn assert_same_sequence<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: element {i} differs: got {:?}, want {:?}",
            got[i], want[i]
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
}

/// Runs a rolling oracle: `step(state, record)` returns the emitted record.
fn rolling_oracle(
    data: &[Rec],
    mut step: impl FnMut(Option<&Rec>, &Rec) -> (Rec, Rec),
) -> BTreeMap<u32, Vec<Rec>> {
    let mut state: HashMap<u32, Rec> = HashMap::new();
    let mut emitted: Vec<Rec> = Vec::new();
    for r in data {
        let (next, out) = step(state.get(&r.0), r);
        state.insert(r.0, next);
        emitted.push(out);
    }
    per_key(emitted)
}

fn reduce_fn(a: Rec, b: Rec) -> Rec {
    // Not commutative: the order of the records matters.
    (a.0, (a.1 * 31 + b.1).rem_euclid(1_000_003), b.2)
}

fn oracle_for(kind: &str, data: &[Rec]) -> BTreeMap<u32, Vec<Rec>> {
    match kind {
        "sum" => rolling_oracle(data, |s, r| {
            let acc = match s {
                None => *r,
                Some(a) => (a.0, a.1 + r.1, a.2),
            };
            // Emits the incoming record with the field set to the sum.
            (acc, (r.0, acc.1, r.2))
        }),
        "min" => rolling_oracle(data, |s, r| {
            let acc = match s {
                None => *r,
                // The first record, with the field set to the minimum.
                Some(a) => (a.0, a.1.min(r.1), a.2),
            };
            (acc, acc)
        }),
        "max" => rolling_oracle(data, |s, r| {
            let acc = match s {
                None => *r,
                Some(a) => (a.0, a.1.max(r.1), a.2),
            };
            (acc, acc)
        }),
        "min_by" => rolling_oracle(data, |s, r| {
            let acc = match s {
                // The first among equals stays.
                Some(a) if a.1 <= r.1 => *a,
                _ => *r,
            };
            (acc, acc)
        }),
        "max_by" => rolling_oracle(data, |s, r| {
            let acc = match s {
                Some(a) if a.1 >= r.1 => *a,
                _ => *r,
            };
            (acc, acc)
        }),
        "reduce" => rolling_oracle(data, |s, r| {
            let acc = match s {
                None => *r,
                Some(a) => reduce_fn(*a, *r),
            };
            (acc, acc)
        }),
        other => panic!("unknown aggregation {other}"),
    }
}

fn aggregate(kind: &str, s: &floe::DataStream<Rec>) -> floe::DataStream<Rec> {
    let by_field = s.key_by_field(|t: &Rec| &t.0);
    let by_fn = s.key_by(|t: &Rec| t.0);
    match kind {
        "sum" => by_field.sum(|t: &mut Rec| &mut t.1),
        "min" => by_fn.min(|t: &mut Rec| &mut t.1),
        "max" => by_field.max(|t: &mut Rec| &mut t.1),
        "min_by" => by_fn.min_by(|t: &mut Rec| &mut t.1),
        "max_by" => by_field.max_by(|t: &mut Rec| &mut t.1),
        "reduce" => by_fn.reduce(reduce_fn),
        other => panic!("unknown aggregation {other}"),
    }
}

const AGGREGATIONS: [&str; 6] = ["sum", "min", "max", "min_by", "max_by", "reduce"];

#[test]
fn keyed_rolling_aggregations_match_oracle() {
    let data = keyed_data(20, 12_000, 60);
    for p in [1, 3] {
        let env = env_with(p);
        let source = env.from_collection(data.clone());
        let outs: Vec<(&str, Collected<Rec>)> = AGGREGATIONS
            .iter()
            .map(|kind| (*kind, aggregate(kind, &source).collect()))
            .collect();
        run_ok(&env);
        for (kind, out) in outs {
            let got = out.take();
            assert_eq!(got.len(), data.len(), "{kind} p={p}: one output per input");
            let expected = oracle_for(kind, &data);
            let got = per_key(got);
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                expected.keys().collect::<Vec<_>>(),
                "{kind} p={p}: keys"
            );
            for (key, want) in &expected {
                // Records of a key reach one subtask in input order, so the
                // rolling values per key are the oracle's, in order; the last
                // is the final value.
                assert_same_sequence(&got[key], want, &format!("{kind} p={p} key {key}"));
            }
        }
    }
}

#[test]
fn keyed_final_values_with_parallel_source() {
    let data = std::sync::Arc::new(keyed_data(21, 30_000, 200));
    let mut sums: HashMap<u32, i64> = HashMap::new();
    let mut mins: HashMap<u32, i64> = HashMap::new();
    let mut maxs: HashMap<u32, i64> = HashMap::new();
    for r in data.iter() {
        *sums.entry(r.0).or_insert(0) += r.1;
        let m = mins.entry(r.0).or_insert(i64::MAX);
        *m = (*m).min(r.1);
        let m = maxs.entry(r.0).or_insert(i64::MIN);
        *m = (*m).max(r.1);
    }
    let env = env_with(3);
    let d = data.clone();
    let source = env.from_generator(data.len() as u64, move |i| d[i as usize]);
    let sum = aggregate("sum", &source).collect();
    let min = aggregate("min", &source).collect();
    let max = aggregate("max_by", &source).collect();
    run_ok(&env);
    let last = |c: &Collected<Rec>| {
        let mut m = HashMap::new();
        for r in c.take() {
            m.insert(r.0, r.1); // the last emitted per key is the final value
        }
        m
    };
    assert_eq!(last(&sum), sums);
    assert_eq!(last(&min), mins);
    assert_eq!(last(&max), maxs);
}

#[test]
fn keyed_process_function_sees_the_current_key() {
    let data = keyed_data(22, 5_000, 40);
    let env = env_with(3);
    let out = env
        .from_collection(data.clone())
        .key_by(|t: &Rec| t.0)
        .process(
            |v: Rec, ctx: &mut ProcessContext<'_, '_, (Option<u32>, Rec), u32>| {
                let key = ctx.current_key().copied();
                ctx.collect((key, v));
                Ok(())
            },
        )
        .collect();
    run_ok(&env);
    let got = out.take();
    assert_eq!(got.len(), data.len());
    for (key, v) in &got {
        assert_eq!(*key, Some(v.0), "record {v:?}");
    }
    assert_eq!(
        sorted(got.into_iter().map(|(_, v)| v).collect()),
        sorted(data)
    );
}

#[test]
fn key_by_sends_each_key_to_one_subtask() {
    let env = env_with(2);
    let out = env
        .from_generator(20_000, |i| (i * 7919) % 1009)
        .key_by(|v: &u64| *v)
        .as_stream()
        .transform("Tag", |ctx| Tag {
            subtask: ctx.subtask,
        })
        .set_parallelism(4)
        .collect();
    run_ok(&env);
    let got = out.take();
    let mut owner: HashMap<u64, BTreeSet<usize>> = HashMap::new();
    for (s, v) in &got {
        owner.entry(*v).or_default().insert(*s);
    }
    for (k, subtasks) in &owner {
        assert_eq!(subtasks.len(), 1, "key {k} reached subtasks {subtasks:?}");
    }
    let expected = multiset((0..20_000u64).map(|i| (i * 7919) % 1009));
    assert_eq!(multiset(got.into_iter().map(|(_, v)| v)), expected);
    let used: BTreeSet<usize> = owner.values().flatten().copied().collect();
    assert_eq!(used.len(), 4, "1009 keys should spread over all 4 subtasks");
}

// ----------------------------------------------------------- partitioning

const N: u64 = 6_000;

/// A generator at `up` subtasks tags each record with its source subtask; the
/// partitioning under test sends it to a tagger with `down` subtasks.
/// Returns (upstream subtask, downstream subtask, value) triples.
fn route(
    up: usize,
    down: usize,
    seed: u64,
    partition: impl Fn(&floe::DataStream<(usize, u64)>) -> floe::DataStream<(usize, u64)>,
) -> Vec<(usize, usize, u64)> {
    let env = env_with(up);
    env.set_seed(seed);
    let tagged = env.from_generator(N, |i| i).transform("TagUp", |ctx| Tag {
        subtask: ctx.subtask,
    });
    let out = partition(&tagged)
        .transform("TagDown", |ctx| Tag {
            subtask: ctx.subtask,
        })
        .set_parallelism(down)
        .disable_chaining()
        .collect();
    run_ok(&env);
    out.take()
        .into_iter()
        .map(|(d, (u, v))| (u, d, v))
        .collect()
}

fn values(routed: &[(usize, usize, u64)]) -> Vec<u64> {
    sorted(routed.iter().map(|t| t.2).collect())
}

fn all_values() -> Vec<u64> {
    (0..N).collect()
}

#[test]
fn rebalance_is_round_robin_per_sender() {
    let routed = route(2, 3, 1, |s| s.rebalance());
    assert_eq!(values(&routed), all_values());
    let counts = multiset(routed.iter().map(|t| (t.0, t.1)));
    for u in 0..2 {
        let c: Vec<usize> = (0..3)
            .map(|d| counts.get(&(u, d)).copied().unwrap_or(0))
            .collect();
        let (min, max) = (c.iter().min().unwrap(), c.iter().max().unwrap());
        assert!(max - min <= 1, "sender {u} spread {c:?}");
    }
}

#[test]
fn rescale_feeds_local_subsets() {
    // Fewer senders than receivers: each sender feeds its own block.
    let routed = route(2, 4, 1, |s| s.rescale());
    assert_eq!(values(&routed), all_values());
    let mut targets: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (u, d, _) in &routed {
        targets.entry(*u).or_default().insert(*d);
    }
    assert_eq!(targets.len(), 2);
    let mut covered = BTreeSet::new();
    for (u, ds) in &targets {
        assert_eq!(ds.len(), 2, "sender {u} feeds {ds:?}");
        for d in ds {
            assert!(covered.insert(*d), "receiver {d} fed by two senders");
        }
    }
    assert_eq!(covered.len(), 4);

    // More senders than receivers: each sender feeds exactly one receiver,
    // each receiver is fed by two senders.
    let routed = route(4, 2, 1, |s| s.rescale());
    assert_eq!(values(&routed), all_values());
    let mut targets: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (u, d, _) in &routed {
        targets.entry(*u).or_default().insert(*d);
    }
    assert!(targets.values().all(|ds| ds.len() == 1), "{targets:?}");
    let fed = multiset(targets.values().flatten().copied());
    assert_eq!(fed, HashMap::from([(0, 2), (1, 2)]));
}

#[test]
fn shuffle_keeps_records_and_is_seeded() {
    let a = route(2, 3, 7, |s| s.shuffle());
    assert_eq!(values(&a), all_values());
    let used: BTreeSet<usize> = a.iter().map(|t| t.1).collect();
    assert_eq!(used.len(), 3);
    let b = route(2, 3, 7, |s| s.shuffle());
    assert_eq!(sorted(a.clone()), sorted(b), "same seed, same placement");
    let c = route(2, 3, 8, |s| s.shuffle());
    assert_ne!(sorted(a), sorted(c), "another seed, another placement");
}

#[test]
fn broadcast_sends_every_record_to_every_subtask() {
    let routed = route(2, 3, 1, |s| s.broadcast());
    assert_eq!(routed.len() as u64, 3 * N);
    let got = multiset(routed.iter().map(|t| (t.1, t.2)));
    let expected = multiset((0..3).flat_map(|d| (0..N).map(move |v| (d, v))));
    assert_eq!(got, expected);
}

#[test]
fn forward_keeps_records_in_their_subtask() {
    let routed = route(3, 3, 1, |s| s.forward());
    assert_eq!(values(&routed), all_values());
    for (u, d, v) in &routed {
        assert_eq!(u, d, "record {v} moved from subtask {u} to {d}");
    }
}

#[test]
fn forward_with_unequal_parallelism_is_rejected() {
    let env = env_with(2);
    let _ = env
        .from_generator(10, |i| i)
        .forward()
        .map(|x| x)
        .set_parallelism(3)
        .collect();
    let err = run(&env).expect_err("forward between 2 and 3 subtasks must fail");
    assert!(err.to_string().contains("forward"), "{err}");
}

#[test]
fn partition_custom_picks_the_subtask() {
    // The function may return any index; it is taken modulo the channel count.
    let routed = route(2, 3, 1, |s| {
        s.partition_custom(|t, _n| (t.1 * 5 + 1) as usize)
    });
    assert_eq!(values(&routed), all_values());
    for (_, d, v) in &routed {
        assert_eq!(*d as u64, (v * 5 + 1) % 3, "record {v}");
    }
    let routed = route(3, 4, 1, |s| {
        s.partition_custom(|t, n| (t.1 as usize / 10) % n)
    });
    assert_eq!(values(&routed), all_values());
    for (_, d, v) in &routed {
        assert_eq!(*d as u64, (v / 10) % 4, "record {v}");
    }
}

// ---------------------------------------------------------------- chaining

#[derive(Debug, PartialEq)]
struct ChainingOutcome {
    filtered: Vec<u64>,
    finals: BTreeMap<u64, u64>,
}

fn chaining_job(mode: &str) -> ChainingOutcome {
    let env = env_with(2);
    if mode == "env" {
        env.disable_operator_chaining();
    }
    let per_op = mode == "per-operator";
    let chain = |s: floe::DataStream<u64>| if per_op { s.disable_chaining() } else { s };
    let chain2 = |s: floe::DataStream<(u64, u64)>| if per_op { s.disable_chaining() } else { s };
    let source = chain(env.from_generator(20_000, |i| i));
    let mapped = chain(source.map(|x| x.wrapping_mul(2_654_435_761) % 10_007));
    let filtered = chain(mapped.filter(|x| x % 3 != 0));
    let filtered_out = filtered.collect();
    let sums = chain2(
        chain2(filtered.map(|x| (x % 17, x)))
            .key_by_field(|t: &(u64, u64)| &t.0)
            .sum(|t: &mut (u64, u64)| &mut t.1),
    );
    let finals = sums.collect();
    run_ok(&env);
    let mut last = BTreeMap::new();
    for (k, s) in finals.take() {
        last.insert(k, s);
    }
    ChainingOutcome {
        filtered: sorted(filtered_out.take()),
        finals: last,
    }
}

#[test]
fn chaining_modes_give_equal_results() {
    let filtered: Vec<u64> = sorted(
        (0..20_000u64)
            .map(|x| x.wrapping_mul(2_654_435_761) % 10_007)
            .filter(|x| x % 3 != 0)
            .collect(),
    );
    let mut finals = BTreeMap::new();
    for x in &filtered {
        *finals.entry(x % 17).or_insert(0) += x;
    }
    let expected = ChainingOutcome { filtered, finals };
    for mode in ["chained", "per-operator", "env"] {
        assert_eq!(chaining_job(mode), expected, "mode {mode}");
    }
}

// ---------------------------------------------------------- process + side

#[test]
fn process_function_splits_records_into_side_outputs() {
    let fizz: OutputTag<String> = OutputTag::new("fizz");
    let buzz: OutputTag<i64> = OutputTag::new("buzz");
    let unused: OutputTag<u64> = OutputTag::new("nobody-reads-this");
    let data = random_i64s(30, 10_000);
    for p in [1, 3] {
        let env = env_with(p);
        let (f, b, u) = (fizz.clone(), buzz.clone(), unused.clone());
        let main = env.from_collection(data.clone()).process(
            move |v: i64, ctx: &mut ProcessContext<'_, '_, i64>| {
                if v % 3 == 0 {
                    ctx.output(&f, format!("fizz{v}"));
                } else if v % 5 == 0 {
                    ctx.output(&b, -v);
                } else {
                    ctx.collect(v * 2);
                }
                ctx.output(&u, 1);
                Ok(())
            },
        );
        let main_out = main.collect();
        let fizz_out = main.get_side_output(&fizz).collect();
        // A side output read twice: once directly, once behind a rebalance.
        let buzz_out = main.get_side_output(&buzz).collect();
        let buzz_again = main
            .get_side_output(&buzz)
            .rebalance()
            .map(|x| x + 1)
            .collect();
        run_ok(&env);

        let want_main: Vec<i64> = data
            .iter()
            .filter(|v| *v % 3 != 0 && *v % 5 != 0)
            .map(|v| v * 2)
            .collect();
        let want_fizz: Vec<String> = data
            .iter()
            .filter(|v| *v % 3 == 0)
            .map(|v| format!("fizz{v}"))
            .collect();
        let want_buzz: Vec<i64> = data
            .iter()
            .filter(|v| *v % 3 != 0 && *v % 5 == 0)
            .map(|v| -v)
            .collect();
        assert_eq!(sorted(main_out.take()), sorted(want_main), "p={p} main");
        assert_eq!(sorted(fizz_out.take()), sorted(want_fizz), "p={p} fizz");
        assert_eq!(
            sorted(buzz_again.take()),
            sorted(want_buzz.iter().map(|x| x + 1).collect()),
            "p={p} buzz behind rebalance"
        );
        assert_eq!(sorted(buzz_out.take()), sorted(want_buzz), "p={p} buzz");
    }
}

/// Counts its records and emits the count once its input ends.
#[derive(Clone, Default)]
struct CountAtEnd {
    seen: u64,
}

impl floe::operators::process::ProcessFunction<u64, u64> for CountAtEnd {
    fn process_element(&mut self, _: u64, _: &mut ProcessContext<'_, '_, u64>) -> floe::Result<()> {
        self.seen += 1;
        Ok(())
    }

    fn on_end_of_input(&mut self, ctx: &mut ProcessContext<'_, '_, u64>) -> floe::Result<()> {
        ctx.collect(self.seen);
        Ok(())
    }
}

#[test]
fn process_function_end_of_input_hook_runs_once_per_subtask() {
    let env = env_with(3);
    let out = env
        .from_generator(10_001, |i| i)
        .rebalance()
        .process(CountAtEnd::default())
        .collect();
    run_ok(&env);
    let counts = out.take();
    assert_eq!(counts.len(), 3, "one count per subtask: {counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), 10_001);
}

// ------------------------------------------------- batching / buffer timeout

fn batching_job(batch_size: usize, timeout: Duration, n: u64) -> (Vec<u64>, BTreeMap<u64, u64>) {
    let env = env_with(2);
    env.set_batch_size(batch_size).set_buffer_timeout(timeout);
    let mapped = env
        .from_generator(n, |i| i)
        .map(|x| x * x % 1_009)
        .rebalance()
        .filter(|x| x % 2 == 1)
        .set_parallelism(3);
    let filtered = mapped.collect();
    let sums = mapped
        .map(|x| (x % 13, x))
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .collect();
    run_ok(&env);
    let mut finals = BTreeMap::new();
    for (k, s) in sums.take() {
        finals.insert(k, s);
    }
    (sorted(filtered.take()), finals)
}

fn batching_oracle(n: u64) -> (Vec<u64>, BTreeMap<u64, u64>) {
    let filtered: Vec<u64> = sorted(
        (0..n)
            .map(|x| x * x % 1_009)
            .filter(|x| x % 2 == 1)
            .collect(),
    );
    let mut finals = BTreeMap::new();
    for x in &filtered {
        *finals.entry(x % 13).or_insert(0) += x;
    }
    (filtered, finals)
}

#[test]
fn zero_buffer_timeout_and_small_batches() {
    for batch_size in [1usize, 7] {
        let n = if batch_size == 1 { 3_000 } else { 20_000 };
        assert_eq!(
            batching_job(batch_size, Duration::ZERO, n),
            batching_oracle(n),
            "batch size {batch_size}"
        );
    }
}

#[test]
fn partial_batches_are_flushed_at_end_of_input() {
    // The batch never fills and the buffer timeout never fires: only the end
    // of input can push the records out.
    let n = 100;
    assert_eq!(
        batching_job(4096, Duration::from_secs(3600), n),
        batching_oracle(n)
    );
}

// ---------------------------------------------------------------- metrics

#[test]
fn operator_metrics_count_records_in_and_out() {
    let data = random_i64s(40, 15_000);
    let passed = data.iter().filter(|x| *x % 4 != 0).count() as u64;
    let exploded: u64 = data
        .iter()
        .filter(|x| *x % 4 != 0)
        .map(|x| x.rem_euclid(3) as u64)
        .sum();
    let n = data.len() as u64;
    let shared = std::sync::Arc::new(data);
    let env = env_with(3);
    let out = env
        .from_generator(n, move |i| shared[i as usize])
        .name("numbers")
        .map(|x| x - 1)
        .name("minus-one")
        .filter(|x| (x + 1) % 4 != 0)
        .name("not-div-4")
        .flat_map(|x| vec![x; (x + 1).rem_euclid(3) as usize])
        .name("explode")
        .rebalance()
        .collect();
    let _ = env
        .generate_sequence(1, 500)
        .broadcast()
        .map(|x| x)
        .name("broadcast-target")
        .set_parallelism(3);
    let result = run_ok(&env);
    assert_eq!(out.len() as u64, exploded);

    let op = |name: &str| {
        result
            .operator(name)
            .unwrap_or_else(|| panic!("no operator {name} in {:?}", result.operators))
            .clone()
    };
    assert_eq!(op("numbers").records_out, n);
    assert_eq!(
        (op("minus-one").records_in, op("minus-one").records_out),
        (n, n)
    );
    assert_eq!(
        (op("not-div-4").records_in, op("not-div-4").records_out),
        (n, passed)
    );
    assert_eq!(
        (op("explode").records_in, op("explode").records_out),
        (passed, exploded)
    );
    assert_eq!(op("Collect Sink").records_in, exploded);
    assert_eq!(op("Collect Sink").records_out, 0);
    assert_eq!(op("broadcast-target").records_in, 3 * 500);
    assert_eq!(op("broadcast-target").records_out, 3 * 500);
}

#[test]
fn an_environment_runs_its_job_once() {
    let env = env_with(1);
    let out = env.from_collection(vec![1u8, 2, 3]).collect();
    run_ok(&env);
    assert_eq!(out.take(), vec![1, 2, 3]);
    // The operators were taken out by the first execution.
    assert!(
        run(&env).is_err(),
        "a second execute has no operators to run"
    );
}

#[test]
fn invalid_settings_are_rejected() {
    type Setup = fn(&StreamExecutionEnvironment);
    let cases: [(&str, Setup, &str); 5] = [
        (
            "env parallelism 0",
            |e| {
                e.set_parallelism(0);
            },
            "parallelism",
        ),
        (
            "operator parallelism 0",
            |e| {
                let _ = e
                    .from_generator(10, |i| i)
                    .map(|x| x)
                    .set_parallelism(0)
                    .collect();
            },
            "parallelism",
        ),
        (
            "batch size 0",
            |e| {
                e.set_batch_size(0);
            },
            "batch size",
        ),
        (
            "credits 0",
            |e| {
                e.set_credits(0);
            },
            "credits",
        ),
        (
            "arbiters 0",
            |e| {
                e.set_arbiters(0);
            },
            "arbiters",
        ),
    ];
    for (what, setup, mentions) in cases {
        let env = env_with(2);
        setup(&env);
        let out = env.from_generator(10, |i| i).collect();
        let err = run(&env).expect_err(what);
        assert!(err.to_string().contains(mentions), "{what}: {err}");
        assert!(out.is_empty(), "{what}: nothing ran");
    }
}
