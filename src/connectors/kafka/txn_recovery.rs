//! Recovery of the exactly-once Kafka sink's pre-committed transactions:
//! committing, after a restart, a transaction a dead producer began — what
//! Flink's `KafkaCommitter` does by resuming the transaction in the Java
//! client, done here with `EndTxn(transactional id, producer id, epoch,
//! commit)` sent straight to the transaction coordinator (librdkafka has
//! no way to resume another producer's transaction).
//!
//! - [`plan`]: which restored transactions a subtask commits before it
//!   initialises (fences) its transactional ids, which are too old to be
//!   committed (a checkpoint written before the producer id and epoch were
//!   kept: aborted, as before).
//! - [`classify`]: what an `EndTxn` error code means, after
//!   `KafkaCommitter`: retriable errors are retried, a fenced producer, an
//!   invalid transaction state or an unknown producer id mean the
//!   transaction was ended already (by another subtask's recovery, or
//!   aborted by the broker's transaction timeout — logged), anything else
//!   fails the job.
//! - [`CoordinatorClient`]: `ApiVersions`, `FindCoordinator` and `EndTxn`
//!   over a blocking `TcpStream` with deadlines (the sink's calls are
//!   blocking), every retry logged.

use super::wire::{self, API_VERSIONS, END_TXN, FIND_COORDINATOR};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The producer that owns a pre-committed transaction: what `EndTxn`
/// needs to end it from another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ProducerIdentity {
    /// The producer id the coordinator assigned at `InitProducerId`.
    pub producer_id: i64,
    /// The producer's epoch at that initialisation.
    pub epoch: i16,
}

/// Why committing a restored transaction failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The broker does not serve a request the recovery needs (a broker
    /// without transactions).
    #[error("the broker at {broker} does not serve {api} (versions {min}..={max} wanted)")]
    Unsupported {
        /// The broker asked.
        broker: String,
        /// The API.
        api: &'static str,
        /// The oldest version this client speaks.
        min: i16,
        /// The newest.
        max: i16,
    },
    /// The broker answered an error no retry mends.
    #[error("{api} for transactional id '{transactional_id}' failed: {}", error_name(*.code))]
    Broker {
        /// The API.
        api: &'static str,
        /// The transaction.
        transactional_id: String,
        /// The Kafka error code.
        code: i16,
    },
    /// No answer before the deadline (the last reason given).
    #[error("no answer from {broker} within {timeout:?}: {reason}")]
    TimedOut {
        /// The broker last tried.
        broker: String,
        /// The deadline.
        timeout: Duration,
        /// The last error.
        reason: String,
    },
    /// An answer that is not a valid Kafka response.
    #[error(transparent)]
    Decode(#[from] wire::DecodeError),
}

impl RecoveryError {
    /// Whether restarting the job may help (a broker that did not answer).
    pub fn is_retriable(&self) -> bool {
        matches!(self, RecoveryError::TimedOut { .. })
    }
}

/// What one subtask does with the restored transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Committed with `EndTxn`, in checkpoint order, before any of the
    /// subtask's transactional ids is initialised.
    pub commit: Vec<(String, ProducerIdentity)>,
    /// From a checkpoint without producer ids (an older format): left to
    /// the fencing, which aborts them.
    pub legacy: Vec<String>,
    /// Ids outside this subtask's own pool that it initialises (fences)
    /// after its commits: those of former subtasks beyond the new
    /// parallelism, or of unknown shape, which subtask 0 takes.
    pub fence: Vec<String>,
}

/// The former subtask that owns `id`, of the form `PREFIX-SUBTASK-N`.
pub fn owner(prefix: &str, id: &str) -> Option<usize> {
    let rest = id.strip_prefix(prefix)?.strip_prefix('-')?;
    let (subtask, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    subtask.parse().ok()
}

/// What `subtask` of `parallelism` does with the `restored` transactions
/// (transactional id, producer when the checkpoint holds it), given in
/// checkpoint order: each subtask ends the transactions of its own ids
/// (the ones it is about to fence), subtask 0 also those of ids no
/// subtask owns any more. Every id is thus ended before the subtask that
/// initialises it does so; an id appears once (the last entry wins: a
/// later transaction on the same id supersedes the earlier one).
pub fn plan(
    prefix: &str,
    subtask: usize,
    parallelism: usize,
    restored: &[(String, Option<ProducerIdentity>)],
) -> Plan {
    let mut plan = Plan::default();
    for (i, (id, producer)) in restored.iter().enumerate() {
        if restored[i + 1..].iter().any(|(later, _)| later == id) {
            continue;
        }
        let own = match owner(prefix, id) {
            Some(k) if k < parallelism => k == subtask,
            _ => subtask == 0,
        };
        if !own {
            continue;
        }
        match producer {
            Some(p) => plan.commit.push((id.clone(), *p)),
            None => plan.legacy.push(id.clone()),
        }
        if owner(prefix, id) != Some(subtask) && !plan.fence.contains(id) {
            plan.fence.push(id.clone());
        }
    }
    plan
}

/// What an `EndTxn` (or `FindCoordinator`) answer means for a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Committed (also: committed before, the same producer and epoch).
    Committed,
    /// Ended before, not by this request: its producer was fenced (a newer
    /// one initialised the id — after it was committed before the failure
    /// or by another subtask's recovery, or the broker aborted it), its
    /// state forbids a commit (it was aborted), or the broker forgot the
    /// producer. Logged; nothing to
    /// retry, as in Flink's `KafkaCommitter`.
    AlreadyEnded,
    /// Try again (after finding the coordinator again).
    Retry,
    /// No retry mends it: the job fails.
    Fail,
}

/// The meaning of a Kafka error code in an answer to the recovery's
/// `EndTxn` or `FindCoordinator`.
pub fn classify(code: i16) -> Verdict {
    match code {
        0 => Verdict::Committed,
        // REQUEST_TIMED_OUT, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
        // COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
        // (the coordinator is still writing an earlier end's markers).
        7 | 13 | 14 | 15 | 16 | 51 => Verdict::Retry,
        // INVALID_PRODUCER_EPOCH, PRODUCER_FENCED, INVALID_TXN_STATE,
        // UNKNOWN_PRODUCER_ID.
        47 | 90 | 48 | 59 => Verdict::AlreadyEnded,
        // INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        // TRANSACTIONAL_ID_NOT_FOUND, UNSUPPORTED_VERSION,
        // TRANSACTION_ABORTABLE and every other error.
        _ => Verdict::Fail,
    }
}

/// The protocol's name of an error code, for messages.
pub fn error_name(code: i16) -> String {
    let name = match code {
        0 => "NONE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        35 => "UNSUPPORTED_VERSION",
        47 => "INVALID_PRODUCER_EPOCH",
        48 => "INVALID_TXN_STATE",
        49 => "INVALID_PRODUCER_ID_MAPPING",
        51 => "CONCURRENT_TRANSACTIONS",
        52 => "TRANSACTION_COORDINATOR_FENCED",
        53 => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        90 => "PRODUCER_FENCED",
        105 => "TRANSACTIONAL_ID_NOT_FOUND",
        120 => "TRANSACTION_ABORTABLE",
        _ => "",
    };
    if name.is_empty() {
        format!("error code {code}")
    } else {
        format!("{name} ({code})")
    }
}

/// The outcome of ending one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Committed by this request.
    Committed,
    /// Ended before (see [`Verdict::AlreadyEnded`]); the error code.
    AlreadyEnded(i16),
}

/// A connection to one broker, its API versions known.
pub(super) struct Connection {
    pub(super) addr: String,
    stream: TcpStream,
    versions: wire::ApiVersions,
    correlation: i32,
}

impl Connection {
    pub(super) fn open(addr: &str, deadline: Instant) -> std::io::Result<Connection> {
        let left = remaining(deadline)?;
        let sockaddr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))?;
        let stream = TcpStream::connect_timeout(&sockaddr, left)?;
        stream.set_nodelay(true)?;
        let mut conn = Connection {
            addr: addr.to_string(),
            stream,
            versions: wire::ApiVersions {
                error_code: 0,
                apis: Vec::new(),
            },
            correlation: 0,
        };
        let mut versions = conn.api_versions(3, deadline)?;
        if versions.error_code == 35 {
            // The broker does not speak v3; it answered in v0.
            versions = conn.api_versions(0, deadline)?;
        }
        conn.versions = versions;
        Ok(conn)
    }

    fn api_versions(
        &mut self,
        version: i16,
        deadline: Instant,
    ) -> std::io::Result<wire::ApiVersions> {
        let body = wire::api_versions_request(version);
        let answer = self.call(API_VERSIONS, version, &body, deadline)?;
        // An UNSUPPORTED_VERSION answer is always in v0.
        let v = if answer.get(..2) == Some(&[0, 35]) {
            0
        } else {
            version
        };
        wire::decode_api_versions(v, &answer).map_err(invalid)
    }

    /// Sends one request and reads its answer's body.
    pub(super) fn call(
        &mut self,
        api: i16,
        version: i16,
        body: &[u8],
        deadline: Instant,
    ) -> std::io::Result<Vec<u8>> {
        self.correlation = self.correlation.wrapping_add(1);
        let request = wire::frame(api, version, self.correlation, "floe-txn-recovery", body);
        self.stream.set_write_timeout(Some(remaining(deadline)?))?;
        self.stream.write_all(&request)?;
        self.stream.set_read_timeout(Some(remaining(deadline)?))?;
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        if !(4..=16 << 20).contains(&size) {
            return Err(invalid(format!("response size {size}")));
        }
        let mut frame = vec![0u8; size as usize];
        self.stream.read_exact(&mut frame)?;
        let (correlation, body) = wire::response_body(api, version, &frame).map_err(invalid)?;
        if correlation != self.correlation {
            return Err(invalid(format!(
                "correlation id {correlation}, {} expected",
                self.correlation
            )));
        }
        Ok(body.to_vec())
    }

    pub(super) fn version(&self, api: i16) -> Result<i16, RecoveryError> {
        self.versions.pick(api).ok_or_else(|| {
            let (_, min, max) = wire::SUPPORTED
                .iter()
                .copied()
                .find(|(a, _, _)| *a == api)
                .unwrap_or((api, 0, 0));
            RecoveryError::Unsupported {
                broker: self.addr.clone(),
                api: wire::api_name(api),
                min,
                max,
            }
        })
    }
}

fn remaining(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "deadline passed",
        )),
    }
}

fn invalid(reason: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, reason.to_string())
}

/// Ends transactions of other producers through their coordinator.
#[derive(Clone, Debug)]
pub struct CoordinatorClient {
    bootstrap: Vec<String>,
    timeout: Duration,
}

/// One failed attempt: retried until the deadline, or final.
enum Attempt {
    Retry(String),
    Final(RecoveryError),
}

impl From<RecoveryError> for Attempt {
    fn from(e: RecoveryError) -> Self {
        Attempt::Final(e)
    }
}

impl CoordinatorClient {
    /// A client of the cluster at `brokers` (comma-separated `HOST:PORT`);
    /// every call gives up after `timeout`.
    pub fn new(brokers: &str, timeout: Duration) -> Self {
        CoordinatorClient {
            bootstrap: brokers
                .split(',')
                .map(|b| b.trim().to_string())
                .filter(|b| !b.is_empty())
                .collect(),
            timeout,
        }
    }

    /// The API versions of the first bootstrap broker that answers.
    pub fn api_versions(&self) -> Result<wire::ApiVersions, RecoveryError> {
        let deadline = Instant::now() + self.timeout;
        let mut last = String::from("no bootstrap broker");
        for b in &self.bootstrap {
            match Connection::open(b, deadline) {
                Ok(c) => return Ok(c.versions),
                Err(e) => last = format!("{b}: {e}"),
            }
        }
        Err(RecoveryError::TimedOut {
            broker: self.bootstrap.join(","),
            timeout: self.timeout,
            reason: last,
        })
    }

    /// Commits the transaction `transactional_id` of `producer`
    /// (`EndTxn`, committed = true) through its coordinator, retrying what
    /// [`classify`] calls retriable — each retry is one warning line —
    /// until the timeout.
    pub fn commit(
        &self,
        transactional_id: &str,
        producer: ProducerIdentity,
    ) -> Result<Ended, RecoveryError> {
        let deadline = Instant::now() + self.timeout;
        let mut retry = 0u32;
        loop {
            let reason = match self.try_commit(transactional_id, producer, deadline) {
                Ok(ended) => return Ok(ended),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Retry(reason)) => reason,
            };
            retry += 1;
            let pause = Duration::from_millis(50 << retry.min(5));
            if Instant::now() + pause >= deadline {
                return Err(RecoveryError::TimedOut {
                    broker: self.bootstrap.join(","),
                    timeout: self.timeout,
                    reason,
                });
            }
            tracing::warn!(
                target: crate::RECOVERY_LOG_TARGET,
                transactional_id,
                retry,
                "Kafka sink: committing a restored transaction, retry {retry} in {pause:?}: {reason}"
            );
            // A pause between attempts to a coordinator that is loading or
            // moving; not a wait for an event: the deadline bounds it.
            std::thread::sleep(pause);
        }
    }

    fn try_commit(
        &self,
        transactional_id: &str,
        producer: ProducerIdentity,
        deadline: Instant,
    ) -> Result<Ended, Attempt> {
        let mut bootstrap = None;
        let mut last = String::new();
        for b in &self.bootstrap {
            match Connection::open(b, deadline) {
                Ok(c) => {
                    bootstrap = Some(c);
                    break;
                }
                Err(e) => last = format!("{b}: {e}"),
            }
        }
        let Some(mut conn) = bootstrap else {
            return Err(Attempt::Retry(last));
        };
        let version = conn.version(FIND_COORDINATOR)?;
        let body = wire::find_coordinator_request(version, transactional_id);
        let answer = conn
            .call(FIND_COORDINATOR, version, &body, deadline)
            .map_err(|e| Attempt::Retry(format!("{}: {e}", conn.addr)))?;
        let found = wire::decode_find_coordinator(version, &answer).map_err(RecoveryError::from)?;
        match classify(found.error_code) {
            Verdict::Committed => {}
            Verdict::Retry => {
                return Err(Attempt::Retry(format!(
                    "FindCoordinator: {}",
                    error_name(found.error_code)
                )));
            }
            _ => {
                return Err(Attempt::Final(RecoveryError::Broker {
                    api: "FindCoordinator",
                    transactional_id: transactional_id.to_string(),
                    code: found.error_code,
                }));
            }
        }
        let addr = format!("{}:{}", found.host, found.port);
        let mut coordinator = if addr == conn.addr {
            conn
        } else {
            Connection::open(&addr, deadline).map_err(|e| Attempt::Retry(format!("{addr}: {e}")))?
        };
        let version = coordinator.version(END_TXN)?;
        let body = wire::end_txn_request(
            version,
            transactional_id,
            producer.producer_id,
            producer.epoch,
            true,
        );
        let answer = coordinator
            .call(END_TXN, version, &body, deadline)
            .map_err(|e| Attempt::Retry(format!("{addr}: {e}")))?;
        let code = wire::decode_end_txn(version, &answer).map_err(RecoveryError::from)?;
        match classify(code) {
            Verdict::Committed => Ok(Ended::Committed),
            Verdict::AlreadyEnded => Ok(Ended::AlreadyEnded(code)),
            Verdict::Retry => Err(Attempt::Retry(format!("EndTxn: {}", error_name(code)))),
            Verdict::Fail => Err(Attempt::Final(RecoveryError::Broker {
                api: "EndTxn",
                transactional_id: transactional_id.to_string(),
                code,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(n: i64) -> Option<ProducerIdentity> {
        Some(ProducerIdentity {
            producer_id: n,
            epoch: 1,
        })
    }

    #[test]
    fn owners_of_ids() {
        assert_eq!(owner("job", "job-3-7"), Some(3));
        assert_eq!(owner("job", "job-12-0"), Some(12));
        assert_eq!(owner("job-1", "job-1-2-5"), Some(2));
        assert_eq!(owner("job", "job-x-1"), None);
        assert_eq!(owner("job", "other-1-1"), None);
        assert_eq!(owner("job", "job-1"), None);
        assert_eq!(owner("job", "job-1-probe"), None);
    }

    #[test]
    fn each_subtask_commits_its_own_and_subtask_0_the_orphans() {
        let restored = vec![
            ("j-0-1".to_string(), p(10)),
            ("j-1-1".to_string(), p(11)),
            ("j-2-1".to_string(), p(12)),
            ("j-1-2".to_string(), None),
        ];
        // Rescaled from 3 to 2: subtask 0 takes former subtask 2's.
        let zero = plan("j", 0, 2, &restored);
        assert_eq!(
            zero.commit,
            vec![
                ("j-0-1".to_string(), p(10).expect("some")),
                ("j-2-1".to_string(), p(12).expect("some"))
            ]
        );
        assert!(zero.legacy.is_empty());
        assert_eq!(zero.fence, vec!["j-2-1".to_string()]);
        let one = plan("j", 1, 2, &restored);
        assert_eq!(
            one.commit,
            vec![("j-1-1".to_string(), p(11).expect("some"))]
        );
        assert_eq!(one.legacy, vec!["j-1-2".to_string()], "old format: aborted");
        assert!(one.fence.is_empty(), "its own ids are fenced by its open");
    }

    #[test]
    fn the_last_transaction_of_an_id_wins() {
        let restored = vec![("j-0-1".to_string(), p(1)), ("j-0-1".to_string(), p(2))];
        let plan = plan("j", 0, 1, &restored);
        assert_eq!(
            plan.commit,
            vec![("j-0-1".to_string(), p(2).expect("some"))]
        );
    }

    #[test]
    fn error_codes_after_kafka_committer() {
        assert_eq!(classify(0), Verdict::Committed);
        for retriable in [7, 13, 14, 15, 16, 51] {
            assert_eq!(classify(retriable), Verdict::Retry, "{retriable}");
        }
        for ended in [47, 48, 59, 90] {
            assert_eq!(classify(ended), Verdict::AlreadyEnded, "{ended}");
        }
        for fatal in [35, 49, 53, 105, 120, -1] {
            assert_eq!(classify(fatal), Verdict::Fail, "{fatal}");
        }
        assert_eq!(error_name(90), "PRODUCER_FENCED (90)");
        assert_eq!(error_name(999), "error code 999");
    }

    /// A broker on a loopback port that answers `ApiVersions` (v3),
    /// `FindCoordinator` (v4, pointing at itself) and `EndTxn` (v4) with
    /// the scripted error codes, in turn (the last one repeats), and
    /// counts the requests; `EndTxn` requests' bodies are kept. `silent`:
    /// it accepts connections and never answers.
    struct FakeBroker {
        addr: String,
        finds: Arc<Mutex<u32>>,
        end_txns: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    use std::sync::{Arc, Mutex};

    impl FakeBroker {
        fn start(find_codes: Vec<i16>, end_txn_codes: Vec<i16>, silent: bool) -> FakeBroker {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
            let port = listener.local_addr().expect("address").port();
            let finds = Arc::new(Mutex::new(0u32));
            let end_txns = Arc::new(Mutex::new(Vec::new()));
            let (f, e) = (finds.clone(), end_txns.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { return };
                    if silent {
                        held.push(stream);
                        continue;
                    }
                    while let Some((api, correlation, body)) = read_request(&mut stream) {
                        let mut out = correlation.to_be_bytes().to_vec();
                        match api {
                            18 => out.extend_from_slice(&[
                                0, 0, // error
                                4, // three APIs
                                0, 18, 0, 0, 0, 3, 0, // ApiVersions 0..3
                                0, 10, 0, 0, 0, 4, 0, // FindCoordinator 0..4
                                0, 26, 0, 0, 0, 4, 0, // EndTxn 0..4
                                0, 0, 0, 0, // throttle
                                0, // tags
                            ]),
                            10 => {
                                let n = {
                                    let mut n = f.lock().expect("lock");
                                    *n += 1;
                                    *n as usize
                                };
                                let code = find_codes[(n - 1).min(find_codes.len() - 1)];
                                out.push(0); // header tags
                                out.extend_from_slice(&[0, 0, 0, 0, 2, 2, b'k', 0, 0, 0, 1]);
                                out.extend_from_slice(&[
                                    10, b'1', b'2', b'7', b'.', b'0', b'.', b'0', b'.', b'1',
                                ]);
                                out.extend_from_slice(&i32::from(port).to_be_bytes());
                                out.extend_from_slice(&code.to_be_bytes());
                                out.extend_from_slice(&[0, 0, 0]); // null message, tags, tags
                            }
                            26 => {
                                let n = {
                                    let mut bodies = e.lock().expect("lock");
                                    bodies.push(body);
                                    bodies.len()
                                };
                                let code = end_txn_codes[(n - 1).min(end_txn_codes.len() - 1)];
                                out.push(0); // header tags
                                out.extend_from_slice(&[0, 0, 0, 0]);
                                out.extend_from_slice(&code.to_be_bytes());
                                out.push(0);
                            }
                            _ => return,
                        }
                        let mut framed = (out.len() as i32).to_be_bytes().to_vec();
                        framed.extend_from_slice(&out);
                        if stream.write_all(&framed).is_err() {
                            break;
                        }
                    }
                }
            });
            FakeBroker {
                addr: format!("127.0.0.1:{port}"),
                finds,
                end_txns,
            }
        }
    }

    /// One request: its API key, correlation id and body (after a header
    /// v2 with an empty tag buffer, as this client sends it).
    fn read_request(stream: &mut TcpStream) -> Option<(i16, i32, Vec<u8>)> {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).ok()?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut frame).ok()?;
        let api = i16::from_be_bytes([frame[0], frame[1]]);
        let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let client_id = i16::from_be_bytes([frame[8], frame[9]]) as usize;
        Some((api, correlation, frame[10 + client_id + 1..].to_vec()))
    }

    const PRODUCER: ProducerIdentity = ProducerIdentity {
        producer_id: 258,
        epoch: 3,
    };

    #[test]
    fn retriable_answers_are_retried_until_the_commit() {
        // COORDINATOR_NOT_AVAILABLE once, then CONCURRENT_TRANSACTIONS once.
        let broker = FakeBroker::start(vec![15, 0], vec![51, 0], false);
        let client = CoordinatorClient::new(&broker.addr, Duration::from_secs(20));
        assert_eq!(
            client.commit("t-0-1", PRODUCER).ok(),
            Some(Ended::Committed)
        );
        assert_eq!(*broker.finds.lock().expect("lock"), 3);
        let bodies = broker.end_txns.lock().expect("lock").clone();
        // EndTxn v4: "t-0-1", producer 258, epoch 3, committed, no tags.
        let expected = [
            6, b't', b'-', b'0', b'-', b'1', 0, 0, 0, 0, 0, 0, 1, 2, 0, 3, 1, 0,
        ];
        assert_eq!(bodies, vec![expected.to_vec(), expected.to_vec()]);
    }

    #[test]
    fn a_fenced_producer_means_ended_before_and_other_errors_fail() {
        let broker = FakeBroker::start(vec![0], vec![90], false);
        let client = CoordinatorClient::new(&broker.addr, Duration::from_secs(20));
        assert_eq!(
            client.commit("t-0-1", PRODUCER).ok(),
            Some(Ended::AlreadyEnded(90))
        );
        let broker = FakeBroker::start(vec![0], vec![49], false);
        let client = CoordinatorClient::new(&broker.addr, Duration::from_secs(20));
        let err = client.commit("t-0-1", PRODUCER).expect_err("fails");
        assert!(
            matches!(err, RecoveryError::Broker { code: 49, .. }),
            "{err}"
        );
        assert!(!err.is_retriable());
        assert_eq!(
            broker.end_txns.lock().expect("lock").len(),
            1,
            "not retried"
        );
    }

    #[test]
    fn a_broker_that_never_answers_times_out() {
        let broker = FakeBroker::start(vec![0], vec![0], true);
        let client = CoordinatorClient::new(&broker.addr, Duration::from_millis(300));
        let err = client.commit("t-0-1", PRODUCER).expect_err("times out");
        assert!(matches!(err, RecoveryError::TimedOut { .. }), "{err}");
        assert!(err.is_retriable(), "a restart may find the broker back");
        assert!(!err.to_string().contains('\n'));
    }

    proptest! {
        /// Over any restored set and parallelism: every id is handled by
        /// exactly one subtask; that subtask is its owner when the owner
        /// still exists, else subtask 0; an id with a producer is
        /// committed, one without is left to the fencing, never both.
        #[test]
        fn every_transaction_is_handled_once(
            entries in proptest::collection::vec((0usize..6, 0u64..8, proptest::option::of(0i64..1000)), 0..24),
            parallelism in 1usize..6,
        ) {
            let restored: Vec<(String, Option<ProducerIdentity>)> = entries
                .iter()
                .map(|(s, n, pid)| (format!("j-{s}-{n}"), pid.map(|producer_id| ProducerIdentity { producer_id, epoch: 0 })))
                .collect();
            // The oracle: the last entry of each id, by a plain map.
            let mut last = std::collections::HashMap::new();
            for (id, producer) in &restored {
                last.insert(id.clone(), *producer);
            }
            let plans: Vec<Plan> = (0..parallelism).map(|k| plan("j", k, parallelism, &restored)).collect();
            for (id, producer) in &last {
                let owner = owner("j", id).expect("well formed");
                let expected = if owner < parallelism { owner } else { 0 };
                for (k, plan) in plans.iter().enumerate() {
                    let committed = plan.commit.iter().filter(|(i, _)| i == id).count();
                    let legacy = plan.legacy.iter().filter(|i| *i == id).count();
                    if k == expected {
                        match producer {
                            Some(pr) => {
                                prop_assert_eq!(committed, 1);
                                prop_assert!(plan.commit.contains(&(id.clone(), *pr)));
                                prop_assert_eq!(legacy, 0);
                            }
                            None => {
                                prop_assert_eq!(committed, 0);
                                prop_assert_eq!(legacy, 1);
                            }
                        }
                        prop_assert_eq!(plan.fence.contains(id), owner != k);
                    } else {
                        prop_assert_eq!(committed + legacy, 0);
                        prop_assert!(!plan.fence.contains(id));
                    }
                }
            }
        }
    }
}
