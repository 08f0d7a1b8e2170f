//! `kafka://` and `postgres://` URLs in `--input` and `--output`.
//!
//! - `--input kafka://HOST:PORT/TOPIC[?start=earliest|latest|committed|TIMESTAMP_MS][&group=G]`
//!   reads the topic's record values as lines, with a Kafka source per
//!   subtask; `--bounded` stops at the end offsets seen at start.
//! - `--output kafka://HOST:PORT/TOPIC[?delivery=exactly-once|at-least-once]`
//!   writes one record per output line (key: the line up to its first
//!   comma). With checkpointing the default is the exactly-once,
//!   transactional sink; otherwise, and with `delivery=at-least-once`, the
//!   at-least-once sink (flushed at each checkpoint).
//!
//! The brokers and topics are checked before the job starts, so a bad URL
//! or a server that is down is one error line.

use std::path::Path;

/// What a `--input` names.
pub enum Input<'a> {
    /// A file.
    File(&'a Path),
    /// A Kafka topic.
    #[cfg(feature = "kafka")]
    Kafka(floe::connectors::kafka::KafkaUrl),
}

/// Whether `path` is a URL of a connector rather than a file.
pub fn is_url(path: &Path) -> bool {
    path.to_str().is_some_and(|s| s.contains("://"))
}

/// The scheme of a URL (`kafka`, `postgres`), for error messages.
fn scheme(path: &Path) -> &str {
    path.to_str()
        .and_then(|s| s.split_once("://"))
        .map_or("", |(scheme, _)| scheme)
}

/// Understands a `--input`.
pub fn input(path: &Path) -> floe::Result<Input<'_>> {
    if !is_url(path) {
        return Ok(Input::File(path));
    }
    #[cfg(feature = "kafka")]
    if let Some(url) = path
        .to_str()
        .and_then(floe::connectors::kafka::KafkaUrl::parse)
    {
        return Ok(Input::Kafka(url?));
    }
    Err(unsupported("--input", path))
}

fn unsupported(flag: &str, path: &Path) -> floe::Error {
    match scheme(path) {
        "kafka" => floe::Error::Config(format!(
            "{flag} '{}': this floe was built without the `kafka` feature",
            path.display()
        )),
        other => floe::Error::Config(format!(
            "{flag} '{}': unknown URL scheme '{other}' (kafka:// is supported)",
            path.display()
        )),
    }
}

/// The Kafka source of a `--input kafka://…` URL, its brokers and topic
/// checked.
#[cfg(feature = "kafka")]
pub fn kafka_source<T: Send + 'static>(
    url: &floe::connectors::kafka::KafkaUrl,
    bounded: bool,
    decode: floe::connectors::kafka::ValueDecoder<T>,
) -> floe::Result<floe::connectors::kafka::KafkaSource<T>> {
    use floe::connectors::kafka::{KafkaError, KafkaSource, StartingOffsets};
    let bad = |reason: String| KafkaError::BadUrl {
        url: format!("kafka://{}/{}", url.brokers, url.topic),
        reason,
    };
    let start = match url.param("start") {
        None | Some("earliest") => StartingOffsets::Earliest,
        Some("latest") => StartingOffsets::Latest,
        Some("committed") => StartingOffsets::Committed,
        Some(ts) => StartingOffsets::Timestamp(ts.parse::<i64>().map_err(|_| {
            bad(format!(
                "start={ts}: expected earliest, latest, committed or a timestamp in ms"
            ))
        })?),
    };
    for (k, _) in &url.params {
        if !matches!(k.as_str(), "start" | "group") {
            return Err(bad(format!("unknown parameter '{k}' (start, group)")).into());
        }
    }
    let mut source = KafkaSource::new(&url.brokers, &[url.topic.as_str()], decode)
        .starting_offsets(start)
        .bounded(bounded);
    if let Some(group) = url.param("group") {
        source = source.group_id(group);
    }
    source.check()?;
    Ok(source)
}

/// A Kafka `--output`, checked.
#[cfg(feature = "kafka")]
#[derive(Clone, Debug)]
pub struct KafkaOutput {
    /// The bootstrap servers.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// Written by the transactional sink.
    pub exactly_once: bool,
}

#[cfg(feature = "kafka")]
impl KafkaOutput {
    /// Adds the sink writing `stream`'s lines to the topic.
    pub fn sink<T>(&self, stream: &floe::DataStream<T>) -> floe::DataStream<()>
    where
        T: std::fmt::Display + Clone + Send + 'static,
    {
        use floe::connectors::kafka_sink::KafkaSink;
        let sink = KafkaSink::<T>::lines(&self.brokers, &self.topic);
        if self.exactly_once {
            stream
                .add_two_phase_sink(sink.exactly_once())
                .name("Kafka Sink")
        } else {
            stream.add_sink(sink).name("Kafka Sink")
        }
    }
}

/// The Kafka sink of an `--output kafka://…` URL (`None`: not a Kafka
/// URL), transactional when `checkpointing` unless the URL asks for
/// `delivery=at-least-once`.
#[cfg(feature = "kafka")]
pub fn kafka_output(path: &Path, checkpointing: bool) -> Option<floe::Result<KafkaOutput>> {
    use floe::connectors::kafka::{KafkaError, KafkaUrl};
    use floe::connectors::kafka_sink::KafkaSink;
    let url = path.to_str().and_then(KafkaUrl::parse)?;
    Some((|| {
        let url = url?;
        let bad = |reason: String| KafkaError::BadUrl {
            url: path.display().to_string(),
            reason,
        };
        for (k, _) in &url.params {
            if k != "delivery" {
                return Err(bad(format!("unknown parameter '{k}' (delivery)")).into());
            }
        }
        let exactly_once = match url.param("delivery") {
            None => checkpointing,
            Some("exactly-once") => true,
            Some("at-least-once") => false,
            Some(other) => {
                return Err(bad(format!(
                    "delivery={other}: expected exactly-once or at-least-once"
                ))
                .into());
            }
        };
        let sink = KafkaSink::<String>::lines(&url.brokers, &url.topic);
        sink.check()?;
        if exactly_once {
            sink.check_transactions()?;
        }
        Ok(KafkaOutput {
            brokers: url.brokers,
            topic: url.topic,
            exactly_once,
        })
    })())
}

/// Refuses a URL `--output` this build or job cannot write.
pub fn check_output(flag: &str, path: &Path) -> floe::Result<()> {
    if is_url(path) {
        #[cfg(feature = "kafka")]
        if scheme(path) == "kafka" {
            return Ok(());
        }
        return Err(unsupported(flag, path));
    }
    Ok(())
}
