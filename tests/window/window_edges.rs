//! Keyed windows at the edges of the integer range, through the CLI (the
//! built-in window operator and both `--state` backends) and the library,
//! against the independent model of `tests/common/mod.rs`.
//!
//! - Timestamps: a record whose window would start at or before `i64::MIN` or
//!   end after `i64::MAX` used to vanish (`i64::MIN` in a tumbling window) or
//!   land in a clamped window that does not contain it (`i64::MAX`). Now the
//!   CLI counts it as a bad record (`bad=`, or fails naming its line), the
//!   library fails the job naming the timestamp (Flink fails on `i64::MIN`),
//!   and the records next to it that do fit are windowed exactly as the
//!   model computes in `i128`.
//! - Sums: `--agg sum` and `floe::window::Sum` used to wrap. Now a window
//!   whose exact sum leaves `i64` fails the job with one line naming the key
//!   and the window, and nothing wrapped is written; a sum that only passes
//!   the limit on the way (`MAX + 1 - 5`) is still exact.
//! - Windows per record: `sliding:9223372036854775807,1` hung and
//!   `sliding:10000000,1` made 10 M windows per record. Now a spec above
//!   `--max-windows-per-record` (default 1000; `ceil(size / slide)` for
//!   sliding windows) is refused before the job runs, with one line.

use crate::cli_common;
use crate::common;

use cli_common::{SplitMix, fails_with_one_error_line, run_ok, summary_field};
use common::{
    Agg, Rec, Spec, assign_exact, expected_late, expected_lines, overflowing, simulate, windowable,
};
use floe::time::WatermarkStrategy;
use floe::window::{AggregateFunction, Sum, TimeWindow, WindowAssigner};
use floe::{Error, StreamExecutionEnvironment};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;

type T = (String, i64, i64);

const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

/// The window specs exercised, as the CLI and the model spell them.
fn specs() -> Vec<(&'static str, Spec)> {
    vec![
        ("tumbling:1", Spec::tumbling(1)),
        ("tumbling:10", Spec::tumbling(10)),
        ("sliding:10,3", Spec::sliding(10, 3)),
        ("sliding:4,10", Spec::sliding(4, 10)),
        ("session:7", Spec::session(7)),
    ]
}

/// Extra arguments selecting the built-in operator and each state backend.
fn variants(state_dir: &Path) -> Vec<Vec<String>> {
    vec![
        vec![],
        vec!["--state".into(), "heap".into()],
        vec![
            "--state".into(),
            "redb".into(),
            "--state-dir".into(),
            state_dir.to_str().unwrap().into(),
        ],
    ]
}

fn write_input(dir: &Path, recs: &[Rec]) -> String {
    let path = dir.join("input.csv");
    let text: String = recs.iter().map(|r| format!("{}\n", r.line())).collect();
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

// ------------------------------------------------ timestamps at the ends

/// Records at and next to both ends of the range, and some ordinary ones,
/// in timestamp order (per-record watermarks then make none of them late).
fn extreme_records(seed: u64) -> Vec<Rec> {
    let mut rng = SplitMix(seed);
    let mut recs = Vec::new();
    for d in 0..=25i64 {
        recs.push(Rec::new(&format!("k{}", d % 3), MIN + d, 1 + d));
    }
    for i in 0..60i64 {
        let key = format!("k{}", rng.below(3));
        recs.push(Rec::new(&key, -30 + i, rng.below(100) as i64));
    }
    for d in (0..=25i64).rev() {
        recs.push(Rec::new(&format!("k{}", d % 3), MAX - d, 100 + d));
    }
    recs
}

#[test]
fn extreme_timestamps_are_bad_records_and_their_neighbours_windowed_exactly() {
    let dir = tempfile::tempdir().unwrap();
    for (window, spec) in specs() {
        for (n, extra) in variants(&dir.path().join("state")).iter().enumerate() {
            let recs = extreme_records(7 + n as u64);
            let (good, bad): (Vec<Rec>, Vec<Rec>) = recs
                .iter()
                .cloned()
                .partition(|r| windowable(&spec, r.ts, r.value));
            assert!(
                !bad.is_empty() && good.iter().any(|r| r.ts > MAX - 30 || r.ts < MIN + 30),
                "{window}: the input should hold both windowable and unwindowable extremes"
            );
            let outcome = simulate(&good, &spec, 0, 0);
            let input = write_input(dir.path(), &recs);
            let (out, late) = (dir.path().join("out.csv"), dir.path().join("late.csv"));
            let mut args = vec![
                "run",
                "window",
                "--input",
                &input,
                "--window",
                window,
                "--agg",
                "sum",
                "--watermarks",
                "per-record",
                "--on-bad-record",
                "skip",
                "--output",
                out.to_str().unwrap(),
                "--late-output",
                late.to_str().unwrap(),
            ];
            args.extend(extra.iter().map(String::as_str));
            let stderr = run_ok(&args);
            let what = format!("{window} {extra:?}");
            assert_eq!(
                sorted_lines(&out),
                expected_lines(&good, &outcome, Agg::Sum),
                "{what}: firings"
            );
            assert_eq!(
                sorted_lines(&late),
                expected_late(&good, &outcome),
                "{what}: late"
            );
            assert_eq!(
                summary_field(&stderr, "bad"),
                bad.len() as u64,
                "{what}: bad"
            );
            // records= counts the source's lines, bad ones included.
            assert_eq!(
                summary_field(&stderr, "records"),
                (good.len() + bad.len()) as u64,
                "{what}: records"
            );
            assert_eq!(
                summary_field(&stderr, "windows_fired"),
                outcome.firings.len() as u64,
                "{what}: windows_fired"
            );
        }
    }
}

#[test]
fn extreme_timestamp_fails_the_job_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for (window, spec) in specs() {
        for ts in [MIN, MAX] {
            if windowable(&spec, ts, 2) {
                // In a gap between sliding windows: no window, nothing to refuse.
                assert!(assign_exact(&spec, ts, 2).is_empty(), "{window} at {ts}");
                continue;
            }
            let recs = vec![Rec::new("a", 5, 1), Rec::new("a", ts, 2)];
            let input = write_input(dir.path(), &recs);
            let line = fails_with_one_error_line(&[
                "run", "window", "--input", &input, "--window", window, "--agg", "sum",
            ]);
            assert!(
                line.contains("bad record at line 2")
                    && line.contains(&format!("timestamp {ts} cannot be windowed")),
                "{window}, ts {ts}: {line}"
            );
        }
    }
}

/// A job over `recs` through `window(assigner)` and `build`, at parallelism 2.
fn library_job<R: Clone + Send + 'static>(
    recs: &[T],
    assigner: WindowAssigner<T>,
    build: impl FnOnce(floe::WindowedStream<T, String>) -> floe::DataStream<R>,
) -> floe::Result<Vec<R>> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2).set_arbiters(2);
    let windowed = env
        .from_collection(recs.to_vec())
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::<T>::monotonous_timestamps()
                .with_timestamp_assigner(|t, _| t.1)
                .per_record(),
        )
        .set_parallelism(1)
        .key_by_field(|t: &T| &t.0)
        .window(assigner);
    let out = build(windowed).collect();
    env.execute()?;
    Ok(out.take())
}

/// A firing's key and window bounds.
type Fired = (String, i64, i64);

/// The three window operators: shared panes (`reduce`), per-window state
/// (`process`), and a custom trigger.
fn each_operator(
    recs: &[T],
    assigner: impl Fn() -> WindowAssigner<T>,
) -> Vec<(&'static str, floe::Result<Vec<Fired>>)> {
    let line = |k: &String, w: &TimeWindow| (k.clone(), w.start, w.end);
    vec![
        (
            "panes",
            library_job(recs, assigner(), |w| {
                w.aggregate_with(
                    Sum::of(|t: &T| t.2),
                    move |k: &String, w: &TimeWindow, _: i64, out: &mut Vec<_>| {
                        out.push(line(k, w))
                    },
                )
            }),
        ),
        (
            "per-window",
            library_job(recs, assigner(), |w| {
                w.process(
                    move |k: &String, w: &TimeWindow, _: Vec<T>, out: &mut Vec<_>| {
                        out.push(line(k, w))
                    },
                )
            }),
        ),
        (
            "trigger",
            library_job(recs, assigner(), |w| {
                w.trigger(floe::window::EventTimeTrigger).aggregate_with(
                    Sum::of(|t: &T| t.2),
                    move |k: &String, w: &TimeWindow, _: i64, out: &mut Vec<_>| {
                        out.push(line(k, w))
                    },
                )
            }),
        ),
    ]
}

#[test]
fn library_fails_the_job_on_an_unwindowable_timestamp() {
    for ts in [MIN, MAX] {
        for (what, got) in each_operator(&[("a".into(), ts, 1)], || WindowAssigner::tumbling(1)) {
            let e = got.expect_err("the job should fail").to_string();
            assert!(
                e.contains(&format!("timestamp {ts} cannot be windowed")),
                "{what}, ts {ts}: {e}"
            );
        }
    }
    // Their neighbours fit: windows [MIN+1, MIN+2) and [MAX-1, MAX).
    let recs: Vec<T> = vec![("a".into(), MIN + 1, 1), ("a".into(), MAX - 1, 2)];
    let mut want: Vec<(String, i64, i64)> = recs
        .iter()
        .flat_map(|t| assign_exact(&Spec::tumbling(1), t.1, t.2))
        .map(|(s, e)| ("a".to_string(), s as i64, e as i64))
        .collect();
    want.sort();
    for (what, got) in each_operator(&recs, || WindowAssigner::tumbling(1)) {
        let mut got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        got.sort();
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn no_window_past_the_last_one_in_range_fires() {
    // sliding(15, 10) with panes of 5: the last window inside the range is
    // [MAX-17, MAX-2) (ends are 5 mod 10, MAX is 7 mod 10). Records of the pane
    // [MAX-12, MAX-7) belong to it alone. Watermarks close to MAX (punctuated
    // here) must not fire a window [MAX-15, MAX) that no assigner produces.
    let recs: Vec<T> = vec![("a".into(), MAX - 12, 1), ("b".into(), MAX - 11, 2)];
    let spec = Spec::sliding(15, 10);
    for r in &recs {
        assert!(windowable(&spec, r.1, r.2));
    }
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(1).set_arbiters(2);
    let fired = env
        .from_collection(recs.clone())
        .assign_timestamps_and_watermarks(
            // After `a`: MAX-3 fires [MAX-17, MAX-2); `b` then joins it late
            // (allowed) and fires it again; then MAX-1.
            WatermarkStrategy::<T>::punctuated(|t: &T, _| {
                Some(if t.0 == "a" { MAX - 3 } else { MAX - 1 })
            })
            .with_timestamp_assigner(|t, _| t.1),
        )
        .set_parallelism(1)
        .key_by_field(|t: &T| &t.0)
        .window(WindowAssigner::sliding(15, 10))
        .allowed_lateness(100)
        .aggregate_with(
            Sum::of(|t: &T| t.2),
            |k: &String, w: &TimeWindow, v: i64, out: &mut Vec<(String, i64, i64, i64)>| {
                out.push((k.clone(), w.start, w.end, v))
            },
        )
        .collect();
    env.execute().expect("the job runs");
    let mut want: Vec<(String, i64, i64, i64)> = recs
        .iter()
        .flat_map(|t| {
            assign_exact(&spec, t.1, t.2)
                .into_iter()
                .map(move |(s, e)| (t.0.clone(), s as i64, e as i64, t.2))
        })
        .collect();
    want.sort();
    let mut got = fired.take();
    got.sort();
    assert_eq!(got, want);
}

/// Brute force: every window start `s = offset (mod slide)` with `s <= t <
/// s + size`, latest first, in `i128`; `None` when one leaves the range.
fn brute_force(t: i64, size: i64, slide: i64, offset: i64) -> Option<Vec<TimeWindow>> {
    let (t, size, slide, offset) = (t as i128, size as i128, slide as i128, offset as i128);
    let windows: Vec<(i128, i128)> = (t - size + 1..=t)
        .rev()
        .filter(|s| (s - offset).rem_euclid(slide) == 0)
        .map(|s| (s, s + size))
        .collect();
    windows
        .iter()
        .all(|&(s, e)| s > i64::MIN as i128 && e <= i64::MAX as i128)
        .then(|| {
            windows
                .iter()
                .map(|&(s, e)| TimeWindow::new(s as i64, e as i64))
                .collect()
        })
}

fn try_windows(a: &WindowAssigner<T>, ts: i64) -> floe::Result<Vec<TimeWindow>> {
    let mut v = Vec::new();
    a.try_assign(&("k".to_string(), ts, 0), ts, |w| v.push(w))?;
    Ok(v)
}

/// A timestamp within 300 ms of either end of the range.
fn near_an_end() -> impl Strategy<Value = i64> {
    prop_oneof![MIN..MIN + 300, MAX - 300..=MAX]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn try_assign_near_the_ends_matches_brute_force(
        ts in near_an_end(),
        size in 1i64..80,
        slide in 1i64..80,
        off in 0i64..80,
        gap in 1i64..80,
    ) {
        let offset = off % slide - slide / 2;
        let cases = [
            (WindowAssigner::<T>::sliding(size, slide).with_offset(offset), brute_force(ts, size, slide, offset)),
            (WindowAssigner::<T>::tumbling(slide).with_offset(offset), brute_force(ts, slide, slide, offset)),
            (
                WindowAssigner::<T>::session(gap),
                (ts > MIN && ts as i128 + gap as i128 <= MAX as i128)
                    .then(|| vec![TimeWindow::new(ts, ts + gap)]),
            ),
        ];
        for (a, want) in cases {
            match (try_windows(&a, ts), want) {
                (Ok(got), Some(want)) => prop_assert_eq!(got, want),
                (Err(Error::TimestampOutOfRange { timestamp }), None) => prop_assert_eq!(timestamp, ts),
                (got, want) => prop_assert!(false, "ts {ts}: got {got:?}, want {want:?}"),
            }
        }
    }
}

// ------------------------------------------------------------- overflow

/// Per key, records whose window sums overflow upwards (`big`), downwards
/// (`neg`), pass `MAX` or `MIN` only on the way (`fits`), and stay small
/// (`small`); records of a key that share a timestamp share every window.
fn overflow_records() -> Vec<Rec> {
    vec![
        Rec::new("big", 1, MAX),
        Rec::new("fits", 1, MAX),
        Rec::new("small", 1, 5),
        Rec::new("big", 1, MAX),
        Rec::new("neg", 2, MIN),
        Rec::new("fits", 1, 1),
        Rec::new("neg", 2, -1),
        Rec::new("fits", 1, -5),
        Rec::new("small", 3, -7),
        Rec::new("small", 40, 1),
        Rec::new("fits", 41, MIN),
        Rec::new("fits", 41, -1),
        Rec::new("fits", 41, 10),
    ]
}

/// The (key, start, end) the error line names, if any of `candidates`.
fn named_window<'a>(
    line: &str,
    candidates: &'a BTreeSet<(String, i64, i64)>,
) -> Option<&'a (String, i64, i64)> {
    candidates
        .iter()
        .find(|(k, s, e)| line.contains(&format!("key \"{k}\", window [{s}, {e})")))
}

#[test]
fn sum_overflow_fails_naming_key_and_window() {
    let dir = tempfile::tempdir().unwrap();
    let recs = overflow_records();
    let input = write_input(dir.path(), &recs);
    for (window, spec) in specs() {
        let outcome = simulate(&recs, &spec, 0, 0);
        let overflows = overflowing(&recs, &outcome, Agg::Sum);
        assert!(!overflows.is_empty(), "{window}: the input should overflow");
        let want = expected_lines(&recs, &outcome, Agg::Sum);
        for extra in variants(&dir.path().join("state")) {
            let out = dir.path().join("out.csv");
            let _ = std::fs::remove_file(&out);
            let mut args = vec![
                "run",
                "window",
                "--input",
                &input,
                "--window",
                window,
                "--agg",
                "sum",
                "--watermarks",
                "per-record",
                "--output",
                out.to_str().unwrap(),
            ];
            args.extend(extra.iter().map(String::as_str));
            let line = fails_with_one_error_line(&args);
            assert!(
                named_window(&line, &overflows).is_some() && line.contains("overflows i64"),
                "{window} {extra:?}: the error should name one of {overflows:?}: {line}"
            );
            // Whatever fired before the failure is exact: nothing wrapped.
            for l in sorted_lines(&out) {
                assert!(
                    want.binary_search(&l).is_ok(),
                    "{window} {extra:?}: wrote {l:?}, not a result of the model {want:?}"
                );
            }
        }
    }
}

#[test]
fn sums_that_fit_are_exact_even_past_the_limit_on_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let recs: Vec<Rec> = overflow_records()
        .into_iter()
        .filter(|r| r.key == "fits" || r.key == "small")
        .collect();
    let input = write_input(dir.path(), &recs);
    for (window, spec) in specs() {
        let outcome = simulate(&recs, &spec, 0, 0);
        assert!(overflowing(&recs, &outcome, Agg::Sum).is_empty());
        for extra in variants(&dir.path().join("state")) {
            let out = dir.path().join("out.csv");
            let mut args = vec![
                "run",
                "window",
                "--input",
                &input,
                "--window",
                window,
                "--agg",
                "sum",
                "--watermarks",
                "per-record",
                "--output",
                out.to_str().unwrap(),
            ];
            args.extend(extra.iter().map(String::as_str));
            run_ok(&args);
            assert_eq!(
                sorted_lines(&out),
                expected_lines(&recs, &outcome, Agg::Sum),
                "{window} {extra:?}"
            );
        }
    }
}

#[test]
fn library_sum_overflow_is_an_error_naming_key_and_window() {
    let recs = overflow_records();
    let tuples: Vec<T> = recs.iter().map(Rec::tuple).collect();
    for (window, spec) in specs() {
        let assigner = || match spec {
            Spec::Tumbling { size, .. } => WindowAssigner::tumbling(size),
            Spec::Sliding { size, slide, .. } => WindowAssigner::sliding(size, slide),
            Spec::Session { gap } => WindowAssigner::session(gap),
            Spec::DynamicSession { .. } => unreachable!(),
        };
        let overflows = overflowing(&recs, &simulate(&recs, &spec, 0, 0), Agg::Sum);
        let got = library_job(&tuples, assigner(), |w| w.aggregate(Sum::of(|t: &T| t.2)));
        let e = got.expect_err("the job should fail").to_string();
        assert!(
            named_window(&e, &overflows).is_some() && e.contains("overflows i64"),
            "{window}: {e}"
        );
        if !matches!(spec, Spec::Session { .. }) {
            let got = library_job(&tuples, assigner(), |w| {
                w.trigger(floe::window::EventTimeTrigger)
                    .aggregate(Sum::of(|t: &T| t.2))
            });
            let e = got.expect_err("the job should fail").to_string();
            assert!(
                named_window(&e, &overflows).is_some(),
                "{window}, trigger: {e}"
            );
        }
    }
}

#[test]
fn sum_aggregate_reports_overflow_as_a_typed_error() {
    let sum = Sum::of(|v: &i64| *v);
    let mut acc = sum.create_accumulator();
    for v in [MAX, 1, -5] {
        sum.add(&v, &mut acc);
    }
    assert_eq!(sum.try_get_result(&acc), Ok(MAX - 4));
    sum.add(&10, &mut acc);
    assert_eq!(
        sum.try_get_result(&acc),
        Err(floe::window::AggregateError::Overflow {
            sum: i128::from(MAX) + 6
        })
    );
}

// ------------------------------------------------- windows per record

#[test]
fn absurd_window_specs_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_input(dir.path(), &[Rec::new("a", 5, 1)]);
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    for spec in ["sliding:9223372036854775807,1", "sliding:10000000,1"] {
        // The empty input first: without the limit it would run (and the
        // one-record input hang), so the test fails there at once.
        for file in [empty.to_str().unwrap(), input.as_str()] {
            for state in [&[][..], &["--state", "heap"][..]] {
                let mut args = vec![
                    "run", "window", "--input", file, "--window", spec, "--agg", "count",
                ];
                args.extend_from_slice(state);
                let line = fails_with_one_error_line(&args);
                assert!(
                    line.contains(&format!("'{spec}'"))
                        && line.contains("--max-windows-per-record 1000"),
                    "{spec} {state:?}: {line}"
                );
            }
        }
    }
}

#[test]
fn windows_per_record_limit_is_ceil_size_over_slide_and_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let recs: Vec<Rec> = (0..40).map(|i| Rec::new("a", i * 3, i)).collect();
    let input = write_input(dir.path(), &recs);
    // ceil(10 / 3) = 4 and 12 / 3 = 4 windows per record.
    for (window, spec) in [
        ("sliding:10,3", Spec::sliding(10, 3)),
        ("sliding:12,3", Spec::sliding(12, 3)),
    ] {
        let most = recs
            .iter()
            .map(|r| assign_exact(&spec, r.ts, r.value).len())
            .max()
            .unwrap();
        assert_eq!(most, 4, "{window}");
        let out = dir.path().join("out.csv");
        let args = |limit: &'static str| {
            vec![
                "run".to_string(),
                "window".into(),
                "--input".into(),
                input.clone(),
                "--window".into(),
                window.into(),
                "--agg".into(),
                "sum".into(),
                "--watermarks".into(),
                "per-record".into(),
                "--output".into(),
                out.to_str().unwrap().into(),
                "--max-windows-per-record".into(),
                limit.into(),
            ]
        };
        let refused: Vec<String> = args("3");
        let line =
            fails_with_one_error_line(&refused.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(line.contains("up to 4 windows"), "{window}: {line}");
        let allowed: Vec<String> = args("4");
        run_ok(&allowed.iter().map(String::as_str).collect::<Vec<_>>());
        let outcome = simulate(&recs, &spec, 0, 0);
        assert_eq!(
            sorted_lines(&out),
            expected_lines(&recs, &outcome, Agg::Sum),
            "{window}"
        );
    }
}

#[test]
fn library_refuses_too_many_windows_with_a_typed_error() {
    let job = |a: WindowAssigner<T>, limit: Option<u64>| {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(1).set_arbiters(2);
        let w = env
            .from_collection(vec![("a".to_string(), 1i64, 1i64)])
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::<T>::monotonous_timestamps().with_timestamp_assigner(|t, _| t.1),
            )
            .key_by_field(|t: &T| &t.0)
            .window(a);
        let w = match limit {
            Some(l) => w.max_windows_per_record(l),
            None => w,
        };
        let _ = w.reduce(|a, _| a).collect();
        env.execute()
    };
    match job(WindowAssigner::sliding(MAX, 1), None) {
        Err(Error::TooManyWindows { windows, limit, .. }) => {
            assert_eq!((windows, limit), (MAX as u64, 1000));
        }
        other => panic!("expected TooManyWindows, got {:?}", other.map(|_| ())),
    }
    match job(WindowAssigner::sliding(10, 3), Some(3)) {
        Err(Error::TooManyWindows { windows, limit, .. }) => assert_eq!((windows, limit), (4, 3)),
        other => panic!("expected TooManyWindows, got {:?}", other.map(|_| ())),
    }
    job(WindowAssigner::sliding(10, 3), Some(4)).expect("4 windows per record are allowed");
}
