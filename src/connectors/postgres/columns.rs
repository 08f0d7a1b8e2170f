//! The sink's column types, and rows as tuples of column values: each
//! batch is sent as one array parameter per column (`unnest`).

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
}

impl ColumnType {
    pub(super) fn sql(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Int8 => "int8",
            ColumnType::Float8 => "float8",
            ColumnType::Bool => "bool",
        }
    }

    pub(super) fn empty(self) -> Column {
        match self {
            ColumnType::Text => Column::Text(Vec::new()),
            ColumnType::Int8 => Column::Int8(Vec::new()),
            ColumnType::Float8 => Column::Float8(Vec::new()),
            ColumnType::Bool => Column::Bool(Vec::new()),
        }
    }
}

/// One column's values of a batch, sent as one array parameter.
#[derive(Debug)]
#[non_exhaustive]
pub enum Column {
    /// `text[]`.
    Text(Vec<String>),
    /// `int8[]`.
    Int8(Vec<i64>),
    /// `float8[]`.
    Float8(Vec<f64>),
    /// `bool[]`.
    Bool(Vec<bool>),
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
                    c.push($e);
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
/// upsert mode).
pub trait PostgresRow: Send + 'static {
    /// The columns' SQL types.
    fn types() -> Vec<ColumnType>;
    /// Appends the record's values, one per column.
    fn push(&self, columns: &mut [Column]);
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

/// Keeps the last row of each key (first column) of a batch: one upsert
/// statement may not touch a row twice.
pub(super) fn dedup_last(columns: &mut [Column]) {
    let keep: Vec<bool> = match &columns[0] {
        Column::Text(keys) => keep_last(keys),
        Column::Int8(keys) => keep_last(keys),
        Column::Bool(keys) => keep_last(keys),
        // Floats are no keys; the server reports duplicates.
        Column::Float8(_) => return,
    };
    if keep.iter().all(|k| *k) {
        return;
    }
    for c in columns.iter_mut() {
        c.retain(&keep);
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
