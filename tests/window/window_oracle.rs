//! End-to-end check of `floe run window` (the CLI binary) against an
//! independent model of Flink's event-time windows (`tests/common/mod.rs`).
//!
//! - `cli_matches_oracle`: a table of seeded random inputs (1..20 keys,
//!   timestamps mostly increasing, optionally jittered and with some very
//!   late records, some starting at negative timestamps, some with huge values
//!   whose sums overflow `i64` and some with large values whose sums fit;
//!   500..5000 lines) run with `--watermarks per-record` over
//!   tumbling, sliding (slide dividing the size or not, and slide > size,
//!   where records may fall in no window) and session windows,
//!   `--agg sum|count|min|max`, out-of-orderness 0, > 0 and `i64::MAX`,
//!   allowed lateness 0, > 0 and `i64::MAX`, parallelism 1, 2 and 4 (also one
//!   key at 4, leaving subtasks idle). The sorted output lines, the sorted late
//!   lines and the summary's records/late/bad/windows_fired/parallelism must
//!   equal the model's, and stderr must hold only the summary line. Where
//!   the model finds a window whose exact sum leaves `i64`, the job must fail
//!   with one stderr line naming one such key and window, having written only
//!   correct lines before (no wrapped sum).
//! - `periodic_watermarks_*`: with periodic watermarks, tumbling / sliding
//!   windows and input out of order by at most the bound, no record is late
//!   and no window fires before it is complete, so the result does not depend
//!   on when watermarks come and must equal the model's too.
//! - `state_backend_windows_match_oracle`: the same table with `--state
//!   heap` and `--state redb` (windows in `MapState`, firings from timers).
//! - empty input, input of only bad lines (skipped), and output to stdout
//!   when `--output` is missing.
//! - malformed lines (too few / too many fields, non-numeric or fractional
//!   timestamp, non-numeric or out-of-range value, empty field, empty line,
//!   a bad last line without newline) fail the job with one stderr line naming
//!   the line number; with `--on-bad-record skip` they are counted in `bad=N`
//!   and the result equals the model over the good lines.
//! - invalid `--window` specs and negative `--allowed-lateness` /
//!   `--out-of-orderness` fail with one readable stderr line.

use crate::common;

use common::{
    Agg, GenParams, Rec, Spec, diff, expected_late, expected_lines, generate, overflowing, simulate,
};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with `args`.
fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .env_remove("FLOE_LOG")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("floe binary runs")
}

/// The `key=value` pairs of the summary line on stderr.
fn summary(stderr: &str) -> HashMap<String, String> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("records="))
        .unwrap_or_else(|| panic!("no summary line on stderr:\n{stderr}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// The settings of one `floe run window` job.
#[derive(Clone, Copy, Debug)]
struct Job {
    /// The `--window` argument and the oracle's view of it.
    window: &'static str,
    spec: Spec,
    agg: Agg,
    ooo: i64,
    lateness: i64,
    parallelism: usize,
}

/// One CLI run to check.
struct Case {
    name: &'static str,
    job: Job,
    seed: u64,
    input: GenParams,
}

/// What one run of the CLI produced.
struct RunResult {
    output: Vec<String>,
    late: Vec<String>,
    summary: HashMap<String, String>,
}

/// Runs the CLI on `input` with `job`; returns its exit status and stderr.
fn launch(dir: &Path, input: &str, job: &Job, extra: &[&str]) -> (Output, String) {
    let in_path = dir.join("input.csv");
    let out_path = dir.join("out.csv");
    let late_path = dir.join("late.csv");
    std::fs::write(&in_path, input).unwrap();
    let (ooo, lateness, p) = (
        job.ooo.to_string(),
        job.lateness.to_string(),
        job.parallelism.to_string(),
    );
    let mut args = vec![
        "run",
        "window",
        "--input",
        in_path.to_str().unwrap(),
        "--window",
        job.window,
        "--agg",
        job.agg.name(),
        "--out-of-orderness",
        &ooo,
        "--allowed-lateness",
        &lateness,
        "--parallelism",
        &p,
        "--output",
        out_path.to_str().unwrap(),
        "--late-output",
        late_path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = floe(&args);
    (out, format!("floe {args:?}"))
}

fn run_cli(dir: &Path, input: &str, job: &Job, extra: &[&str]) -> RunResult {
    let (out, args) = launch(dir, input, job, extra);
    let out_path = dir.join("out.csv");
    let late_path = dir.join("late.csv");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{args} failed ({:?}):\n{stderr}",
        out.status
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args}: stderr should hold just the summary line:\n{stderr}"
    );
    RunResult {
        output: sorted_lines(&out_path),
        late: sorted_lines(&late_path),
        summary: summary(&stderr),
    }
}

/// Compares a run with the oracle over `good` records; `bad` malformed lines.
fn check(what: &str, got: &RunResult, good: &[Rec], job: &Job, bad: usize) -> Result<(), String> {
    let outcome = simulate(good, &job.spec, job.ooo, job.lateness);
    let distinct: std::collections::HashSet<_> = outcome
        .firings
        .iter()
        .map(|f| (f.key.clone(), f.start, f.end))
        .collect();
    eprintln!(
        "{what}: {} records, {} firings ({} re-firings), {} late",
        good.len(),
        outcome.firings.len(),
        outcome.firings.len() - distinct.len(),
        outcome.late.len()
    );
    let want = expected_lines(good, &outcome, job.agg);
    let want_late = expected_late(good, &outcome);
    let mut errors = Vec::new();
    if got.output != want {
        let (missing, extra) = diff(&want, &got.output, 8);
        errors.push(format!(
            "output differs: {} lines expected, {} written; missing {missing:?}; unexpected {extra:?}",
            want.len(),
            got.output.len()
        ));
    }
    if got.late != want_late {
        let (missing, extra) = diff(&want_late, &got.late, 8);
        errors.push(format!(
            "late output differs: {} expected, {} written; missing {missing:?}; unexpected {extra:?}",
            want_late.len(),
            got.late.len()
        ));
    }
    let expect = [
        // The source's records: every line, bad ones included.
        ("records", (good.len() + bad).to_string()),
        ("late", outcome.late.len().to_string()),
        ("bad", bad.to_string()),
        ("windows_fired", outcome.firings.len().to_string()),
        ("parallelism", job.parallelism.to_string()),
    ];
    for (k, v) in expect {
        if got.summary.get(k) != Some(&v) {
            errors.push(format!(
                "summary {k}={:?}, expected {v}",
                got.summary.get(k)
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{what}:\n  {}", errors.join("\n  ")))
    }
}

fn input_text(recs: &[Rec]) -> String {
    let mut s = String::with_capacity(recs.len() * 16);
    for r in recs {
        s.push_str(&r.line());
        s.push('\n');
    }
    s
}

fn run_cases(cases: &[Case], extra: &[&str]) {
    let mut failures = Vec::new();
    for c in cases {
        let recs = generate(c.seed, &c.input);
        let dir = tempfile::tempdir().unwrap();
        let what = format!(
            "case {:?} {:?} seed {} ({} lines)",
            c.name,
            c.job,
            c.seed,
            recs.len()
        );
        let outcome = simulate(&recs, &c.job.spec, c.job.ooo, c.job.lateness);
        let overflows = overflowing(&recs, &outcome, c.job.agg);
        let result = if overflows.is_empty() {
            let got = run_cli(dir.path(), &input_text(&recs), &c.job, extra);
            check(&what, &got, &recs, &c.job, 0)
        } else {
            let want = expected_lines(&recs, &outcome, c.job.agg);
            check_overflow(&what, dir.path(), &input_text(&recs), &c.job, extra).and_then(
                |(line, written)| {
                    eprintln!(
                        "{what}: {} overflowing windows, {} lines before the failure: {line}",
                        overflows.len(),
                        written.len()
                    );
                    overflow_matches(&what, &line, &written, &overflows, &want)
                },
            )
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs a job whose sums overflow: it must fail with one stderr line;
/// returns that line and the (sorted) lines written before the failure.
fn check_overflow(
    what: &str,
    dir: &Path,
    input: &str,
    job: &Job,
    extra: &[&str],
) -> Result<(String, Vec<String>), String> {
    let (out, args) = launch(dir, input, job, extra);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() || stderr.lines().count() != 1 {
        return Err(format!(
            "{what}: {args} should fail with one stderr line (a sum overflows); \
             got {:?}:\n{stderr}",
            out.status
        ));
    }
    let out_path = dir.join("out.csv");
    let written = if out_path.exists() {
        sorted_lines(&out_path)
    } else {
        Vec::new()
    };
    Ok((stderr.trim_end().to_string(), written))
}

/// The failure line must name one of the overflowing (key, window) pairs of
/// the model, and every line written before it must be a correct result (no
/// wrapped sum).
fn overflow_matches(
    what: &str,
    line: &str,
    written: &[String],
    overflows: &std::collections::BTreeSet<(String, i64, i64)>,
    want: &[String],
) -> Result<(), String> {
    let named = overflows
        .iter()
        .any(|(k, s, e)| line.contains(&format!("key \"{k}\", window [{s}, {e})")));
    if !named || !line.contains("overflows i64") {
        return Err(format!(
            "{what}: the error should name an overflowing key and window (one of {:?}): {line}",
            overflows.iter().take(5).collect::<Vec<_>>()
        ));
    }
    let wrong: Vec<&String> = written
        .iter()
        .filter(|l| want.binary_search(l).is_err())
        .take(5)
        .collect();
    if !wrong.is_empty() {
        return Err(format!(
            "{what}: lines written that the model does not produce: {wrong:?}"
        ));
    }
    Ok(())
}

fn cases() -> Vec<Case> {
    use Agg::*;
    let ordered = GenParams::in_order;
    let jittered = GenParams::jittered;
    vec![
        // ---- tumbling
        Case {
            name: "tumbling in-order",
            job: Job {
                window: "tumbling:100",
                spec: Spec::tumbling(100),
                agg: Sum,
                ooo: 0,
                lateness: 0,
                parallelism: 1,
            },
            seed: 1,
            input: ordered(2000, 10, 0, 5),
        },
        Case {
            name: "tumbling in-order negative timestamps",
            job: Job {
                window: "tumbling:70",
                spec: Spec::tumbling(70),
                agg: Min,
                ooo: 0,
                lateness: 0,
                parallelism: 2,
            },
            seed: 2,
            input: ordered(1500, 7, -5000, 6),
        },
        Case {
            name: "tumbling out-of-order, no bound, no lateness (many late)",
            job: Job {
                window: "tumbling:50",
                spec: Spec::tumbling(50),
                agg: Count,
                ooo: 0,
                lateness: 0,
                parallelism: 2,
            },
            seed: 3,
            input: jittered(2000, 12, -1000, 4, 30),
        },
        Case {
            name: "tumbling out-of-order within bound",
            job: Job {
                window: "tumbling:100",
                spec: Spec::tumbling(100),
                agg: Max,
                ooo: 40,
                lateness: 0,
                parallelism: 4,
            },
            seed: 4,
            input: jittered(3000, 20, 0, 3, 40),
        },
        Case {
            name: "tumbling lateness > 0, huge values (sums overflow: the job fails)",
            job: Job {
                window: "tumbling:100",
                spec: Spec::tumbling(100),
                agg: Sum,
                ooo: 20,
                lateness: 150,
                parallelism: 2,
            },
            seed: 5,
            input: jittered(3000, 9, -20_000, 4, 60)
                .with_very_late(40, 60, 400)
                .with_huge_values(30),
        },
        Case {
            name: "tumbling lateness > 0 no bound",
            job: Job {
                window: "tumbling:37",
                spec: Spec::tumbling(37),
                agg: Count,
                ooo: 0,
                lateness: 80,
                parallelism: 4,
            },
            seed: 6,
            input: jittered(2500, 5, -3000, 3, 50),
        },
        Case {
            name: "tumbling one key, big file",
            job: Job {
                window: "tumbling:1000",
                spec: Spec::tumbling(1000),
                agg: Min,
                ooo: 100,
                lateness: 500,
                parallelism: 1,
            },
            seed: 7,
            input: jittered(5000, 1, 0, 10, 150).with_very_late(15, 100, 3000),
        },
        // ---- sliding
        Case {
            name: "sliding in-order",
            job: Job {
                window: "sliding:100,25",
                spec: Spec::sliding(100, 25),
                agg: Sum,
                ooo: 0,
                lateness: 0,
                parallelism: 2,
            },
            seed: 11,
            input: ordered(1500, 10, 0, 5),
        },
        Case {
            name: "sliding out-of-order negative",
            job: Job {
                window: "sliding:60,20",
                spec: Spec::sliding(60, 20),
                agg: Max,
                ooo: 15,
                lateness: 0,
                parallelism: 4,
            },
            seed: 12,
            input: jittered(2000, 15, -4000, 4, 40),
        },
        Case {
            name: "sliding lateness > 0",
            job: Job {
                window: "sliding:90,30",
                spec: Spec::sliding(90, 30),
                agg: Count,
                ooo: 10,
                lateness: 70,
                parallelism: 2,
            },
            seed: 13,
            input: jittered(2000, 8, -500, 4, 60),
        },
        Case {
            name: "sliding size not a multiple of slide, no bound",
            job: Job {
                window: "sliding:50,15",
                spec: Spec::sliding(50, 15),
                agg: Min,
                ooo: 0,
                lateness: 25,
                parallelism: 1,
            },
            seed: 14,
            input: jittered(1500, 6, 100, 3, 30),
        },
        Case {
            name: "sliding slide > size (gaps without windows)",
            job: Job {
                window: "sliding:10,25",
                spec: Spec::sliding(10, 25),
                agg: Sum,
                ooo: 5,
                lateness: 10,
                parallelism: 2,
            },
            seed: 15,
            input: jittered(1500, 4, -777, 3, 20),
        },
        // ---- session
        Case {
            name: "session in-order",
            job: Job {
                window: "session:30",
                spec: Spec::session(30),
                agg: Sum,
                ooo: 0,
                lateness: 0,
                parallelism: 2,
            },
            seed: 21,
            input: ordered(2000, 10, 0, 6).with_pauses(20, 200),
        },
        Case {
            name: "session in-order negative, one key",
            job: Job {
                window: "session:10",
                spec: Spec::session(10),
                agg: Count,
                ooo: 0,
                lateness: 0,
                parallelism: 1,
            },
            seed: 22,
            input: ordered(1000, 1, -10_000, 12),
        },
        Case {
            name: "session out-of-order within bound",
            job: Job {
                window: "session:25",
                spec: Spec::session(25),
                agg: Max,
                ooo: 40,
                lateness: 0,
                parallelism: 4,
            },
            seed: 23,
            input: jittered(2500, 12, -2000, 4, 40).with_pauses(10, 300),
        },
        Case {
            name: "session out-of-order, no bound, lateness > 0",
            job: Job {
                window: "session:20",
                spec: Spec::session(20),
                agg: Min,
                ooo: 0,
                lateness: 60,
                parallelism: 2,
            },
            seed: 24,
            input: jittered(2500, 6, 0, 5, 50).with_pauses(15, 150),
        },
        Case {
            name: "session lateness > 0, bound > 0, large values (sums fit in i64)",
            job: Job {
                window: "session:15",
                spec: Spec::session(15),
                agg: Sum,
                ooo: 10,
                lateness: 40,
                parallelism: 4,
            },
            seed: 25,
            input: jittered(3000, 20, -300, 2, 30)
                .with_pauses(10, 100)
                .with_large_values(20, 8),
        },
        Case {
            name: "session few keys, dense",
            job: Job {
                window: "session:5",
                spec: Spec::session(5),
                agg: Count,
                ooo: 3,
                lateness: 8,
                parallelism: 2,
            },
            seed: 26,
            input: jittered(2000, 3, 50, 3, 12).with_very_late(30, 5, 60),
        },
        // ---- extremes
        Case {
            name: "one key at parallelism 4 (idle subtasks)",
            job: Job {
                window: "session:40",
                spec: Spec::session(40),
                agg: Sum,
                ooo: 20,
                lateness: 30,
                parallelism: 4,
            },
            seed: 27,
            input: jittered(1000, 1, -100, 10, 30).with_pauses(30, 200),
        },
        Case {
            name: "unbounded lateness: nothing is ever purged or late",
            job: Job {
                window: "tumbling:20",
                spec: Spec::tumbling(20),
                agg: Count,
                ooo: 0,
                lateness: i64::MAX,
                parallelism: 2,
            },
            seed: 28,
            input: jittered(800, 4, -400, 3, 40),
        },
        Case {
            name: "out-of-orderness larger than the time range: all fire at the end",
            job: Job {
                window: "sliding:30,10",
                spec: Spec::sliding(30, 10),
                agg: Max,
                ooo: i64::MAX,
                lateness: 0,
                parallelism: 2,
            },
            seed: 29,
            input: jittered(800, 5, -5000, 3, 100),
        },
    ]
}

#[test]
fn cli_matches_oracle() {
    run_cases(&cases(), &["--watermarks", "per-record"]);
}

/// The same cases with the windows kept in a state backend (`--state`):
/// a keyed process function over `MapState` and event-time timers must
/// reproduce the model exactly too.
#[test]
fn state_backend_windows_match_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().to_str().unwrap();
    let all = cases();
    let (heap, redb): (Vec<_>, Vec<_>) = all.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let strip = |v: Vec<(usize, Case)>| v.into_iter().map(|(_, c)| c).collect::<Vec<_>>();
    run_cases(
        &strip(heap),
        &["--watermarks", "per-record", "--state", "heap"],
    );
    run_cases(
        &strip(redb),
        &[
            "--watermarks",
            "per-record",
            "--state",
            "redb",
            "--state-dir",
            state_dir,
        ],
    );
}

#[test]
fn periodic_watermarks_in_order() {
    let cases = vec![
        Case {
            name: "periodic tumbling",
            job: Job {
                window: "tumbling:100",
                spec: Spec::tumbling(100),
                agg: Agg::Sum,
                ooo: 0,
                lateness: 0,
                parallelism: 2,
            },
            seed: 31,
            input: GenParams::in_order(3000, 10, -1500, 4),
        },
        Case {
            name: "periodic sliding",
            job: Job {
                window: "sliding:60,20",
                spec: Spec::sliding(60, 20),
                agg: Agg::Max,
                ooo: 10,
                lateness: 30,
                parallelism: 4,
            },
            seed: 32,
            input: GenParams::in_order(2000, 5, 0, 4),
        },
    ];
    run_cases(&cases, &["--watermarks", "periodic"]);
}

/// With periodic watermarks (`--watermark-interval 50`) on an input long
/// enough that watermarks come while it is read, each passing many sliding
/// windows: their firings go a
/// part at a time, with records past the watermark and newer watermarks
/// let in between the parts. The input is in order, so no record is late
/// and every window's sum is the sum of its records, computed here per key
/// and window start in a `HashMap`.
#[test]
fn periodic_sliding_windows_fire_in_parts_while_records_come() {
    let (size, slide) = (10_000i64, 1_000i64);
    // About 10 ms of event time per record: a watermark every 50 ms of
    // reading passes hundreds of windows of some 400 keys per subtask, tens
    // of thousands of results, fired in parts of 4,096.
    let recs = generate(35, &GenParams::in_order(200_000, 2000, 0, 20));
    let mut sums: HashMap<(&str, i64), i64> = HashMap::new();
    for r in &recs {
        let last = r.ts.div_euclid(slide) * slide;
        for k in 0..size / slide {
            *sums.entry((r.key.as_str(), last - k * slide)).or_insert(0) += r.value;
        }
    }
    let mut want: Vec<String> = sums
        .iter()
        .map(|((key, start), sum)| format!("{key},{start},{},{sum}", start + size))
        .collect();
    want.sort();
    let job = Job {
        window: "sliding:10000,1000",
        spec: Spec::sliding(size, slide),
        agg: Agg::Sum,
        ooo: 500,
        lateness: 0,
        parallelism: 2,
    };
    let dir = tempfile::tempdir().unwrap();
    let got = run_cli(
        dir.path(),
        &input_text(&recs),
        &job,
        &["--watermarks", "periodic", "--watermark-interval", "50"],
    );
    assert_eq!(got.summary["records"], recs.len().to_string());
    assert_eq!(got.summary["late"], "0");
    assert_eq!(got.summary["windows_fired"], want.len().to_string());
    assert!(got.late.is_empty());
    assert!(
        got.output == want,
        "{} lines written, {} expected",
        got.output.len(),
        want.len()
    );
}

/// With periodic watermarks, records out of order by at most the bound are
/// never late, and a tumbling or sliding window only fires once no record can
/// join it any more: the result does not depend on when watermarks come.
#[test]
fn periodic_watermarks_within_bound() {
    let cases = vec![
        Case {
            name: "periodic tumbling, jitter within bound",
            job: Job {
                window: "tumbling:50",
                spec: Spec::tumbling(50),
                agg: Agg::Count,
                ooo: 30,
                lateness: 0,
                parallelism: 2,
            },
            seed: 33,
            input: GenParams::jittered(3000, 8, -2000, 4, 30).with_very_late(0, 0, 1),
        },
        Case {
            name: "periodic sliding, jitter within bound",
            job: Job {
                window: "sliding:40,15",
                spec: Spec::sliding(40, 15),
                agg: Agg::Min,
                ooo: 25,
                lateness: 10,
                parallelism: 3,
            },
            seed: 34,
            input: GenParams::jittered(2000, 8, 500, 4, 25).with_very_late(0, 0, 1),
        },
    ];
    run_cases(&cases, &["--watermarks", "periodic"]);
}

#[test]
fn empty_input_fires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for window in ["tumbling:10", "sliding:10,5", "session:3"] {
        let job = Job {
            window,
            spec: Spec::session(3),
            agg: Agg::Sum,
            ooo: 0,
            lateness: 0,
            parallelism: 2,
        };
        let got = run_cli(dir.path(), "", &job, &["--watermarks", "per-record"]);
        check(&format!("empty input, {window}"), &got, &[], &job, 0).unwrap();
    }
}

#[test]
fn only_bad_lines_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let job = Job {
        window: "tumbling:10",
        spec: Spec::tumbling(10),
        agg: Agg::Count,
        ooo: 0,
        lateness: 0,
        parallelism: 2,
    };
    let text = "x\na,b,c\n1,2\n\n";
    let got = run_cli(
        dir.path(),
        text,
        &job,
        &["--watermarks", "per-record", "--on-bad-record", "skip"],
    );
    check("only bad lines", &got, &[], &job, 4).unwrap();
}

#[test]
fn firings_go_to_stdout_without_output() {
    let dir = tempfile::tempdir().unwrap();
    let recs = generate(35, &GenParams::jittered(300, 3, -50, 4, 20));
    let input = dir.path().join("in.csv");
    std::fs::write(&input, input_text(&recs)).unwrap();
    let out = floe(&[
        "run",
        "window",
        "--input",
        input.to_str().unwrap(),
        "--window",
        "tumbling:25",
        "--agg",
        "max",
        "--out-of-orderness",
        "5",
        "--watermarks",
        "per-record",
        "--parallelism",
        "2",
    ]);
    assert!(out.status.success(), "{out:?}");
    let mut got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    let outcome = simulate(&recs, &Spec::tumbling(25), 5, 0);
    assert!(
        !outcome.late.is_empty(),
        "the input should have late records"
    );
    let want = expected_lines(&recs, &outcome, Agg::Max);
    let (missing, extra) = diff(&want, &got, 8);
    assert_eq!(got, want, "missing {missing:?}; unexpected {extra:?}");
}

// ------------------------------------------------------------ bad records

/// Runs `floe args...`, asserts it failed with exactly one clean stderr line,
/// and returns that line.
fn fails_with_one_line(args: &[&str]) -> String {
    let out = floe(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "floe {args:?}: expected a non-zero exit code, got {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "floe {args:?}: stderr shows a panic:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "floe {args:?}: expected exactly one line on stderr, got:\n{stderr}"
    );
    assert!(
        !lines[0].trim().is_empty(),
        "floe {args:?}: blank stderr line"
    );
    lines[0].to_string()
}

/// Good records with `bad` lines inserted before the given 0-based record
/// positions; returns the text and the 1-based line numbers of the bad lines.
fn with_bad_lines(recs: &[Rec], bad: &[(usize, &str)]) -> (String, Vec<usize>) {
    let mut text = String::new();
    let mut numbers = Vec::new();
    let mut line = 0;
    for (i, r) in recs.iter().enumerate() {
        for (_, b) in bad.iter().filter(|(at, _)| *at == i) {
            line += 1;
            numbers.push(line);
            text.push_str(b);
            text.push('\n');
        }
        line += 1;
        text.push_str(&r.line());
        text.push('\n');
    }
    (text, numbers)
}

const BAD_LINES: &[(&str, &str)] = &[
    ("too few fields", "k1,100"),
    ("too many fields", "k1,100,5,7"),
    ("non-numeric timestamp", "k1,abc,5"),
    ("fractional timestamp", "k1,10.5,5"),
    ("non-numeric value", "k1,100,x"),
    ("value out of i64 range", "k1,100,99999999999999999999"),
    ("empty timestamp", "k1,,5"),
    ("empty line", ""),
];

#[test]
fn malformed_line_fails_naming_its_number() {
    let recs = generate(41, &GenParams::in_order(20, 3, 0, 5));
    for (what, bad) in BAD_LINES {
        for at in [0usize, 7] {
            let dir = tempfile::tempdir().unwrap();
            let (text, numbers) = with_bad_lines(&recs, &[(at, bad)]);
            let input = dir.path().join("in.csv");
            std::fs::write(&input, text).unwrap();
            let out = dir.path().join("out.csv");
            let line = fails_with_one_line(&[
                "run",
                "window",
                "--input",
                input.to_str().unwrap(),
                "--window",
                "tumbling:10",
                "--agg",
                "sum",
                "--watermarks",
                "per-record",
                "--parallelism",
                "2",
                "--output",
                out.to_str().unwrap(),
            ]);
            let n = numbers[0];
            assert!(
                line.contains(&format!("line {n}")),
                "{what} at line {n}: the error should name line {n}: {line}"
            );
        }
    }
}

#[test]
fn malformed_last_line_without_newline_fails() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,1,1\nb,2,2\na,3,x").unwrap();
    let line = fails_with_one_line(&[
        "run",
        "window",
        "--input",
        input.to_str().unwrap(),
        "--window",
        "session:5",
        "--agg",
        "count",
        "--output",
        dir.path().join("out.csv").to_str().unwrap(),
    ]);
    assert!(line.contains("line 3"), "should name line 3: {line}");
}

#[test]
fn skipped_bad_lines_are_counted_and_the_rest_matches() {
    let jobs = [
        Job {
            window: "tumbling:50",
            spec: Spec::tumbling(50),
            agg: Agg::Sum,
            ooo: 10,
            lateness: 20,
            parallelism: 2,
        },
        Job {
            window: "sliding:40,10",
            spec: Spec::sliding(40, 10),
            agg: Agg::Count,
            ooo: 0,
            lateness: 15,
            parallelism: 1,
        },
        Job {
            window: "session:12",
            spec: Spec::session(12),
            agg: Agg::Max,
            ooo: 5,
            lateness: 10,
            parallelism: 4,
        },
    ];
    let mut failures = Vec::new();
    for (n, job) in jobs.iter().enumerate() {
        let recs = generate(
            50 + n as u64,
            &GenParams::jittered(800, 6, -200, 4, 25).with_pauses(10, 80),
        );
        // Every kind of bad line, at seeded positions (some adjacent, one first).
        let mut rng = common::SplitMix(60 + n as u64);
        let mut bad: Vec<(usize, &str)> = BAD_LINES
            .iter()
            .flat_map(|(_, b)| [b, b])
            .map(|b| (rng.below(recs.len() as u64) as usize, *b))
            .collect();
        bad.push((0, "header,ts,value"));
        let (text, numbers) = with_bad_lines(&recs, &bad);
        let dir = tempfile::tempdir().unwrap();
        let got = run_cli(
            dir.path(),
            &text,
            job,
            &["--watermarks", "per-record", "--on-bad-record", "skip"],
        );
        if let Err(e) = check(
            &format!("skip bad lines, {job:?}"),
            &got,
            &recs,
            job,
            numbers.len(),
        ) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_window_spec_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,1,1\n").unwrap();
    for spec in [
        "tumbling:0",
        "tumbling:-5",
        "tumbling:abc",
        "tumbling:",
        "tumbling",
        "tumbling:10,5",
        "hopping:5",
        "sliding:10",
        "sliding:10,0",
        "sliding:0,5",
        "sliding:10,5,1",
        "session:0",
        "session:-1",
        "session:1.5",
        "",
        ":10",
    ] {
        let line = fails_with_one_line(&[
            "run",
            "window",
            "--input",
            input.to_str().unwrap(),
            "--window",
            spec,
            "--agg",
            "sum",
        ]);
        assert!(
            line.contains("--window") && line.contains(&format!("'{spec}'")),
            "--window {spec:?}: the error should name the option and the spec: {line}"
        );
    }
}

#[test]
fn invalid_lateness_or_bound_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "a,1,1\n").unwrap();
    for (flag, v) in [("--allowed-lateness", "-1"), ("--out-of-orderness", "-5")] {
        let line = fails_with_one_line(&[
            "run",
            "window",
            "--input",
            input.to_str().unwrap(),
            "--window",
            "tumbling:10",
            "--agg",
            "sum",
            &format!("{flag}={v}"),
        ]);
        assert!(
            line.contains(flag),
            "{flag} {v}: should name {flag}: {line}"
        );
    }
}
