//! A plan onto floe's operators: the same sources, windows, sinks and
//! checkpoints as a DataStream program's.
//!
//! - `Scan`: the parallel file source (one split per file, dealt round
//!   robin to the source's subtasks) decoding CSV in its read buffer, then
//!   a `Calc` filling computed columns (and refusing a `NULL` event time, as
//!   Flink does), then, with a `WATERMARK`, the timestamps and watermarks
//!   operator: the watermark is the largest `event time - delay` seen
//!   (Flink SQL's, without the DataStream API's `- 1`), emitted per row
//!   (`on-event`) or every 200 ms (`on-periodic`).
//!   A table registered from a DataStream is that stream's rows, checked
//!   against the table's columns, then the same watermarks.
//! - `Calc`: one operator per filter and projection, chained, a batch at a
//!   time.
//! - `WindowAgg`: a `Calc` computing `[key.., arguments..]`, a hash exchange
//!   on the key, floe's window operator (tumbling or sliding, panes,
//!   late rows dropped when their window's end - 1 is at or below the
//!   watermark), emitting `[grouped columns.., aggregates..]` with the
//!   window's last millisecond as event time.
//! - Sinks: `filesystem` writes one CSV file from one sink subtask
//!   (two-phase commit when checkpointing is on), `print` prints `+I[..]`
//!   lines as Flink's, `blackhole` discards.

use super::aggregate::RowAggregate;
use super::csv::CsvDecoder;
use super::expr::{Expr, project};
use super::planner::{GroupItem, Plan, Window, WindowAgg};
use super::stream::{StreamRowsOp, fixed_parallelism};
use super::table::{Connector, Table, WatermarkEmit};
use super::value::{CsvFormat, CsvLine, PrintLine, Row, SqlType, Value};
use crate::connectors::file_source::FileSource;
use crate::connectors::transactional_file::TransactionalFileSink;
use crate::operators::sink::{SinkContext, SinkFunction};
use crate::operators::{Operator, Output};
use crate::time::WatermarkStrategy;
use crate::window::WindowAssigner;
use crate::{DataStream, Error, Record, Result, StreamExecutionEnvironment};
use floe_actors::element::Batch;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// A filter and a projection, a batch at a time.
#[derive(Clone)]
struct CalcOp {
    filter: Option<Arc<Expr>>,
    project: Arc<[Expr]>,
    /// The projection keeps every column in place: a row passes as it is
    /// (no new row per record).
    identity: bool,
    /// The operator's name, for the message of a failed expression.
    name: Arc<str>,
}

fn eval_error(op: &str, message: String) -> Error {
    Error::Sql(super::SqlError::evaluation(format!("{op}: {message}")))
}

impl Operator<Row, Row> for CalcOp {
    fn process_batch(&mut self, batch: Batch<Row>, out: &mut Output<'_, Row>) -> Result<()> {
        out.records.reserve(batch.len());
        for r in batch {
            if let Some(f) = &self.filter
                && !f.holds(&r.value).map_err(|m| eval_error(&self.name, m))?
            {
                continue;
            }
            if self.identity && r.value.len() == self.project.len() {
                out.records.push(r);
                continue;
            }
            let value = project(&self.project, &r.value).map_err(|m| eval_error(&self.name, m))?;
            out.records.push(Record {
                value,
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }
}

/// The rows a file source decoded, with their computed columns.
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

/// Builds the operators of a plan in an environment.
pub struct Builder<'e> {
    env: &'e StreamExecutionEnvironment,
    /// Operators so far, for unique ids.
    operators: usize,
    /// The names of the sources added.
    pub sources: Vec<String>,
    /// The rows of the tables registered from DataStreams, by table name.
    pub streams: HashMap<String, DataStream<Row>>,
}

impl<'e> Builder<'e> {
    /// A builder adding to `env`.
    pub fn new(env: &'e StreamExecutionEnvironment) -> Self {
        // Ids go on from the operators already there (another script's), so
        // they stay unique in the job.
        let operators = env.inner.borrow().nodes.len();
        Builder {
            env,
            operators,
            sources: Vec::new(),
            streams: HashMap::new(),
        }
    }

    /// A stable id for the next operator: its kind and its position in the
    /// script's graph, so a savepoint of a script restores into the same
    /// script.
    fn uid(&mut self, kind: &str) -> String {
        self.operators += 1;
        format!("sql-{}-{kind}", self.operators)
    }

    fn calc(
        &mut self,
        input: &DataStream<Row>,
        filter: Option<Expr>,
        project: Vec<Expr>,
    ) -> DataStream<Row> {
        let identity = project
            .iter()
            .enumerate()
            .all(|(i, e)| matches!(e, Expr::Column(c) if *c == i));
        let op = CalcOp {
            filter: filter.map(Arc::new),
            project: project.into(),
            identity,
            name: "Calc".into(),
        };
        let uid = self.uid("calc");
        let out = input
            .transform("Calc", move |_| op.clone())
            .name("Calc")
            .uid(&uid);
        // Over a stream of a fixed parallelism (a registered DataStream of
        // one subtask, say), a Calc runs at that parallelism, chained: a
        // rebalance would let its rows overtake the watermarks.
        match fixed_parallelism(input) {
            Some(p) => out.set_parallelism(p),
            None => out,
        }
    }

    /// The stream of a plan's rows.
    pub fn stream(&mut self, plan: &Plan) -> Result<DataStream<Row>> {
        match plan {
            Plan::Scan(t) => self.scan(t),
            Plan::Calc {
                input,
                filter,
                project,
                ..
            } => {
                let input = self.stream(input)?;
                Ok(self.calc(&input, filter.clone(), project.clone()))
            }
            Plan::WindowAgg(w) => self.window(w),
            Plan::Union(inputs) => {
                let streams = inputs
                    .iter()
                    .map(|p| self.stream(p))
                    .collect::<Result<Vec<_>>>()?;
                let (first, rest) = streams
                    .split_first()
                    .ok_or_else(|| Error::Internal("a UNION ALL without inputs".into()))?;
                let rest: Vec<&DataStream<Row>> = rest.iter().collect();
                Ok(first.union(&rest))
            }
        }
    }

    fn scan(&mut self, t: &Table) -> Result<DataStream<Row>> {
        if let Some(rows) = self.streams.get(&t.name).cloned() {
            let op = StreamRowsOp::new(t);
            let uid = self.uid("read");
            let parallelism = fixed_parallelism(&rows);
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
        let Connector::FileSystem { path, csv } = &t.connector else {
            return Err(Error::Internal(format!(
                "table '{}' is not a source",
                t.name
            )));
        };
        let decoder = CsvDecoder::new(
            t.physical_types(),
            t.physical.clone(),
            t.columns.len(),
            csv.clone(),
        );
        // One split per file, as Flink reads a CSV file: a file's rows come
        // in file order from one subtask.
        let source = FileSource::new(path, decoder)?.split_size(u64::MAX);
        let name = format!("Source: {}", t.name);
        self.sources.push(name.clone());
        let uid = self.uid("source");
        let rows = self
            .env
            .add_source(&name, move |ctx| Ok(source.reader(ctx)))
            .name(&name)
            .uid(&uid);
        let read = ReadOp {
            computed: t.computed.clone().into(),
            rowtime: t
                .watermark
                .as_ref()
                .map(|w| (w.column, Arc::from(t.columns[w.column].name.as_str()))),
            table: Arc::from(t.name.as_str()),
        };
        let uid = self.uid("read");
        let rows = rows
            .transform("Calc", move |_| read.clone())
            .name("Calc")
            .uid(&uid);
        Ok(self.event_time(rows, t))
    }

    /// `rows` of `t` with their event times and watermarks, if `t` has a
    /// `WATERMARK`.
    fn event_time(&mut self, rows: DataStream<Row>, t: &Table) -> DataStream<Row> {
        let Some(w) = &t.watermark else {
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

    fn window(&mut self, w: &WindowAgg) -> Result<DataStream<Row>> {
        let input = self.stream(&w.input)?;
        let nk = w.keys.len();
        // `[key.., argument of each call..]`.
        let mut pre: Vec<Expr> = w.keys.iter().map(|&k| Expr::Column(k)).collect();
        let mut args = Vec::new();
        let mut arg_types = Vec::new();
        for c in &w.calls {
            match &c.arg {
                Some(e) => {
                    args.push(Some(pre.len()));
                    pre.push(e.clone());
                    arg_types.push(c.arg_ty);
                }
                None => {
                    args.push(None);
                    arg_types.push(SqlType::BigInt);
                }
            }
        }
        let pre = self.calc(&input, None, pre);
        let agg = RowAggregate::new(&w.calls, &args, &arg_types);
        let assigner = match w.window {
            Window::Tumble { size } => WindowAssigner::tumbling(size),
            Window::Hop { size, slide } => WindowAssigner::sliding(size, slide),
            Window::Session { gap } => WindowAssigner::session(gap),
            Window::Cumulate { step, size } => WindowAssigner::cumulative(step, size),
        };
        let group = w.group.clone();
        let ltz = matches!(w.time_ty, SqlType::TimestampLtz(_));
        let uid = self.uid("window");
        let out = pre
            .key_by(move |r: &Row| r[..nk].to_vec())
            .window(assigner)
            .aggregate_with(agg, move |key: &Vec<Value>, window, aggs: Row, out| {
                let mut row = Vec::with_capacity(group.len() + aggs.len());
                for g in &group {
                    row.push(match g {
                        GroupItem::Start => Value::Timestamp(window.start),
                        GroupItem::End => Value::Timestamp(window.end),
                        GroupItem::Time if ltz => Value::TimestampLtz(window.end - 1),
                        GroupItem::Time => Value::Timestamp(window.end - 1),
                        GroupItem::Key(k) => key.get(*k).cloned().unwrap_or(Value::Null),
                    });
                }
                row.extend(aggs);
                out.push(row);
            })
            .name("WindowAggregate")
            .uid(&uid);
        Ok(out)
    }

    /// Adds the sink of `table` writing `rows`.
    pub fn sink(&mut self, rows: &DataStream<Row>, table: &Table) -> Result<()> {
        let name = format!("Sink: {}", table.name);
        let uid = self.uid("sink");
        let parallelism = table.sink_parallelism;
        match &table.connector {
            Connector::FileSystem { path, csv } => {
                let config = self.env.config();
                let format = Arc::new(CsvFormat {
                    delimiter: csv.delimiter,
                    quote: csv.quote,
                    null: csv.null_literal.clone(),
                });
                let lines = rows
                    .map(move |row| CsvLine(row, format.clone()))
                    .name("CsvFormat");
                let transactional =
                    config.checkpoint.interval.is_some() || config.restore_from.is_some();
                let sink = match transactional {
                    true => lines.sink_exactly_once(&name, TransactionalFileSink::new(path)?),
                    false => lines.write_as_text(path),
                };
                // One file: one sink subtask.
                sink.name(&name).uid(&uid).set_parallelism(1);
            }
            Connector::Print { identifier, stderr } => {
                let sink = rows.sink(
                    &name,
                    PrintRows {
                        identifier: identifier.clone(),
                        stderr: *stderr,
                        prefix: String::new(),
                        buf: Vec::new(),
                    },
                );
                let sink = sink.name(&name).uid(&uid);
                if let Some(p) = parallelism {
                    sink.set_parallelism(p);
                }
            }
            Connector::Blackhole => {
                let sink = rows.sink(&name, Blackhole).name(&name).uid(&uid);
                if let Some(p) = parallelism {
                    sink.set_parallelism(p);
                }
            }
        }
        Ok(())
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

impl SinkFunction<Row> for PrintRows {
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

    async fn write(&mut self, batch: Batch<Row>) -> Result<()> {
        self.buf.clear();
        for r in batch {
            // Writing to a Vec cannot fail.
            let _ = writeln!(self.buf, "{}{}", self.prefix, PrintLine(r.value));
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

impl SinkFunction<Row> for Blackhole {
    async fn write(&mut self, _batch: Batch<Row>) -> Result<()> {
        Ok(())
    }
}
