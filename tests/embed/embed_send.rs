//! Building a job is `Send`: the environment and its streams can be held
//! across an `.await` in a task a multi-threaded executor may move, and a
//! job built on one thread starts on another.

use floe::{DataStream, JobHandle, KeyedStream, StreamExecutionEnvironment, WindowedStream};
use std::collections::HashMap;

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}

#[test]
fn builder_types_are_send() {
    assert_send::<StreamExecutionEnvironment>();
    assert_sync::<StreamExecutionEnvironment>();
    assert_send::<DataStream<String>>();
    assert_send::<KeyedStream<(String, u64), String>>();
    assert_send::<WindowedStream<(String, u64), String>>();
    assert_send::<JobHandle>();
    assert_send::<floe::runtime::ArbiterPool>();
    assert_sync::<floe::runtime::ArbiterPool>();
}

const LINES: &[&str] = &[
    "to be or not to be",
    "that is the question",
    "whether tis nobler in the mind to suffer",
    "or to take arms against a sea of troubles",
];

fn oracle() -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for line in LINES {
        for w in line.split_whitespace() {
            *counts.entry(w.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn an_environment_is_held_across_await_in_a_tokio_task() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    // `spawn` takes only `Send` futures: this compiles because the
    // environment and the streams held across each `.await` are `Send`.
    let task = rt.spawn(async {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(2);
        tokio::task::yield_now().await;
        let lines = env.from_collection(LINES.iter().map(|l| l.to_string()).collect());
        tokio::task::yield_now().await;
        let counts = lines
            .flat_map(floe::tokenize)
            .map(|w| (w, 1u64))
            .key_by_field(|t| &t.0)
            .sum(|t| &mut t.1)
            .collect();
        tokio::task::yield_now().await;
        let handle = env.execute_async().expect("the job starts");
        handle.wait().await.expect("the job finishes");
        counts.take()
    });
    let updates = rt.block_on(task).expect("the task ends");
    let mut finals = HashMap::new();
    for (w, c) in updates {
        let e = finals.entry(w).or_insert(0);
        *e = c.max(*e);
    }
    assert_eq!(finals, oracle());
}

#[test]
fn a_job_built_on_one_thread_runs_from_another() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let out = env.generate_sequence(1, 1000).map(|x| x * 2).collect();
    let result = std::thread::spawn(move || env.execute().map(|_| ()))
        .join()
        .expect("the thread ends");
    result.expect("the job finishes");
    let mut got = out.take();
    got.sort_unstable();
    assert_eq!(got, (1..=1000).map(|x| x * 2).collect::<Vec<i64>>());
}
