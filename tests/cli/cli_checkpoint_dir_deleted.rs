//! A checkpoint directory deleted while the job runs is noticed at the next
//! checkpoint: one loud line names it, the checkpoint fails, and the job
//! follows its tolerable-failure policy — here none tolerated, so the job
//! fails over, finds no checkpoint to restore (they went with the
//! directory) and fails with one error line, exit non-zero. What it had
//! committed stays exact: lines of the oracle, none twice.
//!
//! The bug story: the store kept writing into its database file after the
//! directory was deleted (the open file lives on, unlinked), so checkpoints
//! "completed" into a database no one would find, without a line, and the
//! job ended as if all was well with nothing to resume from.

use crate::cli_common;
use cli_common::{checkpointed, floe_command, pipelines_oracle, run_watching, sorted};

const RECORDS: u64 = 60_000;
const SEED: u64 = 9;

#[test]
fn a_deleted_checkpoint_directory_fails_the_next_checkpoint_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let (out, ck) = (dir.path().join("out.txt"), dir.path().join("ck"));
    let args = [
        "run",
        "pipelines",
        "--records",
        &RECORDS.to_string(),
        "--seed",
        &SEED.to_string(),
        "--parallelism",
        "2",
        "--output",
        out.to_str().unwrap(),
        "--checkpoint-interval",
        "30",
        "--checkpoint-dir",
        ck.to_str().unwrap(),
        "--sink-rate",
        "10000",
        // Little in flight: a barrier waits for a few hundred records, not
        // the whole input, so checkpoints go on while the sink drains.
        "--credits",
        "1",
        "--network-buffers",
        "4",
        "--status-interval",
        "20",
    ];
    let mut deleted = false;
    let (status, all) = run_watching(&mut floe_command(&args), |line, _| {
        // The event: a completed checkpoint; the throttled sink keeps the
        // job running for seconds after it.
        if !deleted && checkpointed(line) {
            // Moved away in one step (a removal races the job's writes).
            std::fs::rename(&ck, dir.path().join("gone")).expect("move the directory away");
            deleted = true;
        }
    });
    assert!(deleted, "no checkpoint completed; stderr:\n{all}");
    let loud = all
        .lines()
        .find(|l| l.contains("was deleted or replaced while the job ran"));
    assert!(
        loud.is_some_and(|l| l.contains(ck.to_str().unwrap())),
        "one line names the deleted directory; stderr:\n{all}"
    );
    assert!(
        !status.success(),
        "no checkpoint left to restore; stderr:\n{all}"
    );
    let last = all.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: "),
        "ends with one error line:\n{all}"
    );
    let got = sorted(&std::fs::read_to_string(&out).expect("output"));
    let oracle = pipelines_oracle(RECORDS, SEED);
    assert!(
        got.windows(2).all(|w| w[0] != w[1]) && got.iter().all(|l| oracle.binary_search(l).is_ok()),
        "the committed output holds lines of the oracle, each once"
    );
}
