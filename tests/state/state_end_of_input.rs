//! Visiting every key's state: `floe::state::for_each_entry` on either
//! backend yields exactly the keys a `HashMap` model holds after random puts
//! and clears (the redb backend with a small cache, so the entries come
//! from its cache and its database rows), and a keyed process function that
//! emits from its state at end of input, at parallelism 1 and 2 on both
//! backends, emits exactly a `HashMap` word count.

use floe::StreamExecutionEnvironment;
use floe::operators::keyed::KeyedProcessFunction;
use floe::operators::process::ProcessContext;
use floe::state::{
    HeapStateBackend, KeyScope, RedbStateBackend, StateBackend, StateBackendKind,
    ValueStateDescriptor, for_each_entry,
};
use proptest::prelude::*;
use std::collections::HashMap;

/// Applies `ops` (key, `Some(value)` to put, `None` to clear) to `backend`
/// and to a model; checks `for_each_entry` against the model after each
/// half of the ops.
fn check_visit(backend: &mut dyn StateBackend<String>, ops: &[(u16, Option<u64>)]) {
    let desc = ValueStateDescriptor::<u64>::new("v");
    let mut model: HashMap<String, u64> = HashMap::new();
    let half = ops.len() / 2;
    for (i, &(k, v)) in ops.iter().enumerate() {
        let key = format!("key-{k}");
        let mut state = KeyScope::new(backend, &key)
            .value_state(&desc)
            .expect("state");
        match v {
            Some(v) => {
                state.update(v).expect("update");
                model.insert(key, v);
            }
            None => {
                state.clear().expect("clear");
                model.remove(&key);
            }
        }
        if i + 1 == half || i + 1 == ops.len() {
            let mut seen: HashMap<String, u64> = HashMap::new();
            for_each_entry(backend, &desc, |k, v| {
                let prev = seen.insert(k.into_owned(), *v);
                assert!(prev.is_none(), "a key visited twice");
                Ok(())
            })
            .expect("visit");
            assert_eq!(seen, model);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn for_each_entry_matches_a_map(
        ops in prop::collection::vec((0u16..300, prop::option::weighted(0.8, 0u64..1000)), 1..600),
    ) {
        let mut heap = HeapStateBackend::<String>::new("visit", 128, 0..128);
        check_visit(&mut heap, &ops);
        // 16 entries of cache: most keys live in the database rows.
        let mut redb = RedbStateBackend::<String>::temp("visit", 128, 0..128)
            .expect("redb")
            .with_cache_capacity(16);
        check_visit(&mut redb, &ops);
    }
}

/// Counts words in a `ValueState`, emitting nothing per record and each
/// word's count from the state at end of input.
#[derive(Clone)]
struct CountAtEnd(ValueStateDescriptor<u64>);

impl KeyedProcessFunction<String, String, (String, u64)> for CountAtEnd {
    fn process_element(
        &mut self,
        _word: String,
        ctx: &mut ProcessContext<'_, '_, (String, u64), String>,
    ) -> floe::Result<()> {
        let mut state = ctx.value_state(&self.0)?;
        let n = state.value()?.unwrap_or(0) + 1;
        state.update(n)?;
        Ok(())
    }

    fn on_end_of_input(
        &mut self,
        ctx: &mut ProcessContext<'_, '_, (String, u64), String>,
    ) -> floe::Result<()> {
        ctx.for_each_entry(&self.0, |word, &n, out| {
            out.collect((word.into_owned(), n));
        })?;
        Ok(())
    }
}

#[test]
fn keyed_process_emits_its_state_at_end_of_input() {
    // 20,000 words over 3,000 distinct ones, skewed.
    let words: Vec<String> = (0u64..20_000)
        .map(|i| format!("w{}", (i * i + 7 * i) % 3_000 % (1 + i % 2_000)))
        .collect();
    let mut oracle: HashMap<String, u64> = HashMap::new();
    for w in &words {
        *oracle.entry(w.clone()).or_default() += 1;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for p in [1usize, 2] {
        for kind in [
            StateBackendKind::Heap,
            StateBackendKind::Redb {
                dir: Some(dir.path().to_path_buf()),
            },
        ] {
            let env = StreamExecutionEnvironment::new();
            env.set_parallelism(p);
            let out = env
                .from_collection(words.clone())
                .key_by_field(|w: &String| w)
                .process_with_backend(CountAtEnd(ValueStateDescriptor::new("count")), kind.clone())
                .collect();
            env.execute().expect("job");
            let got = out.take();
            let mut counts: HashMap<String, u64> = HashMap::new();
            for (w, n) in got {
                let prev = counts.insert(w, n);
                assert!(prev.is_none(), "a word emitted twice ({kind:?}, p={p})");
            }
            assert_eq!(counts, oracle, "{kind:?}, parallelism {p}");
        }
    }
}
