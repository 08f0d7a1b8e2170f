//! Updating queries: a non-windowed `GROUP BY` emits a changelog, as
//! Flink's `GroupAggregate` does, and the operators downstream of it carry
//! each row's kind.
//!
//! Per input row the aggregate updates its key's accumulators (keyed
//! state: in checkpoints, restored, redistributed by key group) and emits,
//! as Flink's `GroupAggFunction` without mini-batches: `+I` with the first
//! result of a key; nothing when the result did not change; else `-U` with
//! the previous result (only when something downstream needs it: a
//! filter, a `print` sink) and `+U` with the new one. `COUNT(DISTINCT x)`
//! keeps the values seen in map state, one entry per key and value, so a
//! row reads and writes only what it touches.

use super::aggregate::{Acc, RowAggregate};
use super::expr::{Expr, project};
use super::value::{Row, Value};
use crate::operators::keyed::KeyedProcessFunction;
use crate::operators::process::ProcessContext;
use crate::operators::{Operator, Output};
use crate::state::{AggregateFunction, MapStateDescriptor, ValueStateDescriptor};
use crate::{Record, Result};
use floe_actors::element::Batch;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The kind of a change, as Flink's `RowKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert,
    /// `-U`: the row before an update.
    UpdateBefore,
    /// `+U`: the row after an update.
    UpdateAfter,
    /// `-D`: a row deleted.
    Delete,
}

impl RowKind {
    /// As Flink's `RowKind.shortString()`: `+I`, `-U`, `+U`, `-D`.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// Whether the row is taken away (`-U`, `-D`): an upsert sink deletes
    /// its key.
    pub fn retracts(self) -> bool {
        matches!(self, RowKind::UpdateBefore | RowKind::Delete)
    }
}

/// A row with its kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// What happened to the row.
    pub kind: RowKind,
    /// The row.
    pub row: Row,
}

impl std::fmt::Display for Change {
    /// As Flink's `print` connector shows a change: `+U[a, 2]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        super::value::write_print_row(f, self.kind.short(), &self.row)
    }
}

/// A filter and a projection over changes: the kind passes through.
#[derive(Clone)]
pub(crate) struct ChangeCalcOp {
    pub(crate) filter: Option<Arc<Expr>>,
    pub(crate) project: Arc<[Expr]>,
}

impl Operator<Change, Change> for ChangeCalcOp {
    fn process_batch(&mut self, batch: Batch<Change>, out: &mut Output<'_, Change>) -> Result<()> {
        out.records.reserve(batch.len());
        for r in batch {
            if let Some(f) = &self.filter
                && !f
                    .holds(&r.value.row)
                    .map_err(|m| super::exec::eval_error("Calc", m))?
            {
                continue;
            }
            let row = project(&self.project, &r.value.row)
                .map_err(|m| super::exec::eval_error("Calc", m))?;
            out.records.push(Record {
                value: Change {
                    kind: r.value.kind,
                    row,
                },
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }
}

/// The keyed function of a non-windowed aggregate. Its input rows are
/// `[key.., argument of each call..]` (a `Calc` computed them), keyed by
/// the first `keys` columns; it emits `[key.., result of each call..]`.
#[derive(Clone)]
pub(crate) struct GroupAggregate {
    agg: RowAggregate,
    keys: usize,
    /// `COUNT(DISTINCT ..)` calls: call index and argument column.
    distinct: Arc<[(usize, usize)]>,
    /// Whether `-U` rows are emitted before `+U` rows.
    retract: bool,
    acc: ValueStateDescriptor<Vec<Acc>>,
    seen: MapStateDescriptor<(u32, Value), ()>,
}

impl GroupAggregate {
    /// The function of `agg` (built with distinct counts kept outside its
    /// accumulators) over rows keyed by their first `keys` columns.
    pub(crate) fn new(agg: RowAggregate, keys: usize, retract: bool) -> Self {
        GroupAggregate {
            distinct: agg.distinct_arguments().into(),
            agg,
            keys,
            retract,
            acc: ValueStateDescriptor::new("accumulators"),
            seen: MapStateDescriptor::new("distinct"),
        }
    }

    fn emit(&self, kind: RowKind, key: &[Value], result: Row, ctx: &mut Ctx<'_, '_>) {
        let mut row = Vec::with_capacity(key.len() + result.len());
        row.extend_from_slice(key);
        row.extend(result);
        ctx.collect(Change { kind, row });
    }
}

type Ctx<'a, 'o> = ProcessContext<'a, 'o, Change, Vec<Value>>;

impl KeyedProcessFunction<Vec<Value>, Row, Change> for GroupAggregate {
    fn process_element(&mut self, row: Row, ctx: &mut Ctx<'_, '_>) -> Result<()> {
        let stored = ctx.value_state(&self.acc)?.value()?;
        let first = stored.is_none();
        let mut acc = stored.unwrap_or_else(|| self.agg.create_accumulator());
        let before = (!first).then(|| self.agg.get_result(&acc));
        self.agg.add(&row, &mut acc);
        for &(call, arg) in self.distinct.iter() {
            let v = &row[arg];
            if v.is_null() {
                continue;
            }
            let mut seen = ctx.map_state(&self.seen)?;
            let entry = (call as u32, v.clone());
            if !seen.contains(&entry)? {
                seen.put(entry, ())?;
                if let Some(Acc::Count(n)) = acc.get_mut(call) {
                    *n += 1;
                }
            }
        }
        let after = self.agg.get_result(&acc);
        ctx.value_state(&self.acc)?.update(acc)?;
        let key = &row[..self.keys];
        match before {
            None => self.emit(RowKind::Insert, key, after, ctx),
            Some(b) if b == after => {}
            Some(b) => {
                if self.retract {
                    self.emit(RowKind::UpdateBefore, key, b, ctx);
                }
                self.emit(RowKind::UpdateAfter, key, after, ctx);
            }
        }
        Ok(())
    }
}
