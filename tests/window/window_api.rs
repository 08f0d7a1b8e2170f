//! Library-level checks of keyed event-time windows against the independent
//! model of Flink's rules in `tests/common/mod.rs`.
//!
//! - `oracle_*`: hand-worked examples pin down the model itself.
//! - `process_*`, `aggregate_with_*`, `reduce_*`, `aggregate_*`: seeded random
//!   inputs (several keys, jittered and very late timestamps, negative
//!   timestamps) through `from_collection` -> per-record
//!   bounded-out-of-orderness watermarks -> `key_by_field` ->
//!   `window(WindowAssigner::...)` with tumbling / sliding windows (with and
//!   without `with_offset`, negative offsets too, slide > size too), static
//!   and dynamic session windows, `.allowed_lateness` and
//!   `.side_output_late_data`, at parallelism 1, 2 and 3. Every firing
//!   (`process`: key, window bounds and the sorted values; `aggregate_with`:
//!   window bounds, key, count, sum, min, max; `reduce`: key, latest timestamp
//!   and sum; `aggregate`: key, count, sum, min, max) and the late side
//!   output must equal the model's, as multisets. `process` keeps whole
//!   windows while the incremental functions may share state between
//!   overlapping sliding windows, so both paths are covered.
//! - late records are dropped (and firings unchanged) without a side output.
//! - the union of two watermarked streams fires on the smaller watermark.
//! - an invalid assigner fails the job.
//! - proptests: `WindowAssigner::assign` gives exactly the windows of the
//!   rules for any timestamp (negative too) and offset, `validate` accepts
//!   exactly Flink's parameters, `TimeWindow::intersects` / `cover` follow
//!   their definitions, and small random streams through `process` and
//!   `aggregate_with` jobs equal the model (shrinking to a minimal input on
//!   failure).
//! - regressions: an invalid assigner fails the job even without input, a
//!   dynamic session gap <= 0 fails the job, an offset of `i64::MIN` is
//!   rejected without a panic.

use crate::common;

use common::{GenParams, Outcome, Rec, Spec, diff, generate, simulate};
use floe::time::WatermarkStrategy;
use floe::window::{AggregateFunction, TimeWindow, WindowAssigner};
use floe::{DataStream, JobResult, OutputTag, StreamExecutionEnvironment, WindowedStream};
use proptest::prelude::*;
use std::sync::mpsc;
use std::time::Duration;

type T = (String, i64, i64);

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

/// The floe assigner for a model spec.
fn assigner(spec: &Spec) -> WindowAssigner<T> {
    match *spec {
        Spec::Tumbling { size, offset } => WindowAssigner::tumbling(size).with_offset(offset),
        Spec::Sliding {
            size,
            slide,
            offset,
        } => WindowAssigner::sliding(size, slide).with_offset(offset),
        Spec::Session { gap } => WindowAssigner::session(gap),
        Spec::DynamicSession { gap } => WindowAssigner::dynamic_session(move |t: &T| gap(t.2)),
    }
}

/// One library job to check.
#[derive(Clone, Copy, Debug)]
struct Job {
    spec: Spec,
    ooo: i64,
    lateness: i64,
    parallelism: usize,
    /// Whether to ask for the late side output.
    late_output: bool,
}

/// A windowed stream over `recs` with the job's settings, in `env`.
fn windowed(
    env: &StreamExecutionEnvironment,
    recs: &[Rec],
    job: &Job,
    late: &OutputTag<T>,
) -> WindowedStream<T, String> {
    env.set_parallelism(job.parallelism).set_arbiters(2);
    let data: Vec<T> = recs.iter().map(Rec::tuple).collect();
    let strategy = WatermarkStrategy::<T>::bounded_out_of_orderness(job.ooo)
        .with_timestamp_assigner(|t, _| t.1)
        .per_record();
    let w = env
        .from_collection(data)
        .assign_timestamps_and_watermarks(strategy)
        .set_parallelism(1)
        .key_by_field(|t: &T| &t.0)
        .window(assigner(&job.spec))
        .allowed_lateness(job.lateness);
    if job.late_output {
        w.side_output_late_data(late)
    } else {
        w
    }
}

fn sorted<X: Ord>(mut v: Vec<X>) -> Vec<X> {
    v.sort();
    v
}

fn compare<X: Ord + Clone + std::fmt::Debug>(
    what: &str,
    want: Vec<X>,
    got: Vec<X>,
) -> Result<(), String> {
    let (want, got) = (sorted(want), sorted(got));
    if want == got {
        return Ok(());
    }
    let (missing, extra) = diff(&want, &got, 6);
    Err(format!(
        "{what}: {} expected, {} got; missing {missing:?}; unexpected {extra:?}",
        want.len(),
        got.len()
    ))
}

fn late_of(recs: &[Rec], o: &Outcome) -> Vec<T> {
    o.late.iter().map(|&i| recs[i].tuple()).collect()
}

/// A window job's firings and late records, run through `fire`.
fn run_job<R: Clone + Send + 'static>(
    recs: &[Rec],
    job: &Job,
    fire: impl FnOnce(&WindowedStream<T, String>) -> DataStream<R>,
) -> (Vec<R>, Vec<T>) {
    let env = StreamExecutionEnvironment::new();
    let tag = OutputTag::<T>::new("late");
    let w = windowed(&env, recs, job, &tag);
    let fired = fire(&w);
    let out = fired.collect();
    let late = job
        .late_output
        .then(|| fired.get_side_output(&tag).collect());
    run_ok(&env);
    (out.take(), late.map(|l| l.take()).unwrap_or_default())
}

/// Checks `process`: key, window bounds and sorted values of every firing.
fn check_process(recs: &[Rec], job: &Job) -> Result<(), String> {
    type Fired = (String, i64, i64, Vec<i64>);
    let (got, late) = run_job(recs, job, |w| {
        w.process(
            |k: &String, win: &TimeWindow, items: Vec<T>, out: &mut Vec<Fired>| {
                let vals = sorted(items.iter().map(|t| t.2).collect());
                out.push((k.clone(), win.start, win.end, vals));
            },
        )
    });
    let o = simulate(recs, &job.spec, job.ooo, job.lateness);
    let want: Vec<Fired> = o
        .firings
        .iter()
        .map(|f| {
            let vals = sorted(f.members.iter().map(|&i| recs[i].value).collect());
            (f.key.clone(), f.start, f.end, vals)
        })
        .collect();
    let what = format!("process {job:?} ({} records)", recs.len());
    compare(&what, want, got)?;
    let want_late = if job.late_output {
        late_of(recs, &o)
    } else {
        Vec::new()
    };
    compare(&format!("{what}, late"), want_late, late)
}

/// Checks `aggregate_with` (incremental state, as the CLI uses): key, window
/// bounds, count, sum, min and max of every firing.
fn check_aggregate_with(recs: &[Rec], job: &Job) -> Result<(), String> {
    type Fired = (i64, i64, Stats);
    let (got, late) = run_job(recs, job, |w| {
        w.aggregate_with(
            StatsAgg,
            |_: &String, win: &TimeWindow, s: Stats, out: &mut Vec<Fired>| {
                out.push((win.start, win.end, s))
            },
        )
    });
    let o = simulate(recs, &job.spec, job.ooo, job.lateness);
    let want: Vec<Fired> = o
        .firings
        .iter()
        .map(|f| (f.start, f.end, stats_of(recs, &f.key, &f.members)))
        .collect();
    let what = format!("aggregate_with {job:?} ({} records)", recs.len());
    compare(&what, want, got)?;
    compare(&format!("{what}, late"), late_of(recs, &o), late)
}

fn stats_of(recs: &[Rec], key: &str, members: &[usize]) -> Stats {
    let vals = || members.iter().map(|&i| recs[i].value);
    Stats {
        key: key.to_string(),
        count: vals().count() as i64,
        sum: vals().fold(0i64, |a, v| a.wrapping_add(v)),
        min: vals().min().expect("a firing has records"),
        max: vals().max().expect("a firing has records"),
    }
}

fn standard_jobs() -> Vec<(Job, GenParams)> {
    let j = |spec, ooo, lateness, parallelism| Job {
        spec,
        ooo,
        lateness,
        parallelism,
        late_output: true,
    };
    let jit = GenParams::jittered;
    vec![
        (j(Spec::tumbling(50), 0, 0, 1), jit(800, 6, -2000, 4, 30)),
        (
            j(
                Spec::Tumbling {
                    size: 64,
                    offset: -23,
                },
                15,
                40,
                2,
            ),
            jit(1000, 8, -500, 4, 40),
        ),
        (
            j(
                Spec::Tumbling {
                    size: 100,
                    offset: 37,
                },
                5,
                0,
                3,
            ),
            jit(800, 4, 10, 5, 30),
        ),
        (
            j(
                Spec::Sliding {
                    size: 60,
                    slide: 20,
                    offset: -7,
                },
                10,
                25,
                2,
            ),
            jit(800, 6, -900, 4, 30),
        ),
        (
            j(
                Spec::Sliding {
                    size: 30,
                    slide: 45,
                    offset: 11,
                },
                0,
                10,
                1,
            ),
            jit(800, 3, -100, 3, 20),
        ),
        (j(Spec::sliding(45, 10), 20, 0, 3), jit(800, 10, 0, 4, 40)),
        (
            j(Spec::session(15), 0, 30, 2),
            jit(1000, 5, -3000, 5, 30).with_pauses(20, 120),
        ),
        (
            j(Spec::session(8), 6, 0, 3),
            jit(800, 3, 100, 3, 10).with_very_late(30, 5, 40),
        ),
        (
            j(
                Spec::DynamicSession {
                    gap: |v| 1 + v.rem_euclid(25),
                },
                5,
                20,
                2,
            ),
            jit(1000, 4, -50, 4, 20).with_pauses(15, 80),
        ),
    ]
}

// ---------------------------------------------------- the model itself

fn recs(items: &[(&str, i64, i64)]) -> Vec<Rec> {
    items.iter().map(|&(k, t, v)| Rec::new(k, t, v)).collect()
}

/// (key, start, end, sorted values) of every firing, in firing order.
fn firings(recs: &[Rec], o: &Outcome) -> Vec<(String, i64, i64, Vec<i64>)> {
    o.firings
        .iter()
        .map(|f| {
            let vals = sorted(f.members.iter().map(|&i| recs[i].value).collect());
            (f.key.clone(), f.start, f.end, vals)
        })
        .collect()
}

fn fired(k: &str, s: i64, e: i64, vals: &[i64]) -> (String, i64, i64, Vec<i64>) {
    (k.to_string(), s, e, vals.to_vec())
}

#[test]
fn oracle_tumbling_with_lateness() {
    // size 10, no out-of-orderness, lateness 5.
    let r = recs(&[
        ("a", 1, 1),  // [0,10); wm 0
        ("a", 12, 2), // [10,20); wm 11 fires [0,10) = {1}
        ("a", 3, 3),  // [0,10) late but allowed (9 + 5 > 11): re-fires {1,3}
        ("a", 15, 4), // wm 14: purges [0,10) (cleanup 14)
        ("a", 4, 5),  // [0,10) past cleanup: late record
        ("a", 9, 6),  // also late (9 + 5 <= 14)
    ]);
    let o = simulate(&r, &Spec::tumbling(10), 0, 5);
    assert_eq!(
        firings(&r, &o),
        vec![
            fired("a", 0, 10, &[1]),
            fired("a", 0, 10, &[1, 3]),
            fired("a", 10, 20, &[2, 4]),
        ]
    );
    assert_eq!(o.late, vec![4, 5]);
}

#[test]
fn oracle_bounded_out_of_orderness() {
    // size 10, bound 5: record 12 gives wm 6, record 16 gives wm 10.
    let r = recs(&[("a", 12, 1), ("a", 8, 2), ("a", 16, 3), ("a", 9, 4)]);
    let o = simulate(&r, &Spec::tumbling(10), 5, 0);
    assert_eq!(
        firings(&r, &o),
        vec![fired("a", 0, 10, &[2]), fired("a", 10, 20, &[1, 3])]
    );
    assert_eq!(o.late, vec![3]);
}

#[test]
fn oracle_sliding_and_negative() {
    // size 10, slide 5: -3 is in [-10,0) and [-5,5).
    let r = recs(&[("k", -3, 7), ("k", 2, 1), ("k", 40, 0)]);
    let o = simulate(&r, &Spec::sliding(10, 5), 0, 0);
    assert_eq!(
        sorted(firings(&r, &o)),
        vec![
            fired("k", -10, 0, &[7]),
            fired("k", -5, 5, &[1, 7]),
            fired("k", 0, 10, &[1]),
            fired("k", 35, 45, &[0]),
            fired("k", 40, 50, &[0]),
        ]
    );
    // slide > size: 7 is in no window; not late (wm is MIN) so just dropped.
    let r = recs(&[("k", 7, 1), ("k", 1, 2)]);
    let o = simulate(&r, &Spec::sliding(5, 10), 100, 0);
    assert_eq!(firings(&r, &o), vec![fired("k", 0, 5, &[2])]);
    assert!(o.late.is_empty());
}

#[test]
fn oracle_sessions_merge_touching_and_transitively() {
    // gap 5, bound 20 (so nothing fires early).
    let r = recs(&[
        ("s", 0, 1),  // [0,5)
        ("s", 10, 2), // [10,15)
        ("s", 5, 3),  // [5,10) touches both: [0,15)
        ("s", 40, 4), // [40,45); wm 19: fires [0,15)
        ("s", 36, 5), // [36,41) overlaps [40,45): [36,45)
        ("t", 33, 6), // another key: separate
    ]);
    let o = simulate(&r, &Spec::session(5), 20, 0);
    assert_eq!(
        sorted(firings(&r, &o)),
        vec![
            fired("s", 0, 15, &[1, 2, 3]),
            fired("s", 36, 45, &[4, 5]),
            fired("t", 33, 38, &[6]),
        ]
    );
    assert_eq!(o.firings[0].start, 0, "[0,15) fires at watermark 19");
}

#[test]
fn oracle_session_late_merge() {
    // gap 10, lateness 20: [0,10) fires at wm 9; a late record at 5 merges
    // into it and re-fires [0,15); a record at 2 later is inside a purged
    // window: late.
    let r = recs(&[
        ("s", 0, 1),
        ("s", 30, 2), // wm 29: fires [0,10)
        ("s", 5, 3),  // [5,15) merges with [0,10) (cleanup 29 > 29? no: 9+20=29 <= 29)
    ]);
    let o = simulate(&r, &Spec::session(10), 0, 20);
    // [0,10)'s cleanup time 29 <= wm 29: purged before record 3; [5,15) alone
    // is past its cleanup (14 + 20 = 34 > 29): kept, and fires at once.
    assert_eq!(
        firings(&r, &o),
        vec![
            fired("s", 0, 10, &[1]),
            fired("s", 5, 15, &[3]),
            fired("s", 30, 40, &[2]),
        ]
    );
    let r = recs(&[
        ("s", 0, 1),  // [0,10)
        ("s", 25, 2), // wm 24: fires [0,10), kept until 29
        ("s", 5, 3),  // [5,15) merges: [0,15) re-fires at once
        ("s", 60, 4), // wm 59: fires [25,35), purges everything
        ("s", 2, 5),  // [2,12) is past cleanup: late
    ]);
    let o = simulate(&r, &Spec::session(10), 0, 20);
    assert_eq!(
        firings(&r, &o),
        vec![
            fired("s", 0, 10, &[1]),
            fired("s", 0, 15, &[1, 3]),
            fired("s", 25, 35, &[2]),
            fired("s", 60, 70, &[4]),
        ]
    );
    assert_eq!(o.late, vec![4]);
}

// ------------------------------------------------ jobs against the model

#[test]
fn process_matches_oracle() {
    let mut failures = Vec::new();
    for (n, (job, gen_params)) in standard_jobs().iter().enumerate() {
        let r = generate(100 + n as u64, gen_params);
        if let Err(e) = check_process(&r, job) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn reduce_matches_oracle() {
    let mut failures = Vec::new();
    for (n, (job, gen_params)) in standard_jobs().iter().enumerate().step_by(2) {
        let r = generate(200 + n as u64, &gen_params.clone().with_huge_values(20));
        // Commutative, so the order of records (and of merged sessions) is free.
        let (got, late) = run_job(&r, job, |w| {
            w.reduce(|a: T, b: T| (a.0, a.1.max(b.1), a.2.wrapping_add(b.2)))
        });
        let o = simulate(&r, &job.spec, job.ooo, job.lateness);
        let want: Vec<T> = o
            .firings
            .iter()
            .map(|f| {
                let max_ts = f.members.iter().map(|&i| r[i].ts).max().unwrap();
                let sum = f
                    .members
                    .iter()
                    .fold(0i64, |a, &i| a.wrapping_add(r[i].value));
                (f.key.clone(), max_ts, sum)
            })
            .collect();
        let what = format!("reduce {job:?}");
        if let Err(e) = compare(&what, want, got) {
            failures.push(e);
        }
        if let Err(e) = compare(&format!("{what}, late"), late_of(&r, &o), late) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// (key, count, sum, min, max) of a window.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
struct Stats {
    key: String,
    count: i64,
    sum: i64,
    min: i64,
    max: i64,
}

struct StatsAgg;

impl AggregateFunction<T, Option<Stats>, Stats> for StatsAgg {
    fn create_accumulator(&self) -> Option<Stats> {
        None
    }
    fn add(&self, t: &T, acc: &mut Option<Stats>) {
        let s = acc.get_or_insert_with(|| Stats {
            key: t.0.clone(),
            count: 0,
            sum: 0,
            min: i64::MAX,
            max: i64::MIN,
        });
        s.count += 1;
        s.sum = s.sum.wrapping_add(t.2);
        s.min = s.min.min(t.2);
        s.max = s.max.max(t.2);
    }
    fn get_result(&self, acc: &Option<Stats>) -> Stats {
        acc.clone().expect("a fired window has records")
    }
    fn merge(&self, a: Option<Stats>, b: Option<Stats>) -> Option<Stats> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Stats {
                key: a.key,
                count: a.count + b.count,
                sum: a.sum.wrapping_add(b.sum),
                min: a.min.min(b.min),
                max: a.max.max(b.max),
            }),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

#[test]
fn aggregate_matches_oracle() {
    let mut failures = Vec::new();
    for (n, (job, gen_params)) in standard_jobs().iter().enumerate().skip(1).step_by(2) {
        let r = generate(300 + n as u64, &gen_params.clone().with_huge_values(20));
        let (got, late) = run_job(&r, job, |w| w.aggregate(StatsAgg));
        let o = simulate(&r, &job.spec, job.ooo, job.lateness);
        let want: Vec<Stats> = o
            .firings
            .iter()
            .map(|f| stats_of(&r, &f.key, &f.members))
            .collect();
        let what = format!("aggregate {job:?}");
        if let Err(e) = compare(&what, want, got) {
            failures.push(e);
        }
        if let Err(e) = compare(&format!("{what}, late"), late_of(&r, &o), late) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn aggregate_with_matches_oracle() {
    let mut failures = Vec::new();
    for (n, (job, gen_params)) in standard_jobs().iter().enumerate() {
        let r = generate(350 + n as u64, gen_params);
        if let Err(e) = check_aggregate_with(&r, job) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn late_records_are_dropped_without_side_output() {
    let mut failures = Vec::new();
    for (n, (job, gen_params)) in standard_jobs().iter().enumerate().step_by(3) {
        let job = Job {
            late_output: false,
            ..*job
        };
        let r = generate(400 + n as u64, gen_params);
        assert!(
            !simulate(&r, &job.spec, job.ooo, job.lateness)
                .late
                .is_empty(),
            "the input should have late records"
        );
        if let Err(e) = check_process(&r, &job) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_assigner_fails_the_job() {
    for a in [
        WindowAssigner::<T>::tumbling(0),
        WindowAssigner::tumbling(10).with_offset(10),
        WindowAssigner::tumbling(10).with_offset(-10),
        WindowAssigner::sliding(10, 0),
        WindowAssigner::sliding(0, 5),
        WindowAssigner::sliding(10, 5).with_offset(5),
        WindowAssigner::session(0),
        WindowAssigner::session(-3),
    ] {
        assert!(a.validate().is_err());
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(2).set_arbiters(2);
        let out = env
            .from_collection(vec![("a".to_string(), 1i64, 1i64)])
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::<T>::monotonous_timestamps().with_timestamp_assigner(|t, _| t.1),
            )
            .set_parallelism(1)
            .key_by_field(|t: &T| &t.0)
            .window(a)
            .reduce(|a, _| a)
            .collect();
        let result = run(&env);
        assert!(
            result.is_err(),
            "an invalid assigner should fail the job; it emitted {:?}",
            out.take()
        );
    }
}

#[test]
fn invalid_assigner_fails_the_job_without_input() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1).set_arbiters(2);
    let _ = env
        .from_collection(Vec::<T>::new())
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::<T>::monotonous_timestamps().with_timestamp_assigner(|t, _| t.1),
        )
        .key_by_field(|t: &T| &t.0)
        .window(WindowAssigner::tumbling(0))
        .reduce(|a, _| a)
        .collect();
    assert!(run(&env).is_err(), "tumbling(0) should fail the job");
}

#[test]
fn union_of_two_watermarked_streams_uses_the_smaller_watermark() {
    // Stream `a` is 10 s ahead of stream `b`; both are in order. An operator's
    // watermark is the minimum over its inputs, so no record of `b` is late
    // and every window fires exactly once with all its records.
    type Fired = (String, i64, i64, Vec<i64>);
    for p in [1, 2, 3] {
        let a = generate(500 + p as u64, &GenParams::in_order(600, 5, 10_000, 5));
        let b = generate(600 + p as u64, &GenParams::in_order(600, 5, 0, 5));
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(p).set_arbiters(2);
        let tag = OutputTag::<T>::new("late");
        let stamped = |recs: &[Rec]| {
            env.from_collection(recs.iter().map(Rec::tuple).collect())
                .assign_timestamps_and_watermarks(
                    WatermarkStrategy::<T>::monotonous_timestamps()
                        .with_timestamp_assigner(|t, _| t.1)
                        .per_record(),
                )
                .set_parallelism(1)
        };
        let fired = stamped(&a)
            .union(&[&stamped(&b)])
            .key_by_field(|t: &T| &t.0)
            .window(WindowAssigner::tumbling(50))
            .side_output_late_data(&tag)
            .process(
                |k: &String, w: &TimeWindow, items: Vec<T>, out: &mut Vec<Fired>| {
                    out.push((
                        k.clone(),
                        w.start,
                        w.end,
                        sorted(items.iter().map(|t| t.2).collect()),
                    ))
                },
            );
        let out = fired.collect();
        let late = fired.get_side_output(&tag).collect();
        run_ok(&env);
        // The model over all records in timestamp order: nothing late.
        let mut all: Vec<Rec> = a.iter().chain(&b).cloned().collect();
        all.sort_by_key(|r| r.ts);
        let o = simulate(&all, &Spec::tumbling(50), 0, 0);
        assert!(o.late.is_empty());
        compare(&format!("union at p={p}"), firings(&all, &o), out.take()).unwrap();
        assert_eq!(late.take(), Vec::<T>::new(), "p={p}: no record is late");
    }
}

#[test]
fn dynamic_session_gap_must_be_positive() {
    // Flink's DynamicEventTimeSessionWindows throws "Dynamic session time gap
    // must be positive" for a gap <= 0, failing the job.
    for gap in [0i64, -4] {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(1).set_arbiters(2);
        let out = env
            .from_collection(vec![("a".to_string(), 3i64, gap)])
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::<T>::monotonous_timestamps()
                    .with_timestamp_assigner(|t, _| t.1)
                    .per_record(),
            )
            .set_parallelism(1)
            .key_by_field(|t: &T| &t.0)
            .window(WindowAssigner::dynamic_session(|t: &T| t.2))
            .process(
                |_: &String, w: &TimeWindow, items: Vec<T>, out: &mut Vec<String>| {
                    out.push(format!("{w:?} {items:?}"))
                },
            )
            .collect();
        let result = run(&env);
        assert!(
            result.is_err(),
            "gap {gap}: the job should fail; it emitted {:?}",
            out.take()
        );
    }
}

#[test]
fn validate_rejects_extreme_offsets() {
    for a in [
        WindowAssigner::<T>::tumbling(10).with_offset(i64::MIN),
        WindowAssigner::<T>::sliding(10, 5).with_offset(i64::MIN),
    ] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.validate().is_err()));
        assert_eq!(
            r.ok(),
            Some(true),
            "offset i64::MIN should be rejected with an error"
        );
    }
}

// ---------------------------------------------------------- proptests

fn windows_of(a: &WindowAssigner<T>, t: &T, ts: i64) -> Vec<TimeWindow> {
    let mut v = Vec::new();
    a.assign(t, ts, |w| v.push(w));
    v
}

fn unit() -> T {
    ("k".to_string(), 0, 0)
}

/// `size` and an offset with `|offset| < size`.
fn size_and_offset(max: i64) -> impl Strategy<Value = (i64, i64)> {
    (1..=max).prop_flat_map(|size| (Just(size), -(size - 1)..size))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn tumbling_assigns_the_one_window_containing_ts(
        ts in -1_000_000_000_000i64..1_000_000_000_000,
        (size, offset) in size_and_offset(1_000_000),
    ) {
        let a = WindowAssigner::<T>::tumbling(size).with_offset(offset);
        prop_assert!(a.validate().is_ok());
        // The window number k with offset + k*size <= ts < offset + (k+1)*size.
        let k = (ts - offset).div_euclid(size);
        let start = offset + k * size;
        prop_assert!(start <= ts && ts < start + size);
        prop_assert_eq!(windows_of(&a, &unit(), ts), vec![TimeWindow::new(start, start + size)]);
    }

    #[test]
    fn sliding_assigns_every_window_containing_ts_latest_first(
        ts in -1_000_000i64..1_000_000,
        size in 1i64..400,
        (slide, offset) in size_and_offset(400),
    ) {
        let a = WindowAssigner::<T>::sliding(size, slide).with_offset(offset);
        prop_assert!(a.validate().is_ok());
        // Brute force: every start s = offset (mod slide) with s <= ts < s + size,
        // latest first.
        let want: Vec<TimeWindow> = (ts - size + 1..=ts)
            .rev()
            .filter(|s| (s - offset).rem_euclid(slide) == 0)
            .map(|s| TimeWindow::new(s, s + size))
            .collect();
        prop_assert_eq!(windows_of(&a, &unit(), ts), want);
    }

    #[test]
    fn sliding_and_tumbling_agree_when_slide_equals_size(
        ts in -1_000_000_000i64..1_000_000_000,
        (size, offset) in size_and_offset(100_000),
    ) {
        let s = WindowAssigner::<T>::sliding(size, size).with_offset(offset);
        let t = WindowAssigner::<T>::tumbling(size).with_offset(offset);
        prop_assert_eq!(windows_of(&s, &unit(), ts), windows_of(&t, &unit(), ts));
    }

    #[test]
    fn session_window_is_ts_to_ts_plus_gap(
        ts in -1_000_000_000_000i64..1_000_000_000_000,
        gap in 1i64..1_000_000,
        value in -1000i64..1000,
    ) {
        let a = WindowAssigner::<T>::session(gap);
        prop_assert!(a.is_merging());
        prop_assert_eq!(windows_of(&a, &unit(), ts), vec![TimeWindow::new(ts, ts + gap)]);
        // with_offset does not change session windows.
        let o = WindowAssigner::<T>::session(gap).with_offset(gap / 2);
        prop_assert_eq!(windows_of(&o, &unit(), ts), vec![TimeWindow::new(ts, ts + gap)]);
        let d = WindowAssigner::<T>::dynamic_session(|t: &T| 1 + t.2.abs());
        let t = ("k".to_string(), ts, value);
        prop_assert_eq!(windows_of(&d, &t, ts), vec![TimeWindow::new(ts, ts + 1 + value.abs())]);
    }

    #[test]
    fn validate_accepts_exactly_flinks_parameters(
        size in -5i64..20,
        slide in -5i64..20,
        offset in -25i64..25,
        gap in -5i64..5,
    ) {
        let t = WindowAssigner::<T>::tumbling(size).with_offset(offset);
        prop_assert_eq!(t.validate().is_ok(), size > 0 && offset.abs() < size);
        let s = WindowAssigner::<T>::sliding(size, slide).with_offset(offset);
        prop_assert_eq!(s.validate().is_ok(), size > 0 && slide > 0 && offset.abs() < slide);
        prop_assert_eq!(WindowAssigner::<T>::session(gap).validate().is_ok(), gap > 0);
    }

    #[test]
    fn time_window_intersects_and_cover(
        a in -50i64..50, la in 1i64..30, b in -50i64..50, lb in 1i64..30,
    ) {
        let (x, y) = (TimeWindow::new(a, a + la), TimeWindow::new(b, b + lb));
        // Overlapping or touching: some point of [a, a+la] is in [b, b+lb].
        let touch = (a..=a + la).any(|p| b <= p && p <= b + lb);
        prop_assert_eq!(x.intersects(&y), touch);
        prop_assert_eq!(x.intersects(&y), y.intersects(&x));
        prop_assert_eq!(x.cover(&y), TimeWindow::new(a.min(b), (a + la).max(b + lb)));
        prop_assert_eq!(x.max_timestamp(), a + la - 1);
    }
}

/// A small random stream and job settings.
fn small_case() -> impl Strategy<Value = (Vec<Rec>, Job)> {
    let spec = prop_oneof![
        size_and_offset(12).prop_map(|(size, offset)| Spec::Tumbling { size, offset }),
        (1i64..12, size_and_offset(8)).prop_map(|(size, (slide, offset))| Spec::Sliding {
            size,
            slide,
            offset,
        }),
        (1i64..8).prop_map(|gap| Spec::Session { gap }),
        Just(Spec::DynamicSession {
            gap: |v| 1 + v.rem_euclid(7)
        }),
    ];
    let recs = prop::collection::vec((0u8..3, -20i64..40, -5i64..5), 1..25).prop_map(|v| {
        v.into_iter()
            .map(|(k, ts, value)| Rec::new(&format!("k{k}"), ts, value))
            .collect::<Vec<_>>()
    });
    (recs, spec, 0i64..6, 0i64..8, 1usize..3).prop_map(|(recs, spec, ooo, lateness, p)| {
        (
            recs,
            Job {
                spec,
                ooo,
                lateness,
                parallelism: p,
                late_output: true,
            },
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn small_random_jobs_match_oracle((recs, job) in small_case()) {
        if let Err(e) = check_process(&recs, &job) {
            let input: Vec<(String, i64, i64)> = recs.iter().map(Rec::tuple).collect();
            prop_assert!(false, "{e}\ninput: {input:?}");
        }
    }

    #[test]
    fn small_random_incremental_jobs_match_oracle((recs, job) in small_case()) {
        if let Err(e) = check_aggregate_with(&recs, &job) {
            let input: Vec<(String, i64, i64)> = recs.iter().map(Rec::tuple).collect();
            prop_assert!(false, "{e}\ninput: {input:?}");
        }
    }
}
