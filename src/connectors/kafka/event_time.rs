//! Event time of a Kafka source beyond the record's own timestamp: a
//! timestamp taken from the decoded value, and watermarks carried through
//! an internal topic as records (group mode, `docs/scale-out.md`).
//!
//! - **Upstream** ([`KafkaSource::watermark_records`](super::KafkaSource::watermark_records)):
//!   every interval the source emits, after the records it read, one
//!   record per partition it reads naming the partition and its watermark
//!   (or that it is idle). Written into every partition of a repartition
//!   topic, it follows there every record of that input partition it
//!   covers.
//! - **Downstream** ([`KafkaSource::upstream_watermarks`](super::KafkaSource::upstream_watermarks)):
//!   the source consumes those records (they are not emitted). A partition's
//!   watermark is the minimum over the upstream partitions that are not
//!   idle, held back until every one of them has reported; each upstream's
//!   watermark only rises. The subtask's watermark is the minimum over its
//!   partitions, as with per-partition watermarks. Nothing of this is
//!   checkpointed: after a restore the upstreams report again within an
//!   interval (they write their records periodically, changed or not).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Takes a record's event time from its decoded value (`None`: no event
/// time, it does not move the watermark).
pub type TimestampOf<T> = Arc<dyn Fn(&T) -> Option<i64> + Send + Sync>;

/// Makes the record that carries a partition's watermark: (partition,
/// `Some(watermark)`, or `None` when the partition is idle).
pub type WatermarkRecord<T> = Arc<dyn Fn(i32, Option<i64>) -> T + Send + Sync>;

/// Reads a record that carries an upstream partition's watermark: `None`
/// for an ordinary record, else (upstream partition, `Some(watermark)` or
/// `None` when idle).
pub type ReadWatermark<T> = Arc<dyn Fn(&T) -> Option<(i32, Option<i64>)> + Send + Sync>;

/// The upstream side: how often and how to write watermark records.
pub(super) struct Emit<T> {
    pub every: Duration,
    pub make: WatermarkRecord<T>,
}

impl<T> Clone for Emit<T> {
    fn clone(&self) -> Self {
        Emit {
            every: self.every,
            make: self.make.clone(),
        }
    }
}

/// The downstream side: how many upstream partitions report, and how to
/// read their records.
pub(super) struct Collect<T> {
    pub upstreams: usize,
    pub read: ReadWatermark<T>,
}

impl<T> Clone for Collect<T> {
    fn clone(&self) -> Self {
        Collect {
            upstreams: self.upstreams,
            read: self.read.clone(),
        }
    }
}

/// What one partition of an internal topic has heard from its upstreams.
#[derive(Debug, Default)]
pub(super) struct Upstreams {
    /// Per upstream partition: its highest watermark, and whether its last
    /// report said it is idle.
    heard: BTreeMap<i32, (Option<i64>, bool)>,
}

/// A partition's watermark as its upstreams report it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Not every upstream has reported, or one has no watermark yet.
    Holding,
    /// Every upstream is idle: the partition does not hold the subtask back.
    Idle,
    /// The minimum over the active upstreams.
    At(i64),
}

impl Upstreams {
    /// Notes an upstream's report.
    pub fn report(&mut self, upstream: i32, watermark: Option<i64>) {
        let entry = self.heard.entry(upstream).or_insert((None, false));
        match watermark {
            Some(w) => *entry = (Some(entry.0.map_or(w, |m| m.max(w))), false),
            None => entry.1 = true,
        }
    }

    /// The partition's watermark over `upstreams` upstream partitions.
    pub fn watermark(&self, upstreams: usize) -> Heard {
        if self.heard.len() < upstreams {
            return Heard::Holding;
        }
        let mut min: Option<i64> = None;
        for (watermark, idle) in self.heard.values() {
            if *idle {
                continue;
            }
            let Some(w) = watermark else {
                return Heard::Holding;
            };
            min = Some(min.map_or(*w, |m| m.min(*w)));
        }
        min.map_or(Heard::Idle, Heard::At)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_waits_for_every_upstream_and_skips_idle_ones() {
        let mut u = Upstreams::default();
        assert_eq!(u.watermark(3), Heard::Holding);
        u.report(0, Some(10));
        u.report(2, Some(30));
        assert_eq!(u.watermark(3), Heard::Holding, "upstream 1 not heard");
        u.report(1, None);
        assert_eq!(u.watermark(3), Heard::At(10), "the idle one does not count");
        // Watermarks only rise; an active report ends idleness.
        u.report(0, Some(5));
        assert_eq!(u.watermark(3), Heard::At(10));
        u.report(1, Some(7));
        assert_eq!(u.watermark(3), Heard::At(7));
        for p in 0..3 {
            u.report(p, None);
        }
        assert_eq!(u.watermark(3), Heard::Idle);
    }
}
