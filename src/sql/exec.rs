//! A plan onto floe's operators: the same sources, windows, sinks and
//! checkpoints as a DataStream program's.
//!
//! - `Scan` ([`sources`](super::sources)): the parallel file source or the
//!   Kafka source, decoding rows, a `Calc` filling computed columns, then,
//!   with a `WATERMARK`, the timestamps and watermarks operator.
//!   A table registered from a DataStream is that stream's rows, checked
//!   against the table's columns, then the same watermarks.
//! - `Calc`: one operator per filter and projection, chained, a batch at a
//!   time; over updates, the same on each change, its kind kept.
//! - `WindowAgg`: a `Calc` splitting each row into its key and its calls'
//!   arguments (a [`GroupRow`]: the exchange and the window operator read
//!   the key in place), a hash exchange on the key, floe's window operator
//!   (tumbling or sliding, panes, late rows dropped when their window's
//!   end - 1 is at or below the watermark) running a [`WindowAggregate`],
//!   emitting `[grouped columns.., aggregates..]` with the window's last
//!   millisecond as event time.
//! - `GroupAgg`: a `Calc` computing `[key.., arguments..]`, a hash exchange
//!   on the key, the keyed [`GroupAggregate`](super::changelog) emitting
//!   changes.
//! - Sinks ([`sinks`](super::sinks)): one per connector.

use super::aggregate::RowAggregate;
use super::changelog::{Change, ChangeCalcOp, GroupAggregate, RowKind};
use super::expr::Expr;
use super::planner::{GroupAgg, GroupItem, Plan, Window, WindowAgg};
use super::stream::fixed_parallelism;
use super::value::{Row, SqlType, Value};
use super::window_aggregate::{GroupKey, GroupRow, Results, SmallRow, WindowAggregate};
use crate::operators::{Operator, Output};
use crate::window::{TimeWindow, WindowAssigner};
use crate::{DataStream, Error, Record, Result, StreamExecutionEnvironment};
use floe_actors::element::Batch;
use std::collections::HashMap;
use std::sync::Arc;

/// The rows of a plan: plain rows, or changes (an updating plan).
pub enum Rows {
    /// Append-only rows (each an insertion).
    Append(DataStream<Row>),
    /// Changes with their kinds.
    Changes(DataStream<Change>),
}

impl Rows {
    /// The rows as changes (plain rows are insertions).
    pub fn changes(&self) -> DataStream<Change> {
        match self {
            Rows::Changes(c) => c.clone(),
            Rows::Append(rows) => rows
                .map(|row| Change {
                    kind: RowKind::Insert,
                    row,
                })
                .name("Changes"),
        }
    }
}

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
    /// A row's projected values, before they move into its own vector
    /// (reused: no new row per record).
    scratch: Vec<Value>,
    /// The projection's columns when it only picks columns, each at most
    /// once (a reordering, say).
    columns: Option<Arc<[usize]>>,
}

/// Evaluates `exprs` on `row` into `row` itself, through `scratch`: the
/// row's vector is reused (no allocation once it holds as many values).
fn project_in_place(
    exprs: &[Expr],
    row: &mut Row,
    scratch: &mut Vec<Value>,
) -> std::result::Result<(), String> {
    scratch.clear();
    for e in exprs {
        scratch.push(e.eval(row)?);
    }
    row.clear();
    row.append(scratch);
    Ok(())
}

/// The columns `project` picks, if it only picks columns.
pub(super) fn columns_of(project: &[Expr]) -> Option<Vec<usize>> {
    project
        .iter()
        .map(|e| match e {
            Expr::Column(c) => Some(*c),
            _ => None,
        })
        .collect()
}

/// The columns `project` picks, if it only picks columns, each at most
/// once.
fn picked_columns(project: &[Expr]) -> Option<Arc<[usize]>> {
    let mut columns = Vec::with_capacity(project.len());
    for e in project {
        match e {
            Expr::Column(c) if !columns.contains(c) => columns.push(*c),
            _ => return None,
        }
    }
    Some(columns.into())
}

pub(crate) fn eval_error(op: &str, message: String) -> Error {
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
            let mut r = r;
            match &self.columns {
                // Columns, each at most once: moved, not cloned.
                Some(columns) => {
                    self.scratch.clear();
                    for &c in columns.iter() {
                        let v = r
                            .value
                            .get_mut(c)
                            .map_or(Value::Null, |v| std::mem::replace(v, Value::Null));
                        self.scratch.push(v);
                    }
                    r.value.clear();
                    r.value.append(&mut self.scratch);
                }
                None => project_in_place(&self.project, &mut r.value, &mut self.scratch)
                    .map_err(|m| eval_error(&self.name, m))?,
            }
            out.records.push(r);
        }
        Ok(())
    }
}

/// A window aggregate's input: each row split into its grouping key and
/// its calls' arguments, the key's columns moved out of the row (no copy),
/// a single argument beside it, several in the row's own vector.
#[derive(Clone)]
struct GroupCalcOp {
    keys: Arc<[usize]>,
    args: Arc<[Expr]>,
    scratch: Vec<Value>,
}

impl GroupCalcOp {
    fn split(&mut self, mut row: Row) -> std::result::Result<GroupRow, String> {
        let args = match &*self.args {
            [] => SmallRow::Many(Vec::new()),
            // A column no key takes: moved out of the row.
            [Expr::Column(c)] if !self.keys.contains(c) => SmallRow::One(match row.get_mut(*c) {
                Some(v) => std::mem::replace(v, Value::Null),
                None => Value::Null,
            }),
            [one] => SmallRow::One(one.eval(&row)?),
            many => {
                self.scratch.clear();
                for e in many {
                    self.scratch.push(e.eval(&row)?);
                }
                SmallRow::Many(Vec::new())
            }
        };
        // The arguments are evaluated: the key's columns can be moved out
        // of the row (a column grouped twice is copied).
        let take = |row: &mut Row, k: usize| match row.get_mut(k) {
            Some(v) => std::mem::replace(v, Value::Null),
            None => Value::Null,
        };
        let key = GroupKey::new(match &*self.keys {
            [k] => SmallRow::One(take(&mut row, *k)),
            keys => SmallRow::Many(
                keys.iter()
                    .map(|&k| row.get(k).cloned().unwrap_or(Value::Null))
                    .collect(),
            ),
        });
        let args = match self.args.len() {
            0 | 1 => args,
            _ => {
                row.clear();
                row.append(&mut self.scratch);
                SmallRow::Many(row)
            }
        };
        Ok(GroupRow { key, args })
    }
}

impl Operator<Row, GroupRow> for GroupCalcOp {
    fn process_batch(&mut self, batch: Batch<Row>, out: &mut Output<'_, GroupRow>) -> Result<()> {
        out.records.reserve(batch.len());
        for r in batch {
            let value = self.split(r.value).map_err(|m| eval_error("Calc", m))?;
            out.records.push(Record {
                value,
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }
}

/// Builds the operators of a plan in an environment.
pub struct Builder<'e> {
    pub(super) env: &'e StreamExecutionEnvironment,
    /// Operators so far, for unique ids.
    operators: usize,
    /// The names of the sources added.
    pub sources: Vec<String>,
    /// Whether connectors check their servers while the job is built (not
    /// for `EXPLAIN`).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(super) checks: bool,
    /// `--sink-rate`: each sink's input rate.
    pub(super) sink_rate: Option<f64>,
    /// The job's name, if known when it is built.
    pub(super) job_name: Option<String>,
    /// The rows of the tables registered from DataStreams, by table name.
    pub streams: HashMap<String, DataStream<Row>>,
    /// The split size of `filesystem` sources (see
    /// [`sources::split_size`](super::sources::split_size)).
    pub(super) split_size: u64,
    /// `table.exec.source.idle-timeout`: after how long without a record a
    /// Kafka partition no longer holds its source's watermark back.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(super) idle_timeout: Option<std::time::Duration>,
    /// Where keyed state goes (`None`: the operators' own maps).
    pub(super) state_backend: Option<crate::state::StateBackendKind>,
}

impl<'e> Builder<'e> {
    /// A builder adding to `env`; `checks`: connectors check that their
    /// servers answer (and their topics exist) now.
    pub fn new(env: &'e StreamExecutionEnvironment, checks: bool) -> Self {
        // Ids go on from the operators already there (another script's), so
        // they stay unique in the job.
        let operators = env.inner.borrow().nodes.len();
        Builder {
            env,
            operators,
            sources: Vec::new(),
            checks,
            sink_rate: None,
            job_name: None,
            streams: HashMap::new(),
            split_size: crate::connectors::file_source::DEFAULT_SPLIT_SIZE,
            idle_timeout: None,
            state_backend: None,
        }
    }

    /// A stable id for the next operator: its kind and its position in the
    /// script's graph, so a savepoint of a script restores into the same
    /// script.
    pub(super) fn uid(&mut self, kind: &str) -> String {
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
        let columns = picked_columns(&project);
        let op = CalcOp {
            filter: filter.map(Arc::new),
            project: project.into(),
            identity,
            name: "Calc".into(),
            scratch: Vec::new(),
            columns,
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

    /// The rows of `plan`. `retract`: whoever reads them needs each update's
    /// `-U` row (a filter, a `print` sink), not only its `+U` row.
    pub fn stream(&mut self, plan: &Plan, retract: bool) -> Result<Rows> {
        Ok(match plan {
            Plan::Scan(t) => Rows::Append(self.scan(t)?),
            // Columns of a window aggregate's rows, picked: the window
            // makes its rows in the projection's order, which the Calc
            // then passes as they are.
            Plan::Calc {
                input,
                filter: None,
                project,
                ..
            } if let Plan::WindowAgg(w) = &**input
                && let Some(columns) = columns_of(project) =>
            {
                let rows = self.window(w, Some(columns))?;
                let identity = (0..project.len()).map(Expr::Column).collect();
                Rows::Append(self.calc(&rows, None, identity))
            }
            Plan::Calc {
                input,
                filter,
                project,
                ..
            } => match self.stream(input, retract || filter.is_some())? {
                Rows::Append(rows) => {
                    Rows::Append(self.calc(&rows, filter.clone(), project.clone()))
                }
                Rows::Changes(changes) => {
                    let op = ChangeCalcOp {
                        filter: filter.clone().map(Arc::new),
                        project: project.clone().into(),
                    };
                    let uid = self.uid("calc");
                    Rows::Changes(
                        changes
                            .transform("Calc", move |_| op.clone())
                            .name("Calc")
                            .uid(&uid),
                    )
                }
            },
            Plan::WindowAgg(w) => Rows::Append(self.window(w, None)?),
            Plan::GroupAgg(g) => Rows::Changes(self.group(g, retract)?),
            Plan::Union(inputs) => {
                let streams = inputs
                    .iter()
                    .map(|p| self.stream(p, retract))
                    .collect::<Result<Vec<_>>>()?;
                if streams.iter().all(|s| matches!(s, Rows::Append(_))) {
                    let rows: Vec<DataStream<Row>> = streams
                        .into_iter()
                        .filter_map(|s| match s {
                            Rows::Append(r) => Some(r),
                            Rows::Changes(_) => None,
                        })
                        .collect();
                    let (first, rest) = rows
                        .split_first()
                        .ok_or_else(|| Error::Internal("a UNION ALL without inputs".into()))?;
                    let rest: Vec<&DataStream<Row>> = rest.iter().collect();
                    Rows::Append(first.union(&rest))
                } else {
                    let changes: Vec<DataStream<Change>> =
                        streams.iter().map(Rows::changes).collect();
                    let rest: Vec<&DataStream<Change>> = changes[1..].iter().collect();
                    Rows::Changes(changes[0].union(&rest))
                }
            }
        })
    }

    /// `[key.., argument of each call..]` of an aggregate's input, and the
    /// arguments' columns and types.
    fn pre_aggregate(
        &mut self,
        input: &DataStream<Row>,
        keys: &[usize],
        calls: &[super::bind::AggCall],
    ) -> (DataStream<Row>, Vec<Option<usize>>, Vec<SqlType>) {
        let mut pre: Vec<Expr> = keys.iter().map(|&k| Expr::Column(k)).collect();
        let mut args = Vec::new();
        let mut arg_types = Vec::new();
        for c in calls {
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
        (self.calc(input, None, pre), args, arg_types)
    }

    fn group(&mut self, g: &GroupAgg, retract: bool) -> Result<DataStream<Change>> {
        let Rows::Append(input) = self.stream(&g.input, false)? else {
            return Err(Error::Internal(format!("{}: an updating input", g.text)));
        };
        let nk = g.keys.len();
        let (pre, args, arg_types) = self.pre_aggregate(&input, &g.keys, &g.calls);
        let agg = RowAggregate::with_distinct_outside(&g.calls, &args, &arg_types);
        let function = GroupAggregate::new(agg, nk, retract);
        let uid = self.uid("group-aggregate");
        Ok(pre
            .key_by(move |r: &Row| r[..nk].to_vec())
            .process_with_backend(function, self.state_backend.clone().unwrap_or_default())
            .name("GroupAggregate")
            .uid(&uid))
    }

    /// The window aggregate `w`, its results made into records by `f`
    /// (called with the key, the window and the calls' results).
    pub(super) fn window_with<OUT, F>(&mut self, w: &WindowAgg, f: F) -> Result<DataStream<OUT>>
    where
        OUT: Clone + Send + 'static,
        F: Fn(&GroupKey, &TimeWindow, Results, &mut Vec<OUT>) + Send + Sync + 'static,
    {
        let Rows::Append(input) = self.stream(&w.input, false)? else {
            return Err(Error::Internal("a window over updates".into()));
        };
        // `[argument of each call..]`, beside the key.
        let mut pre = Vec::new();
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
        let op = GroupCalcOp {
            keys: w.keys.clone().into(),
            args: pre.into(),
            scratch: Vec::new(),
        };
        let uid = self.uid("calc");
        let calc = input
            .transform("Calc", move |_| op.clone())
            .name("Calc")
            .uid(&uid);
        let pre = match fixed_parallelism(&input) {
            Some(p) => calc.set_parallelism(p),
            None => calc,
        };
        let agg = WindowAggregate::new(&w.calls, &args, &arg_types);
        let assigner = match w.window {
            Window::Tumble { size } => WindowAssigner::tumbling(size),
            Window::Hop { size, slide } => WindowAssigner::sliding(size, slide),
            Window::Session { gap } => WindowAssigner::session(gap),
            Window::Cumulate { step, size } => WindowAssigner::cumulative(step, size),
        };
        let uid = self.uid("window");
        let windows = pre.key_by_field(|r: &GroupRow| &r.key).window(assigner);
        let windows = match &self.state_backend {
            Some(kind) => windows.state_backend(kind.clone()),
            None => windows,
        };
        Ok(windows
            .aggregate_with(agg, f)
            .name("WindowAggregate")
            .uid(&uid))
    }

    /// The rows of `w`: `[grouped columns.., aggregates..]`, or those
    /// columns picked by `columns`.
    fn window(&mut self, w: &WindowAgg, columns: Option<Vec<usize>>) -> Result<DataStream<Row>> {
        let group = w.group.clone();
        // The columns picked, and whether each at most once (then moved).
        let picked = columns.map(|c| {
            let once = c.iter().enumerate().all(|(i, x)| !c[..i].contains(x));
            (c, once)
        });
        let ltz = matches!(w.time_ty, SqlType::TimestampLtz(_));
        self.window_with(
            w,
            move |key: &GroupKey, window: &TimeWindow, mut aggs: Results, out: &mut Vec<Row>| {
                let key = key.as_slice();
                let grouped = |g: &GroupItem| match g {
                    GroupItem::Start => Value::Timestamp(window.start),
                    GroupItem::End => Value::Timestamp(window.end),
                    GroupItem::Time if ltz => Value::TimestampLtz(window.end - 1),
                    GroupItem::Time => Value::Timestamp(window.end - 1),
                    GroupItem::Key(k) => key.get(*k).cloned().unwrap_or(Value::Null),
                };
                let row = match &picked {
                    None => {
                        let mut row = Vec::with_capacity(group.len() + aggs.len());
                        row.extend(group.iter().map(grouped));
                        aggs.append_to(&mut row);
                        row
                    }
                    Some((columns, once)) => columns
                        .iter()
                        .map(|&c| match group.get(c) {
                            Some(g) => grouped(g),
                            None => aggs.value(c - group.len(), *once),
                        })
                        .collect(),
                };
                out.push(row);
            },
        )
    }
}
