//! The word count of group mode: stage one splits the input's lines into
//! words and sends each to the repartition partition of its key group;
//! stage two counts the words of the repartition partitions it holds and
//! writes `word,count` updates.

use super::super::WordcountArgs;
use super::member::{CliJob, Common, Group, INPUT_SOURCE, Totals};
use floe::connectors::kafka::group::{Assignment, GroupJob};
use floe::connectors::kafka::{KafkaSource, StartingOffsets};
use floe::connectors::kafka_sink::KafkaSink;
use floe::{JobHandle, StreamExecutionEnvironment};
use smol_str::SmolStr;
use std::sync::Arc;

/// The counting operator, whose input the summary's `words=` counts.
const COUNTER: &str = "Keyed Sum";

pub fn run_wordcount(args: &WordcountArgs, name: &str) -> floe::Result<()> {
    if args.state.backend()?.is_some() || args.bounded || args.count_rate.is_some() {
        return Err(floe::Error::Config("--group runs the built-in keyed sum over an unbounded input: drop --state, --bounded and --count-rate".into()));
    }
    let common = Common {
        job: "wordcount",
        input: args.input.as_deref(),
        output: args.output.as_deref(),
        checkpoints: &args.checkpoints,
        observe: &args.observe,
        group: &args.group,
        parallelism: args.parallelism,
        arbiters: args.arbiters,
        batch_size: Some(args.batch_size),
        seed: args.seed,
    };
    let sink_rate = args.checkpoints.sink_rate;
    super::member::run(&common, name, |group| Wordcount { group, sink_rate })
}

/// The word count's stages.
struct Wordcount {
    group: Group,
    /// `--sink-rate`: throttles the PostgreSQL sink.
    sink_rate: Option<f64>,
}

impl GroupJob for Wordcount {
    fn build(&self, env: &StreamExecutionEnvironment, held: &Assignment<'_>) -> floe::Result<()> {
        let group = &self.group;
        let commit = held.commit;
        let (inputs, counted) = (held.of(&group.input), held.of(&group.repartition));
        if !inputs.is_empty() {
            let source = KafkaSource::lines(&group.brokers, &[group.input.as_str()])
                .group_id(&group.name)
                .starting_offsets(StartingOffsets::Committed)
                .partitions(&inputs)
                .group_commit(commit.clone());
            let key_groups = group.key_groups as u32;
            let sink = KafkaSink::<SmolStr>::new(
                &group.brokers,
                &group.repartition,
                Arc::new(|w: &SmolStr, key: &mut Vec<u8>, value: &mut Vec<u8>| {
                    key.extend_from_slice(w.as_bytes());
                    value.extend_from_slice(w.as_bytes());
                }),
            )
            .partitioner(Arc::new(move |w: &SmolStr| {
                floe_actors::keygroup::key_group(w, key_groups) as i32
            }))
            .transactional_id_prefix(&held.transactional_id("repartition"))
            .property("transaction.timeout.ms", &group.transaction_timeout)
            .group_offsets(commit.clone(), &[group.input.as_str()]);
            env.add_source(INPUT_SOURCE, move |ctx| source.reader(ctx))
                .uid("kafka-source")
                .flat_map(|line: String| floe::tokenize(line).map(SmolStr::from))
                .name("Tokenize")
                .uid("tokenize")
                .sink_exactly_once("Repartition Sink", sink.exactly_once())
                .uid("repartition-sink")
                .set_parallelism(1);
        }
        if !counted.is_empty() {
            let source = KafkaSource::new(
                &group.brokers,
                &[group.repartition.as_str()],
                Arc::new(|bytes: &[u8]| {
                    std::str::from_utf8(bytes)
                        .map(|w| (SmolStr::from(w), 1u64))
                        .map_err(|e| format!("value is not valid UTF-8: {e}"))
                }),
            )
            .group_id(&group.name)
            .starting_offsets(StartingOffsets::Committed)
            .partitions(&counted)
            .group_commit(commit.clone());
            let (source, claim) = group.stage_two_source(env, held, &counted, source)?;
            let counts = env
                .add_source("Repartition Source", move |ctx| source.reader(ctx))
                .uid("repartition-source")
                .key_by_field(|t: &(SmolStr, u64)| &t.0)
                .sum(|t: &mut (SmolStr, u64)| &mut t.1)
                .uid("count");
            if let Some(claim) = claim {
                let rows = counts
                    .map(|(word, count): (SmolStr, u64)| (String::from(word), count as i64))
                    .name("Rows")
                    .uid("rows");
                return claim.sink(&rows, self.sink_rate);
            }
            let sink = KafkaSink::<String>::lines(&group.brokers, &group.output)
                .transactional_id_prefix(&held.transactional_id("output"))
                .property("transaction.timeout.ms", &group.transaction_timeout)
                .group_offsets(commit.clone(), &[group.repartition.as_str()]);
            counts
                .map(|(word, count): (SmolStr, u64)| format!("{word},{count}"))
                .name("Format")
                .uid("format")
                .sink_exactly_once("Kafka Sink", sink.exactly_once())
                .uid("kafka-sink")
                .set_parallelism(1);
        }
        Ok(())
    }
}

impl CliJob for Wordcount {
    fn count(&self, handle: &JobHandle, totals: &mut Totals) {
        for o in handle.operator_metrics() {
            if o.name == INPUT_SOURCE {
                totals.records += o.records_out;
            } else if o.name == COUNTER {
                totals.counted += o.records_in;
            }
        }
    }

    fn summary(&self, totals: &Totals) -> String {
        format!("words={}", totals.counted)
    }
}
