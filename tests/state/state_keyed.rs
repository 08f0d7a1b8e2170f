//! Keyed state inside jobs: a word count kept in `ValueState<u64>` against a
//! plain `HashMap` oracle at parallelism 1 and 3, state read from timers,
//! keyed state refused outside a keyed context, and key-group routing: the
//! subtask the partitioner picks for a key is the one whose backend owns it.

use crate::cli_common;
use cli_common::SplitMix;
use floe::StreamExecutionEnvironment;
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::{OnTimerContext, ProcessContext};
use floe::state::{
    HeapStateBackend, KeyScope, ListStateDescriptor, StateError, ValueStateDescriptor,
};
use floe_actors::keygroup::{key_group, subtask_for_key_group};
use proptest::prelude::*;
use std::collections::HashMap;

fn words(seed: u64, n: usize, vocabulary: u64) -> Vec<String> {
    let mut rng = SplitMix(seed);
    (0..n)
        .map(|_| format!("w{}", rng.next() % vocabulary))
        .collect()
}

/// Counts words in `ValueState<u64>`, emitting `(word, count so far)`.
#[derive(Clone)]
struct StatefulCount {
    count: ValueStateDescriptor<u64>,
}

impl KeyedProcessFunction<String, String, (String, u64)> for StatefulCount {
    fn process_element(
        &mut self,
        word: String,
        ctx: &mut ProcessContext<'_, '_, (String, u64), String>,
    ) -> floe::Result<()> {
        let mut state = ctx.value_state(&self.count)?;
        let n = state.value()?.unwrap_or(0) + 1;
        state.update(n)?;
        ctx.collect((word, n));
        Ok(())
    }
}

fn stateful_word_count(
    data: &[String],
    parallelism: usize,
    max_parallelism: u32,
) -> HashMap<String, u64> {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    env.set_max_parallelism(max_parallelism);
    let out = env
        .from_collection(data.to_vec())
        .key_by(|w: &String| w.clone())
        .process(StatefulCount {
            count: ValueStateDescriptor::new("count"),
        })
        .collect();
    env.execute().unwrap();
    let mut finals = HashMap::new();
    for (w, n) in out.take() {
        let e = finals.entry(w).or_insert(0);
        *e = n.max(*e);
    }
    finals
}

#[test]
fn word_count_in_value_state_matches_oracle() {
    let data = words(11, 20_000, 700);
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for w in &data {
        *oracle.entry(w.clone()).or_default() += 1;
    }
    for (p, maxp) in [(1, 128), (3, 128), (3, 7)] {
        assert_eq!(
            stateful_word_count(&data, p, maxp),
            oracle,
            "parallelism {p}, max {maxp}"
        );
    }
}

/// Collects each key's values in list state; an event-time timer emits them.
#[derive(Clone)]
struct EmitAtEnd {
    seen: ListStateDescriptor<i64>,
}

impl KeyedProcessFunction<i64, i64, (i64, Vec<i64>)> for EmitAtEnd {
    fn process_element(
        &mut self,
        v: i64,
        ctx: &mut ProcessContext<'_, '_, (i64, Vec<i64>), i64>,
    ) -> floe::Result<()> {
        ctx.list_state(&self.seen)?.add(v)?;
        ctx.register_event_time_timer(1_000);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _ts: i64,
        ctx: &mut OnTimerContext<'_, '_, (i64, Vec<i64>), i64>,
    ) -> floe::Result<()> {
        let key = *ctx.current_key();
        let mut list = ctx.list_state(&self.seen)?;
        let all = list.get()?;
        list.clear()?;
        ctx.collect((key, all));
        Ok(())
    }
}

#[test]
fn timers_read_the_state_of_their_key() {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let data: Vec<i64> = (0..300).collect();
    let out = env
        .from_collection(data.clone())
        .assign_timestamps_and_watermarks(
            floe::time::WatermarkStrategy::monotonous_timestamps()
                .with_timestamp_assigner(|_: &i64, _| 0)
                .per_record(),
        )
        .key_by(|v: &i64| v % 7)
        .process(EmitAtEnd {
            seen: ListStateDescriptor::new("seen"),
        })
        .collect();
    env.execute().unwrap();
    let mut got: Vec<(i64, Vec<i64>)> = out.take();
    for (_, vs) in &mut got {
        vs.sort();
    }
    got.sort();
    let want: Vec<(i64, Vec<i64>)> = (0..7)
        .map(|k| (k, data.iter().copied().filter(|v| v % 7 == k).collect()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn keyed_state_outside_a_keyed_stream_is_an_error() {
    let env = StreamExecutionEnvironment::new();
    let count = ValueStateDescriptor::<u64>::new("count");
    let _ = env
        .from_collection(vec![1u32, 2, 3])
        .process(move |x: u32, ctx: &mut ProcessContext<'_, '_, u32>| {
            let err = ctx.value_state(&count).err();
            match err {
                Some(floe::Error::State(StateError::NotKeyed { .. })) => {}
                other => panic!("expected NotKeyed, got {other:?}"),
            }
            ctx.value_state(&count)?.update(1)?;
            ctx.collect(x);
            Ok(())
        })
        .collect();
    let msg = env.execute().unwrap_err().to_string();
    assert!(
        msg.contains("keyed state 'count' is only available on keyed streams"),
        "{msg}"
    );
}

proptest! {
    /// The backend of the subtask that the key-group partitioner picks for a
    /// key accepts the key's state; the other subtasks' backends refuse it.
    #[test]
    fn partitioner_and_backends_agree(key in any::<u64>(), maxp in 1u32..300, p_seed in any::<u32>()) {
        let p = 1 + p_seed % maxp.min(16);
        let owner = subtask_for_key_group(key_group(&key, maxp), maxp, p);
        let desc = ValueStateDescriptor::<u64>::new("v");
        for s in 0..p {
            let mut b = HeapStateBackend::<u64>::for_subtask("op", maxp, s, p);
            let r = KeyScope::new(&mut b, &key).value_state(&desc).and_then(|mut v| v.update(key));
            if s == owner {
                prop_assert!(r.is_ok(), "{:?}", r.err());
            } else {
                let refused = matches!(r, Err(StateError::KeyGroupOutOfRange { .. }));
                prop_assert!(refused);
            }
        }
    }
}
