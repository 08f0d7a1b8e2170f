//! Tables: a `CREATE TABLE` checked and resolved (column types, computed
//! columns bound, the watermark's delay, the connector and its options).
//!
//! Connectors of this slice: `filesystem` with `'format' = 'csv'` (a
//! source, and an append-only sink writing one file), `print` and
//! `blackhole` (sinks). `kafka`, `upsert-kafka` and `jdbc` are refused with
//! one line; an option a connector does not know is refused as Flink
//! refuses it.

use super::bind::{Binder, Column, Scope, interval_millis, sql_type};
use super::error::{SqlResult, err};
use super::expr::Expr;
use super::parse::{ColumnKind, TableDef};
use super::value::SqlType;
use sqlparser::ast::{self, Spanned};
use sqlparser::tokenizer::Span;
use std::path::PathBuf;

/// How a table's rows are read or written.
#[derive(Clone, Debug)]
pub enum Connector {
    /// `'connector' = 'filesystem'`, `'format' = 'csv'`.
    FileSystem {
        /// `'path'`: a file, a directory of files, or a glob (source); the
        /// file written (sink).
        path: PathBuf,
        /// The CSV options.
        csv: CsvOptions,
    },
    /// `'connector' = 'print'`.
    Print {
        /// `'print-identifier'`: a prefix of every line.
        identifier: Option<String>,
        /// `'standard-error'`: print to stderr.
        stderr: bool,
    },
    /// `'connector' = 'blackhole'`.
    Blackhole,
}

/// Options of the `csv` format.
#[derive(Clone, Debug)]
pub struct CsvOptions {
    /// `'csv.field-delimiter'` (default `,`).
    pub delimiter: u8,
    /// `'csv.quote-character'` (default `"`), `None` with
    /// `'csv.disable-quote-character' = 'true'`.
    pub quote: Option<u8>,
    /// `'csv.ignore-parse-errors'`: a row that does not parse is skipped
    /// (default: it fails the job naming its line).
    pub ignore_parse_errors: bool,
    /// `'csv.allow-comments'`: lines starting with `#` are skipped.
    pub allow_comments: bool,
    /// `'csv.null-literal'`: the text read and written as `NULL`.
    pub null_literal: Option<String>,
}

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
}

impl Table {
    /// A table from its `CREATE TABLE`.
    pub fn from_ddl(def: &TableDef) -> SqlResult<Table> {
        let name = def.name.value.clone();
        let mut columns = Vec::new();
        let mut physical = Vec::new();
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
            };
            columns.push(Column {
                name: c.name.value.clone(),
                ty,
                rowtime: false,
            });
        }
        // Computed columns are bound over the physical ones (a computed
        // column does not name another).
        let mut computed = Vec::new();
        let visible: Vec<Column> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| match physical.contains(&i) {
                true => c.clone(),
                false => Column {
                    name: String::new(),
                    ..c.clone()
                },
            })
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
            Some(w) => Some(watermark(&columns, w, &name, &def.options)?),
        };
        if let Some(w) = &watermark {
            columns[w.column].rowtime = true;
        }
        for k in &def.primary_key {
            if !columns.iter().any(|c| c.name == k.value) {
                return Err(err!(
                    UnknownColumn,
                    k.span,
                    "unknown column '{}' in the primary key of table '{name}'",
                    k.value
                ));
            }
        }
        let (connector, sink_parallelism) = connector(def, &name)?;
        Ok(Table {
            name,
            columns,
            physical,
            computed,
            watermark,
            connector,
            sink_parallelism,
        })
    }

    /// The physical columns' types, in order.
    pub fn physical_types(&self) -> Vec<SqlType> {
        self.physical.iter().map(|&i| self.columns[i].ty).collect()
    }
}

fn watermark(
    columns: &[Column],
    w: &super::parse::WatermarkDef,
    table: &str,
    options: &[(String, String, Span)],
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
    let delay_ms = match &w.expr {
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
    let emit = match option(options, "scan.watermark.emit.strategy") {
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
    })
}

fn option<'o>(options: &'o [(String, String, Span)], key: &str) -> Option<(&'o str, Span)> {
    options
        .iter()
        .rev()
        .find(|(k, _, _)| k == key)
        .map(|(_, v, at)| (v.as_str(), *at))
}

fn connector(def: &TableDef, table: &str) -> SqlResult<(Connector, Option<usize>)> {
    let options = &def.options;
    let at = def.name.span;
    let Some((kind, kind_at)) = option(options, "connector") else {
        return Err(err!(
            InvalidOption,
            at,
            "table '{table}' has no 'connector' option"
        ));
    };
    let kind = kind.to_ascii_lowercase();
    let known: &[&str] = match kind.as_str() {
        "filesystem" => &[
            "path",
            "format",
            "csv.field-delimiter",
            "csv.quote-character",
            "csv.disable-quote-character",
            "csv.ignore-parse-errors",
            "csv.allow-comments",
            "csv.null-literal",
            "scan.watermark.emit.strategy",
            "sink.parallelism",
        ],
        "print" => &["print-identifier", "standard-error", "sink.parallelism"],
        "blackhole" => &[],
        "kafka" | "upsert-kafka" | "jdbc" => {
            return Err(err!(
                Unsupported,
                kind_at,
                "connector '{kind}' is not supported yet (filesystem, print and blackhole are)"
            ));
        }
        other => {
            return Err(err!(
                InvalidOption,
                kind_at,
                "unknown connector '{other}' (filesystem, print and blackhole are supported)"
            ));
        }
    };
    let unknown: Vec<&str> = options
        .iter()
        .map(|(k, _, _)| k.as_str())
        .filter(|k| *k != "connector" && !known.contains(k))
        .collect();
    if let Some(first) = unknown.first() {
        let at = option(options, first).map_or(at, |(_, s)| s);
        return Err(err!(
            InvalidOption,
            at,
            "unsupported options found for '{kind}': {}",
            unknown.join(", ")
        ));
    }
    let flag = |key: &str| -> SqlResult<bool> {
        match option(options, key) {
            None => Ok(false),
            Some((v, at)) => match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(err!(
                    InvalidOption,
                    at,
                    "'{key}' is 'true' or 'false', not '{v}'"
                )),
            },
        }
    };
    let char_option = |key: &str, default: u8| -> SqlResult<u8> {
        match option(options, key) {
            None => Ok(default),
            Some(("\\t", _)) => Ok(b'\t'),
            Some((v, _)) if v.len() == 1 => Ok(v.as_bytes()[0]),
            Some((v, at)) => Err(err!(
                InvalidOption,
                at,
                "'{key}' must be a single character, not '{v}'"
            )),
        }
    };
    let sink_parallelism = match option(options, "sink.parallelism") {
        None => None,
        Some((v, at)) => match v.parse::<usize>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                return Err(err!(
                    InvalidOption,
                    at,
                    "'sink.parallelism' must be a positive number, not '{v}'"
                ));
            }
        },
    };
    let connector = match kind.as_str() {
        "filesystem" => {
            let Some((path, _)) = option(options, "path") else {
                return Err(err!(
                    InvalidOption,
                    kind_at,
                    "table '{table}' (filesystem) has no 'path' option"
                ));
            };
            match option(options, "format") {
                Some((f, _)) if f.eq_ignore_ascii_case("csv") => {}
                Some((f, at)) => {
                    return Err(err!(
                        Unsupported,
                        at,
                        "format '{f}' is not supported yet (csv is)"
                    ));
                }
                None => {
                    return Err(err!(
                        InvalidOption,
                        kind_at,
                        "table '{table}' (filesystem) has no 'format' option"
                    ));
                }
            }
            let path = path.strip_prefix("file://").unwrap_or(path);
            let csv = CsvOptions {
                delimiter: char_option("csv.field-delimiter", b',')?,
                quote: match flag("csv.disable-quote-character")? {
                    true => None,
                    false => Some(char_option("csv.quote-character", b'"')?),
                },
                ignore_parse_errors: flag("csv.ignore-parse-errors")?,
                allow_comments: flag("csv.allow-comments")?,
                null_literal: option(options, "csv.null-literal").map(|(v, _)| v.to_string()),
            };
            Connector::FileSystem {
                path: PathBuf::from(path),
                csv,
            }
        }
        "print" => Connector::Print {
            identifier: option(options, "print-identifier").map(|(v, _)| v.to_string()),
            stderr: flag("standard-error")?,
        },
        _ => Connector::Blackhole,
    };
    Ok((connector, sink_parallelism))
}
