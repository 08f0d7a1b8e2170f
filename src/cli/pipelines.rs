//! `floe run pipelines`: P independent forward-only pipelines, so each
//! parallel slice is a pipelined region of its own.
//!
//! Each slice runs generator source → parse → filter → enrich → sink, its
//! operators unchained (one subtask each) and connected by forward edges, so
//! a region is the five subtasks of one slice. Record `i` is derived from
//! `i` and the seed only, so the output (as a multiset of lines) depends on
//! `--records` and `--seed` alone: a run with injected failures can be
//! compared line for line with one without.
//!
//! With `--state heap|redb` the enrich step is a keyed process function over
//! the slice's own records (a stream reinterpreted as keyed, no shuffle):
//! it counts the events of each event key seen so far in its pipeline in a
//! `ValueState<u64>` of that backend and appends the count to the line. The
//! key is the event key with a salt chosen so that its key group belongs to
//! the pipeline's subtask, so each slice stays a region of its own and its
//! state is restored with it. The counts depend on how the records are
//! split over the pipelines, so the output then depends on `--parallelism`
//! too (and a restore must keep the parallelism).

use super::PipelinesArgs;
use floe::StreamExecutionEnvironment;
use floe::operators::process::ProcessContext;
use floe::state::ValueStateDescriptor;
use floe::text::mix64;
use floe_actors::keygroup::{key_group, subtask_for_key_group};
use std::sync::Arc;

/// One parsed event.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Event {
    id: u64,
    key: u64,
    value: u64,
}

/// The line of record `i`: `id,key,value`.
pub fn line(i: u64, seed: u64) -> String {
    let h = mix64(i ^ mix64(seed));
    format!("{i},{},{}", h % KEYS, (h >> 16) % 10_000)
}

fn parse(line: &str) -> floe::Result<Event> {
    let mut it = line.split(',').map(|f| f.parse::<u64>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(id)), Some(Ok(key)), Some(Ok(value))) => Ok(Event { id, key, value }),
        _ => Err(floe::Error::Internal(format!(
            "malformed generated line '{line}'"
        ))),
    }
}

/// Whether an event passes the filter (drops about a third).
pub fn keep(value: u64) -> bool {
    !value.is_multiple_of(3)
}

/// The enriched output line of an event.
pub fn enrich(id: u64, key: u64, value: u64) -> String {
    format!("{id},k{key},{value},{}", (value * 7 + key) % 13)
}

/// Number of distinct event keys (`key` is `0..KEYS`).
const KEYS: u64 = 97;

/// The pipeline (generator subtask) that generates record `id` of
/// `records` over `parallelism` pipelines: the `j` with
/// `records * j / parallelism <= id < records * (j + 1) / parallelism`.
pub fn pipeline_of(id: u64, records: u64, parallelism: u64) -> u64 {
    let (n, p) = (records as u128, parallelism as u128);
    let mut j = (id as u128 * p / n.max(1)).min(p - 1);
    while j > 0 && n * j / p > id as u128 {
        j -= 1;
    }
    while j + 1 < p && n * (j + 1) / p <= id as u128 {
        j += 1;
    }
    j as u64
}

/// For each pipeline and event key, the smallest salt such that the state
/// key `(key, salt)` falls in a key group the pipeline's subtask owns.
fn salts(parallelism: u32, max_parallelism: u32) -> Vec<Vec<u64>> {
    (0..parallelism)
        .map(|j| {
            (0..KEYS)
                .map(|k| {
                    (0u64..)
                        .find(|&salt| {
                            let g = key_group(&(k, salt), max_parallelism);
                            subtask_for_key_group(g, max_parallelism, parallelism) == j
                        })
                        .expect("some salt lands in every subtask's key groups")
                })
                .collect()
        })
        .collect()
}

pub fn run(args: &PipelinesArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism, args.arbiters)?;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    args.checkpoints.apply(&env, args.seed)?;
    let output = super::output::Output::new("--output", args.output.as_deref(), &args.checkpoints)?;
    let seed = args.seed;
    let enriched = env
        .from_generator(args.records, move |i| line(i, seed))
        .name("Pipeline Source")
        .uid("pipeline-source")
        .disable_chaining()
        .with_channel_state()
        .try_map(|l: String| parse(&l))
        .name("Parse")
        .uid("parse")
        .disable_chaining()
        .with_channel_state()
        .filter(|e: &Event| keep(e.value))
        .name("Filter")
        .uid("filter")
        .disable_chaining()
        .with_channel_state();
    let enriched = match args.state.backend()? {
        None => enriched.map(|e: Event| enrich(e.id, e.key, e.value)),
        Some(kind) => {
            let (records, p) = (args.records, args.parallelism as u64);
            let salts = Arc::new(salts(args.parallelism as u32, env.config().max_parallelism));
            let seen = ValueStateDescriptor::<u64>::new("seen");
            enriched
                .reinterpret_as_keyed_stream(move |e: &Event| {
                    let j = pipeline_of(e.id, records, p) as usize;
                    (e.key, salts[j][e.key as usize])
                })
                .process_with_backend(
                    move |e: Event, ctx: &mut ProcessContext<'_, '_, String, (u64, u64)>| {
                        let mut state = ctx.value_state(&seen)?;
                        let n = state.value()?.unwrap_or(0) + 1;
                        state.update(n)?;
                        ctx.collect(format!("{},{n}", enrich(e.id, e.key, e.value)));
                        Ok(())
                    },
                    kind,
                )
        }
    }
    .name("Enrich")
    .uid("enrich")
    .disable_chaining()
    .with_channel_state();
    let sink = output
        .sink(&enriched)?
        .name("Sink")
        .uid("sink")
        .disable_chaining();
    if let Some(rate) = args.checkpoints.sink_rate {
        sink.set_input_rate(rate);
    }
    let prometheus = args.observe.install(&env, "pipelines")?;
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let _signals = super::signal::stop_on_signal(&handle, args.checkpoints.stop_savepoint_dir())?;
    let endpoint = args
        .observe
        .serve(prometheus, &handle, args.checkpoints.savepoint_target())?;
    let (result, endpoint) = super::progress::wait_for_job(
        &handle,
        "Pipeline Source",
        Some(args.records),
        args.observe.status_interval(),
        endpoint,
    )?;
    args.checkpoints
        .report_savepoint(&handle.checkpoint_stats())?;
    let records = super::source_records(&result, "Pipeline Source");
    eprintln!(
        "{}{}",
        super::summary_head(records, result.elapsed, args.parallelism),
        super::checkpointing::summary(&args.checkpoints, &handle)
    );
    if let Some(e) = endpoint {
        e.linger();
    }
    Ok(())
}
