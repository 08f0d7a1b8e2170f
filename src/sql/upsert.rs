//! Updates into a sink, as Flink's planner decides them with
//! `table.exec.sink.upsert-materialize` = `AUTO`, and the
//! `SinkUpsertMaterializer` it puts before an upsert sink.
//!
//! An updating query (a non-windowed `GROUP BY`) has an upsert key: the
//! output columns of its group key (none when a key column is not
//! selected, or under a `UNION ALL`). Into an upsert sink (`upsert-kafka`,
//! `jdbc` with a primary key):
//!
//! - primary key = upsert key: each key's `+I`/`+U` rows overwrite it; no
//!   `-U` is needed;
//! - primary key ⊇ upsert key: a key's row may move between sink keys, so
//!   the `-U` rows go to the sink too and delete the old sink key;
//! - otherwise (a primary key that is a subset of the group key, another
//!   column, or no upsert key): several groups meet in one sink key, so
//!   a [`SinkUpsertMaterializer`] keyed by the primary key keeps each sink
//!   key's rows alive in the changelog (keyed state: in checkpoints,
//!   restored, redistributed by key group) and writes the newest of them,
//!   or deletes the sink key when none is left.
//!
//! An append-only sink refuses updates, and so does a `jdbc` table without
//! a primary key, both with Flink's messages.

use super::changelog::{Change, RowKind};
use super::connector::Connector;
use super::error::{SqlResult, err};
use super::planner::Plan;
use super::table::Table;
use super::value::{Row, Value};
use crate::Result;
use crate::operators::keyed::KeyedProcessFunction;
use crate::operators::process::ProcessContext;
use crate::state::ValueStateDescriptor;
use std::sync::Arc;

/// How a plan's rows go into its sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkUpdates {
    /// Append-only rows, or updates whose upsert key is the sink's
    /// primary key: `+I`/`+U` rows only.
    Upsert,
    /// Each update's `-U` row too: a `print` or `blackhole` sink, or a
    /// primary key holding the upsert key.
    Retract,
    /// Through a [`SinkUpsertMaterializer`] keyed by the primary key,
    /// rows told apart by these columns (the upsert key; `None`: the whole
    /// row).
    Materialize(Option<Vec<usize>>),
}

impl SinkUpdates {
    /// Whether the aggregate must emit each update's `-U` row.
    pub fn retract(&self) -> bool {
        !matches!(self, SinkUpdates::Upsert)
    }
}

/// How `plan`'s rows go into `sink`, or Flink's error when the sink cannot
/// take its updates.
pub fn sink_updates(plan: &Plan, sink: &Table) -> SqlResult<SinkUpdates> {
    let Some(agg) = plan.updating() else {
        return Ok(SinkUpdates::Upsert);
    };
    let name = &sink.name;
    match &sink.connector {
        Connector::Print { .. } | Connector::Blackhole => return Ok(SinkUpdates::Retract),
        Connector::UpsertKafka(_) => {}
        Connector::Jdbc(_) if !sink.primary_key.is_empty() => {}
        Connector::Jdbc(_) => {
            return Err(err!(
                Unsupported,
                agg.at,
                "Table sink '{name}' (jdbc) has no PRIMARY KEY: please declare primary key for \
                 sink table when query contains update/delete record (node {})",
                agg.text
            ));
        }
        _ => {
            return Err(err!(
                Unsupported,
                agg.at,
                "Table sink '{name}' doesn't support consuming update changes which is produced \
                 by node {}",
                agg.text
            ));
        }
    }
    let pk = &sink.primary_key;
    Ok(match plan.unique_key() {
        Some(mut key) => {
            key.sort_unstable();
            let mut sorted = pk.clone();
            sorted.sort_unstable();
            if key == sorted {
                SinkUpdates::Upsert
            } else if key.iter().all(|k| pk.contains(k)) {
                SinkUpdates::Retract
            } else {
                SinkUpdates::Materialize(Some(key))
            }
        }
        None => SinkUpdates::Materialize(None),
    })
}

/// Flink's `SinkUpsertMaterializer`, keyed by the sink's primary key: the
/// rows of the key alive in the changelog, oldest first. A `+I`/`+U` row
/// replaces the alive row with its upsert key (else is appended) and is
/// written; a `-U`/`-D` row takes its alive row away: if it was the newest,
/// the newest left is written, and if none is left the key is deleted.
#[derive(Clone)]
pub(crate) struct SinkUpsertMaterializer {
    /// The columns that tell rows apart (`None`: the whole row).
    upsert_key: Option<Arc<[usize]>>,
    rows: ValueStateDescriptor<Vec<Row>>,
}

impl SinkUpsertMaterializer {
    pub(crate) fn new(upsert_key: Option<Vec<usize>>) -> Self {
        SinkUpsertMaterializer {
            upsert_key: upsert_key.map(Into::into),
            rows: ValueStateDescriptor::new("sink-materializer"),
        }
    }

    /// Where `row` is among `alive`, by the upsert key or the whole row.
    fn find(&self, alive: &[Row], row: &[Value]) -> Option<usize> {
        match &self.upsert_key {
            Some(key) => alive
                .iter()
                .position(|a| key.iter().all(|&k| a[k] == row[k])),
            None => alive.iter().position(|a| a.as_slice() == row),
        }
    }
}

type Ctx<'a, 'o> = ProcessContext<'a, 'o, Change, Vec<Value>>;

impl KeyedProcessFunction<Vec<Value>, Change, Change> for SinkUpsertMaterializer {
    fn process_element(&mut self, change: Change, ctx: &mut Ctx<'_, '_>) -> Result<()> {
        let mut alive = ctx.value_state(&self.rows)?.value()?.unwrap_or_default();
        if change.kind.retracts() {
            // A row never seen (its state expired in Flink) is ignored.
            let Some(i) = self.find(&alive, &change.row) else {
                return Ok(());
            };
            alive.remove(i);
            match alive.last() {
                None => {
                    ctx.value_state(&self.rows)?.clear()?;
                    ctx.collect(Change {
                        kind: RowKind::Delete,
                        row: change.row,
                    });
                    return Ok(());
                }
                Some(newest) if i == alive.len() => ctx.collect(Change {
                    kind: RowKind::UpdateAfter,
                    row: newest.clone(),
                }),
                Some(_) => {}
            }
        } else {
            let kind = match alive.is_empty() {
                true => RowKind::Insert,
                false => RowKind::UpdateAfter,
            };
            match self.find(&alive, &change.row) {
                Some(i) if self.upsert_key.is_some() => alive[i] = change.row.clone(),
                _ => alive.push(change.row.clone()),
            }
            ctx.collect(Change {
                kind,
                row: change.row,
            });
        }
        ctx.value_state(&self.rows)?.update(alive)?;
        Ok(())
    }
}
