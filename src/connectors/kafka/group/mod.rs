//! Group mode: one job run by many floe processes, on Kafka's consumer
//! groups (the model is in `docs/scale-out.md`).
//!
//! - [`Membership`] joins a consumer group on a thread of its own and
//!   reports each assignment, with the group's generation, and each
//!   revocation, which it holds until the member's job has stopped (the
//!   eager `range` assignor: every rebalance revokes everything).
//! - [`GroupCommit`] carries the offsets a member's sources held at each
//!   checkpoint to its exactly-once Kafka sinks, which send them to their
//!   transaction with the group's metadata when the checkpoint completes:
//!   the records a checkpoint produced and the input positions that
//!   produced them commit together, and a member that lost its partitions
//!   (an older generation) is fenced by the broker.
//! - Each committed offset's metadata names the checkpoint it belongs to
//!   ([`OffsetMark`]), so a new owner of a partition restores exactly the
//!   state that matches the offset it resumes from.
//! - [`run_member`] (or [`StreamExecutionEnvironment::execute_group`](crate::StreamExecutionEnvironment::execute_group))
//!   puts these together: a process runs a [`GroupJob`] as a member of the
//!   group a [`GroupSetting`] names, the job built anew over each
//!   [`Assignment`], until it is told to stop.
//! - [`Repartition`] is a `keyBy` across the members: an internal topic
//!   partitioned by key group between two stages of the job.

mod member;
mod repartition;
mod runner;
mod topics;

pub use member::{GroupEvent, Membership, MembershipConfig};
pub use repartition::Repartition;
pub use runner::{Assignment, GroupJob, GroupReport, GroupSetting, MarkStore, run_member};
pub use topics::{committed_marks, ensure_topic, partition_count};

use super::KafkaError;
use floe_actors::ids::CheckpointId;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The prefix of the offset metadata floe writes.
const MARK_PREFIX: &str = "floe:";

/// Which checkpoint a committed offset belongs to: the member run's
/// directory under the shared checkpoint directory, and the checkpoint's
/// id there. Written as `floe:RUN/chk-N`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetMark {
    /// The run's directory, relative to the shared checkpoint directory.
    pub run: String,
    /// The checkpoint.
    pub checkpoint: u64,
}

impl OffsetMark {
    /// Reads the metadata of a committed offset (`None`: not floe's).
    pub fn parse(metadata: &str) -> Option<OffsetMark> {
        let rest = metadata.strip_prefix(MARK_PREFIX)?;
        let (run, chk) = rest.rsplit_once("/chk-")?;
        let checkpoint = chk.parse().ok()?;
        (!run.is_empty()).then(|| OffsetMark {
            run: run.to_string(),
            checkpoint,
        })
    }

    /// The checkpoint's path under the shared checkpoint directory `dir`
    /// (a local path or an `s3://` URL).
    pub fn path(&self, dir: &str) -> std::path::PathBuf {
        format!(
            "{}/{}/chk-{}",
            dir.trim_end_matches('/'),
            self.run,
            self.checkpoint
        )
        .into()
    }
}

impl std::fmt::Display for OffsetMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{MARK_PREFIX}{}/chk-{}", self.run, self.checkpoint)
    }
}

/// A partition's position: topic, partition, next offset.
pub type Position = (String, i32, i64);

/// Each partition's next offset, by (topic, partition).
type Offsets = BTreeMap<(String, i32), i64>;

/// How many checkpoints' positions are kept for commits still to come.
const KEPT_CHECKPOINTS: usize = 32;

/// The positions of one member job's sources at each checkpoint, for its
/// sinks' transactions (see the module documentation). One per job run:
/// its group metadata is the generation the job was planned for.
pub struct GroupCommit {
    run: String,
    metadata: Arc<ConsumerGroupMetadata>,
    positions: Mutex<BTreeMap<u64, Offsets>>,
    /// When a source of the run first emitted a record.
    first_record: std::sync::OnceLock<std::time::Instant>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl GroupCommit {
    /// The commits of the job run whose checkpoints go to `run` (relative
    /// to the shared checkpoint directory), in the group generation
    /// `metadata` describes.
    pub fn new(run: &str, metadata: Arc<ConsumerGroupMetadata>) -> Arc<Self> {
        Arc::new(GroupCommit {
            run: run.to_string(),
            metadata,
            positions: Mutex::new(BTreeMap::new()),
            first_record: std::sync::OnceLock::new(),
        })
    }

    /// The run's directory, relative to the shared checkpoint directory.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// When a source of the run first emitted a record, if one did.
    pub fn first_record(&self) -> Option<std::time::Instant> {
        self.first_record.get().copied()
    }

    /// Notes that a source emitted its first record (the first call counts).
    pub(crate) fn record_emitted(&self) {
        let _ = self.first_record.set(std::time::Instant::now());
    }

    /// Records a source subtask's positions at `checkpoint` (the Kafka
    /// source does, at each checkpoint's barrier).
    pub fn record(&self, checkpoint: CheckpointId, positions: &[Position]) {
        let mut all = self.positions.lock().unwrap_or_else(|e| e.into_inner());
        let at = all.entry(checkpoint.0).or_default();
        for (topic, partition, next) in positions {
            at.insert((topic.clone(), *partition), *next);
        }
        while all.len() > KEPT_CHECKPOINTS {
            all.pop_first();
        }
    }

    /// The mark of `checkpoint` of this run (`floe:RUN/chk-N`).
    pub fn mark(&self, checkpoint: CheckpointId) -> OffsetMark {
        OffsetMark {
            run: self.run.clone(),
            checkpoint: checkpoint.0,
        }
    }

    /// The next offsets of the partitions of `topics` the sources held at
    /// `checkpoint`, as (topic, partition, next offset), sorted (empty when
    /// none recorded any): for sinks that commit them elsewhere than to
    /// Kafka.
    pub fn positions(&self, topics: &[String], checkpoint: CheckpointId) -> Vec<Position> {
        let all = self.positions.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&checkpoint.0)
            .into_iter()
            .flatten()
            .filter(|((topic, _), _)| topics.iter().any(|t| t == topic))
            .map(|((topic, partition), next)| (topic.clone(), *partition, *next))
            .collect()
    }

    /// The offsets of `topics` at `checkpoint`, each marked with the
    /// checkpoint (empty when no source of these topics recorded any).
    fn offsets(
        &self,
        topics: &[String],
        checkpoint: CheckpointId,
    ) -> Result<TopicPartitionList, KafkaError> {
        let all = self.positions.lock().unwrap_or_else(|e| e.into_inner());
        let mark = OffsetMark {
            run: self.run.clone(),
            checkpoint: checkpoint.0,
        }
        .to_string();
        let mut list = TopicPartitionList::new();
        if let Some(at) = all.get(&checkpoint.0) {
            for ((topic, partition), next) in at {
                if topics.iter().any(|t| t == topic) {
                    let mut e = list.add_partition(topic, *partition);
                    e.set_offset(Offset::Offset(*next))
                        .map_err(KafkaError::client("offsets to commit"))?;
                    e.set_metadata(mark.as_str());
                }
            }
        }
        Ok(list)
    }

    /// Adds the offsets of `topics` at `checkpoint` to the transaction
    /// open in `producer`, with the group's metadata: a member of an older
    /// generation is refused here (fenced), before it commits.
    pub(crate) fn send_offsets<P: Producer<C>, C: rdkafka::producer::ProducerContext>(
        &self,
        producer: &P,
        topics: &[String],
        checkpoint: CheckpointId,
        timeout: Duration,
    ) -> Result<(), KafkaError> {
        let list = self.offsets(topics, checkpoint)?;
        if list.count() == 0 {
            return Ok(());
        }
        producer
            .send_offsets_to_transaction(&list, &self.metadata, timeout)
            .map_err(|source| KafkaError::Client {
                action: "group offsets commit (fenced: a member of an older generation, or a transaction open longer than transaction.timeout.ms, which the broker aborted)",
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_names_its_checkpoint() {
        let mark = OffsetMark {
            run: "wc/member-a/g3-1".into(),
            checkpoint: 17,
        };
        let text = mark.to_string();
        assert_eq!(OffsetMark::parse(&text), Some(mark.clone()));
        assert_eq!(
            mark.path("s3://b/ck/"),
            std::path::PathBuf::from("s3://b/ck/wc/member-a/g3-1/chk-17")
        );
        for foreign in [
            "",
            "floe:",
            "floe:/chk-3",
            "floe:run/chk-x",
            "other:run/chk-3",
        ] {
            assert_eq!(OffsetMark::parse(foreign), None, "{foreign}");
        }
    }
}
