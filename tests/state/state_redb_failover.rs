//! `floe run wordcount --state redb` with checkpoints every 20 ms and three
//! injected failures: the committed counts equal an oracle counted in a
//! `HashMap` from the same generated words, and the checkpoints are
//! incremental — some retained checkpoint's keyed state builds on the blobs
//! of an earlier one, and such a delta is smaller than the full snapshot it
//! builds on.

use crate::cli_common;
use cli_common::{run_ok, summary_field};
use floe::checkpoint::CheckpointStore;
use std::collections::HashMap;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

#[test]
fn redb_wordcount_survives_failures_with_incremental_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let (records, vocabulary, seed) = (300_000u64, 100_000usize, 3u64);
    let generator = floe::text::WordGenerator::new(vocabulary, seed);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for i in 0..records {
        *oracle.entry(generator.word(i)).or_insert(0) += 1;
    }
    let output = tmp.path().join("counts.txt");
    let checkpoints = tmp.path().join("checkpoints");
    let state = tmp.path().join("state");
    let (records_s, vocabulary_s, seed_s) = (
        records.to_string(),
        vocabulary.to_string(),
        seed.to_string(),
    );
    let stderr = run_ok(&[
        "run",
        "wordcount",
        "--records",
        &records_s,
        "--vocabulary",
        &vocabulary_s,
        "--seed",
        &seed_s,
        "--parallelism",
        "2",
        "--batch-size",
        "256",
        "--state",
        "redb",
        "--state-dir",
        s(&state),
        "--checkpoint-interval",
        "20",
        "--checkpoint-dir",
        s(&checkpoints),
        "--retain-checkpoints",
        "100000",
        "--inject-failures",
        "3",
        "--output",
        s(&output),
    ]);
    assert!(summary_field(&stderr, "restarts") >= 1, "stderr:\n{stderr}");

    let text = std::fs::read_to_string(&output).unwrap();
    let mut got: HashMap<String, Vec<u64>> = HashMap::new();
    for line in text.lines() {
        let (word, count) = line.rsplit_once(',').expect("word,count");
        got.entry(word.to_string())
            .or_default()
            .push(count.parse().expect("a count"));
    }
    assert_eq!(got.len(), oracle.len(), "words written; stderr:\n{stderr}");
    for (word, want) in &oracle {
        let counts = &got[word];
        assert!(
            counts.iter().all(|c| c == want),
            "{word}: expected {want}, got {counts:?}"
        );
    }

    // Incremental: some checkpoint's keyed chain holds an earlier blob.
    let store = CheckpointStore::open_existing(&checkpoints).unwrap();
    let metas = store.list().unwrap();
    let mut chained = 0;
    let mut smaller = 0;
    for meta in &metas {
        for op in meta
            .operators
            .iter()
            .filter(|o| o.name.starts_with("Keyed Process"))
        {
            for sub in &op.subtasks {
                if sub.keyed.len() > 1 {
                    chained += 1;
                    let own = sub.keyed.last().unwrap();
                    let prefix = format!("chk-{}/", meta.id.0);
                    assert!(own.path.starts_with(&prefix), "own blob {}", own.path);
                    assert!(
                        sub.keyed[..sub.keyed.len() - 1]
                            .iter()
                            .all(|b| !b.path.starts_with(&prefix)),
                        "bases are blobs of earlier checkpoints"
                    );
                    if own.len < sub.keyed[0].len {
                        smaller += 1;
                    }
                }
            }
        }
    }
    assert!(
        chained > 0,
        "no incremental checkpoint among {}; stderr:\n{stderr}",
        metas.len()
    );
    assert!(smaller > 0, "no delta smaller than its full snapshot");
}
