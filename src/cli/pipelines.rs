//! `floe run pipelines`: P independent forward-only pipelines, so each
//! parallel slice is a pipelined region of its own.
//!
//! Each slice runs generator source → parse → filter → enrich → sink, its
//! operators unchained (one subtask each) and connected by forward edges, so
//! a region is the five subtasks of one slice. Record `i` is derived from
//! `i` and the seed only, so the output (as a multiset of lines) depends on
//! `--records` and `--seed` alone: a run with injected failures can be
//! compared line for line with one without.

use super::PipelinesArgs;
use floe::StreamExecutionEnvironment;
use floe::text::mix64;

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
    format!("{i},{},{}", h % 97, (h >> 16) % 10_000)
}

fn parse(line: &str) -> floe::Result<Event> {
    let mut it = line.split(',').map(|f| f.parse::<u64>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(id)), Some(Ok(key)), Some(Ok(value))) => Ok(Event { id, key, value }),
        _ => Err(floe::Error::User(format!(
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

pub fn run(args: &PipelinesArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism)?;
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    args.checkpoints.apply(&env, args.seed)?;
    let output =
        super::checkpointing::transactional_output(&args.checkpoints, args.output.as_deref())?;
    let seed = args.seed;
    let enriched = env
        .from_generator(args.records, move |i| line(i, seed))
        .name("Pipeline Source")
        .uid("pipeline-source")
        .disable_chaining()
        .try_map(|l: String| parse(&l))
        .name("Parse")
        .uid("parse")
        .disable_chaining()
        .filter(|e: &Event| keep(e.value))
        .name("Filter")
        .uid("filter")
        .disable_chaining()
        .map(|e: Event| enrich(e.id, e.key, e.value))
        .name("Enrich")
        .uid("enrich")
        .disable_chaining();
    let sink = match (output, &args.output) {
        (Some(tx), _) => enriched.add_two_phase_sink(tx),
        (None, Some(path)) => enriched.write_as_text(path),
        (None, None) => enriched.print(),
    };
    let sink = sink.name("Sink").uid("sink").disable_chaining();
    if let Some(rate) = args.checkpoints.sink_rate {
        sink.set_input_rate(rate);
    }
    let handle = env.execute_async()?;
    args.checkpoints.schedule_savepoint(&handle);
    let result = futures::executor::block_on(handle.wait())?;
    args.checkpoints
        .report_savepoint(&handle.checkpoint_stats())?;
    let records = result.operator("Parse").map(|o| o.records_in).unwrap_or(0);
    let secs = result.elapsed.as_secs_f64();
    let rps = if secs > 0.0 {
        records as f64 / secs
    } else {
        0.0
    };
    eprintln!(
        "records={} elapsed_ms={} throughput_rps={:.0} parallelism={}{}",
        records,
        result.elapsed.as_millis(),
        rps,
        args.parallelism,
        super::checkpointing::summary(&args.checkpoints, &handle)
    );
    Ok(())
}
