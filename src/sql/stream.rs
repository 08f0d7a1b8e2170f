//! Tables and DataStreams mixed: a `DataStream<Row>` of the session's
//! environment read as a table
//! ([`SqlSession::register_stream`](super::SqlSession::register_stream)),
//! and a query's rows as a `DataStream<Row>`
//! ([`SqlSession::query_to_stream`](super::SqlSession::query_to_stream)).
//!
//! A registered stream's rows hold the table's physical columns in order.
//! Each row is checked against the schema as it is read ([`StreamRowsOp`]):
//! a row of another width, or a value of another type, fails the job with a
//! typed error naming the table and the column, never a panic further on.
//! A `rowtime` `METADATA` column is the record's timestamp; a row's event
//! time is its event-time column, and with `SOURCE_WATERMARK()` the
//! stream's own watermarks go on with the rows (as Flink's
//! `fromDataStream` keeps them), else the table's `WATERMARK` makes new
//! ones.

use super::bind::Column;
use super::error::SqlError;
use super::expr::Expr;
use super::table::Table;
use super::value::{Row, SqlType, Value, rescale};
use crate::operators::{Operator, Output};
use crate::{DataStream, Error, Record, Result};
use floe_actors::element::Batch;
use std::sync::Arc;

/// A query's rows as a stream, with their columns.
#[derive(Clone)]
#[non_exhaustive]
pub struct SqlStream {
    /// The rows, one `Value` per column; a window aggregate's rows carry
    /// their `window_time` as event time, and the watermarks flow with
    /// them.
    pub stream: DataStream<Row>,
    /// The columns: name and type, in row order.
    pub columns: Vec<Column>,
}

impl std::fmt::Debug for SqlStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStream")
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// The parallelism of the operator that made `rows`, if it was fixed (a
/// source of one subtask, say): a registered stream's rows are checked and
/// given their watermarks at that parallelism, on forward edges, so that
/// each subtask's rows keep their order (and which are late does not
/// depend on timing).
pub(crate) fn fixed_parallelism(rows: &DataStream<Row>) -> Option<usize> {
    let [one] = rows.refs.as_slice() else {
        return None;
    };
    let inner = rows.env.inner.borrow();
    let node = inner.nodes.get(one.node)?;
    node.fixed_parallelism.then_some(node.parallelism)
}

/// Checks each row of a registered stream against its table and fills
/// the computed columns.
#[derive(Clone)]
pub(crate) struct StreamRowsOp {
    table: Arc<str>,
    columns: Arc<[Column]>,
    physical: Arc<[usize]>,
    computed: Arc<[(usize, Expr)]>,
    rowtime: Option<usize>,
    /// The `rowtime` `METADATA` column (the record's timestamp).
    metadata: Option<usize>,
}

impl StreamRowsOp {
    pub(crate) fn new(t: &Table) -> Self {
        StreamRowsOp {
            table: Arc::from(t.name.as_str()),
            columns: t.columns.clone().into(),
            physical: t.physical.clone().into(),
            computed: t.computed.clone().into(),
            rowtime: t.watermark.as_ref().map(|w| w.column),
            metadata: t.rowtime_metadata,
        }
    }

    fn fail(&self, message: String) -> Error {
        Error::Sql(SqlError::evaluation(format!(
            "DataStream table '{}': {message}",
            self.table
        )))
    }

    /// `row` (the physical columns) of a record stamped `timestamp`
    /// checked, as a row of every column.
    fn row(&self, mut row: Row, timestamp: Option<i64>) -> Result<Row> {
        if row.len() != self.physical.len() {
            return Err(self.fail(format!(
                "a row has {} values, the table {} physical columns",
                row.len(),
                self.physical.len()
            )));
        }
        for (v, &i) in row.iter_mut().zip(self.physical.iter()) {
            let c = &self.columns[i];
            if !conform(v, c.ty) {
                return Err(self.fail(format!(
                    "column '{}' is {}, a row holds {v:?}",
                    c.name, c.ty
                )));
            }
        }
        if self.physical.len() != self.columns.len() {
            let mut full = vec![Value::Null; self.columns.len()];
            for (v, &i) in row.into_iter().zip(self.physical.iter()) {
                full[i] = v;
            }
            if let (Some(i), Some(ts)) = (self.metadata, timestamp) {
                full[i] = match self.columns[i].ty {
                    SqlType::TimestampLtz(_) => Value::TimestampLtz(ts),
                    _ => Value::Timestamp(ts),
                };
            }
            for (i, e) in self.computed.iter() {
                full[*i] = e.eval(&full).map_err(|m| self.fail(m))?;
            }
            row = full;
        }
        if let Some(i) = self.rowtime
            && row[i].is_null()
        {
            return Err(self.fail(format!(
                "the event-time column '{}' is NULL in a row; a row's event time must not be NULL",
                self.columns[i].name
            )));
        }
        Ok(row)
    }
}

/// Whether `v` is a value of `ty` (or `NULL`); a decimal is brought to the
/// column's scale when it fits its precision.
fn conform(v: &mut Value, ty: SqlType) -> bool {
    match (&*v, ty) {
        (Value::Null, _)
        | (Value::Bool(_), SqlType::Boolean)
        | (Value::Int(_), SqlType::Int)
        | (Value::BigInt(_), SqlType::BigInt)
        | (Value::Double(_), SqlType::Double)
        | (Value::Str(_), SqlType::String)
        | (Value::Timestamp(_), SqlType::Timestamp(_))
        | (Value::TimestampLtz(_), SqlType::TimestampLtz(_)) => true,
        (Value::Decimal(u, s), SqlType::Decimal(p, scale)) => {
            match rescale(*u, *s, scale).filter(|x| x.unsigned_abs() < 10u128.pow(u32::from(p))) {
                Some(x) => {
                    *v = Value::Decimal(x, scale);
                    true
                }
                None => false,
            }
        }
        _ => false,
    }
}

impl Operator<Row, Row> for StreamRowsOp {
    fn process_batch(&mut self, batch: Batch<Row>, out: &mut Output<'_, Row>) -> Result<()> {
        out.records.reserve(batch.len());
        for r in batch {
            let value = self.row(r.value, r.timestamp)?;
            // The event time is the event-time column's (SQL windows take
            // the record's timestamp).
            let timestamp = match self.rowtime {
                Some(i) => value[i].as_millis(),
                None => r.timestamp,
            };
            out.records.push(Record { value, timestamp });
        }
        Ok(())
    }
}
