//! A member of a consumer group: joins it on a thread of its own, never
//! reads records through it, and reports assignments and revocations.

use super::super::{KafkaError, log_to_tracing};
use rdkafka::ClientContext;
use rdkafka::client::NativeClient;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata};
use rdkafka::error::KafkaError as ClientError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{TopicPartitionList, bindings as rdsys};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a member joins its group.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// Bootstrap servers, `host:port[,…]`.
    pub brokers: String,
    /// The group's name: every process started with it runs one job.
    pub group: String,
    /// The topics whose partitions the group deals out.
    pub topics: Vec<String>,
    /// How long the group waits for a member that stopped answering
    /// (`session.timeout.ms`) before it deals its partitions out again.
    pub session_timeout: Duration,
    /// How long a revocation waits for the member's job to stop.
    pub revoke_deadline: Duration,
    /// librdkafka consumer properties, set last.
    pub properties: Vec<(String, String)>,
}

impl MembershipConfig {
    /// Joins `group` for `topics` at `brokers` with the defaults: a 10 s
    /// session timeout, 60 s for a job to stop on revocation.
    pub fn new(brokers: &str, group: &str, topics: &[String]) -> Self {
        MembershipConfig {
            brokers: brokers.to_string(),
            group: group.to_string(),
            topics: topics.to_vec(),
            session_timeout: Duration::from_secs(10),
            revoke_deadline: Duration::from_secs(60),
            properties: Vec::new(),
        }
    }
}

/// What the group tells a member.
#[non_exhaustive]
pub enum GroupEvent {
    /// The partitions this member now holds (all of its share: the eager
    /// protocol revoked everything before).
    Assigned {
        /// The group's generation.
        generation: i32,
        /// This member's id in the group.
        member_id: String,
        /// The partitions, as (topic, partition), sorted.
        partitions: Vec<(String, i32)>,
        /// For the transactions that commit this generation's offsets.
        metadata: ConsumerGroupMetadata,
    },
    /// Every partition is revoked: stop the job, then send on `done` (the
    /// group waits for it, at most the revoke deadline).
    Revoked {
        /// Told when the member's job has stopped.
        done: Sender<()>,
    },
    /// The membership failed and ended.
    Failed(KafkaError),
}

/// The assignment the rebalance callback made, for the thread to report.
type Assignment = (i32, String, Vec<(String, i32)>);

struct GroupContext {
    events: Sender<GroupEvent>,
    revoke_deadline: Duration,
    assigned: Mutex<Option<Assignment>>,
    stopping: Arc<AtomicBool>,
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log_to_tracing(level, facility, message);
    }

    fn error(&self, error: ClientError, reason: &str) {
        tracing::warn!(%error, "librdkafka (group member): {reason}");
    }
}

impl ConsumerContext for GroupContext {
    /// The eager protocol by hand: a revocation waits for the member's job
    /// to stop before it gives the partitions up; an assignment is taken
    /// paused (this consumer never fetches: each job reads its partitions
    /// with clients of its own) and noted with its generation.
    fn rebalance(&self, native: &NativeClient, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                // SAFETY: `native` and `tpl` are the live client and list
                // librdkafka handed to this callback.
                unsafe {
                    rdsys::rd_kafka_assign(native.ptr(), tpl.ptr());
                    rdsys::rd_kafka_pause_partitions(native.ptr(), tpl.ptr());
                }
                let (generation, member_id) = generation_of(native);
                let mut partitions: Vec<(String, i32)> = tpl
                    .elements()
                    .iter()
                    .map(|e| (e.topic().to_string(), e.partition()))
                    .collect();
                partitions.sort();
                *self.assigned.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((generation, member_id, partitions));
            }
            _ => {
                if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
                    tracing::warn!(
                        ?err,
                        "Kafka group: rebalance error; giving the partitions up"
                    );
                }
                if !self.stopping.load(Ordering::Acquire) {
                    let (done, stopped) = channel();
                    if self.events.send(GroupEvent::Revoked { done }).is_ok() {
                        match stopped.recv_timeout(self.revoke_deadline) {
                            Ok(()) | Err(RecvTimeoutError::Disconnected) => {}
                            Err(RecvTimeoutError::Timeout) => eprintln!(
                                "warning: the job did not stop within {} s of the revocation; \
                                 giving its partitions up anyway (its transactions are fenced)",
                                self.revoke_deadline.as_secs()
                            ),
                        }
                    }
                }
                // SAFETY: as above; a null list unassigns everything.
                unsafe {
                    rdsys::rd_kafka_assign(native.ptr(), std::ptr::null());
                }
            }
        }
    }
}

/// The generation and member id of the client's group membership, read
/// from its serialized group metadata ("CGMDv2:", then the generation as a
/// native-endian i32, then the group id and the member id, NUL-terminated).
fn generation_of(native: &NativeClient) -> (i32, String) {
    // SAFETY: the metadata is created, written and destroyed here; the
    // buffer librdkafka allocates is read within its size, then freed.
    unsafe {
        let cgmd = rdsys::rd_kafka_consumer_group_metadata(native.ptr());
        if cgmd.is_null() {
            return (-1, String::new());
        }
        let mut buffer: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let error = rdsys::rd_kafka_consumer_group_metadata_write(cgmd, &mut buffer, &mut size);
        rdsys::rd_kafka_consumer_group_metadata_destroy(cgmd);
        if !error.is_null() {
            rdsys::rd_kafka_error_destroy(error);
            return (-1, String::new());
        }
        let bytes = std::slice::from_raw_parts(buffer as *const u8, size).to_vec();
        rdsys::rd_kafka_mem_free(std::ptr::null_mut(), buffer);
        parse_metadata(&bytes).unwrap_or((-1, String::new()))
    }
}

/// The generation and member id of serialized group metadata.
fn parse_metadata(bytes: &[u8]) -> Option<(i32, String)> {
    let rest = bytes.strip_prefix(b"CGMDv2:")?;
    let generation = i32::from_ne_bytes(rest.get(..4)?.try_into().ok()?);
    let mut fields = rest[4..].split(|b| *b == 0);
    let _group = fields.next()?;
    let member = String::from_utf8_lossy(fields.next()?).into_owned();
    Some((generation, member))
}

/// A joined group membership; [`leave`](Self::leave) ends it.
pub struct Membership {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Membership {
    /// Joins the group on a thread of its own; its events arrive on the
    /// receiver.
    pub fn join(
        config: MembershipConfig,
    ) -> Result<(Membership, Receiver<GroupEvent>), KafkaError> {
        let (events, receiver) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let context = GroupContext {
            events: events.clone(),
            revoke_deadline: config.revoke_deadline,
            assigned: Mutex::new(None),
            stopping: stop.clone(),
        };
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("group.id", &config.group)
            .set("partition.assignment.strategy", "range")
            .set(
                "session.timeout.ms",
                config.session_timeout.as_millis().to_string(),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("log_level", "4");
        for (k, v) in &config.properties {
            client.set(k, v);
        }
        let consumer: BaseConsumer<GroupContext> = client
            .create_with_context(context)
            .map_err(KafkaError::client("group member"))?;
        let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(KafkaError::client("group subscription"))?;
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("floe-group-member".into())
            .spawn(move || run(consumer, events, flag))
            .map_err(|e| KafkaError::Unreachable {
                brokers: config.brokers.clone(),
                reason: format!("cannot start the group member's thread: {e}"),
            })?;
        Ok((
            Membership {
                stop,
                thread: Some(thread),
            },
            receiver,
        ))
    }

    /// Leaves the group (its partitions go to the other members at once)
    /// and waits at most `deadline` for that; whether it ended in time.
    pub fn leave(mut self, deadline: Duration) -> bool {
        self.stop.store(true, Ordering::Release);
        let Some(thread) = self.thread.take() else {
            return true;
        };
        let until = std::time::Instant::now() + deadline;
        while !thread.is_finished() {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = thread.join();
        true
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The member's thread: polls (serving the rebalance callbacks and
/// heartbeats), reports assignments, and leaves the group when told.
fn run(consumer: BaseConsumer<GroupContext>, events: Sender<GroupEvent>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        match consumer.poll(Duration::from_millis(100)) {
            // Paused partitions deliver nothing; a record that came before
            // the pause is not this consumer's to read.
            None | Some(Ok(_)) => {}
            Some(Err(e)) => tracing::debug!(error = %e, "Kafka group member: poll"),
        }
        let assigned = consumer
            .context()
            .assigned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((generation, member_id, partitions)) = assigned {
            let Some(metadata) = consumer.group_metadata() else {
                let _ = events.send(GroupEvent::Failed(KafkaError::Unreachable {
                    brokers: String::new(),
                    reason: "the group member has no group metadata after an assignment".into(),
                }));
                return;
            };
            let event = GroupEvent::Assigned {
                generation,
                member_id,
                partitions,
                metadata,
            };
            if events.send(event).is_err() {
                break;
            }
        }
    }
    // Leaving: the revocation this causes needs no answer (`stopping`).
    consumer.unsubscribe();
    drop(consumer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_group_metadata_gives_generation_and_member() {
        let mut bytes = b"CGMDv2:".to_vec();
        bytes.extend_from_slice(&7i32.to_ne_bytes());
        bytes.extend_from_slice(b"wc\0rdkafka-1234\0\x01");
        assert_eq!(
            parse_metadata(&bytes),
            Some((7, "rdkafka-1234".to_string()))
        );
        assert_eq!(parse_metadata(b"CGMDv1:xxxx"), None);
        assert_eq!(parse_metadata(b"CGMDv2:\x01"), None);
    }
}
