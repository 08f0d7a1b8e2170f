//! `kafka://` and `postgres://` URLs in `--input` and `--output`.
//!
//! - `--input kafka://HOST:PORT/TOPIC[?start=earliest|latest|committed|TIMESTAMP_MS][&group=G][&timeout=MS]`
//!   reads the topic's record values as lines, with a Kafka source per
//!   subtask; `--bounded` stops at the end offsets seen at start.
//! - `--output kafka://HOST:PORT/TOPIC[?delivery=exactly-once|at-least-once][&timeout=MS]`
//!   writes one record per output line (key: the line up to its first
//!   comma). With checkpointing the default is the exactly-once,
//!   transactional sink; otherwise, and with `delivery=at-least-once`, the
//!   at-least-once sink (flushed at each checkpoint).
//! - `timeout=MS` is the client's request timeout (source: metadata and
//!   offset requests, and how long it waits for a lost broker before it
//!   fails the subtask, default 10 s; sink: a flush or a transaction step,
//!   default 30 s): how soon a job notices a broker that is gone.
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
    floe::Error::Config(unsupported_message(
        flag,
        path,
        cfg!(feature = "kafka"),
        cfg!(feature = "postgres"),
    ))
}

/// Why `flag` cannot take the URL `path` in a build with (or without) the
/// `kafka` and `postgres` features, and what to do about it.
fn unsupported_message(flag: &str, path: &Path, kafka: bool, postgres: bool) -> String {
    let url = path.display();
    let rebuild = |feature: &str| {
        format!(
            "{flag} '{url}': this floe was built without the `{feature}` feature; \
             build it with `cargo install --path . --features {feature}`"
        )
    };
    let supported = match (kafka, postgres && flag != "--input") {
        (true, true) => "kafka:// and postgres:// are supported",
        (true, false) => "kafka:// is supported",
        (false, true) => "postgres:// is supported",
        (false, false) => "this build reads and writes files only",
    };
    match scheme(path) {
        "kafka" if !kafka => rebuild("kafka"),
        "postgres" | "postgresql" if flag == "--input" => {
            format!("{flag} '{url}': PostgreSQL is an output only ({supported})")
        }
        "postgres" | "postgresql" if !postgres => rebuild("postgres"),
        other => format!("{flag} '{url}': unknown URL scheme '{other}' ({supported})"),
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
    let mut source = KafkaSource::new(&url.brokers, &[url.topic.as_str()], decode)
        .starting_offsets(start)
        .bounded(bounded);
    for (k, v) in &url.params {
        // A dotted key is a librdkafka consumer property (e.g.
        // `queued.min.messages`), set as given.
        if k.contains('.') {
            source = source.property(k, v);
        } else if !matches!(k.as_str(), "start" | "group" | "timeout") {
            return Err(bad(format!(
                "unknown parameter '{k}' (start, group, timeout, or a dotted client property)"
            ))
            .into());
        }
    }
    if let Some(timeout) = timeout_param(url, bad)? {
        source = source.request_timeout(timeout);
    }
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
    /// The sink's request timeout (`timeout=MS`; `None`: its default).
    pub timeout: Option<std::time::Duration>,
}

#[cfg(feature = "kafka")]
impl KafkaOutput {
    /// Adds the sink writing `stream`'s lines to the topic.
    pub fn sink<T>(&self, stream: &floe::DataStream<T>) -> floe::DataStreamSink
    where
        T: std::fmt::Display + Clone + Send + 'static,
    {
        use floe::connectors::kafka_sink::KafkaSink;
        let mut sink = KafkaSink::<T>::lines(&self.brokers, &self.topic);
        if let Some(timeout) = self.timeout {
            sink = sink.request_timeout(timeout);
        }
        if self.exactly_once {
            stream.sink_exactly_once("Kafka Sink", sink.exactly_once())
        } else {
            stream.sink("Kafka Sink", sink)
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
            if !matches!(k.as_str(), "delivery" | "timeout") {
                return Err(bad(format!("unknown parameter '{k}' (delivery, timeout)")).into());
            }
        }
        let timeout = timeout_param(&url, bad)?;
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
        let mut sink = KafkaSink::<String>::lines(&url.brokers, &url.topic);
        if let Some(timeout) = timeout {
            sink = sink.request_timeout(timeout);
        }
        sink.check()?;
        if exactly_once {
            sink.check_transactions()?;
        }
        Ok(KafkaOutput {
            brokers: url.brokers,
            topic: url.topic,
            exactly_once,
            timeout,
        })
    })())
}

/// The `timeout=MS` parameter of a Kafka URL (a positive number of ms).
#[cfg(feature = "kafka")]
fn timeout_param(
    url: &floe::connectors::kafka::KafkaUrl,
    bad: impl Fn(String) -> floe::connectors::kafka::KafkaError,
) -> floe::Result<Option<std::time::Duration>> {
    let Some(ms) = url.param("timeout") else {
        return Ok(None);
    };
    match ms.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Some(std::time::Duration::from_millis(ms))),
        _ => Err(bad(format!(
            "timeout={ms}: expected a positive number of milliseconds"
        ))
        .into()),
    }
}

/// Refuses a URL `--output` this build or job cannot write.
pub fn check_output(flag: &str, path: &Path) -> floe::Result<()> {
    if is_url(path) {
        #[cfg(feature = "kafka")]
        if scheme(path) == "kafka" {
            return Ok(());
        }
        #[cfg(feature = "postgres")]
        if matches!(scheme(path), "postgres" | "postgresql") {
            return Ok(());
        }
        return Err(unsupported(flag, path));
    }
    Ok(())
}

/// A PostgreSQL `--output` (`postgres://USER:PASS@HOST:PORT/DB?table=T`),
/// its server checked.
#[cfg(feature = "postgres")]
#[derive(Clone, Debug)]
pub struct PostgresOutput {
    /// The URL as given.
    pub url: String,
}

#[cfg(feature = "postgres")]
impl PostgresOutput {
    /// The sink's config for `columns` in `mode`.
    pub fn config(
        &self,
        columns: &[&str],
        mode: floe::connectors::postgres::WriteMode,
    ) -> floe::Result<floe::connectors::postgres::PostgresSinkConfig> {
        floe::connectors::postgres::PostgresSinkConfig::from_url(&self.url, columns, mode)
    }

    /// The window job's table, in one process as in a group: each firing
    /// appended as a row `key TEXT, window_start BIGINT, window_end BIGINT,
    /// value BIGINT` (a window fired again within `--allowed-lateness` has
    /// a row per firing).
    pub fn window_config(&self) -> floe::Result<floe::connectors::postgres::PostgresSinkConfig> {
        self.config(
            &["key", "window_start", "window_end", "value"],
            floe::connectors::postgres::WriteMode::Append,
        )
    }

    /// The word count's table, in one process as in a group: `word TEXT
    /// PRIMARY KEY, count BIGINT`, each word's latest count upserted.
    pub fn counts_config(&self) -> floe::Result<floe::connectors::postgres::PostgresSinkConfig> {
        self.config(
            &["word", "count"],
            floe::connectors::postgres::WriteMode::Upsert,
        )
    }

    /// Appends `stream`'s `key,window_start,window_end,value` lines as rows
    /// ([`window_config`](Self::window_config)).
    pub fn sink_window_lines<T>(
        &self,
        stream: &floe::DataStream<T>,
    ) -> floe::Result<floe::DataStreamSink>
    where
        T: std::fmt::Display + Clone + Send + 'static,
    {
        use floe::connectors::postgres::PostgresSink;
        let config = self.window_config()?;
        let rows = stream
            .try_map(|line: T| {
                let line = line.to_string();
                let mut f = line.rsplitn(4, ',');
                let (value, end, start, key) = (f.next(), f.next(), f.next(), f.next());
                let num = |v: Option<&str>| v.and_then(|v| v.parse::<i64>().ok());
                match (key, num(start), num(end), num(value)) {
                    (Some(k), Some(s), Some(e), Some(v)) => Ok((k.to_string(), s, e, v)),
                    _ => Err(floe::Error::Internal(format!(
                        "not a key,window_start,window_end,value line: '{line}'"
                    ))),
                }
            })
            .name("Rows");
        let sink = PostgresSink::<(String, i64, i64, i64)>::new(config)?;
        Ok(rows.sink_exactly_once(&sink.operator_name(), sink))
    }
}

/// The PostgreSQL output of a `postgres://` URL (`None`: not one), the
/// server reached once before the job starts.
/// `--output postgres://…` that cannot be reached (the client's error is
/// the source).
#[cfg(feature = "postgres")]
#[derive(Debug, thiserror::Error)]
#[error("cannot reach PostgreSQL for --output: {0}")]
struct Unreachable(#[source] Box<dyn std::error::Error + Send + Sync>);

#[cfg(feature = "postgres")]
fn unreachable(e: Box<dyn std::error::Error + Send + Sync>) -> floe::Error {
    floe::Error::InvalidConfig {
        source: Box::new(Unreachable(e)),
    }
}

#[cfg(feature = "postgres")]
pub fn postgres_output(path: &Path) -> Option<floe::Result<PostgresOutput>> {
    let url = path
        .to_str()
        .filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))?;
    Some((|| {
        use floe::connectors::postgres::WriteMode;
        let out = PostgresOutput {
            url: url.to_string(),
        };
        let config = out.config(&["key"], WriteMode::Append)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| unreachable(e.into()))?;
        runtime.block_on(async {
            let connect = tokio_postgres::connect(&config.connection, tokio_postgres::NoTls);
            match tokio::time::timeout(std::time::Duration::from_secs(10), connect).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(unreachable(e.into())),
                Err(_) => Err(unreachable("no answer in 10 s".into())),
            }
        })?;
        Ok(out)
    })())
}

#[cfg(test)]
mod tests {
    use super::unsupported_message;
    use std::path::Path;

    /// A connector URL on a build without its feature names the feature
    /// and the command that builds it, whichever features the build has.
    #[test]
    fn a_url_of_a_missing_feature_says_which_feature_to_build_with() {
        let pg = Path::new("postgres://u:p@localhost:5432/db?table=t");
        let kafka = Path::new("kafka://localhost:9092/words");
        for kafka_built in [false, true] {
            let line = unsupported_message("--output", pg, kafka_built, false);
            assert!(
                line.contains("`postgres` feature")
                    && line.contains("cargo install --path . --features postgres")
                    && !line.contains("unknown"),
                "{line}"
            );
        }
        for postgres_built in [false, true] {
            let line = unsupported_message("--input", kafka, false, postgres_built);
            assert!(
                line.contains("`kafka` feature") && line.contains("--features kafka"),
                "{line}"
            );
        }
        // PostgreSQL is never an input: no feature helps.
        let line = unsupported_message("--input", pg, true, true);
        assert!(
            line.contains("output only") && !line.contains("feature"),
            "{line}"
        );
        let line = unsupported_message("--output", Path::new("s3://b/k"), true, true);
        assert!(
            line.contains("unknown URL scheme 's3'")
                && line.contains("kafka:// and postgres:// are supported"),
            "{line}"
        );
    }
}
