//! The sink's SQL: the insert (an upsert by the key in upsert mode), the
//! delete of keys and the insert that comes before it, and the table's
//! creation, each over one array parameter per column (`unnest`), and the
//! quoting of names.

use super::{ColumnType, PostgresError, PostgresSinkConfig, WriteMode};
use crate::Result;

/// The statements of a sink: insert, create, delete.
pub(super) struct Sql {
    pub(super) insert: String,
    pub(super) create: Option<String>,
    pub(super) delete: Option<String>,
    /// Upsert mode: `INSERT … ON CONFLICT (key) DO NOTHING` of the rows
    /// about to be deleted, run before the delete. A `DELETE` neither sees
    /// nor waits for a row another transaction inserted and has not
    /// committed yet (the previous checkpoint's, prepared and not yet
    /// committed), so it would miss that row, which then appears when that
    /// transaction commits; an insert of the same key waits for it to end,
    /// and the delete that follows sees its row (and the rows this one
    /// added, where there was none).
    pub(super) claim: Option<String>,
}

/// The statements of a sink writing `types` into `c`'s table, keyed (in
/// upsert mode) by the columns `key`.
pub(super) fn statements(
    c: &PostgresSinkConfig,
    types: &[ColumnType],
    key: &[usize],
) -> Result<Sql> {
    let table = identifier(&c.table)?;
    let cols: Vec<String> = c
        .columns
        .iter()
        .map(|x| identifier(x))
        .collect::<Result<_>>()?;
    let upsert = c.mode == WriteMode::Upsert;
    // `unnest($1::P[], …) AS u(c0, …)`, the values cast to each
    // column's type where they travel as text.
    let unnest = |columns: &[usize]| {
        let arrays: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(n, &i)| format!("${}::{}[]", n + 1, types[i].param()))
            .collect();
        let names: Vec<String> = (0..columns.len()).map(|n| format!("c{n}")).collect();
        format!("unnest({}) AS u({})", arrays.join(", "), names.join(", "))
    };
    let value = |n: usize, i: usize| match types[i].param() == types[i].sql() {
        true => format!("u.c{n}"),
        false => format!("u.c{n}::{}", types[i].sql()),
    };
    let all: Vec<usize> = (0..cols.len()).collect();
    let values: Vec<String> = all.iter().map(|&i| value(i, i)).collect();
    let mut insert = format!(
        "INSERT INTO {table} ({}) SELECT {} FROM {}",
        cols.join(", "),
        values.join(", "),
        unnest(&all)
    );
    let key_cols: Vec<&str> = key.iter().map(|&k| cols[k].as_str()).collect();
    let claim =
        upsert.then(|| format!("{insert} ON CONFLICT ({}) DO NOTHING", key_cols.join(", ")));
    if upsert {
        let set: Vec<String> = (0..cols.len())
            .filter(|i| !key.contains(i))
            .map(|i| format!("{x} = EXCLUDED.{x}", x = cols[i]))
            .collect();
        if set.is_empty() {
            insert.push_str(&format!(
                " ON CONFLICT ({}) DO NOTHING",
                key_cols.join(", ")
            ));
        } else {
            insert.push_str(&format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                key_cols.join(", "),
                set.join(", ")
            ));
        }
    }
    let delete = upsert.then(|| {
        let matches: Vec<String> = key
            .iter()
            .enumerate()
            .map(|(n, &k)| format!("d.{} = {}", cols[k], value(n, k)))
            .collect();
        format!(
            "DELETE FROM {table} AS d USING {} WHERE {}",
            unnest(key),
            matches.join(" AND ")
        )
    });
    let create = c.create_table.then(|| {
        let mut defs: Vec<String> = cols
            .iter()
            .zip(types.iter())
            .map(|(n, t)| format!("{n} {}", t.sql()))
            .collect();
        if upsert {
            defs.push(format!("PRIMARY KEY ({})", key_cols.join(", ")));
        }
        format!("CREATE TABLE IF NOT EXISTS {table} ({})", defs.join(", "))
    });
    Ok(Sql {
        insert,
        create,
        delete,
        claim,
    })
}

pub(super) fn identifier(name: &str) -> Result<String> {
    let ok = |p: &str| {
        !p.is_empty()
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !p.starts_with(|c: char| c.is_ascii_digit())
    };
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| ok(p)) {
        return Err(PostgresError::BadIdentifier(name.to_string()).into());
    }
    Ok(parts
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join("."))
}
