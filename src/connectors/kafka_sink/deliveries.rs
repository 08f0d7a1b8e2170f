//! What a producer of the Kafka sink reports back: failed deliveries, its
//! transactional state and, for a transactional producer, the lowest
//! offset delivered into each partition.

use rdkafka::ClientContext;
use rdkafka::error::KafkaError as ClientError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// Collects the first failed delivery of a producer, and its latest
/// transactional state from the statistics.
#[derive(Clone, Default)]
pub(super) struct Deliveries {
    pub(super) failed: Arc<AtomicBool>,
    pub(super) first: Arc<Mutex<Option<String>>>,
    pub(super) eos: Arc<Mutex<Option<Eos>>>,
    /// A transactional producer's lowest delivered offset per partition
    /// (`i64::MAX`: none yet), for the pre-commit's check (see
    /// `kafka::producers`).
    pub(super) offsets: Arc<Vec<AtomicI64>>,
}

/// The `eos` object of librdkafka's statistics (STATISTICS.md): the
/// transactional state and the producer id and epoch.
#[derive(Clone, Debug, serde::Deserialize)]
pub(super) struct Eos {
    pub(super) txn_state: String,
    pub(super) producer_id: i64,
    pub(super) producer_epoch: i64,
}

/// The part of the statistics the sink reads.
#[derive(serde::Deserialize)]
struct Stats {
    eos: Option<Eos>,
}

/// How often a transactional producer emits its statistics: pre-commit
/// waits for one taken inside the transaction, to read its producer id
/// and epoch.
pub(super) const STATS_INTERVAL_MS: &str = "100";

impl Deliveries {
    /// The first failure since the last call, if any.
    pub(super) fn take(&self) -> Option<String> {
        if !self.failed.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.first.lock().ok().and_then(|mut f| f.take())
    }
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        crate::connectors::kafka::log_to_tracing(level, facility, message);
    }

    fn error(&self, error: ClientError, reason: &str) {
        tracing::warn!(%error, "librdkafka: {reason}");
    }

    fn stats_raw(&self, statistics: &[u8]) {
        // Only the `eos` object is read; the rest is skipped unparsed.
        match serde_json::from_slice::<Stats>(statistics) {
            Ok(Stats { eos: Some(eos) }) => {
                if let Ok(mut slot) = self.eos.lock() {
                    *slot = Some(eos);
                }
            }
            Ok(Stats { eos: None }) => {}
            Err(e) => tracing::warn!("librdkafka statistics not understood: {e}"),
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        use rdkafka::message::Message;
        if let Ok(m) = result {
            if let Some(slot) = self.offsets.get(m.partition() as usize) {
                slot.fetch_min(m.offset(), Ordering::Relaxed);
            }
        } else if let Err((e, _)) = result {
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
            self.failed.store(true, Ordering::Release);
        }
    }
}
