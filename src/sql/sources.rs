//! The sources of a SQL job: a table's rows read by its connector
//! (`filesystem`: the parallel file source, a file cut into splits read
//! by all source subtasks, or one split where lateness needs it; `kafka`:
//! floe's Kafka source) and decoded by its format, then a `Calc` filling
//! computed columns (and refusing a `NULL` event time, as Flink does),
//! then, with a `WATERMARK`, the timestamps and watermarks operator: the
//! watermark is the largest `event time - delay` seen (Flink SQL's,
//! without the DataStream API's `- 1`), emitted per row (`on-event`) or
//! every 200 ms (`on-periodic`). A `kafka` table's watermark is made in
//! its source instead, per partition, as Flink pushes a table's watermark
//! into its `KafkaSource`: each partition's is the largest event time read
//! from it minus the delay, the subtask's the least over its partitions
//! that are neither idle (`table.exec.source.idle-timeout`) nor finished.

use super::connector::{Connector, Format};
use super::csv::CsvDecoder;
use super::exec::{Builder, eval_error};
use super::expr::Expr;
use super::json::JsonDecoder;
use super::table::{Table, WatermarkEmit};
use super::value::{Row, Value};
use crate::connectors::file_source::{FileSource, LineDecoder};
use crate::operators::{Operator, Output};
use crate::time::WatermarkStrategy;
use crate::{DataStream, Error, Record, Result};
use floe_actors::element::Batch;
use std::sync::Arc;

/// A row format's decoder.
#[derive(Clone)]
pub(crate) enum RowDecoder {
    Csv(CsvDecoder),
    Json(JsonDecoder),
    /// `raw`: the bytes as the one `STRING` column at `position`.
    Raw {
        position: usize,
        width: usize,
    },
}

impl RowDecoder {
    /// The decoder of `table`'s physical columns in `format`.
    pub(crate) fn new(t: &Table, format: &Format) -> Self {
        match format {
            Format::Csv(options) => RowDecoder::Csv(CsvDecoder::new(
                t.physical_types(),
                t.physical.clone(),
                t.columns.len(),
                options.clone(),
            )),
            Format::Json(options) => RowDecoder::Json(JsonDecoder::new(
                t.physical
                    .iter()
                    .map(|&i| t.columns[i].name.clone())
                    .collect(),
                t.physical_types(),
                t.physical.clone(),
                t.columns.len(),
                options.clone(),
            )),
            Format::Raw => RowDecoder::Raw {
                position: t.physical[0],
                width: t.columns.len(),
            },
        }
    }
}

impl LineDecoder for RowDecoder {
    type Out = Option<Row>;

    fn decode(&mut self, bytes: &[u8]) -> std::result::Result<Option<Row>, String> {
        match self {
            RowDecoder::Csv(d) => d.decode(bytes.strip_suffix(b"\n").unwrap_or(bytes)),
            RowDecoder::Json(d) => d.decode_bytes(bytes),
            RowDecoder::Raw { position, width } => {
                let mut row = vec![Value::Null; *width];
                row[*position] = Value::Str(String::from_utf8_lossy(bytes).as_ref().into());
                Ok(Some(row))
            }
        }
    }
}

/// The rows a source decoded, with their computed columns.
#[derive(Clone)]
struct ReadOp {
    computed: Arc<[(usize, Expr)]>,
    rowtime: Option<(usize, Arc<str>)>,
    table: Arc<str>,
}

impl Operator<Option<Row>, Row> for ReadOp {
    fn process_batch(
        &mut self,
        batch: Batch<Option<Row>>,
        out: &mut Output<'_, Row>,
    ) -> Result<()> {
        out.records.reserve(batch.len());
        for r in batch {
            let Some(mut row) = r.value else {
                continue;
            };
            for (i, e) in self.computed.iter() {
                row[*i] = e.eval(&row).map_err(|m| eval_error(&self.table, m))?;
            }
            if let Some((i, name)) = &self.rowtime
                && row[*i].is_null()
            {
                return Err(eval_error(
                    &self.table,
                    format!(
                        "the event-time column '{name}' is NULL in a row; a row's event time \
                         must not be NULL"
                    ),
                ));
            }
            out.records.push(Record {
                value: row,
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }
}

/// The split size of a `filesystem` source of `t`: `size` (the byte
/// ranges of a file read by all source subtasks, each in file order),
/// except where which rows are late would then differ from Flink's: a
/// `WATERMARK` emitted per row (`'on-event'`, or a delay of 0) makes a
/// file one split, read in file order by one subtask, as Flink reads it.
///
/// With a periodic watermark the late rows are those of Flink's within
/// its timing: a subtask reads its splits in file order, so its watermark
/// before a row is at most the largest event time before that row in the
/// file, minus the delay, and the window's watermark is the least of the
/// subtasks'. A row late from split reading is late from one reader
/// emitting per row too; a file out of order by less than the delay has no
/// late row either way.
pub(super) fn split_size(t: &Table, size: u64) -> u64 {
    match &t.watermark {
        Some(w) if w.emit == WatermarkEmit::OnEvent || w.delay_ms == 0 => u64::MAX,
        _ => size.max(1),
    }
}

impl Builder<'_> {
    /// The rows of table `t`, read by its connector.
    pub(super) fn scan(&mut self, t: &Table) -> Result<DataStream<Row>> {
        if let Some(rows) = self.streams.get(&t.name).cloned() {
            let op = super::stream::StreamRowsOp::new(t);
            let uid = self.uid("read");
            let parallelism = super::stream::fixed_parallelism(&rows);
            let fixed = |rows: DataStream<Row>| match parallelism {
                Some(p) => rows.set_parallelism(p),
                None => rows,
            };
            let rows = fixed(
                rows.transform("Calc", move |_| op.clone())
                    .name("Calc")
                    .uid(&uid),
            );
            return Ok(fixed(self.event_time(rows, t)));
        }
        let name = format!("Source: {}", t.name);
        let uid = self.uid("source");
        // Files read whole, in order, by one subtask (a per-row
        // watermark): the read and the watermarks run at parallelism 1, so
        // no other subtask's watermark (one without a split, ending when
        // it will) decides which rows are late.
        let one_reader = matches!(t.connector, Connector::FileSystem { .. })
            && split_size(t, self.split_size) == u64::MAX;
        let single = |rows: DataStream<Row>| match one_reader {
            true => rows.set_parallelism(1),
            false => rows,
        };
        let rows = match &t.connector {
            Connector::FileSystem { path, format } => {
                let decoder = RowDecoder::new(t, format);
                let source =
                    FileSource::new(path, decoder)?.split_size(split_size(t, self.split_size));
                let rows = self
                    .env
                    .add_source(&name, move |ctx| Ok(source.reader(ctx)));
                match one_reader {
                    true => rows.set_parallelism(1),
                    false => rows,
                }
            }
            #[cfg(feature = "kafka")]
            Connector::Kafka(k) => self.kafka_source(t, k, &name)?,
            _ => {
                return Err(Error::Internal(format!(
                    "table '{}' is not a source",
                    t.name
                )));
            }
        };
        self.sources.push(name.clone());
        let rows = rows.name(&name).uid(&uid);
        let read = ReadOp {
            computed: t.computed.clone().into(),
            rowtime: t
                .watermark
                .as_ref()
                .map(|w| (w.column, Arc::from(t.columns[w.column].name.as_str()))),
            table: Arc::from(t.name.as_str()),
        };
        let uid = self.uid("read");
        let rows = single(
            rows.transform("Calc", move |_| read.clone())
                .name("Calc")
                .uid(&uid),
        );
        if matches!(t.connector, Connector::Kafka(_)) {
            // Its watermarks come from the source, per partition.
            return Ok(rows);
        }
        Ok(single(self.event_time(rows, t)))
    }

    /// `rows` of `t` with their event times and watermarks, if `t` has a
    /// `WATERMARK`.
    fn event_time(&mut self, rows: DataStream<Row>, t: &Table) -> DataStream<Row> {
        let Some(w) = t.watermark.as_ref().filter(|w| !w.from_source) else {
            // None, or the stream's own (`SOURCE_WATERMARK()`).
            return rows;
        };
        let (col, delay) = (w.column, w.delay_ms);
        let millis = move |row: &Row| row[col].as_millis().unwrap_or(i64::MIN);
        let strategy = match (w.emit, delay) {
            (WatermarkEmit::OnEvent, _) | (WatermarkEmit::OnPeriodic, 0) => {
                WatermarkStrategy::punctuated(move |row: &Row, _| {
                    Some(millis(row).saturating_sub(delay))
                })
                .with_timestamp_assigner(move |row, _| millis(row))
            }
            // `max - (delay - 1) - 1`: the largest event time minus the delay.
            (WatermarkEmit::OnPeriodic, _) => {
                WatermarkStrategy::bounded_out_of_orderness(delay - 1)
                    .with_timestamp_assigner(move |row, _| millis(row))
            }
        };
        let uid = self.uid("watermarks");
        rows.assign_timestamps_and_watermarks(strategy)
            .name("WatermarkAssigner")
            .uid(&uid)
    }

    /// A `kafka` table's rows: floe's Kafka source over its topic, each
    /// subtask decoding values with a decoder of its own.
    #[cfg(feature = "kafka")]
    fn kafka_source(
        &mut self,
        t: &Table,
        k: &super::connector::KafkaTable,
        name: &str,
    ) -> Result<DataStream<Option<Row>>> {
        use super::connector::Startup;
        use crate::connectors::kafka::{KafkaSource, StartingOffsets};
        let decoder = RowDecoder::new(t, &k.value);
        let k = k.clone();
        // The event time of a decoded row (its computed column evaluated
        // here when it is one; a row without one fails in the `Calc`) and
        // the delay: `max - (delay - 1) - 1` is the largest event time
        // minus the delay.
        let event_time = t.watermark.as_ref().map(|w| {
            let col = w.column;
            let computed = t
                .computed
                .iter()
                .find(|(i, _)| *i == col)
                .map(|(_, e)| e.clone());
            let of: crate::connectors::kafka::event_time::TimestampOf<Option<Row>> =
                Arc::new(move |row: &Option<Row>| {
                    let row = row.as_ref()?;
                    match &computed {
                        None => row[col].as_millis(),
                        Some(e) => e.eval(row).ok()?.as_millis(),
                    }
                });
            (of, w.delay_ms - 1)
        });
        let idleness = self.idle_timeout;
        let source = move |decode: crate::connectors::kafka::ValueDecoder<Option<Row>>| {
            let mut s = KafkaSource::new(&k.brokers, &[k.topic.as_str()], decode)
                .starting_offsets(match k.startup {
                    Startup::Earliest => StartingOffsets::Earliest,
                    Startup::Latest => StartingOffsets::Latest,
                    Startup::GroupOffsets => StartingOffsets::Committed,
                    Startup::Timestamp(ms) => StartingOffsets::Timestamp(ms),
                })
                .bounded(k.bounded);
            if let Some(g) = &k.group {
                s = s.group_id(g);
            }
            for (key, v) in &k.properties {
                s = s.property(key, v);
            }
            if let Some((of, out_of_orderness)) = &event_time {
                s = s
                    .timestamps(of.clone())
                    .per_partition_watermarks(*out_of_orderness, idleness);
            }
            s
        };
        if self.checks {
            source(Arc::new(|_: &[u8]| Ok(None))).check()?;
        }
        Ok(self.env.add_source(name, move |ctx| {
            // Each subtask's own decoder: its buffers are reused, its lock
            // never contended.
            let d = std::sync::Mutex::new(decoder.clone());
            source(Arc::new(move |bytes: &[u8]| {
                d.lock()
                    .map_err(|_| "a decoder panicked".to_string())?
                    .decode(bytes)
            }))
            .reader(ctx)
        }))
    }
}
