//! A window aggregate inserted into a `csv` file: the window operator
//! writes each result's line itself, no row built for it, no `Calc` or
//! formatting pass after it.
//!
//! It applies when the query is a window aggregate, or a pick of its
//! columns (`SELECT k, window_start, ..`, no expression, no `HAVING`), the
//! sink a `filesystem` table in `csv` without a sink rate (which counts
//! rows). The lines are those the rows would have been written as, byte
//! for byte: each value written by [`Value::write_csv`], the window's bounds
//! formatted once per window. A window's lines (of one subtask) go to the
//! sink subtask as one record, a [`CsvBlock`].

use super::exec::{Builder, columns_of};
use super::planner::{GroupItem, Plan};
use super::table::{Connector, Format, Table};
use super::value::{CsvFormat, SqlType, Value};
use super::window_aggregate::{GroupKey, Results};
use crate::window::TimeWindow;
use crate::{DataStream, Result};
use std::fmt;
use std::sync::Arc;

/// The lines of one window's results, and the text of its bounds.
#[derive(Clone, Debug)]
pub struct CsvBlock {
    /// The window's start and end.
    window: (i64, i64),
    /// `window_start`, `window_end`, `window_time` as the lines write
    /// them (each formatted when a line uses it).
    bounds: [String; 3],
    /// The lines, joined by line feeds (the sink ends each record with
    /// one).
    text: String,
}

impl fmt::Display for CsvBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a column of a line is.
#[derive(Clone, Copy, Debug)]
enum Field {
    /// `window_start` (0), `window_end` (1) or `window_time` (2).
    Bound(usize),
    /// The key's column.
    Key(usize),
    /// The call's result.
    Agg(usize),
}

/// Writes a window's results as lines.
struct LineWriter {
    fields: Arc<[Field]>,
    format: Arc<CsvFormat>,
    /// Which bounds the lines use.
    used: [bool; 3],
    /// `window_time` is a `TIMESTAMP_LTZ`.
    ltz: bool,
    /// Each line's bytes so far (the capacity of a window's first block).
    line_len: usize,
}

impl LineWriter {
    /// A block for `w`, its bounds formatted.
    fn block(&self, w: &TimeWindow) -> CsvBlock {
        let values = [
            Value::Timestamp(w.start),
            Value::Timestamp(w.end),
            match self.ltz {
                true => Value::TimestampLtz(w.end - 1),
                false => Value::Timestamp(w.end - 1),
            },
        ];
        let mut bounds: [String; 3] = Default::default();
        for ((text, v), used) in bounds.iter_mut().zip(&values).zip(self.used) {
            if used {
                // Writing into a String cannot fail.
                let _ = v.write_csv(text, &self.format);
            }
        }
        CsvBlock {
            window: (w.start, w.end),
            bounds,
            text: String::with_capacity(self.line_len * 64),
        }
    }

    /// Appends the line of `key`'s results in `w` to the window's block.
    #[inline]
    fn write(&self, key: &GroupKey, w: &TimeWindow, aggs: &Results, out: &mut Vec<CsvBlock>) {
        let block = match out.last_mut() {
            Some(b) if b.window == (w.start, w.end) => {
                b.text.push('\n');
                b
            }
            _ => {
                out.push(self.block(w));
                out.last_mut().expect("pushed")
            }
        };
        let (key, f) = (key.as_slice(), &*self.format);
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                block.text.push(char::from(f.delimiter));
            }
            // Writing into a String cannot fail.
            let _ = match *field {
                Field::Bound(b) => {
                    block.text.push_str(&block.bounds[b]);
                    Ok(())
                }
                Field::Key(k) => key
                    .get(k)
                    .unwrap_or(&Value::Null)
                    .write_csv(&mut block.text, f),
                Field::Agg(a) => aggs
                    .get(a)
                    .unwrap_or(&Value::Null)
                    .write_csv(&mut block.text, f),
            };
        }
    }
}

impl Builder<'_> {
    /// The lines of `plan` into `table`, written by its window aggregate,
    /// if `plan` is a window aggregate (or a pick of its columns) and
    /// `table` a `csv` file without a sink rate.
    pub(super) fn window_csv(
        &mut self,
        plan: &Plan,
        table: &Table,
    ) -> Result<Option<DataStream<CsvBlock>>> {
        let (
            Connector::FileSystem {
                format: Format::Csv(csv),
                ..
            },
            None,
        ) = (&table.connector, self.sink_rate)
        else {
            return Ok(None);
        };
        let (w, columns, calc) = match plan {
            Plan::WindowAgg(w) => (w, None, false),
            Plan::Calc {
                input,
                filter: None,
                project,
                ..
            } => match (&**input, columns_of(project)) {
                (Plan::WindowAgg(w), Some(c)) => (w, Some(c), true),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let ng = w.group.len();
        let columns = columns.unwrap_or_else(|| (0..ng + w.calls.len()).collect());
        let fields: Arc<[Field]> = columns
            .iter()
            .map(|&c| match w.group.get(c) {
                Some(GroupItem::Start) => Field::Bound(0),
                Some(GroupItem::End) => Field::Bound(1),
                Some(GroupItem::Time) => Field::Bound(2),
                Some(GroupItem::Key(k)) => Field::Key(*k),
                None => Field::Agg(c - ng),
            })
            .collect();
        let mut used = [false; 3];
        for f in fields.iter() {
            if let Field::Bound(b) = f {
                used[*b] = true;
            }
        }
        let writer = LineWriter {
            line_len: 24 * fields.len(),
            fields,
            format: Arc::new(CsvFormat {
                delimiter: csv.delimiter,
                quote: csv.quote,
                null: csv.null_literal.clone(),
            }),
            used,
            ltz: matches!(w.time_ty, SqlType::TimestampLtz(_)),
        };
        let lines = self.window_with(
            w,
            move |key: &GroupKey, window: &TimeWindow, aggs: Results, out: &mut Vec<CsvBlock>| {
                writer.write(key, window, &aggs, out)
            },
        )?;
        if calc {
            // The pick's id, so the ids after it are those of the rows'
            // plan (a savepoint restores into either).
            let _ = self.uid("calc");
        }
        Ok(Some(lines))
    }
}
