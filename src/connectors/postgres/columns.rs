//! The sink's column types, and rows as tuples of column values: each
//! batch is sent as one array parameter per column (`unnest`), `NULL`s
//! included. Numerics and timestamps travel as text and are cast by the
//! statement.

use std::collections::HashSet;
use tokio_postgres::types::ToSql;

/// The SQL type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnType {
    /// `text`.
    Text,
    /// `int8` (`bigint`).
    Int8,
    /// `float8` (`double precision`).
    Float8,
    /// `bool`.
    Bool,
    /// `numeric` (sent as text).
    Numeric,
    /// `timestamp` (sent as text, `yyyy-MM-dd HH:mm:ss[.fff]`).
    Timestamp,
    /// `timestamptz` (sent as text with its offset).
    TimestampTz,
}

impl ColumnType {
    /// The column's SQL type.
    pub(super) fn sql(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Int8 => "int8",
            ColumnType::Float8 => "float8",
            ColumnType::Bool => "bool",
            ColumnType::Numeric => "numeric",
            ColumnType::Timestamp => "timestamp",
            ColumnType::TimestampTz => "timestamptz",
        }
    }

    /// The type of the array parameter its values travel in.
    pub(super) fn param(self) -> &'static str {
        match self {
            ColumnType::Numeric | ColumnType::Timestamp | ColumnType::TimestampTz => "text",
            other => other.sql(),
        }
    }

    pub(super) fn empty(self) -> Column {
        match self {
            ColumnType::Int8 => Column::Int8(Vec::new()),
            ColumnType::Float8 => Column::Float8(Vec::new()),
            ColumnType::Bool => Column::Bool(Vec::new()),
            ColumnType::Text
            | ColumnType::Numeric
            | ColumnType::Timestamp
            | ColumnType::TimestampTz => Column::Text(Vec::new()),
        }
    }
}

/// One column's values of a batch, sent as one array parameter (`None`:
/// `NULL`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Column {
    /// `text[]` (also numerics and timestamps, as text).
    Text(Vec<Option<String>>),
    /// `int8[]`.
    Int8(Vec<Option<i64>>),
    /// `float8[]`.
    Float8(Vec<Option<f64>>),
    /// `bool[]`.
    Bool(Vec<Option<bool>>),
}

impl Column {
    pub(super) fn clear(&mut self) {
        match self {
            Column::Text(v) => v.clear(),
            Column::Int8(v) => v.clear(),
            Column::Float8(v) => v.clear(),
            Column::Bool(v) => v.clear(),
        }
    }

    pub(super) fn retain(&mut self, keep: &[bool]) {
        fn r<T>(v: &mut Vec<T>, keep: &[bool]) {
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
        match self {
            Column::Text(v) => r(v, keep),
            Column::Int8(v) => r(v, keep),
            Column::Float8(v) => r(v, keep),
            Column::Bool(v) => r(v, keep),
        }
    }

    pub(super) fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Column::Text(v) => v,
            Column::Int8(v) => v,
            Column::Float8(v) => v,
            Column::Bool(v) => v,
        }
    }
}

/// A value of one column.
pub trait PostgresValue {
    /// Its SQL type.
    const TYPE: ColumnType;
    /// Appends it to `column` (of type [`TYPE`](Self::TYPE)).
    fn push(&self, column: &mut Column);
}

macro_rules! value {
    ($t:ty, $ty:ident, $v:ident => $e:expr) => {
        impl PostgresValue for $t {
            const TYPE: ColumnType = ColumnType::$ty;
            fn push(&self, column: &mut Column) {
                if let Column::$ty(c) = column {
                    let $v = self;
                    c.push(Some($e));
                }
            }
        }
    };
}
value!(String, Text, v => v.clone());
value!(i64, Int8, v => *v);
value!(i32, Int8, v => i64::from(*v));
// Counts beyond i64::MAX do not occur; saturate rather than wrap.
value!(u64, Int8, v => i64::try_from(*v).unwrap_or(i64::MAX));
value!(u32, Int8, v => i64::from(*v));
value!(f64, Float8, v => *v);
value!(bool, Bool, v => *v);

/// A record the sink can write: a tuple of [`PostgresValue`]s, one per
/// column, in the order of the sink's columns (the first is the key in
/// upsert mode, unless the config names the key).
pub trait PostgresRow: Send + 'static {
    /// The columns' SQL types (a record type whose columns are known only
    /// at run time returns none, and its sink is made with
    /// [`PostgresSink::with_types`](super::PostgresSink::with_types)).
    fn types() -> Vec<ColumnType>;
    /// Appends the record's values, one per column.
    fn push(&self, columns: &mut [Column]);
    /// Whether the record deletes its key's row (upsert mode) instead of
    /// writing it. Its values are inserted where the key has no row (and
    /// deleted with it), so that the delete waits for a transaction that
    /// inserted the key and has not committed: they must fit the table.
    fn is_delete(&self) -> bool {
        false
    }
}

macro_rules! row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: PostgresValue + Send + 'static),+> PostgresRow for ($($t,)+) {
            fn types() -> Vec<ColumnType> {
                vec![$($t::TYPE),+]
            }
            fn push(&self, columns: &mut [Column]) {
                $(self.$i.push(&mut columns[$i]);)+
            }
        }
    };
}
row!(A 0);
row!(A 0, B 1);
row!(A 0, B 1, C 2);
row!(A 0, B 1, C 2, D 3);
row!(A 0, B 1, C 2, D 3, E 4);

/// Which rows of a batch to write: the last of each key (the columns
/// `key`), since one upsert statement may not touch a row twice.
pub(super) fn last_per_key(columns: &[Column], key: &[usize]) -> Vec<bool> {
    let rows = columns.first().map_or(0, Column::len);
    if let [k] = key {
        return match &columns[*k] {
            Column::Text(keys) => keep_last(keys),
            Column::Int8(keys) => keep_last(keys),
            Column::Bool(keys) => keep_last(keys),
            Column::Float8(keys) => {
                keep_last(&keys.iter().map(|f| f.map(f64::to_bits)).collect::<Vec<_>>())
            }
        };
    }
    let tuples: Vec<Vec<KeyPart<'_>>> = (0..rows)
        .map(|r| key.iter().map(|&k| columns[k].part(r)).collect())
        .collect();
    keep_last(&tuples)
}

/// One value of a key, compared as the server compares it.
#[derive(Hash, PartialEq, Eq)]
enum KeyPart<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Float(Option<u64>),
    Bool(Option<bool>),
}

impl Column {
    pub(super) fn len(&self) -> usize {
        match self {
            Column::Text(v) => v.len(),
            Column::Int8(v) => v.len(),
            Column::Float8(v) => v.len(),
            Column::Bool(v) => v.len(),
        }
    }

    fn part(&self, row: usize) -> KeyPart<'_> {
        match self {
            Column::Text(v) => KeyPart::Text(v[row].as_deref()),
            Column::Int8(v) => KeyPart::Int(v[row]),
            Column::Float8(v) => KeyPart::Float(v[row].map(f64::to_bits)),
            Column::Bool(v) => KeyPart::Bool(v[row]),
        }
    }
}

fn keep_last<K: std::hash::Hash + Eq>(keys: &[K]) -> Vec<bool> {
    let mut seen = HashSet::with_capacity(keys.len());
    let mut keep = vec![false; keys.len()];
    for (i, k) in keys.iter().enumerate().rev() {
        keep[i] = seen.insert(k);
    }
    keep
}
