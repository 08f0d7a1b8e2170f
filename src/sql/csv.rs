//! The `csv` format's reading side: a line of the file into a row, in the
//! file source's read buffer (no copy of the line), as Flink's CSV format
//! reads it.
//!
//! Fields are separated by the delimiter and may be quoted (`"a,b"`, a
//! doubled quote inside is one quote). An empty unquoted field is `NULL`
//! for every type but `STRING` (an empty string), and so is the
//! `'csv.null-literal'` text. Timestamps are `yyyy-MM-dd HH:mm:ss[.fff]`
//! (`TIMESTAMP_LTZ`: a trailing `Z` is accepted), booleans `true`/`false`,
//! decimals plain or with an exponent. A line with another number of fields
//! or a field that does not parse fails the job naming its line, unless
//! `'csv.ignore-parse-errors' = 'true'` (then such a field is `NULL` and
//! such a line skipped). With `'csv.allow-comments' = 'true'` lines
//! starting with `#` are skipped.

use super::expr::{fits, parse_decimal};
use super::table::CsvOptions;
use super::value::{Row, SqlType, Value, parse_timestamp};
use crate::connectors::file_source::LineDecoder;
use std::sync::Arc;

/// Decodes lines of a table's file into rows (`None`: a line skipped).
#[derive(Clone)]
pub struct CsvDecoder {
    /// The physical columns' types, in file order.
    types: Arc<[SqlType]>,
    /// Where each physical column goes in the row.
    positions: Arc<[usize]>,
    /// The row's width (computed columns are filled in later).
    width: usize,
    options: Arc<CsvOptions>,
    /// The fields of the line being decoded (reused).
    fields: Vec<(usize, usize, bool)>,
    /// A field with doubled quotes, unescaped (reused).
    unquoted: Vec<u8>,
}

impl CsvDecoder {
    /// A decoder of rows `width` wide whose physical columns are `types`
    /// at `positions`.
    pub fn new(
        types: Vec<SqlType>,
        positions: Vec<usize>,
        width: usize,
        options: CsvOptions,
    ) -> Self {
        CsvDecoder {
            types: types.into(),
            positions: positions.into(),
            width,
            options: Arc::new(options),
            fields: Vec::new(),
            unquoted: Vec::new(),
        }
    }

    /// Splits `line` into field ranges `(start, end, quoted)`.
    fn split(&mut self, line: &[u8]) -> Result<(), String> {
        self.fields.clear();
        let (delim, quote) = (self.options.delimiter, self.options.quote);
        let mut i = 0;
        loop {
            if quote.is_some_and(|q| line.get(i) == Some(&q)) {
                let q = quote.unwrap_or(b'"');
                let start = i + 1;
                let mut j = start;
                loop {
                    match line.get(j) {
                        None => return Err("a quoted field is not closed".into()),
                        Some(&c) if c == q && line.get(j + 1) == Some(&q) => j += 2,
                        Some(&c) if c == q => break,
                        Some(_) => j += 1,
                    }
                }
                self.fields.push((start, j, true));
                i = j + 1;
                match line.get(i) {
                    None => return Ok(()),
                    Some(&c) if c == delim => i += 1,
                    Some(_) => return Err("text after a closing quote".into()),
                }
            } else {
                let end = memchr::memchr(delim, &line[i..]).map_or(line.len(), |k| i + k);
                self.fields.push((i, end, false));
                if end == line.len() {
                    return Ok(());
                }
                i = end + 1;
            }
        }
    }

    fn field(&mut self, line: &[u8], k: usize) -> Result<Value, String> {
        let (start, end, quoted) = self.fields[k];
        let mut raw = &line[start..end];
        if quoted
            && let Some(q) = self.options.quote
            && raw.windows(2).any(|w| w == [q, q])
        {
            self.unquoted.clear();
            let mut it = raw.iter().peekable();
            while let Some(&c) = it.next() {
                self.unquoted.push(c);
                if c == q && it.peek() == Some(&&q) {
                    it.next();
                }
            }
            raw = &self.unquoted;
        }
        let text = std::str::from_utf8(raw).map_err(|_| "invalid UTF-8".to_string())?;
        let ty = self.types[k];
        if self.options.null_literal.as_deref() == Some(text)
            || (!quoted && text.is_empty() && ty != SqlType::String)
        {
            return Ok(Value::Null);
        }
        let bad = || format!("'{text}' is not a valid {ty}");
        let t = text.trim();
        Ok(match ty {
            SqlType::String => Value::Str(text.into()),
            SqlType::Boolean => match t.to_ascii_lowercase().as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(bad()),
            },
            SqlType::Int => Value::Int(t.parse().map_err(|_| bad())?),
            SqlType::BigInt => Value::BigInt(t.parse().map_err(|_| bad())?),
            SqlType::Double => Value::Double(t.parse().map_err(|_| bad())?),
            SqlType::Decimal(p, s) => {
                let u = match parse_decimal(t, s) {
                    Some(u) => u,
                    // An exponent: through a double, as a number node is.
                    None => {
                        let d: f64 = t.parse().map_err(|_| bad())?;
                        parse_decimal(&format!("{d}"), s).ok_or_else(bad)?
                    }
                };
                if fits(u, p) {
                    Value::Decimal(u, s)
                } else {
                    Value::Null
                }
            }
            SqlType::Timestamp(_) => Value::Timestamp(parse_timestamp(t).ok_or_else(bad)?),
            SqlType::TimestampLtz(_) => {
                let t = t.strip_suffix('Z').unwrap_or(t);
                Value::TimestampLtz(parse_timestamp(t).ok_or_else(bad)?)
            }
            SqlType::Null => Value::Null,
        })
    }
}

impl LineDecoder for CsvDecoder {
    type Out = Option<Row>;

    fn decode(&mut self, line: &[u8]) -> Result<Option<Row>, String> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if self.options.allow_comments && line.first() == Some(&b'#') {
            return Ok(None);
        }
        let lenient = self.options.ignore_parse_errors;
        if let Err(e) = self.split(line) {
            return if lenient { Ok(None) } else { Err(e) };
        }
        if self.fields.len() != self.types.len() {
            if lenient {
                return Ok(None);
            }
            return Err(format!(
                "expected {} fields, found {}",
                self.types.len(),
                self.fields.len()
            ));
        }
        let mut row = vec![Value::Null; self.width];
        for k in 0..self.types.len() {
            let v = match self.field(line, k) {
                Ok(v) => v,
                Err(_) if lenient => Value::Null,
                Err(e) => return Err(format!("column {}: {e}", k + 1)),
            };
            row[self.positions[k]] = v;
        }
        Ok(Some(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder(types: Vec<SqlType>, lenient: bool) -> CsvDecoder {
        let n = types.len();
        CsvDecoder::new(
            types,
            (0..n).collect(),
            n,
            CsvOptions {
                delimiter: b',',
                quote: Some(b'"'),
                ignore_parse_errors: lenient,
                allow_comments: true,
                null_literal: None,
            },
        )
    }

    #[test]
    fn fields_parse_by_type_with_quotes_and_nulls() {
        let mut d = decoder(
            vec![
                SqlType::String,
                SqlType::Int,
                SqlType::Decimal(5, 2),
                SqlType::Timestamp(3),
                SqlType::Boolean,
            ],
            false,
        );
        let row = d
            .decode(b"\"a,\"\"b\"\"\",,1.5,1970-01-01 00:00:01.5,true")
            .expect("decodes")
            .expect("a row");
        assert_eq!(
            row,
            vec![
                Value::Str("a,\"b\"".into()),
                Value::Null,
                Value::Decimal(150, 2),
                Value::Timestamp(1500),
                Value::Bool(true),
            ]
        );
        assert!(d.decode(b"a,x,1,2020-01-01 00:00:00,true").is_err());
        assert!(d.decode(b"a,1").is_err());
        assert_eq!(d.decode(b"# a comment"), Ok(None));
        let mut lenient = decoder(vec![SqlType::String, SqlType::Int], true);
        assert_eq!(
            lenient.decode(b"a,x"),
            Ok(Some(vec![Value::Str("a".into()), Value::Null]))
        );
        assert_eq!(lenient.decode(b"a"), Ok(None));
    }
}
