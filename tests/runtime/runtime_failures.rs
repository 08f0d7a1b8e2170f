//! Failures end a job promptly with an error that names their source.
//!
//! - A panic in `map` on one specific record (chained or not, at parallelism 1
//!   and 3) makes `execute` return `Err` naming the operator ("exploding-map"),
//!   saying it panicked and carrying the panic message; the job handle's status
//!   becomes `Failed`.
//! - The same holds for a panic in a sink, in a generator function, in a keyed
//!   reduce function, and upstream of a fast parallel exchange; a panic in a
//!   rate-limited job that would otherwise run for hours ends it at once.
//! - An `Err` from `try_map` (on the first or on the last record), from a
//!   process function or from a sink's `finish` fails the job naming that
//!   operator and carrying the error text.
//! - A file source on a missing path, on a directory, or on a file that is not
//!   UTF-8 fails the job with an error naming the path.
//! - After a failure, the next job in the same process runs normally.
//!
//! Every job runs under a watchdog: it must end within a minute, so a hang
//! fails (or aborts) the test instead of blocking the suite.

use floe::operators::process::ProcessContext;
use floe::operators::sink::SinkFunction;
use floe::{JobResult, JobStatus, StreamExecutionEnvironment};
use std::sync::mpsc;
use std::time::Duration;

const JOB_LIMIT: Duration = Duration::from_secs(60);

/// Runs the job under a watchdog; returns its result and final status.
fn run(env: &StreamExecutionEnvironment) -> (floe::Result<JobResult>, Option<JobStatus>) {
    let handle = match env.execute_async() {
        Ok(h) => h,
        Err(e) => return (Err(e), None),
    };
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watchdog = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(JOB_LIMIT) {
                eprintln!("job did not end within {JOB_LIMIT:?}; canceling it");
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
    (result, Some(handle.status()))
}

/// Runs a job that must fail; returns its error message.
fn run_err(env: &StreamExecutionEnvironment) -> String {
    let (result, status) = run(env);
    let err = match result {
        Ok(r) => panic!("the job should have failed, but finished: {r:?}"),
        Err(e) => e,
    };
    assert!(
        !matches!(err, floe::Error::Runtime(floe_actors::Error::Canceled)),
        "the watchdog had to cancel the job: it hung"
    );
    if let Some(status) = status {
        assert_eq!(status, JobStatus::Failed, "status after: {err}");
    }
    err.to_string()
}

fn env_with(parallelism: usize) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism).set_arbiters(2);
    env
}

fn assert_names(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} should contain {p:?}");
    }
}

fn exploding(x: u64) -> u64 {
    if x == 7_777 {
        panic!("boom on record {x}");
    }
    x
}

#[test]
fn panic_in_map_names_the_operator() {
    for p in [1usize, 3] {
        for chained in [true, false] {
            let env = env_with(p);
            let mut mapped = env
                .from_generator(20_000, |i| i)
                .map(exploding)
                .name("exploding-map");
            if !chained {
                mapped = mapped.disable_chaining();
            }
            let out = mapped.collect();
            let msg = run_err(&env);
            assert_names(&msg, &["exploding-map", "panicked", "boom on record 7777"]);
            assert!(
                out.take().iter().all(|x| *x != 7_777),
                "the failing record was never emitted"
            );
        }
    }
}

#[test]
fn panic_error_is_a_user_panic_of_the_operator() {
    let env = env_with(2);
    let _ = env
        .from_collection((0..10_000u64).collect())
        .rebalance()
        .map(exploding)
        .name("exploding-map")
        .collect();
    let (result, _) = run(&env);
    match result {
        Err(floe::Error::Runtime(floe_actors::Error::UserPanic {
            operator, message, ..
        })) => {
            assert_eq!(operator, "exploding-map");
            assert_eq!(message, "boom on record 7777");
        }
        other => panic!("expected a user panic of exploding-map, got {other:?}"),
    }
}

#[test]
fn panic_ends_a_job_that_would_run_for_hours() {
    // Ten million records at 2000 per second: hours, unless the failure of
    // the map stops the source too.
    let env = env_with(2);
    let _ = env
        .from_generator_rate_limited(10_000_000, 2_000.0, |i| i)
        .rebalance()
        .map(|x| {
            if x == 50 {
                panic!("early failure");
            }
            x
        })
        .name("early-map")
        .collect();
    let msg = run_err(&env);
    assert_names(&msg, &["early-map", "panicked", "early failure"]);
}

#[test]
fn panic_behind_a_busy_exchange_names_the_operator() {
    // Fast parallel producers keep sending to the failing subtask's peers.
    let env = env_with(2);
    env.set_batch_size(64).set_credits(2);
    let _ = env
        .from_generator(200_000, |i| i)
        .rebalance()
        .map(|x| x * 2)
        .key_by(|x: &u64| *x % 101)
        .reduce(|a, b| {
            if b == 2 * 150_001 {
                panic!("reduce gave up");
            }
            a.max(b)
        })
        .name("max-per-key")
        .collect();
    let msg = run_err(&env);
    assert_names(&msg, &["max-per-key", "panicked", "reduce gave up"]);
}

#[derive(Clone)]
struct FragileSink {
    fail_on: u64,
}

impl SinkFunction<u64> for FragileSink {
    async fn write(&mut self, batch: floe::Batch<u64>) -> floe::Result<()> {
        for r in batch {
            let value = r.value;
            if value == self.fail_on {
                panic!("sink cannot store {value}");
            }
        }
        Ok(())
    }
}

#[test]
fn panic_in_sink_names_the_sink() {
    let env = env_with(2);
    env.from_generator(5_000, |i| i)
        .sink("fragile-sink", FragileSink { fail_on: 4_321 });
    let msg = run_err(&env);
    assert_names(
        &msg,
        &["fragile-sink", "panicked", "sink cannot store 4321"],
    );
}

#[test]
fn panic_in_generator_names_the_source() {
    let env = env_with(3);
    let _ = env
        .from_generator(9_000, |i| {
            if i == 8_999 {
                panic!("generator broke at {i}");
            }
            i
        })
        .name("numbers")
        .map(|x| x + 1)
        .collect();
    let msg = run_err(&env);
    assert_names(&msg, &["numbers", "panicked", "generator broke at 8999"]);
}

#[test]
fn try_map_error_names_the_operator() {
    for bad in [0u64, 4_999] {
        let env = env_with(2);
        let _ = env
            .from_generator(5_000, |i| i)
            .try_map(move |x| {
                if x == bad {
                    Err(floe::Error::User(
                        format!("record {x} is not acceptable").into(),
                    ))
                } else {
                    Ok(x)
                }
            })
            .name("strict-map")
            .collect();
        let msg = run_err(&env);
        assert_names(
            &msg,
            &["strict-map", &format!("record {bad} is not acceptable")],
        );
        assert!(!msg.contains("panicked"), "an error is not a panic: {msg}");
    }
}

#[test]
fn process_function_error_names_the_operator() {
    let env = env_with(1);
    let _ = env
        .from_collection(vec!["1", "2", "three", "4"])
        .process(|s: &str, ctx: &mut ProcessContext<'_, '_, u32>| {
            let n = s.parse::<u32>().map_err(|e| floe::Error::BadRecord {
                line: 3,
                message: format!("{s:?}: {e}"),
            })?;
            ctx.collect(n);
            Ok(())
        })
        .name("parse-numbers")
        .collect();
    let msg = run_err(&env);
    assert_names(&msg, &["parse-numbers", "line 3", "\"three\""]);
}

#[derive(Clone)]
struct FailingFlush;

impl SinkFunction<u64> for FailingFlush {
    async fn write(&mut self, _: floe::Batch<u64>) -> floe::Result<()> {
        Ok(())
    }

    async fn finish(&mut self) -> floe::Result<()> {
        Err(floe::Error::User("flush failed".into()))
    }
}

#[test]
fn sink_finish_error_fails_the_job() {
    let env = env_with(2);
    env.from_generator(1_000, |i| i)
        .sink("flushing-sink", FailingFlush);
    let msg = run_err(&env);
    assert_names(&msg, &["flushing-sink", "flush failed"]);
}

#[test]
fn missing_input_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("input.txt");
    let env = env_with(2);
    let _ = env
        .read_text_file(&path)
        .flat_map(|l: String| floe::tokenize(l))
        .collect();
    let msg = run_err(&env);
    assert_names(&msg, &[path.to_str().unwrap()]);
}

#[test]
fn directory_as_input_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_with(1);
    let _ = env.read_text_file(dir.path()).collect();
    let msg = run_err(&env);
    assert_names(&msg, &[dir.path().to_str().unwrap(), "directory"]);
}

#[test]
fn invalid_utf8_input_names_path_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.txt");
    let mut bytes = Vec::new();
    for i in 0..2_000 {
        bytes.extend_from_slice(format!("line {i}\n").as_bytes());
    }
    bytes.extend_from_slice(b"\xff\xfe broken\n");
    std::fs::write(&path, bytes).unwrap();
    let env = env_with(2);
    let _ = env.read_text_file(&path).collect();
    let msg = run_err(&env);
    assert_names(
        &msg,
        &[
            path.to_str().unwrap(),
            "UTF-8",
            "line 2001",
            "Text File Source",
        ],
    );
}

#[test]
fn a_job_after_a_failure_runs_normally() {
    let env = env_with(2);
    let _ = env
        .from_generator(10_000, |i| i)
        .map(exploding)
        .name("exploding-map")
        .collect();
    run_err(&env);

    let env = env_with(2);
    let out = env
        .from_generator(10_000, |i| i)
        .map(|x| x % 7_777)
        .collect();
    let (result, status) = run(&env);
    result.expect("a healthy job after a failed one");
    assert_eq!(status, Some(JobStatus::Finished));
    let mut got = out.take();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..10_000).map(|x| x % 7_777).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}
