//! Tables: a `CREATE TABLE` checked and resolved (column types, computed
//! columns bound, the watermark's delay, the connector and its options).
//!
//! The connector and format options are read by [`connector`](super::connector).

use super::bind::{Binder, Column, Scope, interval_millis, sql_type};
pub use super::connector::{Connector, CsvOptions, Format};
use super::connector::{Options, Physical};
use super::error::{SqlResult, err};
use super::expr::Expr;
use super::parse::{ColumnKind, TableDef};
use super::value::SqlType;
use sqlparser::ast::{self, Spanned};
use sqlparser::tokenizer::Span;

/// When a source emits its watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkEmit {
    /// After every row that advances it (`'scan.watermark.emit.strategy' =
    /// 'on-event'`): results do not depend on timing.
    OnEvent,
    /// Every 200 ms (Flink's default, `'on-periodic'`).
    OnPeriodic,
}

/// A table's watermark: `WATERMARK FOR column AS column - INTERVAL ..`.
#[derive(Clone, Debug)]
pub struct Watermark {
    /// The event-time column.
    pub column: usize,
    /// How far the watermark trails the largest event time seen (ms).
    pub delay_ms: i64,
    /// When it is emitted.
    pub emit: WatermarkEmit,
    /// As written (for `EXPLAIN`).
    pub text: String,
    /// `SOURCE_WATERMARK()`: the watermarks are the input's own (a
    /// registered DataStream's), none are generated.
    pub from_source: bool,
}

/// A table of the catalog.
#[derive(Clone, Debug)]
pub struct Table {
    /// Its name.
    pub name: String,
    /// All its columns in order, physical and computed.
    pub columns: Vec<Column>,
    /// The positions of the physical columns (what the connector reads and
    /// writes), in order.
    pub physical: Vec<usize>,
    /// The computed columns: position and expression over the row.
    pub computed: Vec<(usize, Expr)>,
    /// The watermark, if declared.
    pub watermark: Option<Watermark>,
    /// The connector.
    pub connector: Connector,
    /// `'sink.parallelism'`.
    pub sink_parallelism: Option<usize>,
    /// `PRIMARY KEY (..)`: column positions (empty: none).
    pub primary_key: Vec<usize>,
    /// The `METADATA` column holding each record's timestamp (`rowtime`,
    /// of a registered DataStream), if any.
    pub rowtime_metadata: Option<usize>,
}

impl Table {
    /// A table from its `CREATE TABLE`.
    pub fn from_ddl(def: &TableDef) -> SqlResult<Table> {
        Table::build(def, false)
    }

    /// A registered DataStream's table from its schema, read as a `CREATE
    /// TABLE`: besides, a `rowtime` `METADATA` column (the record's
    /// timestamp) and `WATERMARK FOR c AS SOURCE_WATERMARK()` (the stream's
    /// own watermarks), as Flink's `fromDataStream` schema takes them.
    pub fn from_stream_schema(def: &TableDef) -> SqlResult<Table> {
        Table::build(def, true)
    }

    fn build(def: &TableDef, stream: bool) -> SqlResult<Table> {
        let name = def.name.value.clone();
        let mut columns = Vec::new();
        let mut physical = Vec::new();
        let mut rowtime_metadata = None;
        for (i, c) in def.columns.iter().enumerate() {
            if columns.iter().any(|x: &Column| x.name == c.name.value) {
                return Err(err!(
                    Invalid,
                    c.name.span,
                    "column '{}' is defined twice in table '{name}'",
                    c.name.value
                ));
            }
            let ty = match &c.kind {
                ColumnKind::Physical(dt, at) => {
                    physical.push(i);
                    sql_type(dt, *at)?
                }
                ColumnKind::Computed(_) => SqlType::Null,
                ColumnKind::Metadata(dt, at, key) => {
                    rowtime_metadata = Some(i);
                    metadata(&name, &c.name, dt, *at, key.as_ref(), stream)?
                }
            };
            columns.push(Column {
                name: c.name.value.clone(),
                ty,
                rowtime: false,
            });
        }
        // Computed columns are bound over the physical and metadata ones
        // (a computed column does not name another).
        let mut computed = Vec::new();
        let visible: Vec<Column> = columns
            .iter()
            .enumerate()
            .map(
                |(i, c)| match physical.contains(&i) || rowtime_metadata == Some(i) {
                    true => c.clone(),
                    false => Column {
                        name: String::new(),
                        ..c.clone()
                    },
                },
            )
            .collect();
        let table_label = format!("table '{name}'");
        let scope = Scope {
            columns: &visible,
            table: &table_label,
            qualifiers: vec![name.clone()],
        };
        for (i, c) in def.columns.iter().enumerate() {
            if let ColumnKind::Computed(e) = &c.kind {
                let (x, ty) = Binder::new(&scope).bind(e)?;
                if ty == SqlType::Null {
                    return Err(err!(
                        TypeMismatch,
                        e.span(),
                        "computed column '{}' has no type",
                        c.name.value
                    ));
                }
                columns[i].ty = ty;
                computed.push((i, x));
            }
        }
        let watermark = match &def.watermark {
            None => None,
            Some(w) => Some(watermark(&columns, w, &name, &def.options, stream)?),
        };
        if let Some(w) = &watermark {
            columns[w.column].rowtime = true;
        }
        let mut primary_key = Vec::new();
        for k in &def.primary_key {
            let Some(i) = columns.iter().position(|c| c.name == k.value) else {
                return Err(err!(
                    UnknownColumn,
                    k.span,
                    "unknown column '{}' in the primary key of table '{name}'",
                    k.value
                ));
            };
            if !physical.contains(&i) {
                return Err(err!(
                    Invalid,
                    k.span,
                    "the primary key of table '{name}' names the computed column '{}'",
                    k.value
                ));
            }
            primary_key.push(i);
        }
        let options = Options {
            list: &def.options,
            at: def.name.span,
            table: &name,
        };
        let cols = Physical {
            names: physical.iter().map(|&i| columns[i].name.as_str()).collect(),
            types: physical.iter().map(|&i| columns[i].ty).collect(),
            key: primary_key
                .iter()
                .filter_map(|k| physical.iter().position(|p| p == k))
                .collect(),
        };
        let (connector, sink_parallelism) = super::connector::connector(&options, &cols)?;
        Ok(Table {
            name,
            columns,
            physical,
            computed,
            watermark,
            connector,
            sink_parallelism,
            primary_key,
            rowtime_metadata,
        })
    }

    /// The physical columns' types, in order.
    pub fn physical_types(&self) -> Vec<SqlType> {
        self.physical.iter().map(|&i| self.columns[i].ty).collect()
    }
}

/// The type of `METADATA` column `column` of `table`: only a registered
/// DataStream's (`stream`) has one, its record's timestamp (key
/// `rowtime`), as in Flink's `fromDataStream`.
fn metadata(
    table: &str,
    column: &ast::Ident,
    dt: &ast::DataType,
    at: Span,
    key: Option<&(String, Span)>,
    stream: bool,
) -> SqlResult<SqlType> {
    if !stream {
        return Err(err!(
            Unsupported,
            column.span,
            "METADATA columns are supported only in the schema of a registered DataStream \
             (column '{}' of table '{table}')",
            column.value
        ));
    }
    let (key, key_at) = key.map_or((column.value.as_str(), column.span), |(k, at)| (k, *at));
    if key != "rowtime" {
        return Err(err!(
            Invalid,
            key_at,
            "invalid metadata key '{key}' in column '{}' of table '{table}': a DataStream \
             table has the metadata key 'rowtime' (the record's timestamp)",
            column.value
        ));
    }
    match sql_type(dt, at)? {
        ty @ (SqlType::TimestampLtz(3) | SqlType::Timestamp(3)) => Ok(ty),
        ty => Err(err!(
            TypeMismatch,
            at,
            "the metadata column '{}' (rowtime) must be TIMESTAMP_LTZ(3) or TIMESTAMP(3), not {ty}",
            column.value
        )),
    }
}

/// Whether `e` is `SOURCE_WATERMARK()`.
fn is_source_watermark(e: &ast::Expr) -> bool {
    matches!(e, ast::Expr::Function(f)
        if f.name.to_string().eq_ignore_ascii_case("SOURCE_WATERMARK")
            && matches!(&f.args, ast::FunctionArguments::List(l) if l.args.is_empty()))
}

fn watermark(
    columns: &[Column],
    w: &super::parse::WatermarkDef,
    table: &str,
    options: &[(String, String, Span)],
    stream: bool,
) -> SqlResult<Watermark> {
    let column = columns
        .iter()
        .position(|c| c.name == w.column.value)
        .ok_or_else(|| {
            err!(
                UnknownColumn,
                w.column.span,
                "unknown column '{}' in the WATERMARK of table '{table}'",
                w.column.value
            )
        })?;
    let ty = columns[column].ty;
    if !matches!(ty, SqlType::Timestamp(0..=3) | SqlType::TimestampLtz(0..=3)) {
        return Err(err!(
            TypeMismatch,
            w.column.span,
            "the event-time column '{}' must be TIMESTAMP(3) or TIMESTAMP_LTZ(3), not {ty}",
            w.column.value
        ));
    }
    let is_column =
        |e: &ast::Expr| matches!(e, ast::Expr::Identifier(i) if i.value == w.column.value);
    let from_source = is_source_watermark(&w.expr);
    if from_source && !stream {
        return Err(err!(
            Unsupported,
            w.expr.span(),
            "SOURCE_WATERMARK() is supported only in the schema of a registered DataStream \
             (table '{table}'): write `{c} - INTERVAL 'n' SECOND`",
            c = w.column.value
        ));
    }
    let delay_ms = match &w.expr {
        _ if from_source => 0,
        e if is_column(e) => 0,
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Minus,
            right,
        } if is_column(left) => interval_millis(right)?,
        other => {
            return Err(err!(
                Unsupported,
                other.span(),
                "watermark expression {other} is not supported: write `{c}` or `{c} - INTERVAL \
                 'n' SECOND`",
                c = w.column.value
            ));
        }
    };
    if delay_ms < 0 {
        return Err(err!(
            Unsupported,
            w.expr.span(),
            "a watermark ahead of the event time is not supported"
        ));
    }
    let options = Options {
        list: options,
        at: w.column.span,
        table,
    };
    let emit = match options.get("scan.watermark.emit.strategy") {
        None => WatermarkEmit::OnPeriodic,
        Some((v, at)) => match v.to_ascii_lowercase().as_str() {
            "on-event" => WatermarkEmit::OnEvent,
            "on-periodic" => WatermarkEmit::OnPeriodic,
            _ => {
                return Err(err!(
                    InvalidOption,
                    at,
                    "'scan.watermark.emit.strategy' is 'on-event' or 'on-periodic', not '{v}'"
                ));
            }
        },
    };
    Ok(Watermark {
        column,
        delay_ms,
        emit,
        text: w.expr.to_string(),
        from_source,
    })
}
