//! Updates into a sink, as Flink's planner decides them under
//! `table.exec.sink.upsert-materialize` (`NONE`, `AUTO`, `FORCE`), and the
//! `SinkUpsertMaterializer` it puts before a sink with a primary key.
//!
//! An updating query (a non-windowed `GROUP BY`) has an upsert key: the
//! output columns of its group key (none when a key column is not
//! selected, or under a `UNION ALL`). Into an upsert sink (`upsert-kafka`,
//! `jdbc` with a primary key), under `AUTO`:
//!
//! - primary key = upsert key: each key's `+I`/`+U` rows overwrite it; no
//!   `-U` is needed;
//! - primary key ⊇ upsert key: a key's row may move between sink keys, so
//!   the `-U` rows go to the sink too and delete the old sink key;
//! - otherwise (a primary key that is a subset of the group key, another
//!   column, or no upsert key): several groups meet in one sink key, so
//!   a `SinkUpsertMaterializer` keyed by the primary key keeps each sink
//!   key's rows alive in the changelog (keyed state: in checkpoints,
//!   restored, redistributed by key group) and writes the newest of them,
//!   or deletes the sink key when none is left.
//!
//! `NONE` never materializes: the `-U` rows then delete their sink key even
//! where another group's row is still alive in it. `FORCE` materializes
//! before every sink with a primary key. A `print` or `blackhole` table
//! with a primary key is materialized by the same rule (it takes the `-U`
//! rows anyway).
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
use sqlparser::tokenizer::Span;
use std::sync::Arc;

/// Flink's option `table.exec.sink.upsert-materialize`.
pub const UPSERT_MATERIALIZE: &str = "table.exec.sink.upsert-materialize";

/// `table.exec.sink.upsert-materialize`: when a `SinkUpsertMaterializer`
/// goes before a sink with a primary key that is written updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpsertMaterialize {
    /// Never: the changes go to the sink as the query emits them, each
    /// `-U` deleting its row's primary key (Flink's `NONE`).
    None,
    /// Where the primary key does not hold the query's upsert key
    /// (Flink's default, `AUTO`).
    #[default]
    Auto,
    /// Before every sink with a primary key, even one keyed by the upsert
    /// key (Flink's `FORCE`).
    Force,
}

impl UpsertMaterialize {
    /// The value of `SET 'table.exec.sink.upsert-materialize'`, in any
    /// case (as Flink reads an enum option).
    pub fn parse(value: &str, at: Span) -> SqlResult<Self> {
        Ok(match value.to_ascii_uppercase().as_str() {
            "NONE" => UpsertMaterialize::None,
            "AUTO" => UpsertMaterialize::Auto,
            "FORCE" => UpsertMaterialize::Force,
            _ => {
                return Err(err!(
                    InvalidOption,
                    at,
                    "'{UPSERT_MATERIALIZE}' cannot be '{value}': write NONE, AUTO or FORCE"
                ));
            }
        })
    }
}

/// How a plan's rows go into its sink.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkUpdates {
    /// Whether the aggregate emits each update's `-U` row: into a sink
    /// that takes them (`print`, `blackhole`), or one whose primary key is
    /// not exactly the upsert key.
    pub retract: bool,
    /// Flink's `upsertMaterialize` of the sink (`EXPLAIN` shows
    /// `upsertMaterialize=[true]`); under `FORCE` set for an insert-only
    /// query too, which then has no materializer (as in Flink).
    pub upsert_materialize: bool,
    /// The `SinkUpsertMaterializer` before the sink: an updating query
    /// with `upsert_materialize`.
    pub materializer: Option<Materializer>,
}

/// A `SinkUpsertMaterializer` keyed by the sink's primary key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Materializer {
    /// The columns that tell rows apart: the query's upsert key (`None`:
    /// the whole row, without one).
    pub upsert_key: Option<Vec<usize>>,
}

/// How `plan`'s rows go into `sink` under `mode`, as Flink's planner
/// decides it, or Flink's error when the sink cannot take its updates.
pub fn sink_updates(plan: &Plan, sink: &Table, mode: UpsertMaterialize) -> SqlResult<SinkUpdates> {
    let pk = &sink.primary_key;
    let Some(agg) = plan.updating() else {
        return Ok(SinkUpdates {
            retract: false,
            upsert_materialize: mode == UpsertMaterialize::Force && !pk.is_empty(),
            materializer: None,
        });
    };
    let name = &sink.name;
    // Whether the sink takes `-U` rows itself.
    let takes_before = match &sink.connector {
        Connector::Print { .. } | Connector::Blackhole => true,
        Connector::UpsertKafka(_) => false,
        Connector::Jdbc(_) if !pk.is_empty() => false,
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
    };
    // A global aggregate's upsert key is empty: its rows are told apart
    // whole.
    let key = plan.unique_key().map(|mut k| {
        k.sort_unstable();
        k
    });
    let mut sorted_pk = pk.clone();
    sorted_pk.sort_unstable();
    // An upsert sink keyed by the upsert key itself takes `+U` rows only;
    // any other primary key needs the `-U` rows too (to delete the old
    // sink key, or to be materialized).
    let retract = takes_before || key.as_ref() != Some(&sorted_pk);
    let upsert_materialize = !pk.is_empty()
        && match mode {
            UpsertMaterialize::None => false,
            UpsertMaterialize::Force => true,
            UpsertMaterialize::Auto => !key
                .as_ref()
                .is_some_and(|k| k.iter().all(|c| pk.contains(c))),
        };
    Ok(SinkUpdates {
        retract,
        upsert_materialize,
        materializer: upsert_materialize.then(|| Materializer {
            upsert_key: key.filter(|k| !k.is_empty()),
        }),
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
