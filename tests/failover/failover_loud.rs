//! Failures that repeat on every attempt are loud and end the run.
//!
//! The bug: with checkpointing on, a failure that comes back on every
//! attempt (invalid UTF-8 in the input, a malformed record under
//! `--on-bad-record fail`, an output that cannot be written, an input file
//! shorter than the restored offset) made the `floe` binary restart forever
//! and print nothing. Now:
//!
//! - errors no restart can mend are non-retriable: the job fails at once,
//!   with no restart and one `error:` line (restart-all and region failover);
//! - a retriable failure that repeats (a kill on every attempt, a full
//!   disk) ends after the default strategy's bounded restarts, one `restart attempt=N cause=… restored_checkpoint=…`
//!   line each, then one `error:` line;
//! - `--status-interval` lines count `restarts=` and `failed_checkpoints=`;
//! - a restore that skips a damaged newest checkpoint says which one and
//!   why, and its output still equals the oracle (a HashMap over the
//!   generated words).
//!
//! Every run is bounded by a generous watchdog, so that a regression to
//! restarting forever fails the test instead of hanging it.

use crate::cli_common;
use cli_common::{SplitMix, summary_field};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Far beyond any run here (the slowest, ten default restarts of a job
/// that reads 4.8 MB each time, takes about half a minute); only a run that
/// never ends reaches it.
const WATCHDOG: Duration = Duration::from_secs(180);

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Runs `floe args...` to its end; panics if it is still running after the
/// watchdog (it would restart forever), after killing it.
fn floe_bounded(args: &[&str]) -> Output {
    run_bounded(floe_command(args), args)
}

fn floe_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_floe"));
    command
        .args(args)
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `floe args... --status-interval 20` until a status line reports at
/// least `checkpoints` completed checkpoints, then kills it (`kill -9`): the
/// crash leaves the newest checkpoint one taken mid-run, with state.
fn crash_after_checkpoints(args: &[&str], checkpoints: u64) {
    crash_after_checkpoints_past(args, 0, checkpoints);
}

/// As [`crash_after_checkpoints`], counting only checkpoints that completed
/// after a status line showed the sources past `records` records. The
/// second such checkpoint was triggered after the first completed (one
/// checkpoint at a time), so with `checkpoints >= 2` the newest one holds
/// source positions past `records`, however fast or slow the machine.
fn crash_after_checkpoints_past(args: &[&str], records: u64, checkpoints: u64) {
    use std::io::BufRead;
    let mut base: Option<u64> = None;
    let mut command = floe_command(&[args, &["--status-interval", "20"]].concat());
    command.stdout(Stdio::null());
    let mut child = command.spawn().expect("floe binary runs");
    let stderr = child.stderr.take().expect("piped stderr");
    let mut seen = String::new();
    let mut reached = false;
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if !line.starts_with("status ") {
            continue;
        }
        let done = field(&line, "checkpoints").and_then(|v| v.parse::<u64>().ok());
        let read = field(&line, "records").and_then(|v| v.parse::<u64>().ok());
        if base.is_none() && read.is_some_and(|r| r >= records) {
            base = done;
        }
        if let (Some(b), Some(n)) = (base, done)
            && n >= b + checkpoints
        {
            reached = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        reached,
        "the run ended before {checkpoints} checkpoints completed:\n{seen}"
    );
}

fn run_bounded(mut command: Command, args: &[&str]) -> Output {
    let child = command.spawn().expect("floe binary runs");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(out) => out.expect("floe output"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("floe {args:?} still running after {WATCHDOG:?}: it keeps restarting");
        }
    }
}

/// The run failed: non-zero exit, no panic, its `restart` lines, and
/// exactly one other line, an `error:` line, last. Returns (restart lines,
/// error line).
fn failed(args: &[&str]) -> (Vec<String>, String) {
    failed_output(args, floe_bounded(args))
}

fn failed_output(args: &[&str], out: Output) -> (Vec<String>, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "floe {args:?}: expected a non-zero exit, got {:?}; stderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    let (restarts, others): (Vec<&str>, Vec<&str>) =
        stderr.lines().partition(|l| l.starts_with("restart "));
    assert_eq!(others.len(), 1, "one line besides restarts:\n{stderr}");
    assert!(others[0].starts_with("error: "), "{stderr}");
    assert!(
        stderr.lines().last() == Some(others[0]),
        "the error line comes last:\n{stderr}"
    );
    (
        restarts.into_iter().map(str::to_string).collect(),
        others[0].to_string(),
    )
}

/// The value of `name=` in a `key=value` line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
}

/// Restart lines number their attempts 1, 2, ... and name a cause and the
/// checkpoint restored.
fn assert_restart_lines(lines: &[String]) {
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(
            field(l, "attempt"),
            Some((i + 1).to_string().as_str()),
            "{l}"
        );
        assert!(l.contains(" cause=\""), "{l}");
        let restored = field(l, "restored_checkpoint").unwrap_or_else(|| panic!("{l}"));
        assert!(restored == "none" || restored.parse::<u64>().is_ok(), "{l}");
    }
}

/// Lines of words, with a line of invalid UTF-8 after `good` lines.
fn text_with_invalid_utf8(path: &Path, good: usize) {
    let mut rng = SplitMix(5);
    let mut bytes = Vec::new();
    for _ in 0..good {
        bytes.extend_from_slice(format!("w{} w{}\n", rng.below(50), rng.below(50)).as_bytes());
    }
    bytes.extend_from_slice(b"caf\xe9 au lait\n");
    bytes.extend_from_slice(b"more words\n");
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn invalid_utf8_fails_at_once_without_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    text_with_invalid_utf8(&input, 20_000);
    for failover in ["all", "region"] {
        let (restarts, error) = failed(&[
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--checkpoint-interval",
            "10",
            "--failover",
            failover,
            "--output",
            s(&dir.path().join(format!("out-{failover}.txt"))),
        ]);
        assert!(restarts.is_empty(), "{failover}: {restarts:?}");
        assert!(error.contains("UTF-8"), "{error}");
        assert!(error.contains("line 20001"), "{error}");
    }
}

#[test]
fn a_malformed_record_under_the_fail_policy_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.csv");
    let mut text: String = (0..5_000)
        .map(|i| format!("k{},{},{}\n", i % 7, i * 10, i % 13))
        .collect();
    text.push_str("k1,not-a-timestamp,3\n");
    std::fs::write(&input, text).unwrap();
    for failover in ["all", "region"] {
        let (restarts, error) = failed(&[
            "run",
            "window",
            "--input",
            s(&input),
            "--window",
            "tumbling:100",
            "--agg",
            "sum",
            "--on-bad-record",
            "fail",
            "--checkpoint-interval",
            "10",
            "--failover",
            failover,
            "--output",
            s(&dir.path().join(format!("out-{failover}.txt"))),
        ]);
        assert!(restarts.is_empty(), "{failover}: {restarts:?}");
        assert!(error.contains("line 5001"), "{error}");
    }
}

/// A regular file nothing may write, whoever runs the test (root
/// included): the kernel refuses to create it.
#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_output_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a b c\nb c\n").unwrap();
    let (restarts, error) = failed(&[
        "run",
        "wordcount",
        "--input",
        s(&input),
        "--checkpoint-interval",
        "10",
        "--output",
        "/proc/version",
    ]);
    assert!(restarts.is_empty(), "{restarts:?}");
    assert!(error.contains("/proc/version"), "{error}");
}

#[test]
fn an_input_shorter_than_the_restored_offset_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    let mut rng = SplitMix(9);
    // Far more lines than the channels hold (the count takes 3,000 a
    // second): the source is still mid-file when the run is killed, so its
    // position is an offset, not "finished".
    let text: String = (0..300_000)
        .map(|_| format!("w{}\n", rng.below(200)))
        .collect();
    std::fs::write(&input, &text).unwrap();
    let ck = dir.path().join("ck");
    // A throttled count holds the source back, so checkpoints complete
    // while it is mid-file.
    // The run is killed mid-file (a finished run's final checkpoint
    // records its sources as finished, past any offset check), after two
    // checkpoints completed once the source was past line 100: the newest
    // one's offset is past the 3 bytes the input shrinks to.
    crash_after_checkpoints_past(
        &[
            "run",
            "wordcount",
            "--input",
            s(&input),
            "--batch-size",
            "64",
            "--credits",
            "1",
            "--count-rate",
            "3000",
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            s(&ck),
            "--output",
            s(&dir.path().join("first.txt")),
        ],
        100,
        2,
    );
    // The input shrinks below any offset a checkpoint recorded.
    std::fs::write(&input, "w1\n").unwrap();
    let (restarts, error) = failed(&[
        "run",
        "wordcount",
        "--input",
        s(&input),
        "--checkpoint-interval",
        "20",
        "--from-checkpoint",
        s(&ck),
        "--output",
        s(&dir.path().join("second.txt")),
    ]);
    assert!(restarts.is_empty(), "{restarts:?}");
    assert!(error.contains("past its end"), "{error}");
}

/// A retriable failure on every attempt (a kill after each checkpoint, more
/// kills than the default strategy grants): the run ends after
/// `RestartStrategy::DEFAULT_ATTEMPTS` restarts, each with its line.
#[test]
fn a_repeating_failure_ends_after_the_default_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let granted = floe::failover::RestartStrategy::DEFAULT_ATTEMPTS;
    let kills = (granted + 5).to_string();
    let (restarts, error) = failed(&[
        "run",
        "wordcount",
        "--records",
        "20000",
        "--checkpoint-interval",
        "10",
        "--inject-failures",
        &kills,
        "--output",
        s(&dir.path().join("out.txt")),
    ]);
    assert_eq!(restarts.len() as u32, granted, "{restarts:#?}");
    assert_restart_lines(&restarts);
    assert!(error.contains("injected failure"), "{error}");
}

/// A full disk, simulated by a file size limit on the `floe` process (its
/// writes beyond it fail with EFBIG, as with ENOSPC on a full disk; the
/// limit leaves room for the checkpoint database, not for the output): the
/// failure is retriable, so the run ends after the default strategy's
/// restarts, each with its line, then one error line.
#[cfg(unix)]
#[test]
fn a_full_disk_ends_after_the_default_restarts() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    const LIMIT: u64 = 3 << 20;
    // 20,000 distinct long words: a 4.8 MB output.
    let text: String = (0..20_000)
        .map(|i| format!("{}\n", format!("{i:06}").repeat(40)))
        .collect();
    assert!(text.len() as u64 > LIMIT + (1 << 20));
    std::fs::write(&input, text).unwrap();
    let ck = dir.path().join("ck");
    let output = dir.path().join("out.txt");
    let args = [
        "run",
        "wordcount",
        "--input",
        s(&input),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(&ck),
        "--output",
        s(&output),
    ];
    let mut command = floe_command(&args);
    // SAFETY: between fork and exec only async-signal-safe calls: ignore
    // SIGXFSZ (so that a write beyond the limit fails instead of killing
    // the process) and set the limit.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: LIMIT as libc::rlim_t,
                rlim_max: LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = run_bounded(command, &args);
    let (restarts, error) = failed_output(&args, out);
    assert_eq!(
        restarts.len() as u32,
        floe::failover::RestartStrategy::DEFAULT_ATTEMPTS,
        "{restarts:#?}"
    );
    assert_restart_lines(&restarts);
    assert!(error.contains("File too large"), "{error}");
}

/// Restart lines and the `restarts=`/`failed_checkpoints=` fields of the
/// status lines agree with the summary line (counted by the job's failover
/// and checkpoint statistics), for restart-all and region failover.
#[test]
fn status_lines_count_restarts_and_failed_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    for (job, failover) in [("wordcount", "all"), ("pipelines", "region")] {
        let out = floe_bounded(&[
            "run",
            job,
            "--records",
            "100000",
            "--checkpoint-interval",
            "20",
            "--failover",
            failover,
            "--inject-failures",
            "3",
            "--status-interval",
            "50",
            "--output",
            s(&dir.path().join(format!("{job}.txt"))),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let restarts = summary_field(&stderr, "restarts");
        assert_eq!(restarts, 3, "{stderr}");
        let restart_lines: Vec<String> = stderr
            .lines()
            .filter(|l| l.starts_with("restart "))
            .map(str::to_string)
            .collect();
        assert_eq!(restart_lines.len() as u64, restarts, "{stderr}");
        assert_restart_lines(&restart_lines);
        let status: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("status "))
            .collect();
        let counts = |name: &str| -> Vec<u64> {
            status
                .iter()
                .map(|l| {
                    field(l, name)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("no {name}= in {l}"))
                })
                .collect()
        };
        let (r, f) = (counts("restarts"), counts("failed_checkpoints"));
        assert!(r.windows(2).all(|w| w[0] <= w[1]), "{stderr}");
        // The last status line is printed once the job ended.
        assert_eq!(r.last(), Some(&restarts), "{stderr}");
        assert_eq!(
            f.last(),
            Some(&summary_field(&stderr, "failed_checkpoints")),
            "{stderr}"
        );
    }
}

// ---------------------------------------------------------------- fallback

const RECORDS: u64 = 3_000;
const VOCABULARY: usize = 400;
const SEED: u64 = 11;

fn generated_args() -> Vec<String> {
    [
        "--records",
        &RECORDS.to_string(),
        "--vocabulary",
        &VOCABULARY.to_string(),
        "--seed",
        &SEED.to_string(),
    ]
    .map(str::to_string)
    .to_vec()
}

/// The ids `floe checkpoints list` shows, oldest first.
fn listed_checkpoints(ck: &Path) -> Vec<u64> {
    let out = floe_bounded(&["checkpoints", "list", s(ck)]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn a_restore_that_skips_a_damaged_newest_checkpoint_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let mut args: Vec<String> = ["run", "wordcount"].map(str::to_string).to_vec();
    args.extend(generated_args());
    // Output on stdout: no transactional sink, so a restore may fall back
    // to an older checkpoint without repeating committed output. A slow
    // sink makes the run complete several checkpoints.
    let mut first = args.clone();
    first.extend(
        [
            "--batch-size",
            "128",
            "--checkpoint-interval",
            "20",
            "--unaligned",
            "--count-rate",
            "2000",
            "--credits",
            "1",
            "--checkpoint-dir",
            s(&ck),
            "--retain-checkpoints",
            "3",
        ]
        .map(str::to_string),
    );
    // Killed mid-run, so the newest checkpoint holds keyed state (a
    // finished run's final checkpoints hold none).
    crash_after_checkpoints(&first.iter().map(String::as_str).collect::<Vec<_>>(), 3);
    let ids = listed_checkpoints(&ck);
    assert!(ids.len() >= 2, "two checkpoints retained: {ids:?}");
    let (newest, older) = (ids[ids.len() - 1], ids[ids.len() - 2]);

    // One flipped byte in a state file of the newest checkpoint.
    let chk = ck.join(format!("chk-{newest}"));
    let blob = std::fs::read_dir(&chk)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-keyed"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap_or_else(|| panic!("no keyed state file in {}", chk.display()));
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&blob, &bytes).unwrap();

    let mut restore = args.clone();
    restore.extend(["--from-checkpoint", s(&ck)].map(str::to_string));
    let out = floe_bounded(&restore.iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let fallback: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("restore fallback "))
        .collect();
    assert_eq!(fallback.len(), 1, "one fallback line:\n{stderr}");
    let line = fallback[0];
    assert_eq!(
        field(line, "restored_checkpoint"),
        Some(older.to_string().as_str()),
        "{line}"
    );
    assert_eq!(
        field(line, "skipped_checkpoint"),
        Some(newest.to_string().as_str()),
        "{line}"
    );
    let blob_name = blob.file_name().unwrap().to_string_lossy();
    assert!(
        line.contains("reason=\"") && line.contains("corrupt") && line.contains(&*blob_name),
        "the reason names the damaged file {blob_name}: {line}"
    );

    // The oracle: the generated words counted in a HashMap.
    let generator = floe::text::WordGenerator::new(VOCABULARY, SEED);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for i in 0..RECORDS {
        *oracle.entry(generator.word(i)).or_insert(0) += 1;
    }
    let mut counts: HashMap<String, u64> = HashMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let (word, count) = l.rsplit_once(',').unwrap_or_else(|| panic!("{l:?}"));
        let previous = counts.insert(word.to_string(), count.parse().unwrap());
        assert!(previous.is_none(), "{word} written twice");
    }
    assert_eq!(counts, oracle);
}

// ----------------------------------------------------------------- library

/// A job whose map fails with `error` at record `at`, on every attempt.
fn failing_job(
    error: fn() -> floe::Error,
    restart: Option<floe::failover::RestartStrategy>,
) -> floe::JobHandle {
    let env = floe::StreamExecutionEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_millis(10));
    let mut config = env.config();
    config.restart = restart;
    env.set_config(config);
    let at = 500u64;
    env.from_generator(1_000, |i| i)
        .try_map(move |i| if i == at { Err(error()) } else { Ok(i) })
        .collect();
    env.execute_async().expect("job starts")
}

/// The library reports restarts on `JobHandle::events` (one per restart,
/// numbered, with the cause) and fails a non-retriable error at once.
#[test]
fn library_events_name_each_restart_and_non_retriable_errors_skip_them() {
    use floe::failover::RestartStrategy;
    let handle = failing_job(
        || floe::Error::User("flaky downstream".into()),
        Some(RestartStrategy::FixedDelay {
            attempts: 2,
            delay: Duration::ZERO,
        }),
    );
    let error = futures::executor::block_on(handle.wait()).expect_err("the job fails");
    assert!(error.is_retriable(), "{error}");
    let events: Vec<floe::JobEvent> = futures::executor::block_on_stream(handle.events()).collect();
    let restarts: Vec<&floe::RestartEvent> = events
        .iter()
        .filter_map(|e| match e {
            floe::JobEvent::Restarted(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(restarts.len() as u64, handle.failover_stats().restarts);
    assert_eq!(restarts.len(), 2, "{events:?}");
    for (i, r) in restarts.iter().enumerate() {
        assert_eq!(r.attempt, i as u64 + 1);
        assert!(r.cause.contains("flaky downstream"), "{r:?}");
    }

    // A bad record: no restart is spent on it, even with attempts left.
    let handle = failing_job(
        || floe::Error::BadRecord {
            line: 501,
            message: "unparsable".into(),
        },
        Some(RestartStrategy::FixedDelay {
            attempts: 100,
            delay: Duration::ZERO,
        }),
    );
    let error = futures::executor::block_on(handle.wait()).expect_err("the job fails");
    assert!(!error.is_retriable(), "{error}");
    assert!(
        error.to_string().contains("bad record at line 501"),
        "{error}"
    );
    assert_eq!(handle.failover_stats().restarts, 0);
    assert_eq!(handle.status(), floe::JobStatus::Failed);
    assert!(
        futures::executor::block_on_stream(handle.events())
            .next()
            .is_none()
    );
}
