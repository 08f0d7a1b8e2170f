//! End-to-end checks of the checkpoint flags of the `floe` binary and of
//! `floe checkpoints list|verify`, each against an oracle computed in this
//! file (a HashMap over the generated input) or a fault-free run.
//!
//! - Savepoint rescale: a run at parallelism 2 takes a savepoint after N
//!   records; restores at parallelism 3 and 1 must end with the oracle's
//!   output and must really resume (`records=` is the total minus N).
//! - Checkpoints on, no restore: exactly-once, at-least-once and unaligned
//!   (under backpressure) runs give the oracle's output.
//! - Retention: `checkpoints list` shows exactly `--retain-checkpoints` rows.
//! - Corruption: a flipped byte in a state file or a truncated `_metadata` is
//!   reported by `checkpoints verify` and refused by `--from-checkpoint` with
//!   one `error:` line naming the checkpoint.
//! - Bad flags are refused with one readable `error:` line.

use crate::cli_common;
use cli_common::{SplitMix, WindowInput, fails_with_one_error_line, floe, run_ok, summary_field};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The path of the `savepoint=PATH` line.
fn savepoint_path(stderr: &str) -> PathBuf {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("savepoint="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no savepoint= line in stderr:\n{stderr}"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

// ---------------------------------------------------------------- wordcount

const RECORDS: u64 = 60_000;
const VOCABULARY: usize = 400;
const SEED: u64 = 11;

/// The oracle: the generated words counted in a HashMap.
fn wordcount_oracle(records: u64) -> HashMap<String, u64> {
    let generator = floe::text::WordGenerator::new(VOCABULARY, SEED);
    let mut counts = HashMap::new();
    for i in 0..records {
        *counts.entry(generator.word(i)).or_insert(0) += 1;
    }
    counts
}

/// Reads `word,count` lines, failing on a word written twice.
fn read_counts(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut counts = HashMap::new();
    for line in text.lines() {
        let (word, count) = line
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("bad output line {line:?}"));
        let count: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        assert!(
            counts.insert(word.to_string(), count).is_none(),
            "{word} written twice in {}",
            path.display()
        );
    }
    counts
}

/// `floe run wordcount` over the generated words with `extra` flags.
fn wordcount(records: u64, parallelism: usize, output: &Path, extra: &[&str]) -> String {
    let records = records.to_string();
    let parallelism = parallelism.to_string();
    let mut args = vec![
        "run",
        "wordcount",
        "--records",
        &records,
        "--vocabulary",
        "400",
        "--seed",
        "11",
        "--parallelism",
        &parallelism,
        "--output",
        s(output),
    ];
    args.extend_from_slice(extra);
    run_ok(&args)
}

fn assert_counts(path: &Path, oracle: &HashMap<String, u64>, what: &str) {
    let got = read_counts(path);
    if &got != oracle {
        let wrong: Vec<_> = oracle
            .iter()
            .filter(|(w, c)| got.get(*w) != Some(c))
            .take(5)
            .map(|(w, c)| format!("{w}: expected {c}, got {:?}", got.get(w)))
            .collect();
        panic!(
            "{what}: {} words written, {} expected; first differences: {wrong:?}",
            got.len(),
            oracle.len()
        );
    }
}

#[test]
fn wordcount_savepoint_restores_at_other_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = wordcount_oracle(RECORDS);
    let at = 25_000u64;

    // The uninterrupted CLI run agrees with the oracle.
    let full = dir.path().join("full.txt");
    wordcount(RECORDS, 2, &full, &[]);
    assert_counts(&full, &oracle, "uninterrupted run");

    let sp = dir.path().join("sp");
    let run1 = dir.path().join("run1.txt");
    let stderr = wordcount(
        RECORDS,
        2,
        &run1,
        &[
            "--batch-size",
            "256",
            "--checkpoint-interval",
            "50",
            "--checkpoint-dir",
            s(&dir.path().join("ck")),
            "--savepoint-at-records",
            &at.to_string(),
            "--savepoint-dir",
            s(&sp),
        ],
    );
    assert_counts(&run1, &oracle, "run with a savepoint");
    let savepoint = savepoint_path(&stderr);
    assert!(
        savepoint.starts_with(&sp) && savepoint.is_dir(),
        "savepoint {} should be a directory under {}",
        savepoint.display(),
        sp.display()
    );

    for p in [3, 1] {
        let out = dir.path().join(format!("restored-p{p}.txt"));
        let stderr = wordcount(
            RECORDS,
            p,
            &out,
            &["--batch-size", "256", "--from-checkpoint", s(&savepoint)],
        );
        assert_counts(&out, &oracle, &format!("restored at parallelism {p}"));
        assert_eq!(
            summary_field(&stderr, "records"),
            RECORDS - at,
            "restored at parallelism {p}: should resume after the savepoint's {at} records; stderr:\n{stderr}"
        );
        assert_eq!(summary_field(&stderr, "parallelism"), p as u64);
    }
}

#[test]
fn wordcount_checkpoints_do_not_change_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let oracle = wordcount_oracle(RECORDS);
    let plain = dir.path().join("plain.txt");
    wordcount(RECORDS, 2, &plain, &[]);
    assert_counts(&plain, &oracle, "without checkpoints");
    let out = dir.path().join("checkpointed.txt");
    let stderr = wordcount(
        RECORDS,
        2,
        &out,
        &["--batch-size", "256", "--checkpoint-interval", "20"],
    );
    assert_counts(&out, &oracle, "exactly-once, checkpoint every 20 ms");
    assert_eq!(summary_field(&stderr, "records"), RECORDS);
    assert_eq!(summary_field(&stderr, "failed_checkpoints"), 0);
}

#[test]
fn at_least_once_without_failure_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let records = 8_000;
    let oracle = wordcount_oracle(records);
    let out = dir.path().join("at-least-once.txt");
    let stderr = wordcount(
        records,
        2,
        &out,
        &[
            "--batch-size",
            "128",
            "--checkpoint-interval",
            "20",
            "--checkpoint-mode",
            "at-least-once",
            "--count-rate",
            "20000",
            "--credits",
            "1",
        ],
    );
    assert_counts(&out, &oracle, "at-least-once");
    assert_eq!(summary_field(&stderr, "failed_checkpoints"), 0);
    // At-least-once never aligns, so never stores channel state.
    assert_eq!(summary_field(&stderr, "channel_state_bytes"), 0);
}

#[test]
fn unaligned_under_backpressure_is_exact_and_stores_channel_state() {
    let dir = tempfile::tempdir().unwrap();
    let records = 3_000;
    let oracle = wordcount_oracle(records);
    let out = dir.path().join("unaligned.txt");
    let stderr = wordcount(
        records,
        2,
        &out,
        &[
            "--batch-size",
            "128",
            "--checkpoint-interval",
            "20",
            "--unaligned",
            "--count-rate",
            "2000",
            "--credits",
            "1",
            // At least one checkpoint, however slow the machine; the slow
            // sink keeps data in flight for 1.5 s, whose first checkpoint
            // stores it.
            "--finish-after-checkpoints",
            "1",
        ],
    );
    assert_counts(&out, &oracle, "unaligned under backpressure");
    assert!(
        summary_field(&stderr, "checkpoints") >= 1,
        "no checkpoint completed: {stderr}"
    );
    assert!(
        summary_field(&stderr, "channel_state_bytes") > 0,
        "unaligned checkpoints under backpressure should store in-flight data: {stderr}"
    );
}

/// The output channel state of the word generator's subtasks in every
/// retained checkpoint of `ck`: how many carry some.
fn sources_with_output_channel_state(ck: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(ck).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("chk-")
        {
            continue;
        }
        let loaded = floe::checkpoint::load_snapshot(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += loaded
            .meta
            .runtime
            .iter()
            .filter(|r| r.head_uid == "word-generator" && r.output_channel_state.is_some())
            .count();
    }
    n
}

/// Aligned checkpoints with an alignment timeout under backpressure: each
/// barrier waits in a source's full output queue; at the timeout it
/// overtakes the queued batches (turned unaligned), which the source's
/// snapshot then carries as output channel state. Only such a promoted
/// barrier gives a source output channel state in an aligned run (without
/// the timeout, or with the timeout applied at inputs only, it has none).
/// The output stays exact, with failures restored from those checkpoints
/// too (a source's output channel state is queued again on restore and
/// sent with the channel's initial credit).
#[test]
fn alignment_timeout_promotes_barriers_waiting_in_output_queues() {
    let dir = tempfile::tempdir().unwrap();
    let records = 4_000;
    let oracle = wordcount_oracle(records);
    let backpressured = [
        "--batch-size",
        "128",
        "--checkpoint-interval",
        "100",
        "--count-rate",
        "2000",
        "--credits",
        "1",
        "--retain-checkpoints",
        "100",
        "--finish-after-checkpoints",
        "1",
    ];
    for (what, timeout, failures) in [
        ("no timeout", None, None),
        ("timeout", Some("50"), None),
        ("timeout and failures", Some("50"), Some("2")),
        // Unaligned barriers overtake at the sources too; restoring their
        // output channel state re-sends it first.
        ("unaligned and failures", Some("unaligned"), Some("2")),
    ] {
        let ck = dir.path().join(format!("ck-{}", what.replace(' ', "-")));
        let out = dir.path().join(format!("{}.txt", what.replace(' ', "-")));
        let mut extra = backpressured.to_vec();
        extra.extend(["--checkpoint-dir", s(&ck)]);
        match timeout {
            Some("unaligned") => extra.push("--unaligned"),
            Some(t) => extra.extend(["--alignment-timeout", t]),
            None => {}
        }
        if let Some(k) = failures {
            extra.extend(["--inject-failures", k, "--restart", "fixed:5,0"]);
        }
        let stderr = wordcount(records, 2, &out, &extra);
        assert_counts(&out, &oracle, what);
        assert!(
            summary_field(&stderr, "checkpoints") >= 1,
            "{what}: no checkpoint completed: {stderr}"
        );
        let promoted = sources_with_output_channel_state(&ck);
        if timeout.is_some() {
            assert!(
                promoted > 0,
                "{what}: no source barrier overtook its output queue: {stderr}"
            );
        } else {
            assert_eq!(promoted, 0, "{what}: aligned barriers keep their place");
        }
    }
}

#[test]
fn list_shows_exactly_the_retained_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let records = 3_000;
    let retain = 3u64;
    // The sources hold at their end until more than `retain` checkpoints
    // completed, however fast or slow the machine.
    let more = (retain + 2).to_string();
    let stderr = wordcount(
        records,
        2,
        &dir.path().join("out.txt"),
        &[
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
            &retain.to_string(),
            "--finish-after-checkpoints",
            &more,
        ],
    );
    let completed = summary_field(&stderr, "checkpoints");
    assert!(
        completed > retain,
        "the run should complete more than {retain} checkpoints: {stderr}"
    );
    let out = floe(&["checkpoints", "list", s(&ck)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "list failed: {stdout}");
    let mut lines = stdout.lines();
    let header = lines.next().expect("a header line");
    assert!(header.contains("id"), "header: {header}");
    let ids: Vec<u64> = lines
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("row without an id: {l:?}"))
        })
        .collect();
    assert_eq!(ids.len() as u64, retain, "rows: {stdout}");
    // A reader that went away (`floe checkpoints list DIR | head`) ends the
    // printing, not the command: both commands used to panic on the closed
    // pipe (exit 101); verify still checks every checkpoint.
    for command in ["list", "verify"] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["checkpoints", command, s(&ck)])
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "checkpoints {command} into a closed pipe: {:?} {stderr}",
            out.status
        );
    }
    // The newest ones, oldest first, as many directories as rows.
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "rows: {stdout}");
    let dirs = std::fs::read_dir(&ck)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("chk-")
        })
        .count();
    assert_eq!(dirs as u64, retain, "chk-* directories in {}", ck.display());
    for id in ids {
        assert!(ck.join(format!("chk-{id}")).is_dir(), "chk-{id} missing");
    }
}

/// The newest committed checkpoint's `chk-<id>` directory of `ck` that
/// holds a keyed state file, and that file (the largest one). Directories
/// of aborted checkpoints may linger until the next commit; they are not
/// listed.
fn checkpoint_with_keyed_state(ck: &Path) -> (PathBuf, PathBuf) {
    let listed = floe(&["checkpoints", "list", s(ck)]);
    let committed: Vec<u64> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let mut found = None;
    for entry in std::fs::read_dir(ck).unwrap() {
        let path = entry.unwrap().path();
        let Some(id) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("chk-"))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|id| committed.contains(id))
        else {
            continue;
        };
        let blob = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with("-keyed"))
            .max_by_key(|p| std::fs::metadata(p).unwrap().len());
        if let Some(blob) = blob
            && found.as_ref().is_none_or(|(i, _, _)| *i < id)
        {
            found = Some((id, path, blob));
        }
    }
    let (_, chk, blob) =
        found.unwrap_or_else(|| panic!("no checkpoint with keyed state in {}", ck.display()));
    (chk, blob)
}

#[test]
fn corrupt_checkpoints_are_reported_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let stderr = wordcount(
        RECORDS,
        2,
        &dir.path().join("out.txt"),
        &[
            "--batch-size",
            "256",
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            s(&ck),
            "--retain-checkpoints",
            "5",
            // The sources hold at their end until two checkpoints
            // completed: however fast the run, the directory has some.
            "--finish-after-checkpoints",
            "2",
        ],
    );
    assert!(summary_field(&stderr, "checkpoints") >= 2, "{stderr}");

    // Intact: verify passes and names every checkpoint ok.
    let out = floe(&["checkpoints", "verify", s(&ck)]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "verify of an intact dir: {stdout}");
    assert!(
        stdout.lines().count() >= 1 && stdout.lines().all(|l| l.ends_with(": ok")),
        "verify of an intact dir: {stdout}"
    );

    let (chk, blob) = checkpoint_with_keyed_state(&ck);
    let chk_name = chk.file_name().unwrap().to_str().unwrap().to_string();
    let id = chk_name.strip_prefix("chk-").unwrap().to_string();
    let restore = |from: &Path| {
        fails_with_one_error_line(&[
            "run",
            "wordcount",
            "--records",
            "1000",
            "--output",
            s(&dir.path().join("restored.txt")),
            "--from-checkpoint",
            s(from),
        ])
    };

    // One flipped byte in a state file.
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&blob, &bytes).unwrap();
    let out = floe(&["checkpoints", "verify", s(&ck)]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success(),
        "verify should fail on a flipped byte in {}: {stdout}",
        blob.display()
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("checkpoint {id}: CORRUPT"))),
        "verify should report checkpoint {id} as CORRUPT: {stdout}"
    );
    let line = restore(&chk);
    assert!(
        line.contains(&chk_name) || line.contains(&format!("checkpoint {id}")),
        "the error should name the checkpoint {chk_name}: {line}"
    );
    bytes[middle] ^= 0x5a;
    std::fs::write(&blob, &bytes).unwrap();
    let out = floe(&["checkpoints", "verify", s(&ck)]);
    assert!(out.status.success(), "verify after repairing the byte");

    // A truncated `_metadata`.
    let metadata = chk.join("_metadata");
    let full = std::fs::read(&metadata).unwrap();
    std::fs::write(&metadata, &full[..full.len() / 2]).unwrap();
    let out = floe(&["checkpoints", "verify", s(&ck)]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "verify of a truncated _metadata");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("checkpoint {id}: CORRUPT"))),
        "verify should report checkpoint {id} as CORRUPT: {stdout}"
    );
    let line = restore(&chk);
    assert!(
        line.contains(&chk_name) || line.contains(&format!("checkpoint {id}")),
        "the error should name the checkpoint {chk_name}: {line}"
    );
}

#[test]
fn bad_checkpoint_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sp = dir.path().join("sp");
    let missing = dir.path().join("nonexistent");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--checkpoint-interval", "0"], "checkpoint-interval"),
        (vec!["--savepoint-at-records", "10"], "savepoint-dir"),
        (vec!["--from-checkpoint", s(&missing)], s(&missing)),
        (vec!["--unaligned"], "checkpoint-interval"),
        (
            vec!["--checkpoint-interval", "20", "--retain-checkpoints", "0"],
            "retain-checkpoints",
        ),
        (
            vec![
                "--checkpoint-interval",
                "20",
                "--savepoint-at-records",
                "0",
                "--savepoint-dir",
                s(&sp),
            ],
            "savepoint-at-records",
        ),
    ];
    for (flags, named) in cases {
        let mut args = vec!["run", "wordcount", "--records", "100"];
        args.extend_from_slice(&flags);
        let line = fails_with_one_error_line(&args);
        assert!(
            line.contains(named),
            "floe {args:?}: the error should name {named}: {line}"
        );
    }
    // The same checks for the window job.
    let input = dir.path().join("ev.txt");
    std::fs::write(&input, "a,1,1\n").unwrap();
    let line = fails_with_one_error_line(&[
        "run",
        "window",
        "--input",
        s(&input),
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--unaligned",
    ]);
    assert!(line.contains("checkpoint-interval"), "{line}");
}

// ------------------------------------------------------------------- window

const OUT_OF_ORDERNESS: i64 = 50;
const WINDOW_MS: i64 = 1000;

/// A seeded input of `lines` `key,timestamp_ms,value` lines: timestamps rise
/// with jitter of at most half the out-of-orderness, so no record is late.
fn window_input(seed: u64, lines: usize) -> (String, Vec<(String, i64, i64)>) {
    cli_common::window_input(
        seed,
        &WindowInput {
            lines,
            start: 1_000_000,
            step: 12,
            jitter: (OUT_OF_ORDERNESS / 2 + 1) as u64,
            keys: 17,
            low: -1000,
            high: 1000,
        },
    )
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn window(input: &Path, parallelism: usize, output: &Path, extra: &[&str]) -> String {
    let parallelism = parallelism.to_string();
    let mut args = vec![
        "run",
        "window",
        "--input",
        s(input),
        "--window",
        "tumbling:1000",
        "--agg",
        "sum",
        "--watermarks",
        "per-record",
        "--out-of-orderness",
        "50",
        "--parallelism",
        &parallelism,
        "--output",
        s(output),
    ];
    args.extend_from_slice(extra);
    run_ok(&args)
}

fn assert_window_output(path: &Path, oracle: &[String], what: &str) {
    let got = sorted_lines(path);
    if got != oracle {
        let missing: Vec<_> = oracle.iter().filter(|l| !got.contains(l)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|l| !oracle.contains(l)).take(5).collect();
        panic!(
            "{what}: {} lines, {} expected; missing {missing:?}, unexpected {extra:?}",
            got.len(),
            oracle.len()
        );
    }
}

/// Each state backend of the windows (`--state`): none (the operator's
/// maps), the heap's, redb's in `dir`.
fn window_states(dir: &Path) -> Vec<Vec<String>> {
    vec![
        vec![],
        vec!["--state".into(), "heap".into()],
        vec![
            "--state".into(),
            "redb".into(),
            "--state-dir".into(),
            dir.join("window-state").to_str().unwrap().into(),
        ],
    ]
}

#[test]
fn window_savepoint_restores_into_the_same_output_at_other_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let lines = 6_000usize;
    let at = 2_500u64;
    let (text, events) = window_input(0x5eed_0001, lines);
    let input = dir.path().join("ev.txt");
    std::fs::write(&input, text).unwrap();
    let oracle = cli_common::tumbling_sums(&events, WINDOW_MS);

    let full = dir.path().join("full.txt");
    let stderr = window(&input, 2, &full, &[]);
    assert_window_output(&full, &oracle, "uninterrupted run");
    assert_eq!(summary_field(&stderr, "late"), 0, "{stderr}");

    let states = window_states(dir.path());
    // Without `--state` at 3 and 1; each backend's windows at 3.
    for (state, p) in [
        (&states[0], 3),
        (&states[0], 1),
        (&states[1], 3),
        (&states[2], 3),
    ] {
        let state: Vec<&str> = state.iter().map(String::as_str).collect();
        let what = format!("{state:?} restored at parallelism {p}");
        // A run 1 of its own for each restore, into the output the restore
        // then continues.
        let out = dir.path().join(format!("w-p{p}-{}.txt", state.len()));
        let sp = dir.path().join(format!("sp-p{p}-{}", state.len()));
        let mut first = vec![
            "--checkpoint-interval",
            "50",
            "--savepoint-at-records",
            "2500",
            "--savepoint-dir",
            s(&sp),
        ];
        first.extend(&state);
        let stderr = window(&input, 2, &out, &first);
        assert_window_output(&out, &oracle, &format!("{what}: run with a savepoint"));
        let savepoint = savepoint_path(&stderr);
        let mut restore = vec!["--from-checkpoint", s(&savepoint)];
        restore.extend(&state);
        let stderr = window(&input, p, &out, &restore);
        assert_window_output(&out, &oracle, &format!("{what} into the same output"));
        assert_eq!(
            summary_field(&stderr, "records"),
            lines as u64 - at,
            "{what}: should resume after the savepoint's {at} records; stderr:\n{stderr}"
        );
    }
}

/// The heap's windows and redb's are stored differently: a savepoint of
/// one restored into the other is refused with one line naming the window
/// state, never read as garbage.
#[test]
fn window_savepoint_of_one_backend_is_refused_by_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = window_input(0x5eed_0003, 3_000);
    let input = dir.path().join("ev.txt");
    std::fs::write(&input, text).unwrap();
    let states = window_states(dir.path());
    for (from, to) in [(&states[1], &states[2]), (&states[2], &states[1])] {
        let from: Vec<&str> = from.iter().map(String::as_str).collect();
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        let out = dir.path().join(format!("out-{}.txt", from.len()));
        let sp = dir.path().join(format!("sp-{}", from.len()));
        let mut first = vec![
            "--checkpoint-interval",
            "50",
            "--savepoint-at-records",
            "1500",
            "--savepoint-dir",
            s(&sp),
        ];
        first.extend(&from);
        let stderr = window(&input, 2, &out, &first);
        let savepoint = savepoint_path(&stderr);
        let out2 = dir.path().join(format!("out2-{}.txt", from.len()));
        let parallelism = "2";
        let mut args = vec![
            "run",
            "window",
            "--input",
            s(&input),
            "--window",
            "tumbling:1000",
            "--agg",
            "sum",
            "--watermarks",
            "per-record",
            "--out-of-orderness",
            "50",
            "--parallelism",
            parallelism,
            "--output",
            s(&out2),
            "--from-checkpoint",
            s(&savepoint),
        ];
        args.extend(&to);
        let line = fails_with_one_error_line(&args);
        assert!(
            line.contains("state '") && line.contains("window"),
            "{from:?} -> {to:?}: {line}"
        );
    }
}

#[test]
fn window_checkpoints_do_not_change_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let (text, events) = window_input(0x5eed_0002, 5_000);
    let input = dir.path().join("ev.txt");
    std::fs::write(&input, text).unwrap();
    let oracle = cli_common::tumbling_sums(&events, WINDOW_MS);
    let plain = dir.path().join("plain.txt");
    window(&input, 2, &plain, &[]);
    assert_window_output(&plain, &oracle, "without checkpoints");
    let out = dir.path().join("checkpointed.txt");
    let stderr = window(&input, 2, &out, &["--checkpoint-interval", "20"]);
    assert_window_output(&out, &oracle, "exactly-once, checkpoint every 20 ms");
    assert_eq!(summary_field(&stderr, "failed_checkpoints"), 0);
}

/// A checkpoint still waiting for a subtask that reaches its end of input
/// (its barrier stuck behind a slow sink) is aborted, never completed
/// without that subtask's state: the newest retained checkpoint of a
/// backpressured run restores into the same output exactly.
#[test]
fn restore_from_the_last_checkpoint_of_a_backpressured_run_keeps_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let records = 10_000;
    let oracle = wordcount_oracle(records);
    let ck = dir.path().join("ck");
    let out = dir.path().join("out.txt");
    wordcount(
        records,
        2,
        &out,
        &[
            "--batch-size",
            "128",
            "--checkpoint-interval",
            "20",
            "--count-rate",
            "20000",
            "--checkpoint-dir",
            s(&ck),
        ],
    );
    assert_counts(&out, &oracle, "run with checkpoints");
    let newest = std::fs::read_dir(&ck)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_prefix("chk-")?.parse::<u64>().ok()
        })
        .max()
        .expect("a retained checkpoint");
    let chk = ck.join(format!("chk-{newest}"));
    wordcount(
        records,
        2,
        &out,
        &["--batch-size", "128", "--from-checkpoint", s(&chk)],
    );
    assert_counts(
        &out,
        &oracle,
        "restored from the newest checkpoint into the same output",
    );
}

// ---------------------------------------------------------------- damaged files

/// The four commands that open a checkpoint directory's database, each
/// expected to fail with one `error:` line naming `file` (no panic).
fn assert_each_command_names(ck: &Path, out: &Path, file: &Path, what: &str) {
    let from = ck.to_str().expect("UTF-8 temp path");
    let output = s(out);
    for args in [
        vec!["checkpoints", "verify", from],
        vec!["checkpoints", "list", from],
        vec![
            "run",
            "wordcount",
            "--records",
            "1000",
            "--output",
            output,
            "--from-checkpoint",
            from,
        ],
        vec![
            "run",
            "wordcount",
            "--records",
            "1000",
            "--output",
            output,
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            from,
        ],
    ] {
        let line = fails_with_one_error_line(&args);
        assert!(
            line.contains(s(file)),
            "{what}: `floe {}` should name '{}': {line}",
            args.join(" "),
            file.display()
        );
        // redb's own assertion text says nothing a user can act on.
        assert!(!line.contains("assert"), "{what}: {line}");
    }
}

/// A truncated `checkpoints.redb` used to panic inside redb (an assertion on
/// the file length) in `checkpoints verify|list`, a restore and a fresh run
/// with that `--checkpoint-dir`; a file of garbage bytes was reported, but
/// not as a damaged database. Both are now one `error:` line naming the file.
#[test]
fn damaged_checkpoint_database_is_one_error_line_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let stderr = wordcount(
        RECORDS,
        2,
        &dir.path().join("out.txt"),
        &[
            "--batch-size",
            "256",
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            s(&ck),
        ],
    );
    assert!(summary_field(&stderr, "checkpoints") >= 1, "{stderr}");
    let db = ck.join("checkpoints.redb");
    let intact = std::fs::read(&db).unwrap();
    assert!(intact.len() > 4096, "the database is larger than a page");
    let out = dir.path().join("restored.txt");

    // `truncate -s 4096`.
    std::fs::write(&db, &intact[..4096]).unwrap();
    assert_each_command_names(&ck, &out, &db, "truncated database");

    // Garbage of the same length.
    let mut rng = SplitMix(7);
    let garbage: Vec<u8> = (0..intact.len()).map(|_| rng.next() as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    assert_each_command_names(&ck, &out, &db, "garbage database");
}

/// A checkpoint whose state file or `_metadata` is truncated or garbage:
/// `verify` and a restore (from the directory and from `chk-<id>`) fail
/// with one `error:` line naming the file; `list`, which reads the database
/// only, still lists it.
#[test]
fn damaged_checkpoint_files_are_one_error_line_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let stderr = wordcount(
        RECORDS,
        2,
        &dir.path().join("out.txt"),
        &[
            "--batch-size",
            "256",
            "--checkpoint-interval",
            "20",
            "--checkpoint-dir",
            s(&ck),
            // Two checkpoints while the sources hold at their end (with
            // keyed state), and room for the final ones after them.
            "--finish-after-checkpoints",
            "2",
            "--retain-checkpoints",
            "10",
        ],
    );
    assert!(summary_field(&stderr, "checkpoints") >= 2, "{stderr}");
    let (chk, blob) = checkpoint_with_keyed_state(&ck);
    let metadata = chk.join("_metadata");
    let out = dir.path().join("restored.txt");
    let mut rng = SplitMix(3);
    for file in [&blob, &metadata] {
        let intact = std::fs::read(file).unwrap();
        let garbage: Vec<u8> = (0..intact.len()).map(|_| rng.next() as u8).collect();
        for (damage, bytes) in [
            ("truncated", &intact[..intact.len() / 3]),
            ("emptied", &intact[..0]),
            ("garbage", &garbage[..]),
        ] {
            let what = format!("{damage} '{}'", file.display());
            std::fs::write(file, bytes).unwrap();
            for args in [
                // (Restoring the directory takes its newest checkpoint, a
                // final one after the damaged one: it restores fine;
                // failover_loud checks a damaged newest one is skipped.)
                vec!["checkpoints", "verify", s(&ck)],
                vec![
                    "run",
                    "wordcount",
                    "--records",
                    "1000",
                    "--output",
                    s(&out),
                    "--from-checkpoint",
                    s(&chk),
                ],
            ] {
                let line = fails_with_one_error_line(&args);
                assert!(
                    line.contains(s(file)),
                    "{what}: `floe {}` should name the file: {line}",
                    args.join(" ")
                );
            }
            let listed = run_ok(&["checkpoints", "list", s(&ck)]);
            assert!(listed.is_empty(), "{what}: list writes no stderr: {listed}");
        }
        std::fs::write(file, &intact).unwrap();
        run_ok(&["checkpoints", "verify", s(&ck)]);
    }
}

// ---------------------------------------------------------------- one output, one job

/// A wordcount over the generated words, its sink throttled so that it runs
/// for seconds, checkpointing into `ck` (unaligned, so checkpoints complete
/// under the sink's backpressure) and writing `out`; returns once it has
/// completed its first checkpoint (it committed output by then), with the
/// thread draining the rest of its stderr.
fn throttled_wordcount(
    records: u64,
    ck: &Path,
    out: &Path,
) -> (cli_common::Reap, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let records = records.to_string();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "run",
            "wordcount",
            "--records",
            &records,
            "--vocabulary",
            "400",
            "--seed",
            "11",
            "--batch-size",
            "128",
            "--output",
            s(out),
            "--checkpoint-interval",
            "20",
            "--unaligned",
            "--checkpoint-dir",
            s(ck),
            "--count-rate",
            "20000",
            "--status-interval",
            "50",
        ])
        .env_remove("FLOE_LOG")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("floe starts");
    let mut child = cli_common::Reap(child);
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().expect("piped stderr"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stderr.read_line(&mut line).expect("read floe's stderr");
        assert!(
            n > 0,
            "the throttled job ended before a checkpoint:\n{seen}"
        );
        seen.push_str(&line);
        let completed = line.starts_with("status ")
            && line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("checkpoints="))
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n >= 1);
        if completed {
            break;
        }
    }
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        seen + &rest
    });
    (child, rest)
}

/// Two jobs on one `--output`: the second used to reset the output and
/// delete the first's commit log and pending files, and the first lost
/// records. The second is now refused with one line while the first runs,
/// and the first's output is the oracle's. So is a second job without
/// checkpoints, which writes its output directly: it used to truncate the
/// first's committed output (and the first then failed after its restarts).
#[test]
fn a_second_job_on_the_same_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let records = 200_000;
    let (mut first, first_stderr) = throttled_wordcount(records, &dir.path().join("ck1"), &out);

    let line = fails_with_one_error_line(&[
        "run",
        "wordcount",
        "--records",
        "1000",
        "--output",
        s(&out),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(&dir.path().join("ck2")),
    ]);
    assert!(
        line.contains("in use by another job") && line.contains(s(&out)),
        "{line}"
    );
    let line =
        fails_with_one_error_line(&["run", "wordcount", "--records", "1000", "--output", s(&out)]);
    assert!(
        line.contains("in use by another job") && line.contains(s(&out)),
        "without checkpoints: {line}"
    );
    assert!(
        first.0.try_wait().unwrap().is_none(),
        "the first job still runs after the second was refused"
    );

    let status = first.0.wait().unwrap();
    let stderr = first_stderr.join().unwrap();
    assert!(status.success(), "first job: {status:?}\n{stderr}");
    assert_counts(&out, &wordcount_oracle(records), "the first job's output");
}

/// The lock is the kernel's: a job killed with SIGKILL holds it no more, and
/// a restore into the same output runs and ends with the oracle's output.
#[test]
fn a_killed_jobs_output_can_be_restored_into() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let ck = dir.path().join("ck");
    let records = 200_000;
    let (mut first, first_stderr) = throttled_wordcount(records, &ck, &out);
    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    first_stderr.join().unwrap();

    wordcount(records, 2, &out, &["--from-checkpoint", s(&ck)]);
    assert_counts(&out, &wordcount_oracle(records), "restored after kill -9");
}
