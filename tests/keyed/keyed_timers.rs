//! Timers of keyed process functions, checked against hand-worked sequences
//! and against an independent single-threaded model (the oracle).
//!
//! - hand-worked, at parallelism 1 with punctuated watermarks placed by the
//!   input: event-time timers fire in timestamp order (registration order
//!   among equal timestamps), once per (key, timestamp) however often they
//!   are registered, before the watermark is forwarded (downstream still sees
//!   the previous watermark), with the timer's timestamp on their output;
//!   deleted timers do not fire (deleting another key's timer or a missing
//!   one changes nothing); timers registered and deleted from `on_timer`
//!   work, one registered at or before the current watermark fires in the same
//!   advance; a timer registered after the watermark passed it fires at the
//!   next watermark; the final watermark at the end of input fires every
//!   remaining event-time timer (`i64::MAX` included).
//! - processing time with a `ManualClock` the function itself moves, batch
//!   size 1 (one record per batch): a timer fires at the first clock check
//!   at or after its time — after the batch that moved the clock past it, or
//!   on a watermark — with no timestamp on its output; pending ones are
//!   dropped at the end of input; deletion and deduplication as above.
//! - seeded random inputs (several keys, jittered and very late timestamps,
//!   per-record bounded-out-of-orderness watermarks) through a function that
//!   registers a bucket-end timer per record, deletes some, and registers and
//!   deletes more from `on_timer`, emitting on each firing the key's count of
//!   records seen so far: per key, the sequence of firings (timestamp, count,
//!   output timestamp, watermark in `on_timer` and downstream) equals the
//!   model's, at parallelism 1 and 3. The same for processing-time timers at
//!   parallelism 1 (the shared manual clock makes larger parallelism racy).
//! - closures still are keyed process functions (their timers fire into the
//!   default `on_timer`), and registering a timer on a non-keyed stream fails
//!   the job with a readable error.

use crate::rng;
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::{OnTimerContext, ProcessContext};
use floe::time::{ManualClock, TimeDomain, WatermarkStrategy};
use floe::{DataStream, JobResult, StreamExecutionEnvironment};
use rng::SplitMix;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, mpsc};
use std::time::Duration;

// ---------------------------------------------------------------- helpers

/// Upper bound on the run time of one job; only reached if it hangs.
const JOB_LIMIT: Duration = Duration::from_secs(60);

/// Runs the job; cancels it (failing the test) if it hangs.
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

fn run_ok(env: &StreamExecutionEnvironment) {
    if let Err(e) = run(env) {
        panic!("job failed: {e}");
    }
}

/// Adds, after `s`, the output timestamp and the watermark each record meets
/// downstream (a chained non-keyed process function).
fn with_downstream_view<X: Clone + Send + Sync + 'static>(
    s: &DataStream<X>,
) -> DataStream<(X, Option<i64>, i64)> {
    s.process(
        |x: X, ctx: &mut ProcessContext<'_, '_, (X, Option<i64>, i64)>| {
            let seen = (x, ctx.timestamp(), ctx.current_watermark());
            ctx.collect(seen);
            Ok(())
        },
    )
}

// ------------------------------------------------- scripted hand-worked jobs

/// What a scripted record (or a firing timer) does.
#[derive(Clone, Debug)]
enum Op {
    RegE(i64),
    DelE(i64),
    RegP(i64),
    DelP(i64),
    SetClock(i64),
}

/// A scripted record: its key and timestamp, what it does, and the watermark
/// the source emits right after it (punctuated).
#[derive(Clone, Debug)]
struct Ev {
    key: &'static str,
    ts: i64,
    ops: Vec<Op>,
    wm: Option<i64>,
}

fn ev(key: &'static str, ts: i64, ops: Vec<Op>, wm: Option<i64>) -> Ev {
    Ev { key, ts, ops, wm }
}

/// What the scripted function emits.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Out {
    /// A record was processed (key, timestamp).
    Seen(String, i64),
    /// A timer fired: key, timestamp, domain, `current_watermark()` and
    /// `current_processing_time()` in `on_timer`.
    Fired(String, i64, TimeDomain, i64, i64),
}

fn seen(k: &str, ts: i64) -> Out {
    Out::Seen(k.to_string(), ts)
}

fn fired_e(k: &str, t: i64, wm: i64) -> Out {
    Out::Fired(k.to_string(), t, TimeDomain::EventTime, wm, 0)
}

fn fired_p(k: &str, t: i64, wm: i64, now: i64) -> Out {
    Out::Fired(k.to_string(), t, TimeDomain::ProcessingTime, wm, now)
}

type FireOps = HashMap<(String, i64, TimeDomain), Vec<Op>>;

/// What firing timers do: `((key, timestamp, domain), ops)`.
type FireScript<'a> = Vec<((&'a str, i64, TimeDomain), Vec<Op>)>;

/// Applies each record's ops; on a firing, applies the ops scripted for it.
#[derive(Clone)]
struct Script {
    clock: ManualClock,
    on_fire: Arc<FireOps>,
}

fn apply(ops: &[Op], ctx: &mut ProcessContext<'_, '_, Out, String>, clock: &ManualClock) {
    for op in ops {
        match *op {
            Op::RegE(t) => ctx.register_event_time_timer(t),
            Op::DelE(t) => ctx.delete_event_time_timer(t),
            Op::RegP(t) => ctx.register_processing_time_timer(t),
            Op::DelP(t) => ctx.delete_processing_time_timer(t),
            Op::SetClock(t) => clock.set(t),
        }
    }
}

impl KeyedProcessFunction<String, Ev, Out> for Script {
    fn process_element(
        &mut self,
        value: Ev,
        ctx: &mut ProcessContext<'_, '_, Out, String>,
    ) -> floe::Result<()> {
        assert_eq!(ctx.current_key().map(String::as_str), Some(value.key));
        apply(&value.ops, ctx, &self.clock);
        ctx.collect(Out::Seen(value.key.to_string(), value.ts));
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut OnTimerContext<'_, '_, Out, String>,
    ) -> floe::Result<()> {
        assert_eq!(ctx.timestamp(), timestamp);
        let key = ctx.current_key().clone();
        let domain = ctx.time_domain();
        let (wm, now) = (ctx.current_watermark(), ctx.current_processing_time());
        let now = if domain == TimeDomain::EventTime {
            0
        } else {
            now
        };
        ctx.collect(Out::Fired(key.clone(), timestamp, domain, wm, now));
        if let Some(ops) = self.on_fire.get(&(key, timestamp, domain)) {
            apply(ops, ctx, &self.clock);
        }
        Ok(())
    }
}

/// Runs a scripted job at parallelism 1 with batch size 1; returns each
/// output with its timestamp and the watermark downstream saw with it.
fn run_script(
    events: Vec<Ev>,
    on_fire: FireScript<'_>,
    clock: ManualClock,
) -> Vec<(Out, Option<i64>, i64)> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1).set_batch_size(1).set_arbiters(2);
    let strategy =
        WatermarkStrategy::punctuated(|e: &Ev, _| e.wm).with_timestamp_assigner(|e: &Ev, _| e.ts);
    let on_fire: FireOps = on_fire
        .into_iter()
        .map(|((k, t, d), ops)| ((k.to_string(), t, d), ops))
        .collect();
    let script = Script {
        clock: clock.clone(),
        on_fire: Arc::new(on_fire),
    };
    let fired = env
        .from_collection(events)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(|e: &Ev| e.key.to_string())
        .process_with_clock(script, clock);
    let out = with_downstream_view(&fired).collect();
    run_ok(&env);
    out.take()
}

/// The `Out` values alone.
fn outs(v: &[(Out, Option<i64>, i64)]) -> Vec<Out> {
    v.iter().map(|(o, _, _)| o.clone()).collect()
}

const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

#[test]
fn event_time_timers_fire_in_order_once_per_key_and_timestamp() {
    use Op::*;
    let got = run_script(
        vec![
            ev("a", 1, vec![RegE(30), RegE(10), RegE(20), RegE(10)], None),
            ev("b", 2, vec![RegE(10), RegE(10)], Some(25)),
            // 20 already fired; registered again behind the watermark, it
            // fires at the next watermark (here: the final one).
            ev("a", 26, vec![RegE(20)], None),
        ],
        vec![],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            seen("b", 2),
            fired_e("a", 10, 25),
            fired_e("b", 10, 25),
            fired_e("a", 20, 25),
            seen("a", 26),
            fired_e("a", 20, MAX),
            fired_e("a", 30, MAX),
        ]
    );
    // Firings carry the timer's timestamp and reach downstream before the
    // watermark that fired them.
    let views: Vec<(Option<i64>, i64)> = got.iter().map(|(_, ts, wm)| (*ts, *wm)).collect();
    assert_eq!(
        views,
        vec![
            (Some(1), MIN),
            (Some(2), MIN),
            (Some(10), MIN),
            (Some(10), MIN),
            (Some(20), MIN),
            (Some(26), 25),
            (Some(20), 25),
            (Some(30), 25),
        ]
    );
}

#[test]
fn deleted_event_time_timers_do_not_fire() {
    use Op::*;
    let got = run_script(
        vec![
            ev("a", 1, vec![RegE(10), RegE(20), RegE(30)], None),
            ev("b", 2, vec![RegE(20), DelE(10), DelE(99)], None),
            ev("a", 3, vec![DelE(10), DelE(10)], None),
            // Deleted, then registered again: one firing.
            ev("a", 4, vec![DelE(30), RegE(30)], Some(50)),
        ],
        vec![],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            seen("b", 2),
            seen("a", 3),
            seen("a", 4),
            fired_e("a", 20, 50),
            fired_e("b", 20, 50),
            fired_e("a", 30, 50),
        ]
    );
}

#[test]
fn timers_registered_and_deleted_in_on_timer() {
    use Op::*;
    let e = TimeDomain::EventTime;
    let got = run_script(
        vec![
            ev("a", 1, vec![RegE(10)], None),
            ev("b", 2, vec![RegE(12)], Some(20)),
            ev("a", 30, vec![], Some(35)),
        ],
        vec![
            // Fired at watermark 20: 5 is behind it and fires in the same
            // advance, right after 10 (before b's 12 and a's 15); 40 waits.
            (("a", 10, e), vec![RegE(15), RegE(40), RegE(5)]),
            // Deletes b's own follow-up before it fires, and a's 40 is not b's.
            (("b", 12, e), vec![RegE(18), DelE(18), DelE(40)]),
            (("a", 15, e), vec![RegE(36)]),
            (("a", 36, e), vec![DelE(40)]),
        ],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            seen("b", 2),
            fired_e("a", 10, 20),
            fired_e("a", 5, 20),
            fired_e("b", 12, 20),
            fired_e("a", 15, 20),
            seen("a", 30),
            fired_e("a", 36, MAX),
        ]
    );
}

#[test]
fn end_of_input_fires_remaining_event_time_timers() {
    use Op::*;
    let got = run_script(
        vec![
            ev("a", 1, vec![RegE(MAX), RegE(MAX - 1), RegE(-100)], None),
            ev("b", 2, vec![RegE(MIN)], None),
        ],
        vec![],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            seen("b", 2),
            fired_e("b", MIN, MAX),
            fired_e("a", -100, MAX),
            fired_e("a", MAX - 1, MAX),
            fired_e("a", MAX, MAX),
        ]
    );
}

#[test]
fn processing_time_timers_fire_at_the_next_check_after_their_time() {
    use Op::*;
    let got = run_script(
        vec![
            ev(
                "a",
                1,
                vec![SetClock(100), RegP(150), RegP(120), RegP(150)],
                None,
            ),
            // The clock passes 120 and 125 while this record is processed:
            // both fire right after its batch, in time order.
            ev("b", 2, vec![SetClock(130), RegP(125)], None),
            ev("c", 3, vec![RegP(135), DelP(135), DelP(150)], None),
            ev("a", 4, vec![SetClock(149)], None),
            // A timer behind the clock fires after the batch too.
            ev("a", 5, vec![SetClock(200), RegP(50)], None),
            // Never reached: dropped at the end of input, as in Flink.
            ev("b", 6, vec![RegP(500)], None),
        ],
        vec![],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            seen("b", 2),
            fired_p("a", 120, MIN, 130),
            fired_p("b", 125, MIN, 130),
            seen("c", 3),
            seen("a", 4),
            seen("a", 5),
            fired_p("a", 50, MIN, 200),
            fired_p("a", 150, MIN, 200),
            seen("b", 6),
        ]
    );
    // Processing-time firings carry no timestamp.
    for (o, ts, _) in &got {
        if let Out::Fired(..) = o {
            assert_eq!(*ts, None, "{o:?}");
        }
    }
}

#[test]
fn processing_time_timers_fire_on_watermarks() {
    use Op::*;
    let e = TimeDomain::EventTime;
    let p = TimeDomain::ProcessingTime;
    let got = run_script(
        vec![
            ev("a", 1, vec![RegP(250), RegE(10)], Some(10)),
            ev("a", 2, vec![RegE(11), RegP(900)], None),
        ],
        vec![
            // The event-time firing moves the clock; the clock check on the
            // same watermark fires the processing-time timer before the next
            // record.
            (("a", 10, e), vec![SetClock(300)]),
            // A processing-time firing may register an event-time timer the
            // watermark already passed: it fires on the same watermark.
            (("a", 250, p), vec![RegE(3), RegP(299), RegP(301)]),
            // At the end: the final watermark fires event time, then the
            // clock check fires what became due meanwhile.
            (("a", 11, e), vec![SetClock(1000)]),
        ],
        ManualClock::new(0),
    );
    assert_eq!(
        outs(&got),
        vec![
            seen("a", 1),
            fired_e("a", 10, 10),
            fired_p("a", 250, 10, 300),
            fired_p("a", 299, 10, 300),
            fired_e("a", 3, 10),
            seen("a", 2),
            fired_e("a", 11, MAX),
            fired_p("a", 301, MAX, 1000),
            fired_p("a", 900, MAX, 1000),
        ]
    );
}

#[test]
fn closures_are_keyed_process_functions_with_timers() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let data: Vec<(u32, i64)> = (0..100).map(|i| (i % 7, i as i64)).collect();
    let out = env
        .from_collection(data.clone())
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::monotonous_timestamps()
                .with_timestamp_assigner(|t: &(u32, i64), _| t.1)
                .per_record(),
        )
        .key_by_field(|t: &(u32, i64)| &t.0)
        .process(
            |t: (u32, i64), ctx: &mut ProcessContext<'_, '_, (u32, i64), u32>| {
                // Fired into the closure's default (empty) on_timer.
                ctx.register_event_time_timer(t.1 + 5);
                ctx.register_processing_time_timer(0);
                ctx.collect(t);
                Ok(())
            },
        )
        .collect();
    run_ok(&env);
    let mut got = out.take();
    got.sort();
    let mut want = data;
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn timers_on_a_non_keyed_stream_fail_the_job() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    let _ = env
        .from_collection(vec![1i64, 2, 3])
        .process(|x: i64, ctx: &mut ProcessContext<'_, '_, i64>| {
            ctx.register_event_time_timer(x);
            ctx.collect(x);
            Ok(())
        })
        .collect();
    let err = match run(&env) {
        Ok(_) => panic!("a timer on a non-keyed stream must fail the job"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("only supported on keyed streams"), "{err}");
    assert!(
        err.contains("Process"),
        "the error names the operator: {err}"
    );
}

// ------------------------------------------------ random event-time oracle

type Rec = (String, i64, i64);

/// Seeded records `(key, ts, value)`: time moves forward by 0..=3 per record,
/// timestamps lag it by 0..=15 and 3% lag by 100..=299 (late).
fn generate(seed: u64, n: usize, keys: u64) -> Vec<Rec> {
    let mut rng = SplitMix(seed);
    let mut now = -500 + rng.below(1000) as i64;
    (0..n)
        .map(|_| {
            now += rng.below(4) as i64;
            let mut ts = now - rng.below(16) as i64;
            if rng.chance(30) {
                ts = now - 100 - rng.below(200) as i64;
            }
            let key = format!("k{}", rng.below(keys));
            (key, ts, rng.below(1000) as i64)
        })
        .collect()
}

/// The last timestamp of the 10 ms bucket holding `ts`.
fn bucket_end(ts: i64) -> i64 {
    ts - ts.rem_euclid(10) + 9
}

/// What a firing timer does besides emitting: `(register, delete)`.
/// Bucket-end timers in every third bucket register a follow-up 3 ms later
/// (never a bucket end, so follow-ups have none); those in the next bucket
/// delete the key's timer of the bucket after theirs.
fn on_timer_rule(t: i64) -> (Option<i64>, Option<i64>) {
    if t.rem_euclid(10) != 9 {
        return (None, None);
    }
    match t.div_euclid(10).rem_euclid(3) {
        0 => (Some(t + 3), None),
        1 => (None, Some(t + 10)),
        _ => (None, None),
    }
}

/// Per record: count it, register the timer at its bucket's end and, for
/// values divisible by 5, delete the timer of the next bucket.
#[derive(Clone, Default)]
struct BucketCounter {
    counts: HashMap<String, u64>,
}

/// A firing: (timer timestamp, key's count, watermark in on_timer).
type Firing = (i64, u64, i64);

impl KeyedProcessFunction<String, Rec, (String, Firing)> for BucketCounter {
    fn process_element(
        &mut self,
        r: Rec,
        ctx: &mut ProcessContext<'_, '_, (String, Firing), String>,
    ) -> floe::Result<()> {
        *self.counts.entry(r.0).or_default() += 1;
        let b = bucket_end(r.1);
        ctx.register_event_time_timer(b);
        if r.2 % 5 == 0 {
            ctx.delete_event_time_timer(b + 10);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        t: i64,
        ctx: &mut OnTimerContext<'_, '_, (String, Firing), String>,
    ) -> floe::Result<()> {
        let key = ctx.current_key().clone();
        let count = self.counts.get(&key).copied().unwrap_or(0);
        let wm = ctx.current_watermark();
        ctx.collect((key, (t, count, wm)));
        let (register, delete) = on_timer_rule(t);
        if let Some(x) = register {
            ctx.register_event_time_timer(x);
        }
        if let Some(x) = delete {
            ctx.delete_event_time_timer(x);
        }
        Ok(())
    }
}

/// One pending timer of the model: (timestamp, registration number, key).
type Pending = Vec<(i64, u64, String)>;

/// Removes the model's next timer `<= limit`: the earliest, the first
/// registered among equal timestamps.
fn pop_due(pending: &mut Pending, limit: i64) -> Option<(i64, String)> {
    let i = (0..pending.len())
        .filter(|&i| pending[i].0 <= limit)
        .min_by_key(|&i| (pending[i].0, pending[i].1))?;
    let (t, _, k) = pending.remove(i);
    Some((t, k))
}

/// The model: per key, the firings with the output timestamp and the
/// watermark downstream sees with them.
fn event_time_model(recs: &[Rec], ooo: i64) -> BTreeMap<String, Vec<(Firing, Option<i64>, i64)>> {
    let mut out: BTreeMap<String, Vec<(Firing, Option<i64>, i64)>> = BTreeMap::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut pending: Pending = Vec::new();
    let mut seq = 0u64;
    let mut wm = i64::MIN;
    let mut register = |pending: &mut Pending, t: i64, k: &str| {
        if !pending.iter().any(|(x, _, y)| *x == t && y == k) {
            pending.push((t, seq, k.to_string()));
            seq += 1;
        }
    };
    let delete = |pending: &mut Pending, t: i64, k: &str| {
        pending.retain(|(x, _, y)| !(*x == t && y == k));
    };
    let mut advance = |pending: &mut Pending,
                       counts: &HashMap<String, u64>,
                       wm: &mut i64,
                       to: i64,
                       register: &mut dyn FnMut(&mut Pending, i64, &str)| {
        let before = *wm;
        *wm = to;
        while let Some((t, k)) = pop_due(pending, to) {
            let count = counts.get(&k).copied().unwrap_or(0);
            out.entry(k.clone())
                .or_default()
                .push(((t, count, to), Some(t), before));
            let (r, d) = on_timer_rule(t);
            if let Some(x) = r {
                register(pending, x, &k);
            }
            if let Some(x) = d {
                delete(pending, x, &k);
            }
        }
    };
    let mut max_ts: Option<i64> = None;
    for (k, ts, v) in recs {
        *counts.entry(k.clone()).or_default() += 1;
        let b = bucket_end(*ts);
        register(&mut pending, b, k);
        if v % 5 == 0 {
            delete(&mut pending, b + 10, k);
        }
        let m = max_ts.map_or(*ts, |m| m.max(*ts));
        max_ts = Some(m);
        let w = m - ooo - 1;
        if w > wm {
            advance(&mut pending, &counts, &mut wm, w, &mut register);
        }
    }
    advance(&mut pending, &counts, &mut wm, i64::MAX, &mut register);
    out
}

fn check_event_time_oracle(seed: u64, n: usize, keys: u64, ooo: i64, parallelism: usize) {
    let recs = generate(seed, n, keys);
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism).set_arbiters(2);
    let strategy = WatermarkStrategy::<Rec>::bounded_out_of_orderness(ooo)
        .with_timestamp_assigner(|r, _| r.1)
        .per_record();
    let fired = env
        .from_collection(recs.clone())
        .assign_timestamps_and_watermarks(strategy)
        .set_parallelism(1)
        .key_by_field(|r: &Rec| &r.0)
        .process(BucketCounter::default());
    let out = with_downstream_view(&fired).collect();
    run_ok(&env);
    let mut got: BTreeMap<String, Vec<(Firing, Option<i64>, i64)>> = BTreeMap::new();
    for ((k, f), ts, wm) in out.take() {
        got.entry(k).or_default().push((f, ts, wm));
    }
    let want = event_time_model(&recs, ooo);
    let total: usize = want.values().map(Vec::len).sum();
    assert!(
        total > n / 20,
        "the input should fire many timers ({total})"
    );
    for k in want.keys().chain(got.keys()) {
        let (w, g) = (want.get(k), got.get(k));
        if w != g {
            let w = w.map(Vec::as_slice).unwrap_or_default();
            let g = g.map(Vec::as_slice).unwrap_or_default();
            let first = w.iter().zip(g).position(|(a, b)| a != b);
            panic!(
                "seed {seed}, P={parallelism}, key {k}: {} firings expected, {} got; \
                 first difference at {first:?}: want {:?}, got {:?}",
                w.len(),
                g.len(),
                first.and_then(|i| w.get(i)),
                first.and_then(|i| g.get(i)),
            );
        }
    }
}

#[test]
fn event_time_timers_match_the_model_at_parallelism_1() {
    for seed in [1, 2, 3] {
        check_event_time_oracle(seed, 3000, 7, 5, 1);
    }
    check_event_time_oracle(4, 2000, 1, 0, 1);
}

#[test]
fn event_time_timers_match_the_model_at_parallelism_3() {
    for seed in [11, 12, 13] {
        check_event_time_oracle(seed, 3000, 7, 5, 3);
    }
    check_event_time_oracle(14, 2000, 40, 30, 3);
}

// ------------------------------------------- random processing-time oracle

/// A record for the processing-time model: key, the clock it sets, and the
/// timers it registers and deletes.
type PRec = (String, i64, Vec<i64>, Vec<i64>);

fn generate_processing(seed: u64, n: usize, keys: u64) -> Vec<PRec> {
    let mut rng = SplitMix(seed);
    let mut now = rng.below(1000) as i64;
    let mut registered: Vec<(String, i64)> = Vec::new();
    (0..n)
        .map(|_| {
            now += rng.below(8) as i64;
            let key = format!("k{}", rng.below(keys));
            let mut reg = Vec::new();
            for _ in 0..rng.below(3) {
                // Mostly ahead of the clock, sometimes behind it.
                let t = now - 5 + rng.below(60) as i64;
                reg.push(t);
                registered.push((key.clone(), t));
            }
            let mut del = Vec::new();
            if rng.chance(300) && !registered.is_empty() {
                let i = rng.below(registered.len() as u64) as usize;
                if registered[i].0 == key {
                    del.push(registered[i].1);
                } else {
                    del.push(now + rng.below(60) as i64);
                }
            }
            (key, now, reg, del)
        })
        .collect()
}

/// Sets the clock, registers and deletes processing-time timers; a firing
/// emits (key, timer, clock) and, for timers divisible by 4, registers one
/// 3 ms later (it fires in the same check when the clock has passed it).
#[derive(Clone)]
struct ClockDriver {
    clock: ManualClock,
}

impl KeyedProcessFunction<String, PRec, (String, i64, i64)> for ClockDriver {
    fn process_element(
        &mut self,
        r: PRec,
        ctx: &mut ProcessContext<'_, '_, (String, i64, i64), String>,
    ) -> floe::Result<()> {
        self.clock.set(r.1);
        for t in r.2 {
            ctx.register_processing_time_timer(t);
        }
        for t in r.3 {
            ctx.delete_processing_time_timer(t);
        }
        ctx.collect((r.0, i64::MIN, r.1));
        Ok(())
    }

    fn on_timer(
        &mut self,
        t: i64,
        ctx: &mut OnTimerContext<'_, '_, (String, i64, i64), String>,
    ) -> floe::Result<()> {
        assert_eq!(ctx.time_domain(), TimeDomain::ProcessingTime);
        let (key, now) = (ctx.current_key().clone(), ctx.current_processing_time());
        ctx.collect((key, t, now));
        if t.rem_euclid(4) == 0 {
            ctx.register_processing_time_timer(t + 3);
        }
        Ok(())
    }
}

/// The model: after every record (one per batch) the clock is checked and
/// due timers fire in (time, registration) order; at the end the pending
/// ones are dropped. Record markers are `(key, i64::MIN, clock)`.
fn processing_model(recs: &[PRec]) -> Vec<(String, i64, i64)> {
    let mut out = Vec::new();
    let mut pending: Pending = Vec::new();
    let mut seq = 0u64;
    let mut register = |pending: &mut Pending, t: i64, k: &str| {
        if !pending.iter().any(|(x, _, y)| *x == t && y == k) {
            pending.push((t, seq, k.to_string()));
            seq += 1;
        }
    };
    for (k, now, reg, del) in recs {
        for &t in reg {
            register(&mut pending, t, k);
        }
        for &t in del {
            pending.retain(|(x, _, y)| !(*x == t && y == k));
        }
        out.push((k.clone(), i64::MIN, *now));
        while let Some((t, key)) = pop_due(&mut pending, *now) {
            out.push((key.clone(), t, *now));
            if t.rem_euclid(4) == 0 {
                register(&mut pending, t + 3, &key);
            }
        }
    }
    out
}

#[test]
fn processing_time_timers_match_the_model_at_parallelism_1() {
    for seed in [21, 22, 23] {
        let recs = generate_processing(seed, 1500, 5);
        let clock = ManualClock::new(0);
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(1).set_batch_size(1).set_arbiters(2);
        let out = env
            .from_collection(recs.clone())
            .key_by_field(|r: &PRec| &r.0)
            .process_with_clock(
                ClockDriver {
                    clock: clock.clone(),
                },
                clock,
            )
            .collect();
        run_ok(&env);
        let got = out.take();
        let want = processing_model(&recs);
        let fired = want.iter().filter(|o| o.1 != i64::MIN).count();
        assert!(fired > 500, "the input should fire many timers ({fired})");
        if got != want {
            let first = want.iter().zip(&got).position(|(a, b)| a != b);
            panic!(
                "seed {seed}: {} outputs expected, {} got; first difference at {first:?}: \
                 want {:?}, got {:?}",
                want.len(),
                got.len(),
                first.and_then(|i| want.get(i)),
                first.and_then(|i| got.get(i)),
            );
        }
    }
}
