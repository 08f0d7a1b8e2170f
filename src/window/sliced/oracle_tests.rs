//! Sliding (and tumbling) windows over shared panes against a naive oracle,
//! for every aggregate the API and the CLI offer, in both stores.
//!
//! The oracle (the operator tests' `Model`) keeps the raw values each
//! (key, window) accepted, with windows enumerated from their definition, and computes a
//! window's result from those values whenever Flink fires it: when the
//! watermark passes its end, and again for each record it takes late within
//! the allowed lateness. The operator runs the same steps — out-of-order
//! and late records, watermarks — and, in the middle, is snapshotted and
//! restored into two operators splitting the key groups (a rescale), each
//! then fed its keys' records. Every step's output must be the oracle's.

use super::tests::{Model, Step as ModelStep, emitted, resume_all, sorted};
use super::*;
use crate::operators::RestoredState;
use crate::state::RedbStateBackend;
use crate::state::window::RedbPanes;
use crate::window::function::{CollectAll, ReduceAggregate, Sum, WindowFunction};
use floe_actors::element::MAX_WATERMARK;
use floe_actors::keygroup::key_group;
use proptest::prelude::*;

/// (key, value); the event time travels in the record.
type Ev = (u8, i64);
/// (key, window start, window end, result as values), and the record's
/// timestamp.
type Fired = ((u8, i64, i64, Vec<i64>), Option<Timestamp>);

/// Key groups of the snapshots; the restored operators own `0..SPLIT` and
/// `SPLIT..MAX_PARALLELISM`.
const MAX_PARALLELISM: u32 = 16;
const SPLIT: u32 = 7;

#[derive(Clone, Debug)]
enum Step {
    Record {
        key: u8,
        ts: i64,
        value: i64,
    },
    Watermark(i64),
    /// Snapshot, then restore into two operators splitting the key groups.
    Rescale,
}

/// The aggregates of the CLI's `--agg` (the same accumulator and merge).
#[derive(Clone, Copy, Debug)]
enum Agg {
    Sum,
    Count,
    Min,
    Max,
}

impl AggregateFunction<Ev, i128, i64> for Agg {
    fn create_accumulator(&self) -> i128 {
        match self {
            Agg::Sum | Agg::Count => 0,
            Agg::Min => i64::MAX.into(),
            Agg::Max => i64::MIN.into(),
        }
    }
    fn add(&self, e: &Ev, acc: &mut i128) {
        *acc = match self {
            Agg::Sum => *acc + i128::from(e.1),
            Agg::Count => *acc + 1,
            Agg::Min => (*acc).min(e.1.into()),
            Agg::Max => (*acc).max(e.1.into()),
        }
    }
    fn get_result(&self, acc: &i128) -> i64 {
        i64::try_from(*acc).expect("small results")
    }
    fn merge(&self, a: i128, b: i128) -> i128 {
        match self {
            Agg::Sum | Agg::Count => a + b,
            Agg::Min => a.min(b),
            Agg::Max => a.max(b),
        }
    }
    fn retract(&self, acc: &mut i128, part: &i128) -> bool {
        match self {
            Agg::Sum | Agg::Count => {
                *acc -= part;
                true
            }
            Agg::Min | Agg::Max => false,
        }
    }
}

/// Which aggregate a case runs, with the oracle's result for it.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Cli(Agg),
    /// `Sum::of` (the API's sum).
    ApiSum,
    /// `reduce` keeping the larger value (first among equals).
    Reduce,
    /// Every record of the window (whole-window functions).
    Collect,
}

impl Kind {
    /// The result over the values a window accepted, in arrival order.
    fn oracle(self, values: &[i64]) -> Vec<i64> {
        let one = |v: Option<i64>| vec![v.expect("a fired window has values")];
        match self {
            Kind::Cli(Agg::Sum) | Kind::ApiSum => vec![values.iter().sum()],
            Kind::Cli(Agg::Count) => vec![values.len() as i64],
            Kind::Cli(Agg::Min) => one(values.iter().copied().min()),
            Kind::Cli(Agg::Max) | Kind::Reduce => one(values.iter().copied().max()),
            Kind::Collect => {
                let mut v = values.to_vec();
                v.sort();
                v
            }
        }
    }
}

/// Where a case keeps its panes.
#[derive(Clone, Copy, Debug)]
enum Store {
    Heap,
    Redb,
}

/// An operator of a case, whatever its aggregate.
type Op = Box<dyn Operator<Ev, (u8, i64, i64, Vec<i64>)>>;

fn key_of(e: &Ev) -> &u8 {
    &e.0
}

/// An operator for the case's windows and aggregate, in `store` owning the
/// key groups `groups`.
fn operator<ACC, R, A>(
    spec: &WindowSpec<Ev>,
    agg: &Arc<A>,
    result: fn(R) -> Vec<i64>,
    store: Store,
    groups: std::ops::Range<u32>,
) -> Op
where
    ACC: StateValue,
    R: 'static,
    A: AggregateFunction<Ev, ACC, R>,
{
    let window_fn: WindowFunction<u8, R, (u8, i64, i64, Vec<i64>)> =
        Arc::new(move |k: &u8, w: &TimeWindow, r: R, out: &mut Vec<_>| {
            out.push((*k, w.start, w.end, result(r)))
        });
    let key = KeyFn::Borrowed(key_of);
    match store {
        Store::Heap => Box::new(
            SlicedWindowOp::new(key, spec.clone(), agg.clone(), window_fn)
                .expect("aligned windows slice"),
        ),
        Store::Redb => {
            let backend = RedbStateBackend::temp("Window", MAX_PARALLELISM, groups)
                .expect("temp database")
                .with_cache_capacity(4);
            Box::new(
                SlicedWindowOp::with_store(
                    key,
                    spec.clone(),
                    agg.clone(),
                    window_fn,
                    RedbPanes::new(backend),
                )
                .expect("aligned windows slice"),
            )
        }
    }
}

/// Runs `steps` through the operator(s); each step's sorted output.
/// Pending firings are resumed after each step, as the runtime does (and
/// before a snapshot).
fn run<ACC, R, A>(
    spec: &WindowSpec<Ev>,
    agg: A,
    result: fn(R) -> Vec<i64>,
    store: Store,
    steps: &[Step],
) -> Vec<Vec<Fired>>
where
    ACC: StateValue,
    R: 'static,
    A: AggregateFunction<Ev, ACC, R>,
{
    let agg = Arc::new(agg);
    let mut ops: Vec<Op> = vec![operator(spec, &agg, result, store, 0..MAX_PARALLELISM)];
    let mut watermark = MIN_WATERMARK;
    let mut checkpoint = 0;
    let mut got = Vec::new();
    for step in steps {
        let records = emitted(|out| {
            match *step {
                Step::Record { key, ts, value } => {
                    // The operator owning the key's group.
                    let at = if ops.len() == 1 {
                        0
                    } else {
                        usize::from(key_group(&key, MAX_PARALLELISM) >= SPLIT)
                    };
                    ops[at]
                        .process_batch(vec![Record::with_timestamp((key, value), ts)], out)
                        .expect("record processed");
                }
                Step::Watermark(wm) => {
                    watermark = watermark.max(wm);
                    for op in &mut ops {
                        op.on_watermark(wm, out).expect("watermark");
                    }
                }
                Step::Rescale => {
                    checkpoint += 1;
                    let mut groups = Vec::new();
                    for op in &mut ops {
                        assert!(!op.has_pending(), "resumed before the snapshot");
                        let ctx = SnapshotContext {
                            checkpoint: CheckpointId(checkpoint),
                            savepoint: true,
                            max_parallelism: MAX_PARALLELISM,
                            key_groups: 0..MAX_PARALLELISM,
                        };
                        let capture = op.snapshot_state(&ctx).expect("snapshot");
                        let keyed = capture.keyed.expect("keyed state");
                        groups.extend(keyed().expect("serialized"));
                    }
                    ops = [0..SPLIT, SPLIT..MAX_PARALLELISM]
                        .into_iter()
                        .map(|range| {
                            let mut op = operator(spec, &agg, result, store, range.clone());
                            let keyed = groups
                                .iter()
                                .filter(|g| range.contains(&g.key_group))
                                .cloned()
                                .collect();
                            op.restore_state(RestoredState {
                                keyed,
                                ..Default::default()
                            })
                            .expect("restored");
                            op.restore_watermark(watermark).expect("watermark restored");
                            op
                        })
                        .collect();
                }
            }
            for op in &mut ops {
                resume_all(op.as_mut(), out);
            }
        });
        let fired: Vec<Fired> = sorted(records);
        got.push(fired);
    }
    got
}

/// Records around a wandering clock, some behind it by more than the
/// watermark's bound (late), watermarks a little behind the clock, a
/// rescale somewhere, a final `MAX_WATERMARK`.
fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        0u8..10,
        0u8..12,
        -40i64..=4,
        0i64..=3,
        -50i64..100,
        0i64..=6,
    );
    (
        -60i64..60,
        prop::collection::vec(step, 1..160),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(start, raw, rescale_at)| {
            let mut steps: Vec<Step> = super::tests::wander(start, raw)
                .into_iter()
                .map(|step| match step {
                    super::tests::Step::Record { key, ts, value } => {
                        Step::Record { key, ts, value }
                    }
                    super::tests::Step::Watermark(w) => Step::Watermark(w),
                })
                .collect();
            let at = rescale_at.index(steps.len() + 1);
            steps.insert(at, Step::Rescale);
            steps.push(Step::Watermark(MAX_WATERMARK));
            steps
        })
}

fn kinds() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Cli(Agg::Sum)),
        Just(Kind::Cli(Agg::Count)),
        Just(Kind::Cli(Agg::Min)),
        Just(Kind::Cli(Agg::Max)),
        Just(Kind::ApiSum),
        Just(Kind::Reduce),
        Just(Kind::Collect),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn sliding_windows_match_a_naive_oracle(
        // Mostly windows of several panes (the key-major heap layout),
        // some of one (tumbling) or with gaps (slide above size).
        (size, slide) in prop_oneof![
            3 => (1i64..=5, 2i64..=6).prop_map(|(slide, n)| (slide * n, slide)),
            1 => (1i64..=12, 1i64..=15),
        ],
        off in 0i64..15,
        lateness in prop_oneof![Just(0i64), 1i64..=12, Just(i64::MAX)],
        kind in kinds(),
        redb in any::<bool>(),
        steps in steps(),
    ) {
        let offset = off % slide;
        let spec = WindowSpec {
            assigner: WindowAssigner::sliding(size, slide).with_offset(offset),
            allowed_lateness: lateness,
            late_tag: None,
            panes: true,
        };
        let mut oracle = Model::new((size, slide, offset), lateness, move |v: &[i64]| kind.oracle(v));
        let want: Vec<Vec<Fired>> = steps
            .iter()
            .map(|s| match *s {
                Step::Record { key, ts, value } => oracle.step(&ModelStep::Record { key, ts, value }),
                Step::Watermark(w) => oracle.step(&ModelStep::Watermark(w)),
                Step::Rescale => Vec::new(),
            })
            .collect();
        let store = if redb { Store::Redb } else { Store::Heap };
        let got = match kind {
            Kind::Cli(agg) => run(&spec, agg, |r: i64| vec![r], store, &steps),
            Kind::ApiSum => run(
                &spec,
                Sum::of(|e: &Ev| e.1),
                |r: i64| vec![r],
                store,
                &steps,
            ),
            Kind::Reduce => run(
                &spec,
                ReduceAggregate::new(|a: Ev, b: Ev| if b.1 > a.1 { b } else { a }),
                |r: Ev| vec![r.1],
                store,
                &steps,
            ),
            Kind::Collect => run(
                &spec,
                CollectAll,
                |r: Vec<Ev>| {
                    let mut v: Vec<i64> = r.into_iter().map(|e| e.1).collect();
                    v.sort();
                    v
                },
                store,
                &steps,
            ),
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g, w, "step {} ({:?})", i, &steps[i]);
        }
    }
}
