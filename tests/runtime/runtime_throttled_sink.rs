//! A throttled sink (`DataStream::set_input_rate`, the CLI's `--sink-rate`)
//! counts the records the sink receives. It used to throttle the whole
//! chain it was fused into: behind a keyed sum that emits each key's total
//! at the end of input, a "sink rate" throttled every word the sum counted
//! (`floe run wordcount --sink-rate 10000` on 116 MB took 11 minutes). The
//! throttled operator now heads a chain of its own, so its chain's input is
//! exactly what it receives: checked by counts, never by time, in the
//! library and in `floe run wordcount --sink-rate` (whose sink receives
//! the `word,count` lines).

use crate::cli_common;

use floe::StreamExecutionEnvironment;
use floe::operators::sink::SinkFunction;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Keeps what it receives.
#[derive(Clone, Default)]
struct Keep(Arc<Mutex<Vec<(String, u64)>>>);

impl SinkFunction<(String, u64)> for Keep {
    async fn write(&mut self, batch: floe::Batch<(String, u64)>) -> floe::Result<()> {
        for r in batch {
            let value = r.value;
            self.0.lock().expect("the test's sink").push(value);
        }
        Ok(())
    }
}

#[test]
fn a_throttled_sink_behind_a_keyed_sum_counts_the_sums_it_receives() {
    let words: Vec<(String, u64)> = (0..20_000u64)
        .map(|i| (format!("w{}", (i * 7919) % 50), 1))
        .collect();
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for (w, n) in &words {
        *oracle.entry(w.clone()).or_insert(0) += n;
    }
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let kept = Keep::default();
    env.from_collection(words.clone())
        .key_by(|t: &(String, u64)| t.0.clone())
        .sum_at_end_of_input(|t: &mut (String, u64)| &mut t.1)
        .sink("Throttled Sink", kept.clone())
        .set_input_rate(1_000_000.0);
    let handle = env.execute_async().expect("the job starts");
    let result = futures::executor::block_on(handle.wait()).expect("the job finishes");
    let got: HashMap<String, u64> = kept.0.lock().expect("the test's sink").drain(..).collect();
    assert_eq!(got, oracle);
    assert_eq!(
        result.operator("Throttled Sink").map(|o| o.records_in),
        Some(oracle.len() as u64)
    );
    // The throttle paces its chain's input: the sink's chain receives the
    // sums, one per word, not the 20,000 words the sum counted.
    let status = handle.status_snapshot();
    let chain: Vec<_> = status
        .subtasks
        .iter()
        .filter(|s| s.name.contains("Throttled Sink"))
        .collect();
    assert!(!chain.is_empty(), "{:?}", status.subtasks);
    assert!(
        chain.iter().all(|s| !s.name.contains("Keyed Sum")),
        "the throttled sink heads its own chain: {:?}",
        chain.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let chain_in: u64 = chain.iter().map(|s| s.records_in).sum();
    assert_eq!(chain_in, oracle.len() as u64);
}

/// `floe run wordcount --sink-rate`: the sink's chain receives one
/// `word,count` record per word of the oracle, and writes the oracle's
/// counts (read from `/status` once the job has ended).
#[test]
fn wordcount_sink_rate_counts_the_lines_the_sink_receives() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.txt");
    let mut rng = cli_common::SplitMix(0x5eed_0008);
    let text: String = (0..5_000)
        .map(|_| format!("w{} w{}\n", rng.below(400), rng.below(40)))
        .collect();
    std::fs::write(&input, &text).unwrap();
    let oracle = cli_common::count_words(&text);
    let out = dir.path().join("counts.txt");
    let served = cli_common::serve(&[
        "run",
        "wordcount",
        "--input",
        input.to_str().unwrap(),
        "--sink-rate",
        "1000000",
        "--output",
        out.to_str().unwrap(),
    ]);
    let got = cli_common::parse_counts(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(got, oracle);
    let status = served.status();
    let sink: Vec<&serde_json::Value> = status["subtasks"]
        .as_array()
        .expect("subtasks")
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.contains("Final Counts"))
        })
        .collect();
    assert!(!sink.is_empty(), "{status}");
    assert!(
        sink.iter()
            .all(|s| !s["name"].as_str().unwrap_or("").contains("Keyed Sum")),
        "{status}"
    );
    let received: u64 = sink
        .iter()
        .map(|s| s["records_in"].as_u64().expect("records_in"))
        .sum();
    assert_eq!(received, oracle.len() as u64);
}
