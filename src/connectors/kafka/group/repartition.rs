//! A `keyBy` across the members of a group: records go through an internal
//! topic whose partition `p` is key group `p` of the state downstream, and
//! come back as an input the group deals out like any other
//! (`docs/scale-out.md`, "In the library").

use super::{Assignment, GroupSetting, ensure_topic};
use crate::connectors::kafka::{KafkaSource, StartingOffsets, ValueDecoder};
use crate::connectors::kafka_sink::{KafkaSink, RecordSerializer};
use crate::{DataStream, DataStreamSink, StreamExecutionEnvironment};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

/// How long a transaction of a repartition sink may stay open: a member
/// that died with one open holds back the topic's readers this long.
const TRANSACTION_TIMEOUT_MS: &str = "10000";

/// An internal topic `floe-GROUP-NAME` carrying a stream, partitioned by the
/// key group of each record's key, between the two stages of a group's
/// job: [`write`](Self::write) sends a stream into it exactly once,
/// [`read`](Self::read) reads back the partitions a member holds.
///
/// The topic's partition count is the job's max parallelism: list
/// [`topic`](Self::topic) among the setting's
/// [`keyed_topics`](GroupSetting::keyed_topics), and key the stream read
/// back by the same key (its key groups are then the partitions), so a
/// partition's state moves with the partition.
pub struct Repartition<T> {
    brokers: String,
    group: String,
    topic: String,
    partitions: i32,
    serialize: RecordSerializer<T>,
    partition: Arc<dyn Fn(&T) -> i32 + Send + Sync>,
    decode: ValueDecoder<T>,
}

impl<T> Clone for Repartition<T> {
    fn clone(&self) -> Self {
        Repartition {
            brokers: self.brokers.clone(),
            group: self.group.clone(),
            topic: self.topic.clone(),
            partitions: self.partitions,
            serialize: self.serialize.clone(),
            partition: self.partition.clone(),
            decode: self.decode.clone(),
        }
    }
}

impl<T: Clone + Send + 'static> Repartition<T> {
    /// The repartition topic `floe-GROUP-NAME` of `setting`'s group, keyed
    /// by `key`; created with `partitions` partitions when it does not
    /// exist (an existing topic keeps its count: its partitions are the
    /// key groups of state already checkpointed). `serialize` writes a
    /// record's value, `decode` reads it back.
    pub fn new<K, F>(
        setting: &GroupSetting,
        name: &str,
        partitions: i32,
        key: F,
        serialize: impl Fn(&T, &mut Vec<u8>) + Send + Sync + 'static,
        decode: impl Fn(&[u8]) -> Result<T, String> + Send + Sync + 'static,
    ) -> crate::Result<Self>
    where
        K: Hash + ?Sized,
        F: Fn(&T) -> &K + Send + Sync + 'static,
    {
        if partitions < 1 {
            return Err(crate::Error::Config(format!(
                "repartition topic '{name}': partitions must be at least 1, not {partitions}"
            )));
        }
        let topic = format!("floe-{}-{name}", setting.name);
        let timeout = setting.request_timeout.max(Duration::from_secs(1));
        let partitions = ensure_topic(&setting.brokers, &topic, partitions, 1, timeout)?;
        let key_groups = partitions as u32;
        let key = Arc::new(key);
        let partition = {
            let key = key.clone();
            Arc::new(move |t: &T| floe_actors::keygroup::key_group(key(t), key_groups) as i32)
        };
        Ok(Repartition {
            brokers: setting.brokers.clone(),
            group: setting.name.clone(),
            topic,
            partitions,
            serialize: Arc::new(move |t: &T, _key: &mut Vec<u8>, value: &mut Vec<u8>| {
                serialize(t, value)
            }),
            partition,
            decode: Arc::new(decode),
        })
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Its partitions: the key groups of the state it feeds.
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// Stage one: writes `stream` into the topic, each record into the
    /// partition of its key's key group. Each checkpoint's records commit
    /// in one Kafka transaction with the offsets the run's sources held in
    /// `upstream` (the group's topics `stream` was read from), so a member
    /// that lost its partitions is fenced and nothing is sent twice.
    pub fn write(
        &self,
        stream: &DataStream<T>,
        held: &Assignment<'_>,
        upstream: &[&str],
    ) -> DataStreamSink {
        let what = format!("repartition-{}", self.topic);
        let sink = KafkaSink::new(&self.brokers, &self.topic, self.serialize.clone())
            .partitioner(self.partition.clone())
            .transactional_id_prefix(&held.transactional_id(&what))
            .property("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
            .group_offsets(held.commit.clone(), upstream);
        stream
            .sink_exactly_once(&format!("Repartition {}", self.topic), sink.exactly_once())
            .uid(&what)
    }

    /// The source of stage two over the topic's partitions `held` holds,
    /// from the group's committed offsets (`None` when it holds none), for
    /// a caller that sets more on it (its start positions, say) before
    /// [`read`](Self::read)ing.
    pub fn source(&self, held: &Assignment<'_>) -> Option<KafkaSource<T>> {
        let mine = held.of(&self.topic);
        (!mine.is_empty()).then(|| {
            KafkaSource::new(&self.brokers, &[self.topic.as_str()], self.decode.clone())
                .group_id(&self.group)
                .starting_offsets(StartingOffsets::Committed)
                .partitions(&mine)
                .group_commit(held.commit.clone())
        })
    }

    /// Stage two: the records of the topic's partitions `held` holds, as a
    /// stream of `env` (`None` when it holds none). Key it by the key the
    /// topic was partitioned by.
    pub fn read(
        &self,
        env: &StreamExecutionEnvironment,
        held: &Assignment<'_>,
    ) -> Option<DataStream<T>> {
        let source = self.source(held)?;
        let name = format!("Repartition Source {}", self.topic);
        Some(
            env.add_source(&name, move |ctx| source.reader(ctx))
                .uid(&format!("repartition-source-{}", self.topic)),
        )
    }
}
