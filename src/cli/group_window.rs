//! The window job of group mode: stage one parses the input's
//! `key,timestamp_ms,value` lines and sends each event to the repartition
//! partition of its key's key group, with the input partitions'
//! watermarks; stage two windows the events of the repartition partitions
//! it holds and writes `key,window_start,window_end,value` firings.
//!
//! Event time crosses the processes as in one: stage one's source keeps a
//! watermark per input partition (bounded out-of-orderness, idleness) and
//! writes it, every `--watermark-interval`, into every repartition
//! partition as a record after the events it covers; stage two's source
//! takes, per repartition partition, the minimum over the input's
//! partitions that are not idle, and the minimum over its partitions
//! (`floe::connectors::kafka::event_time`). The windows' state, timers
//! included, moves with its repartition partition.
//!
//! With `--output postgres://…` stage two claims its repartition
//! partitions and appends its firings to the table as the word count
//! upserts its counts (`group_postgres.rs`).

use super::super::WindowArgs;
use super::super::window::{Agg, Event, EventDecoder, Firing, NoLine, OnBadRecord, Watermarks};
use super::member::{CliJob, Common, Group, INPUT_SOURCE, Totals};
use floe::connectors::kafka::group::{Assignment, GroupJob};
use floe::connectors::kafka::{KafkaSource, StartingOffsets};
use floe::connectors::kafka_sink::KafkaSink;
use floe::window::WindowAssigner;
use floe::{JobHandle, OutputTag, StreamExecutionEnvironment};
use smol_str::SmolStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The window operator, whose output the summary's `windows_fired=` counts.
const WINDOW: &str = "Window";
/// The late records' operator, counted by `late=`.
const LATE: &str = "Late Records";

pub fn run_window(args: &WindowArgs, name: &str) -> floe::Result<()> {
    let refuse = |m: &str| Err(floe::Error::Config(format!("--group {m}")));
    if args.late_output.is_some() {
        return refuse("writes no --late-output: late records are counted (late=)");
    }
    if args.bounded || args.state.backend()?.is_some() {
        return refuse(
            "windows an unbounded input with the built-in state: drop --bounded and --state",
        );
    }
    if args.watermarks != Watermarks::Periodic || args.explain_watermarks {
        return refuse(
            "takes periodic watermarks per input partition: drop --watermarks per-record and --explain-watermarks",
        );
    }
    if args.out_of_orderness < 0 || args.allowed_lateness < 0 {
        return refuse("needs --out-of-orderness and --allowed-lateness that are not negative");
    }
    let assigner = super::super::window::parse_window::<Event<NoLine>>(
        &args.window,
        args.max_windows_per_record,
    )?;
    let job = |group| Windows {
        group,
        decoder: EventDecoder::new(
            Arc::from(args.input.display().to_string()),
            false,
            assigner.clone(),
        ),
        assigner,
        agg: args.agg,
        out_of_orderness: args.out_of_orderness,
        allowed_lateness: args.allowed_lateness,
        max_windows_per_record: args.max_windows_per_record,
        idleness: args.idleness.map(Duration::from_millis),
        interval: Duration::from_millis(args.watermark_interval.max(1)),
        skip: args.on_bad_record == OnBadRecord::Skip,
        sink_rate: args.checkpoints.sink_rate,
        bad: Arc::new(AtomicU64::new(0)),
        watermark_records: Arc::new(AtomicU64::new(0)),
    };
    let common = Common {
        job: "window",
        input: Some(&args.input),
        output: args.output.as_deref(),
        checkpoints: &args.checkpoints,
        observe: &args.observe,
        group: &args.group,
        parallelism: args.parallelism,
        arbiters: args.arbiters,
        batch_size: None,
        seed: args.seed,
    };
    super::member::run(&common, name, job)
}

/// What stage one's source emits and the repartition topic carries.
#[derive(Clone, Debug)]
enum Item {
    /// An event, sent to its key's key group.
    Event(Event<NoLine>),
    /// A line that is not an event, skipped (`--on-bad-record skip`).
    Bad,
    /// An input partition's watermark (`None`: idle), for the repartition
    /// partition `to` (stage one's source leaves `to` unset: it is copied
    /// to every partition).
    Watermark {
        to: i32,
        from: i32,
        watermark: Option<i64>,
    },
}

/// The records of one stage-one item: an event as itself, a watermark once
/// per repartition partition, a bad line as nothing.
enum Routed {
    One(Option<Item>),
    Copies {
        to: std::ops::Range<i32>,
        from: i32,
        watermark: Option<i64>,
    },
}

impl Iterator for Routed {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        match self {
            Routed::One(item) => item.take(),
            Routed::Copies {
                to,
                from,
                watermark,
            } => to.next().map(|to| Item::Watermark {
                to,
                from: *from,
                watermark: *watermark,
            }),
        }
    }
}

/// An event as `E`, its timestamp and value (big-endian), its key; a
/// watermark as `W`, the input partition, and `1` and the watermark or `0`
/// for idle.
fn encode(item: &Item, key: &mut Vec<u8>, value: &mut Vec<u8>) {
    match item {
        Item::Event(e) => {
            key.extend_from_slice(e.key.as_bytes());
            value.push(b'E');
            value.extend_from_slice(&e.ts.to_be_bytes());
            value.extend_from_slice(&e.value.to_be_bytes());
            value.extend_from_slice(e.key.as_bytes());
        }
        Item::Watermark {
            from, watermark, ..
        } => {
            value.push(b'W');
            value.extend_from_slice(&from.to_be_bytes());
            match watermark {
                Some(w) => {
                    value.push(1);
                    value.extend_from_slice(&w.to_be_bytes());
                }
                None => value.push(0),
            }
        }
        // Never routed to the sink.
        Item::Bad => {}
    }
}

/// Reads what [`encode`] wrote.
fn decode(bytes: &[u8]) -> Result<Item, String> {
    let i64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
    };
    let item = match bytes.first() {
        Some(b'E') => match (i64_at(1), i64_at(9), bytes.get(17..)) {
            (Some(ts), Some(value), Some(key)) => std::str::from_utf8(key).ok().map(|key| {
                Item::Event(Event {
                    key: SmolStr::from(key),
                    ts,
                    value,
                    line: NoLine,
                })
            }),
            _ => None,
        },
        Some(b'W') => {
            let from = bytes
                .get(1..5)
                .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")));
            match (from, bytes.get(5), bytes.len()) {
                (Some(from), Some(0), 6) => Some(Item::Watermark {
                    to: 0,
                    from,
                    watermark: None,
                }),
                (Some(from), Some(1), 14) => i64_at(6).map(|w| Item::Watermark {
                    to: 0,
                    from,
                    watermark: Some(w),
                }),
                _ => None,
            }
        }
        _ => None,
    };
    item.ok_or_else(|| "not a record of floe's repartition topic".to_string())
}

/// The window job's stages and its counters across runs.
struct Windows {
    group: Group,
    decoder: EventDecoder<NoLine>,
    assigner: WindowAssigner<Event<NoLine>>,
    agg: Agg,
    out_of_orderness: i64,
    allowed_lateness: i64,
    max_windows_per_record: u64,
    idleness: Option<Duration>,
    interval: Duration,
    skip: bool,
    /// `--sink-rate`: throttles the PostgreSQL sink.
    sink_rate: Option<f64>,
    /// Lines skipped as bad.
    bad: Arc<AtomicU64>,
    /// Watermark records stage one's sources emitted (not input records).
    watermark_records: Arc<AtomicU64>,
}

impl Windows {
    /// Stage one: the input's lines as events, with their partitions'
    /// watermarks, into the repartition topic.
    fn stage_one(
        &self,
        env: &StreamExecutionEnvironment,
        held: &Assignment<'_>,
        inputs: &[(String, i32)],
    ) {
        let (group, commit) = (&self.group, held.commit);
        let (decoder, skip, bad) = (self.decoder.clone(), self.skip, self.bad.clone());
        let made = self.watermark_records.clone();
        let source = KafkaSource::new(
            &group.brokers,
            &[group.input.as_str()],
            Arc::new(move |bytes: &[u8]| match decoder.parse(bytes) {
                Ok(e) => Ok(Item::Event(e)),
                Err(_) if skip => {
                    bad.fetch_add(1, Ordering::Relaxed);
                    Ok(Item::Bad)
                }
                Err(m) => Err(m),
            }),
        )
        .group_id(&group.name)
        .starting_offsets(StartingOffsets::Committed)
        .partitions(inputs)
        .group_commit(commit.clone())
        .timestamps(Arc::new(|item: &Item| match item {
            Item::Event(e) => Some(e.ts),
            _ => None,
        }))
        .per_partition_watermarks(self.out_of_orderness, self.idleness)
        .watermark_records(
            self.interval,
            Arc::new(move |from, watermark| {
                made.fetch_add(1, Ordering::Relaxed);
                Item::Watermark {
                    to: 0,
                    from,
                    watermark,
                }
            }),
        );
        let key_groups = group.key_groups as u32;
        let sink = KafkaSink::<Item>::new(&group.brokers, &group.repartition, Arc::new(encode))
            .partitioner(Arc::new(move |item: &Item| match item {
                Item::Event(e) => floe_actors::keygroup::key_group(&e.key, key_groups) as i32,
                Item::Watermark { to, .. } => *to,
                Item::Bad => 0,
            }))
            .transactional_id_prefix(&held.transactional_id("repartition"))
            .property("transaction.timeout.ms", &group.transaction_timeout)
            .group_offsets(commit.clone(), &[group.input.as_str()]);
        let partitions = group.key_groups;
        env.add_source(INPUT_SOURCE, move |ctx| source.reader(ctx))
            .uid("kafka-source")
            .flat_map(move |item: Item| match item {
                Item::Watermark {
                    from, watermark, ..
                } => Routed::Copies {
                    to: 0..partitions,
                    from,
                    watermark,
                },
                Item::Bad => Routed::One(None),
                event => Routed::One(Some(event)),
            })
            .name("Route")
            .uid("route")
            .sink_exactly_once("Repartition Sink", sink.exactly_once())
            .uid("repartition-sink")
            .set_parallelism(1);
    }

    /// Stage two: the repartition partitions' events windowed, the firings
    /// into the output (a Kafka topic, or a PostgreSQL table after a claim
    /// of the partitions).
    fn stage_two(
        &self,
        env: &StreamExecutionEnvironment,
        held: &Assignment<'_>,
        counted: &[(String, i32)],
    ) -> floe::Result<()> {
        let (group, commit) = (&self.group, held.commit);
        let source = KafkaSource::new(
            &group.brokers,
            &[group.repartition.as_str()],
            Arc::new(decode),
        )
        .group_id(&group.name)
        .starting_offsets(StartingOffsets::Committed)
        .partitions(counted)
        .group_commit(commit.clone())
        .timestamps(Arc::new(|item: &Item| match item {
            Item::Event(e) => Some(e.ts),
            _ => None,
        }))
        .upstream_watermarks(
            group.input_partitions as usize,
            Arc::new(|item: &Item| match item {
                Item::Watermark {
                    from, watermark, ..
                } => Some((*from, *watermark)),
                _ => None,
            }),
        );
        let (source, claim) = group.stage_two_source(env, held, counted, source)?;
        let late = OutputTag::<Event<NoLine>>::new("late");
        // A source subtask without a partition would hold every window's
        // watermark back: no more subtasks than partitions held.
        let readers = env.config().parallelism.min(counted.len()).max(1);
        let fired = env
            .add_source("Repartition Source", move |ctx| source.reader(ctx))
            .uid("repartition-source")
            .set_parallelism(readers)
            .flat_map(|item: Item| match item {
                Item::Event(e) => Some(e),
                _ => None,
            })
            .name("Events")
            .uid("events")
            .set_parallelism(readers)
            .key_by_field(|e: &Event<NoLine>| &e.key)
            .window(self.assigner.clone())
            .max_windows_per_record(self.max_windows_per_record)
            .allowed_lateness(self.allowed_lateness)
            .side_output_late_data(&late)
            .aggregate_with(self.agg, Firing::push)
            .uid("window");
        fired
            .get_side_output(&late)
            .map(|_: Event<NoLine>| ())
            .name(LATE)
            .set_parallelism(1);
        if let Some(claim) = claim {
            // The rows one process writes (`PostgresOutput::window_config`).
            let rows = fired
                .map(|f: Firing| (String::from(f.key), f.start, f.end, f.value))
                .name("Rows")
                .uid("rows");
            return claim.sink(&rows, self.sink_rate);
        }
        let sink = KafkaSink::<String>::lines(&group.brokers, &group.output)
            .transactional_id_prefix(&held.transactional_id("output"))
            .property("transaction.timeout.ms", &group.transaction_timeout)
            .group_offsets(commit.clone(), &[group.repartition.as_str()]);
        fired
            .map(|f: Firing| f.to_string())
            .name("Format")
            .uid("format")
            .sink_exactly_once("Kafka Sink", sink.exactly_once())
            .uid("kafka-sink")
            .set_parallelism(1);
        Ok(())
    }
}

impl GroupJob for Windows {
    fn build(&self, env: &StreamExecutionEnvironment, held: &Assignment<'_>) -> floe::Result<()> {
        let (inputs, counted) = (held.of(&self.group.input), held.of(&self.group.repartition));
        if !inputs.is_empty() {
            self.stage_one(env, held, &inputs);
        }
        if !counted.is_empty() {
            self.stage_two(env, held, &counted)?;
        }
        Ok(())
    }
}

impl CliJob for Windows {
    fn count(&self, handle: &JobHandle, totals: &mut Totals) {
        for o in handle.operator_metrics() {
            match o.name.as_str() {
                INPUT_SOURCE => totals.records += o.records_out,
                WINDOW => totals.counted += o.records_out,
                LATE => totals.late += o.records_in,
                _ => {}
            }
        }
        // The watermark records of the run that ended are not input.
        let made = self.watermark_records.swap(0, Ordering::Relaxed);
        totals.records = totals.records.saturating_sub(made);
    }

    fn summary(&self, totals: &Totals) -> String {
        format!(
            "late={} bad={} windows_fired={}",
            totals.late,
            self.bad.load(Ordering::Relaxed),
            totals.counted
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_cross_the_repartition_topic_unchanged() {
        let event = Event {
            key: SmolStr::from("sensor-7"),
            ts: -1_234_567,
            value: i64::MIN,
            line: NoLine,
        };
        let items = [
            Item::Event(event),
            Item::Watermark {
                to: 3,
                from: 5,
                watermark: Some(i64::MAX - 1),
            },
            Item::Watermark {
                to: 3,
                from: 0,
                watermark: None,
            },
        ];
        for item in items {
            let (mut key, mut value) = (Vec::new(), Vec::new());
            encode(&item, &mut key, &mut value);
            let back = decode(&value).expect("decodes");
            match (&item, &back) {
                (Item::Event(a), Item::Event(b)) => {
                    assert_eq!((&a.key, a.ts, a.value), (&b.key, b.ts, b.value));
                    assert_eq!(key, a.key.as_bytes());
                }
                (
                    Item::Watermark {
                        from: f1,
                        watermark: w1,
                        ..
                    },
                    Item::Watermark {
                        from: f2,
                        watermark: w2,
                        ..
                    },
                ) => assert_eq!((f1, w1), (f2, w2)),
                _ => panic!("{item:?} came back as {back:?}"),
            }
        }
        for foreign in [
            &b""[..],
            b"E123",
            b"W\0\0\0\x01\x02",
            b"x",
            b"W\0\0\0\x01\x01abc",
        ] {
            assert!(decode(foreign).is_err(), "{foreign:?}");
        }
    }
}
