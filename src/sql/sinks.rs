//! The sinks of a SQL job, one per connector:
//!
//! - `filesystem`: one file (`csv` or `json` lines) from one sink subtask,
//!   through the two-phase-commit file sink when checkpointing is on;
//!   append-only. Lines are formatted at the rows' parallelism, a `csv`
//!   batch's lines as one record (a window aggregate's lines by the window
//!   itself, see [`window_csv`](super::window_csv)).
//! - `kafka`: floe's Kafka sink, at least once, or exactly once through its
//!   transactions (`'sink.delivery-guarantee' = 'exactly-once'`); a record
//!   per row, keyed by `'key.fields'` when given; append-only.
//! - `upsert-kafka`: a record per change keyed by the primary key: the
//!   row for `+I`/`+U`, a tombstone (no value) for `-U`/`-D`.
//! - `jdbc` (PostgreSQL): floe's PostgreSQL sink, two-phase commit with
//!   the checkpoints (autocommit per batch without them); with a primary
//!   key an upsert by it (`INSERT … ON CONFLICT (key) DO UPDATE`, a `-U` or
//!   `-D` deletes the key's row), else plain inserts.
//! - `print`: `+I[..]` lines (`-U[..]`, `+U[..]`, `-D[..]` for changes), as
//!   Flink's; `blackhole` discards.
//!
//! Before an upsert sink with its own `'sink.parallelism'`, changes are
//! repartitioned by the sink's key, so each key's changes stay in order.
//! Where `table.exec.sink.upsert-materialize` asks for it (by default:
//! where the sink's key does not hold the query's upsert key), a
//! `SinkUpsertMaterializer` keyed by it comes first
//! ([`upsert`](super::upsert)).

use super::changelog::Change;
use super::connector::{Connector, Format};
use super::exec::{Builder, Rows};
use super::json::{JsonFormat, JsonLine};
use super::planner::Plan;
use super::table::Table;
use super::upsert::{SinkUpdates, SinkUpsertMaterializer};
use super::value::{CsvFormat, Row, Value};
use crate::connectors::transactional_file::TransactionalFileSink;
use crate::operators::sink::{SinkContext, SinkFunction};
use crate::operators::{Operator, Output};
use crate::{DataStream, DataStreamSink, Error, Record, Result};
use floe_actors::element::Batch;
use std::fmt::{self, Write as _};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// A row format's encoder (of Kafka records).
#[derive(Clone)]
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) enum RowEncoder {
    Csv(Arc<CsvFormat>),
    Json(Arc<JsonFormat>),
    Raw,
}

/// `fmt::Write` into bytes.
struct Bytes<'b>(&'b mut Vec<u8>);

impl fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
impl RowEncoder {
    /// The encoder of columns `names` in `format`.
    pub(crate) fn new(format: &Format, names: &[String]) -> Self {
        match format {
            Format::Csv(o) => RowEncoder::Csv(Arc::new(CsvFormat {
                delimiter: o.delimiter,
                quote: o.quote,
                null: o.null_literal.clone(),
            })),
            Format::Json(_) => RowEncoder::Json(Arc::new(JsonFormat::new(names))),
            Format::Raw => RowEncoder::Raw,
        }
    }

    /// Appends `values` (one per column) to `out`.
    pub(crate) fn encode<'v>(&self, values: impl Iterator<Item = &'v Value>, out: &mut Vec<u8>) {
        // Writing into a Vec cannot fail.
        let _ = match self {
            RowEncoder::Csv(f) => values.enumerate().try_for_each(|(i, v)| {
                if i > 0 {
                    out.push(f.delimiter);
                }
                v.write_csv(&mut Bytes(out), f)
            }),
            RowEncoder::Json(f) => f.write(&mut Bytes(out), values),
            RowEncoder::Raw => values.take(1).try_for_each(|v| match v {
                Value::Str(s) => Bytes(out).write_str(s),
                Value::Null => Ok(()),
                other => other.write_print(&mut Bytes(out)),
            }),
        };
    }
}

/// Rows as lines of Flink's CSV format, for a file: a batch's lines as one
/// record, joined by line feeds (the sink ends each record with one), so
/// the lines go to the sink subtask without a string or a record each.
#[derive(Clone)]
struct CsvLines {
    format: Arc<CsvFormat>,
    /// A record per line.
    per_row: bool,
    stamps: Stamps,
    /// The last block's length: the next one's capacity.
    capacity: usize,
}

impl CsvLines {
    fn write_row(&mut self, row: &[Value], out: &mut String) {
        let f = &*self.format;
        for (i, v) in row.iter().enumerate() {
            if i > 0 {
                out.push(char::from(f.delimiter));
            }
            match v {
                Value::Timestamp(ms) | Value::TimestampLtz(ms) => {
                    let ltz = matches!(v, Value::TimestampLtz(_));
                    self.stamps.write(*ms, ltz, out, |text| {
                        // Writing into a String cannot fail.
                        let _ = v.write_csv(text, f);
                    })
                }
                _ => {
                    let _ = v.write_csv(out, f);
                }
            }
        }
    }
}

impl Operator<Row, String> for CsvLines {
    fn process_batch(&mut self, batch: Batch<Row>, out: &mut Output<'_, String>) -> Result<()> {
        if self.per_row {
            out.records.reserve(batch.len());
            for r in batch {
                let mut line = String::with_capacity(64);
                self.write_row(&r.value, &mut line);
                out.records.push(Record {
                    value: line,
                    timestamp: r.timestamp,
                });
            }
            return Ok(());
        }
        let Some(timestamp) = batch.last().map(|r| r.timestamp) else {
            return Ok(());
        };
        let mut block = String::with_capacity(self.capacity.max(64));
        for (i, r) in batch.iter().enumerate() {
            if i > 0 {
                block.push('\n');
            }
            self.write_row(&r.value, &mut block);
        }
        self.capacity = block.len() + block.len() / 8;
        out.records.push(Record {
            value: block,
            timestamp,
        });
        Ok(())
    }
}

/// The text of the two timestamps written last: a window's rows share
/// their `window_start` and `window_end`, formatted once per window.
#[derive(Clone, Default)]
struct Stamps {
    /// `(milliseconds, TIMESTAMP_LTZ, text)`; an empty text is no entry.
    last: [(i64, bool, String); 2],
    /// The entry replaced next.
    next: usize,
}

impl Stamps {
    /// Appends the text of `ms` to `out`, written by `write` unless it is
    /// one of the last two.
    #[inline]
    fn write(&mut self, ms: i64, ltz: bool, out: &mut String, write: impl FnOnce(&mut String)) {
        if let Some((_, _, text)) = self
            .last
            .iter()
            .find(|(m, l, text)| *m == ms && *l == ltz && !text.is_empty())
        {
            out.push_str(text);
            return;
        }
        let entry = &mut self.last[self.next];
        self.next ^= 1;
        entry.2.clear();
        write(&mut entry.2);
        (entry.0, entry.1) = (ms, ltz);
        out.push_str(&entry.2);
    }
}

/// The sink of a file of lines (`T`'s text): one sink subtask, through the
/// two-phase-commit file sink when `transactional`.
fn file_lines<T: fmt::Display + Clone + Send + 'static>(
    lines: &DataStream<T>,
    path: &Path,
    name: &str,
    transactional: bool,
) -> Result<DataStreamSink> {
    let sink = match transactional {
        true => lines.sink_exactly_once(name, TransactionalFileSink::new(path)?),
        false => lines.write_as_text(path),
    };
    Ok(sink.set_parallelism(1))
}

impl Builder<'_> {
    /// Adds the rows of `plan` and the sink of `table` writing them: a
    /// window aggregate into a `csv` file writes its lines itself
    /// ([`window_csv`](super::window_csv)), any other plan's rows go to
    /// [`sink`](Self::sink).
    pub fn insert(&mut self, plan: &Plan, table: &Table, updates: &SinkUpdates) -> Result<()> {
        let Some(blocks) = self.window_csv(plan, table)? else {
            let rows = self.stream(plan, updates.retract)?;
            return self.sink(&rows, table, updates);
        };
        let name = format!("Sink: {}", table.name);
        let uid = self.uid("sink");
        let Connector::FileSystem { path, .. } = &table.connector else {
            return Err(Error::Internal(format!("'{}' is not a file", table.name)));
        };
        file_lines(&blocks, path, &name, self.transactional())?
            .name(&name)
            .uid(&uid);
        Ok(())
    }

    /// Whether sinks commit with checkpoints (checkpointing is on, or the
    /// job restores one).
    fn transactional(&self) -> bool {
        let config = self.env.config();
        config.checkpoint.interval.is_some() || config.restore_from.is_some()
    }

    /// Adds the sink of `table` writing `rows` (through a
    /// `SinkUpsertMaterializer` when `updates` says so).
    pub fn sink(&mut self, rows: &Rows, table: &Table, updates: &SinkUpdates) -> Result<()> {
        let name = format!("Sink: {}", table.name);
        let uid = self.uid("sink");
        let parallelism = table.sink_parallelism;
        let names: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
        let transactional = self.transactional();
        let append = |rows: &Rows| match rows {
            Rows::Append(r) => Ok(r.clone()),
            Rows::Changes(_) => Err(Error::Internal(format!(
                "updates planned into the append-only table '{}'",
                table.name
            ))),
        };
        let sink: DataStreamSink = match &table.connector {
            Connector::FileSystem { path, format } => {
                let rows = append(rows)?;
                match format {
                    Format::Json(_) => {
                        let f = Arc::new(JsonFormat::new(&names));
                        // Each line formatted before the one sink
                        // subtask, at the rows' parallelism.
                        let lines = rows
                            .map(move |row| JsonLine(row, f.clone()).to_string())
                            .name("Json");
                        file_lines(&lines, path, &name, transactional)?
                    }
                    _ => {
                        let Format::Csv(csv) = format else {
                            return Err(Error::Internal("a raw file".into()));
                        };
                        let f = Arc::new(CsvFormat {
                            delimiter: csv.delimiter,
                            quote: csv.quote,
                            null: csv.null_literal.clone(),
                        });
                        // Formatted before the one sink subtask, at the
                        // rows' parallelism: a block of lines per batch,
                        // or a line per row when the sink's input rate
                        // (in records) is set.
                        let op = CsvLines {
                            format: f,
                            per_row: self.sink_rate.is_some(),
                            stamps: Default::default(),
                            capacity: 0,
                        };
                        let lines = rows
                            .transform("CsvFormat", move |_| op.clone())
                            .name("CsvFormat");
                        file_lines(&lines, path, &name, transactional)?
                    }
                }
            }
            Connector::Print { identifier, stderr } => {
                let print = PrintRows {
                    identifier: identifier.clone(),
                    stderr: *stderr,
                    prefix: String::new(),
                    buf: Vec::new(),
                };
                match rows {
                    Rows::Append(r) => r.sink(&name, print),
                    Rows::Changes(_) => self.keyed(rows, table, updates).sink(&name, print),
                }
            }
            Connector::Blackhole => match rows {
                Rows::Append(r) => r.sink(&name, Blackhole),
                Rows::Changes(_) => self.keyed(rows, table, updates).sink(&name, Blackhole),
            },
            #[cfg(feature = "kafka")]
            Connector::Kafka(k) => self.kafka_sink(&append(rows)?, table, k, &name, &names)?,
            #[cfg(feature = "kafka")]
            Connector::UpsertKafka(k) => {
                let changes = self.keyed(rows, table, updates);
                self.upsert_kafka_sink(&changes, table, k, &name, &names)?
            }
            #[cfg(feature = "postgres")]
            Connector::Jdbc(j) => {
                let changes = self.keyed(rows, table, updates);
                let job = self.job_name.clone().unwrap_or_else(|| "sql".into());
                jdbc_sink(&changes, table, j, (&name, &uid, &job), transactional)?
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::Internal(format!(
                    "connector '{}' without its feature",
                    other.kind()
                )));
            }
        };
        let mut sink = sink.name(&name).uid(&uid);
        if let (Some(p), false) = (
            parallelism,
            matches!(table.connector, Connector::FileSystem { .. }),
        ) {
            sink = sink.set_parallelism(p);
        }
        if let Some(rate) = self.sink_rate {
            sink.set_input_rate(rate);
        }
        Ok(())
    }

    /// `rows` as changes, repartitioned by `table`'s primary key when the
    /// sink has a parallelism of its own and they are updates, or through
    /// a `SinkUpsertMaterializer` keyed by it (at the sink's parallelism).
    fn keyed(&mut self, rows: &Rows, table: &Table, updates: &SinkUpdates) -> DataStream<Change> {
        let changes = rows.changes();
        let key = table.primary_key.clone();
        let by_key = move |c: &Change| key.iter().map(|&k| c.row[k].clone()).collect::<Vec<_>>();
        match (rows, table.sink_parallelism, &updates.materializer) {
            (Rows::Changes(_), _, Some(m)) => {
                let pk: Vec<&str> = table
                    .primary_key
                    .iter()
                    .map(|&i| table.columns[i].name.as_str())
                    .collect();
                let name = format!("SinkMaterializer(pk=[{}])", pk.join(", "));
                let uid = self.uid("sink-materializer");
                let out = changes
                    .key_by(by_key)
                    .process_with_backend(
                        SinkUpsertMaterializer::new(m.upsert_key.clone()),
                        self.state_backend.clone().unwrap_or_default(),
                    )
                    .name(&name)
                    .uid(&uid);
                match table.sink_parallelism {
                    Some(p) => out.set_parallelism(p),
                    None => out,
                }
            }
            (Rows::Changes(_), Some(_), _) if !table.primary_key.is_empty() => {
                changes.key_by(by_key).as_stream().clone()
            }
            _ => changes,
        }
    }

    #[cfg(feature = "kafka")]
    fn kafka_sink(
        &mut self,
        rows: &DataStream<Row>,
        table: &Table,
        k: &super::connector::KafkaTable,
        name: &str,
        names: &[String],
    ) -> Result<DataStreamSink> {
        use crate::connectors::kafka_sink::KafkaSink;
        let value = RowEncoder::new(&k.value, names);
        let key = k.key.as_ref().map(|(f, cols)| {
            let key_names: Vec<String> = cols
                .iter()
                .map(|&i| names[table.physical[i]].clone())
                .collect();
            let cols: Vec<usize> = cols.iter().map(|&i| table.physical[i]).collect();
            (RowEncoder::new(f, &key_names), cols)
        });
        let mut sink = KafkaSink::<Row>::new(
            &k.brokers,
            &k.topic,
            Arc::new(move |row: &Row, kb: &mut Vec<u8>, vb: &mut Vec<u8>| {
                if let Some((enc, cols)) = &key {
                    enc.encode(cols.iter().map(|&i| &row[i]), kb);
                }
                value.encode(row.iter(), vb);
            }),
        );
        sink = configure(sink, k);
        self.check_kafka(&sink, k)?;
        Ok(match k.exactly_once {
            true => rows.sink_exactly_once(name, sink.exactly_once()),
            false => rows.sink(name, sink),
        })
    }

    #[cfg(feature = "kafka")]
    fn upsert_kafka_sink(
        &mut self,
        changes: &DataStream<Change>,
        table: &Table,
        k: &super::connector::KafkaTable,
        name: &str,
        names: &[String],
    ) -> Result<DataStreamSink> {
        use crate::connectors::kafka_sink::KafkaSink;
        let value = RowEncoder::new(&k.value, names);
        let key_names: Vec<String> = table
            .primary_key
            .iter()
            .map(|&i| names[i].clone())
            .collect();
        let key_format = k
            .key
            .as_ref()
            .map(|(f, _)| f.clone())
            .unwrap_or(Format::Raw);
        let key = RowEncoder::new(&key_format, &key_names);
        let cols = table.primary_key.clone();
        let mut sink = KafkaSink::<Change>::new(
            &k.brokers,
            &k.topic,
            Arc::new(move |c: &Change, kb: &mut Vec<u8>, vb: &mut Vec<u8>| {
                key.encode(cols.iter().map(|&i| &c.row[i]), kb);
                if !c.kind.retracts() {
                    value.encode(c.row.iter(), vb);
                }
            }),
        )
        .tombstones(Arc::new(|c: &Change| c.kind.retracts()));
        sink = configure(sink, k);
        self.check_kafka(&sink, k)?;
        Ok(match k.exactly_once {
            true => changes.sink_exactly_once(name, sink.exactly_once()),
            false => changes.sink(name, sink),
        })
    }

    #[cfg(feature = "kafka")]
    fn check_kafka<T>(
        &self,
        sink: &crate::connectors::kafka_sink::KafkaSink<T>,
        k: &super::connector::KafkaTable,
    ) -> Result<()> {
        if self.checks {
            sink.check()?;
            if k.exactly_once {
                sink.check_transactions()?;
            }
        }
        Ok(())
    }
}

/// The table's client properties and transactional id prefix on a sink.
#[cfg(feature = "kafka")]
fn configure<T>(
    mut sink: crate::connectors::kafka_sink::KafkaSink<T>,
    k: &super::connector::KafkaTable,
) -> crate::connectors::kafka_sink::KafkaSink<T> {
    for (key, v) in &k.properties {
        sink = sink.property(key, v);
    }
    if let Some(p) = &k.transactional_id_prefix {
        sink = sink.transactional_id_prefix(p);
    }
    sink
}

#[cfg(feature = "postgres")]
fn jdbc_sink(
    changes: &DataStream<Change>,
    table: &Table,
    j: &super::connector::JdbcTable,
    (name, uid, job): (&str, &str, &str),
    transactional: bool,
) -> Result<DataStreamSink> {
    use super::value::SqlType;
    use crate::connectors::postgres::{ColumnType, PostgresSink, PostgresSinkConfig, WriteMode};
    let columns: Vec<&str> = table.columns.iter().map(|c| c.name.as_str()).collect();
    let types: Vec<ColumnType> = table
        .columns
        .iter()
        .map(|c| match c.ty {
            SqlType::Boolean => ColumnType::Bool,
            SqlType::Int | SqlType::BigInt => ColumnType::Int8,
            SqlType::Double => ColumnType::Float8,
            SqlType::Decimal(..) => ColumnType::Numeric,
            SqlType::Timestamp(_) => ColumnType::Timestamp,
            SqlType::TimestampLtz(_) => ColumnType::TimestampTz,
            _ => ColumnType::Text,
        })
        .collect();
    let key: Vec<&str> = table.primary_key.iter().map(|&i| columns[i]).collect();
    let mode = match key.is_empty() {
        true => WriteMode::Append,
        false => WriteMode::Upsert,
    };
    let job = job.replace(':', "_");
    let pg = PostgresSinkConfig::new(j.connection.clone(), j.table.clone(), &columns, mode)
        .key(&key)
        .create_table(false)
        .job(job)
        .operator(format!("{}-{uid}", j.table.replace(['.', ':'], "_")));
    let sink = PostgresSink::<Change>::with_types(pg, types)?;
    Ok(match transactional {
        true => changes.sink_exactly_once(name, sink),
        false => changes.sink(name, sink),
    })
}

/// A change as a PostgreSQL row: its values as the columns' parameters
/// (numerics and timestamps as text), a `-U` or `-D` a delete of its key.
#[cfg(feature = "postgres")]
impl crate::connectors::postgres::PostgresRow for Change {
    fn types() -> Vec<crate::connectors::postgres::ColumnType> {
        // Known at run time: the sink is made with `with_types`.
        Vec::new()
    }

    fn push(&self, columns: &mut [crate::connectors::postgres::Column]) {
        use crate::connectors::postgres::Column;
        for (v, c) in self.row.iter().zip(columns.iter_mut()) {
            match c {
                Column::Int8(x) => x.push(v.as_i64()),
                Column::Float8(x) => x.push(v.as_f64()),
                Column::Bool(x) => x.push(match v {
                    Value::Bool(b) => Some(*b),
                    _ => None,
                }),
                Column::Text(x) => x.push(match v {
                    Value::Null => None,
                    Value::Str(s) => Some(s.to_string()),
                    Value::TimestampLtz(_) => Some(format!("{}+00", v.to_sql_string())),
                    other => Some(other.to_sql_string()),
                }),
            }
        }
    }

    fn is_delete(&self) -> bool {
        self.kind.retracts()
    }
}

/// What the `print` sink prints of a record.
trait PrintRecord {
    fn print(&self, out: &mut Vec<u8>);
}

impl PrintRecord for Row {
    fn print(&self, out: &mut Vec<u8>) {
        let _ = super::value::write_print_row(&mut Bytes(out), "+I", self);
    }
}

impl PrintRecord for Change {
    fn print(&self, out: &mut Vec<u8>) {
        let _ = super::value::write_print_row(&mut Bytes(out), self.kind.short(), &self.row);
    }
}

/// Flink's `print` connector: `+I[..]` lines, prefixed by the identifier
/// and, with more than one sink subtask, the subtask's number.
#[derive(Clone)]
struct PrintRows {
    identifier: Option<String>,
    stderr: bool,
    prefix: String,
    buf: Vec<u8>,
}

impl<T: PrintRecord + Send + 'static> SinkFunction<T> for PrintRows {
    async fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        let n = ctx.subtask.0 + 1;
        self.prefix = match (&self.identifier, ctx.parallelism > 1) {
            (Some(id), true) => format!("{id}:{n}> "),
            (Some(id), false) => format!("{id}> "),
            (None, true) => format!("{n}> "),
            (None, false) => String::new(),
        };
        Ok(())
    }

    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        self.buf.clear();
        for r in batch {
            self.buf.extend_from_slice(self.prefix.as_bytes());
            r.value.print(&mut self.buf);
            self.buf.push(b'\n');
        }
        let result = if self.stderr {
            let mut err = std::io::stderr().lock();
            err.write_all(&self.buf).and_then(|_| err.flush())
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(&self.buf).and_then(|_| out.flush())
        };
        result.map_err(|e| Error::io("cannot write", "stdout", e))
    }
}

/// Flink's `blackhole` connector: every row is dropped.
#[derive(Clone, Copy)]
struct Blackhole;

impl<T: Send + 'static> SinkFunction<T> for Blackhole {
    async fn write(&mut self, _batch: Batch<T>) -> Result<()> {
        Ok(())
    }
}
