//! A table's connector and format from its `WITH` options, checked as
//! Flink's factories check them: an option the connector or its format
//! does not know is refused, naming every unknown one.
//!
//! Connectors: `filesystem` (`csv`, `json`; a source and an append-only
//! sink), `kafka` (`csv`, `json`, `raw`; a source and an append-only sink,
//! at least once or exactly once), `upsert-kafka` (a sink keyed by the
//! table's primary key), `jdbc` (a PostgreSQL sink: append-only, or an
//! upsert by the primary key), `print` and `blackhole` (sinks). `kafka`
//! and `upsert-kafka` need floe's cargo feature `kafka`, `jdbc` its
//! feature `postgres`: without it a table naming one is refused.

use super::error::{SqlResult, err};
use super::json::JsonOptions;
use super::value::SqlType;
use sqlparser::tokenizer::Span;
use std::path::PathBuf;

/// How a table's rows are read or written.
#[derive(Clone, Debug)]
pub enum Connector {
    /// `'connector' = 'filesystem'`.
    FileSystem {
        /// `'path'`: a file, a directory of files, or a glob (source); the
        /// file written (sink).
        path: PathBuf,
        /// `'format'`.
        format: Format,
    },
    /// `'connector' = 'kafka'`: an append-only topic.
    Kafka(KafkaTable),
    /// `'connector' = 'upsert-kafka'`: a topic holding the latest row per
    /// key (a sink).
    UpsertKafka(KafkaTable),
    /// `'connector' = 'jdbc'` on PostgreSQL (a sink).
    Jdbc(JdbcTable),
    /// `'connector' = 'print'`.
    Print {
        /// `'print-identifier'`: a prefix of every line.
        identifier: Option<String>,
        /// `'standard-error'`: print to stderr.
        stderr: bool,
    },
    /// `'connector' = 'blackhole'`.
    Blackhole,
}

impl Connector {
    /// The connector's name, as in `'connector' = '…'`.
    pub fn kind(&self) -> &'static str {
        match self {
            Connector::FileSystem { .. } => "filesystem",
            Connector::Kafka(_) => "kafka",
            Connector::UpsertKafka(_) => "upsert-kafka",
            Connector::Jdbc(_) => "jdbc",
            Connector::Print { .. } => "print",
            Connector::Blackhole => "blackhole",
        }
    }
}

/// A row format.
#[derive(Clone, Debug)]
pub enum Format {
    /// `csv`.
    Csv(CsvOptions),
    /// `json`.
    Json(JsonOptions),
    /// `raw`: the bytes of one `STRING` column (UTF-8).
    Raw,
}

/// Options of the `csv` format.
#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// `'csv.field-delimiter'` (default `,`).
    pub delimiter: u8,
    /// `'csv.quote-character'` (default `"`), `None` with
    /// `'csv.disable-quote-character' = 'true'`.
    pub quote: Option<u8>,
    /// `'csv.ignore-parse-errors'`: a row that does not parse is skipped
    /// (default: it fails the job naming its line).
    pub ignore_parse_errors: bool,
    /// `'csv.allow-comments'`: lines starting with `#` are skipped.
    pub allow_comments: bool,
    /// `'csv.null-literal'`: the text read and written as `NULL`.
    pub null_literal: Option<String>,
}

/// Where a Kafka source starts (`'scan.startup.mode'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Startup {
    /// `earliest-offset`.
    Earliest,
    /// `latest-offset`.
    Latest,
    /// `group-offsets` (the default): the group's committed offsets.
    GroupOffsets,
    /// `timestamp` with `'scan.startup.timestamp-millis'`.
    Timestamp(i64),
}

/// A `kafka` or `upsert-kafka` table.
#[derive(Clone, Debug)]
pub struct KafkaTable {
    /// `'topic'`.
    pub topic: String,
    /// `'properties.bootstrap.servers'`.
    pub brokers: String,
    /// `'properties.group.id'`.
    pub group: Option<String>,
    /// The other `'properties.*'`, for the client.
    pub properties: Vec<(String, String)>,
    /// `'scan.startup.mode'`.
    pub startup: Startup,
    /// `'scan.bounded.mode' = 'latest-offset'`: read up to the end offsets
    /// at the start, then end.
    pub bounded: bool,
    /// `'format'` or `'value.format'`.
    pub value: Format,
    /// `'key.format'` and the key's columns (physical positions): the
    /// primary key's for `upsert-kafka`, `'key.fields'` for `kafka`.
    pub key: Option<(Format, Vec<usize>)>,
    /// `'sink.delivery-guarantee' = 'exactly-once'`.
    pub exactly_once: bool,
    /// `'sink.transactional-id-prefix'`.
    pub transactional_id_prefix: Option<String>,
}

/// A `jdbc` table on PostgreSQL.
#[derive(Clone, Debug)]
pub struct JdbcTable {
    /// The connection, in `tokio-postgres`'s `key=value` form.
    pub connection: String,
    /// `'url'` as written, for messages (without a password).
    pub url: String,
    /// `'table-name'`.
    pub table: String,
}

/// The `WITH` options of a table.
pub(crate) struct Options<'o> {
    pub(crate) list: &'o [(String, String, Span)],
    /// Where the table is named (for a missing option).
    pub(crate) at: Span,
    pub(crate) table: &'o str,
}

impl<'o> Options<'o> {
    pub(crate) fn get(&self, key: &str) -> Option<(&'o str, Span)> {
        self.list
            .iter()
            .rev()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, at)| (v.as_str(), *at))
    }

    fn required(&self, key: &str, kind: &str) -> SqlResult<&'o str> {
        self.get(key).map(|(v, _)| v).ok_or_else(|| {
            err!(
                InvalidOption,
                self.at,
                "table '{}' ({kind}) has no '{key}' option",
                self.table
            )
        })
    }

    fn flag(&self, key: &str) -> SqlResult<bool> {
        match self.get(key) {
            None => Ok(false),
            Some((v, at)) => match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(err!(
                    InvalidOption,
                    at,
                    "'{key}' is 'true' or 'false', not '{v}'"
                )),
            },
        }
    }

    fn char(&self, key: &str, default: u8) -> SqlResult<u8> {
        match self.get(key) {
            None => Ok(default),
            Some(("\\t", _)) => Ok(b'\t'),
            Some((v, _)) if v.len() == 1 => Ok(v.as_bytes()[0]),
            Some((v, at)) => Err(err!(
                InvalidOption,
                at,
                "'{key}' must be a single character, not '{v}'"
            )),
        }
    }
}

const CSV_OPTIONS: &[&str] = &[
    "field-delimiter",
    "quote-character",
    "disable-quote-character",
    "ignore-parse-errors",
    "allow-comments",
    "null-literal",
];
const JSON_OPTIONS: &[&str] = &["ignore-parse-errors", "fail-on-missing-field"];

/// The physical columns of a table, for formats that check them.
pub(crate) struct Physical<'c> {
    /// Names, in order.
    pub(crate) names: Vec<&'c str>,
    /// Types, in order.
    pub(crate) types: Vec<SqlType>,
    /// The primary key's physical positions (empty: none).
    pub(crate) key: Vec<usize>,
}

/// The connector of a table from its options, with `'sink.parallelism'`.
pub(crate) fn connector(o: &Options, cols: &Physical) -> SqlResult<(Connector, Option<usize>)> {
    let Some((kind, kind_at)) = o.get("connector") else {
        return Err(err!(
            InvalidOption,
            o.at,
            "table '{}' has no 'connector' option",
            o.table
        ));
    };
    let kind = kind.to_ascii_lowercase();
    // Options the connector knows besides its formats'.
    let known: &[&str] = match kind.as_str() {
        "filesystem" => &[
            "path",
            "format",
            "scan.watermark.emit.strategy",
            "sink.parallelism",
        ],
        "kafka" | "upsert-kafka" => &[
            "topic",
            "properties.bootstrap.servers",
            "properties.group.id",
            "format",
            "value.format",
            "key.format",
            "key.fields",
            "value.fields-include",
            "scan.startup.mode",
            "scan.startup.timestamp-millis",
            "scan.bounded.mode",
            "scan.watermark.emit.strategy",
            "sink.delivery-guarantee",
            "sink.transactional-id-prefix",
            "sink.parallelism",
        ],
        "jdbc" => &[
            "url",
            "table-name",
            "username",
            "password",
            "driver",
            "sink.parallelism",
        ],
        "print" => &["print-identifier", "standard-error", "sink.parallelism"],
        "blackhole" => &[],
        other => {
            return Err(err!(
                InvalidOption,
                kind_at,
                "unknown connector '{other}' (filesystem, kafka, upsert-kafka, jdbc, print and \
                 blackhole are supported)"
            ));
        }
    };
    // The formats named, with the prefix of their options.
    let mut formats: Vec<(&str, String)> = Vec::new();
    for (key, prefix) in [
        ("format", ""),
        ("value.format", "value."),
        ("key.format", "key."),
    ] {
        if let Some((f, _)) = o.get(key) {
            formats.push((f, prefix.to_string()));
        }
    }
    let format_option = |k: &str| {
        formats.iter().any(|(f, prefix)| {
            let list: &[&str] = match f.to_ascii_lowercase().as_str() {
                "csv" => CSV_OPTIONS,
                "json" => JSON_OPTIONS,
                _ => &[],
            };
            k.strip_prefix(prefix.as_str())
                .and_then(|k| k.strip_prefix(&format!("{}.", f.to_ascii_lowercase())))
                .is_some_and(|k| list.contains(&k))
        })
    };
    let kafka_property = |k: &str| kind.ends_with("kafka") && k.starts_with("properties.");
    let unknown: Vec<&str> = o
        .list
        .iter()
        .map(|(k, _, _)| k.as_str())
        .filter(|k| *k != "connector" && !known.contains(k) && !format_option(k))
        .filter(|k| !kafka_property(k))
        .collect();
    if let Some(first) = unknown.first() {
        let at = o.get(first).map_or(o.at, |(_, s)| s);
        return Err(err!(
            InvalidOption,
            at,
            "unsupported options found for '{kind}': {}",
            unknown.join(", ")
        ));
    }
    let sink_parallelism = match o.get("sink.parallelism") {
        None => None,
        Some((v, at)) => match v.parse::<usize>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                return Err(err!(
                    InvalidOption,
                    at,
                    "'sink.parallelism' must be a positive number, not '{v}'"
                ));
            }
        },
    };
    let connector = match kind.as_str() {
        "filesystem" => {
            let path = o.required("path", "filesystem")?;
            let Some(format) = format(o, "format", "", cols, &cols.types)? else {
                return Err(err!(
                    InvalidOption,
                    kind_at,
                    "table '{}' (filesystem) has no 'format' option",
                    o.table
                ));
            };
            if matches!(format, Format::Raw) {
                let at = o.get("format").map_or(kind_at, |(_, s)| s);
                return Err(err!(
                    Unsupported,
                    at,
                    "format 'raw' is not supported by the filesystem connector (csv and json are)"
                ));
            }
            let path = path.strip_prefix("file://").unwrap_or(path);
            Connector::FileSystem {
                path: PathBuf::from(path),
                format,
            }
        }
        "kafka" | "upsert-kafka" => kafka(o, &kind, kind_at, cols)?,
        "jdbc" => jdbc(o, kind_at)?,
        "print" => Connector::Print {
            identifier: o.get("print-identifier").map(|(v, _)| v.to_string()),
            stderr: o.flag("standard-error")?,
        },
        _ => Connector::Blackhole,
    };
    let feature = match connector {
        Connector::Kafka(_) | Connector::UpsertKafka(_) if !cfg!(feature = "kafka") => {
            Some("kafka")
        }
        Connector::Jdbc(_) if !cfg!(feature = "postgres") => Some("postgres"),
        _ => None,
    };
    if let Some(feature) = feature {
        return Err(err!(
            Unsupported,
            kind_at,
            "connector '{kind}' needs floe built with the cargo feature '{feature}'"
        ));
    }
    Ok((connector, sink_parallelism))
}

/// The format named by the option `key` (`None`: no such option), its
/// options prefixed by `prefix` (`value.`, `key.`), for columns of `types`.
fn format(
    o: &Options,
    key: &str,
    prefix: &str,
    cols: &Physical,
    types: &[SqlType],
) -> SqlResult<Option<Format>> {
    let Some((name, at)) = o.get(key) else {
        return Ok(None);
    };
    let opt = |f: &str, k: &str| format!("{prefix}{f}.{k}");
    Ok(Some(match name.to_ascii_lowercase().as_str() {
        "csv" => Format::Csv(CsvOptions {
            delimiter: o.char(&opt("csv", "field-delimiter"), b',')?,
            quote: match o.flag(&opt("csv", "disable-quote-character"))? {
                true => None,
                false => Some(o.char(&opt("csv", "quote-character"), b'"')?),
            },
            ignore_parse_errors: o.flag(&opt("csv", "ignore-parse-errors"))?,
            allow_comments: o.flag(&opt("csv", "allow-comments"))?,
            null_literal: o
                .get(&opt("csv", "null-literal"))
                .map(|(v, _)| v.to_string()),
        }),
        "json" => {
            let options = JsonOptions {
                ignore_parse_errors: o.flag(&opt("json", "ignore-parse-errors"))?,
                fail_on_missing_field: o.flag(&opt("json", "fail-on-missing-field"))?,
            };
            if options.ignore_parse_errors && options.fail_on_missing_field {
                return Err(err!(
                    InvalidOption,
                    at,
                    "fail-on-missing-field and ignore-parse-errors shouldn't both be true"
                ));
            }
            Format::Json(options)
        }
        "raw" => {
            if types.len() != 1 || types[0] != SqlType::String {
                return Err(err!(
                    Unsupported,
                    at,
                    "the 'raw' format takes one STRING column, but table '{}' has [{}]",
                    o.table,
                    cols.names.join(", ")
                ));
            }
            Format::Raw
        }
        other => {
            return Err(err!(
                Unsupported,
                at,
                "format '{other}' is not supported (csv and json are{})",
                if key == "format" && prefix.is_empty() && o.get("topic").is_none() {
                    ""
                } else {
                    ", and raw for Kafka"
                }
            ));
        }
    }))
}

fn kafka(o: &Options, kind: &str, kind_at: Span, cols: &Physical) -> SqlResult<Connector> {
    let upsert = kind == "upsert-kafka";
    let topic = o.required("topic", kind)?.to_string();
    let brokers = o
        .required("properties.bootstrap.servers", kind)?
        .to_string();
    let value = match (
        format(o, "format", "", cols, &cols.types)?,
        format(o, "value.format", "value.", cols, &cols.types)?,
    ) {
        (Some(_), Some(_)) => {
            let at = o.get("value.format").map_or(kind_at, |(_, s)| s);
            return Err(err!(
                InvalidOption,
                at,
                "table '{}' has both 'format' and 'value.format': give one",
                o.table
            ));
        }
        (Some(f), None) if !upsert => f,
        (Some(_), None) => {
            let at = o.get("format").map_or(kind_at, |(_, s)| s);
            return Err(err!(
                InvalidOption,
                at,
                "'upsert-kafka' takes 'key.format' and 'value.format', not 'format'"
            ));
        }
        (None, Some(f)) => f,
        (None, None) => {
            return Err(err!(
                InvalidOption,
                kind_at,
                "table '{}' ({kind}) has no '{}' option",
                o.table,
                if upsert { "value.format" } else { "format" }
            ));
        }
    };
    if let Some((v, at)) = o.get("value.fields-include")
        && !v.eq_ignore_ascii_case("all")
    {
        return Err(err!(
            Unsupported,
            at,
            "'value.fields-include' = '{v}' is not supported (ALL is)"
        ));
    }
    let key_fields: Vec<usize> = match (upsert, o.get("key.fields")) {
        (true, Some((_, at))) => {
            return Err(err!(
                InvalidOption,
                at,
                "'upsert-kafka' takes its key from the PRIMARY KEY, not 'key.fields'"
            ));
        }
        (true, None) => {
            if cols.key.is_empty() {
                return Err(err!(
                    InvalidOption,
                    kind_at,
                    "'upsert-kafka' tables require to define a PRIMARY KEY constraint (table '{}' \
                     has none): the PRIMARY KEY names the columns written to the Kafka message key",
                    o.table
                ));
            }
            cols.key.clone()
        }
        (false, None) => Vec::new(),
        (false, Some((fields, at))) => fields
            .split(';')
            .map(|f| {
                let f = f.trim();
                cols.names.iter().position(|n| *n == f).ok_or_else(|| {
                    err!(
                        InvalidOption,
                        at,
                        "'key.fields' names '{f}', which is not a physical column of table '{}'",
                        o.table
                    )
                })
            })
            .collect::<SqlResult<_>>()?,
    };
    let key_types: Vec<SqlType> = key_fields.iter().map(|&i| cols.types[i]).collect();
    let key = match format(o, "key.format", "key.", cols, &key_types)? {
        Some(f) if !key_fields.is_empty() => Some((f, key_fields)),
        Some(_) => {
            let at = o.get("key.format").map_or(kind_at, |(_, s)| s);
            return Err(err!(
                InvalidOption,
                at,
                "'key.format' needs 'key.fields' (the columns of the key)"
            ));
        }
        None if upsert => {
            return Err(err!(
                InvalidOption,
                kind_at,
                "table '{}' (upsert-kafka) has no 'key.format' option",
                o.table
            ));
        }
        None if !key_fields.is_empty() => {
            let at = o.get("key.fields").map_or(kind_at, |(_, s)| s);
            return Err(err!(InvalidOption, at, "'key.fields' needs 'key.format'"));
        }
        None => None,
    };
    let startup = match o.get("scan.startup.mode") {
        None => Startup::GroupOffsets,
        Some((v, at)) => match v.to_ascii_lowercase().as_str() {
            "earliest-offset" => Startup::Earliest,
            "latest-offset" => Startup::Latest,
            "group-offsets" => Startup::GroupOffsets,
            "timestamp" => {
                let Some((ms, ms_at)) = o.get("scan.startup.timestamp-millis") else {
                    return Err(err!(
                        InvalidOption,
                        at,
                        "'scan.startup.mode' = 'timestamp' needs 'scan.startup.timestamp-millis'"
                    ));
                };
                Startup::Timestamp(ms.parse().map_err(|_| {
                    err!(
                        InvalidOption,
                        ms_at,
                        "'scan.startup.timestamp-millis' must be a number, not '{ms}'"
                    )
                })?)
            }
            other => {
                return Err(err!(
                    Unsupported,
                    at,
                    "'scan.startup.mode' = '{other}' is not supported (earliest-offset, \
                     latest-offset, group-offsets and timestamp are)"
                ));
            }
        },
    };
    let bounded = match o.get("scan.bounded.mode") {
        None => false,
        Some((v, at)) => match v.to_ascii_lowercase().as_str() {
            "unbounded" => false,
            "latest-offset" => true,
            other => {
                return Err(err!(
                    Unsupported,
                    at,
                    "'scan.bounded.mode' = '{other}' is not supported (unbounded and \
                     latest-offset are)"
                ));
            }
        },
    };
    let exactly_once = match o.get("sink.delivery-guarantee") {
        None => false,
        Some((v, at)) => match v.to_ascii_lowercase().as_str() {
            "exactly-once" => true,
            "at-least-once" | "none" => false,
            other => {
                return Err(err!(
                    InvalidOption,
                    at,
                    "'sink.delivery-guarantee' is 'exactly-once', 'at-least-once' or 'none', not \
                     '{other}'"
                ));
            }
        },
    };
    let transactional_id_prefix = o
        .get("sink.transactional-id-prefix")
        .map(|(v, _)| v.to_string());
    if exactly_once && transactional_id_prefix.is_none() {
        let at = o.get("sink.delivery-guarantee").map_or(kind_at, |(_, s)| s);
        return Err(err!(
            InvalidOption,
            at,
            "'sink.transactional-id-prefix' must be specified when using \
             DeliveryGuarantee.EXACTLY_ONCE"
        ));
    }
    let properties = o
        .list
        .iter()
        .filter_map(|(k, v, _)| Some((k.strip_prefix("properties.")?, v)))
        .filter(|(k, _)| !matches!(*k, "bootstrap.servers" | "group.id"))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let table = KafkaTable {
        topic,
        brokers,
        group: o.get("properties.group.id").map(|(v, _)| v.to_string()),
        properties,
        startup,
        bounded,
        value,
        key,
        exactly_once,
        transactional_id_prefix,
    };
    Ok(match upsert {
        true => Connector::UpsertKafka(table),
        false => Connector::Kafka(table),
    })
}

fn jdbc(o: &Options, kind_at: Span) -> SqlResult<Connector> {
    let (url, url_at) = o.get("url").ok_or_else(|| {
        err!(
            InvalidOption,
            kind_at,
            "table '{}' (jdbc) has no 'url' option",
            o.table
        )
    })?;
    let table = o.required("table-name", "jdbc")?.to_string();
    if let Some((d, at)) = o.get("driver")
        && d != "org.postgresql.Driver"
    {
        return Err(err!(
            Unsupported,
            at,
            "driver '{d}' is not supported (PostgreSQL's org.postgresql.Driver is)"
        ));
    }
    let bad = |why: &str| {
        err!(
            Unsupported,
            url_at,
            "'url' {why}: write 'jdbc:postgresql://host:port/database'"
        )
    };
    let Some(rest) = url.strip_prefix("jdbc:postgresql://") else {
        return Err(bad("is not a PostgreSQL JDBC URL"));
    };
    let (address, params) = rest.split_once('?').unwrap_or((rest, ""));
    let (hostport, db) = address
        .split_once('/')
        .ok_or_else(|| bad("names no database"))?;
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| bad(&format!("has the port '{p}'")))?,
        ),
        None => (hostport, 5432),
    };
    if host.is_empty() || db.is_empty() {
        return Err(bad("names no host or no database"));
    }
    let mut user = o.get("username").map(|(v, _)| v.to_string());
    let mut password = o.get("password").map(|(v, _)| v.to_string());
    for pair in params.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("user", v)) => user = user.or(Some(v.to_string())),
            Some(("password", v)) => password = password.or(Some(v.to_string())),
            _ => {
                return Err(bad(&format!(
                    "has the parameter '{pair}' floe does not know"
                )));
            }
        }
    }
    // `key=value` with single quotes, as libpq reads it.
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut connection = format!(
        "host={} port={port} dbname={}",
        quote(host.trim_start_matches('[').trim_end_matches(']')),
        quote(db)
    );
    if let Some(u) = &user {
        connection.push_str(&format!(" user={}", quote(u)));
    }
    if let Some(p) = &password {
        connection.push_str(&format!(" password={}", quote(p)));
    }
    let shown = match url.find("password=") {
        Some(i) => format!("{}password=***", &url[..i]),
        None => url.to_string(),
    };
    Ok(Connector::Jdbc(JdbcTable {
        connection,
        url: shown,
        table,
    }))
}
