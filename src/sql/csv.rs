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
use smol_str::SmolStr;
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
    /// The physical columns are the row's first, in file order: a row is
    /// built by pushing its values.
    in_order: bool,
    /// Lines may be read by [`CsvDecoder::plain`]: no null literal, the
    /// columns in order, each of a type it reads.
    plain: bool,
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
        let in_order = positions.iter().enumerate().all(|(i, &p)| i == p);
        let plain = in_order
            && options.null_literal.is_none()
            && types.iter().all(|t| {
                matches!(
                    t,
                    SqlType::String
                        | SqlType::Int
                        | SqlType::BigInt
                        | SqlType::Double
                        | SqlType::Timestamp(_)
                        | SqlType::TimestampLtz(_)
                )
            });
        CsvDecoder {
            in_order,
            plain,
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

    /// The row of a line without a quote character whose fields each read
    /// plainly (text, digits, a double, a timestamp), split by one scan of
    /// the line; `None` for any other line, which [`CsvDecoder::field`]s
    /// then read. Where this gives a row, they give the same one.
    #[inline]
    fn plain(&self, line: &[u8]) -> Option<Row> {
        let delim = self.options.delimiter;
        // Without a quote character, the delimiter stands in for it.
        let quote = self.options.quote.unwrap_or(delim);
        let mut row = Vec::with_capacity(self.width);
        let mut rest = line;
        let last = self.types.len().checked_sub(1)?;
        for (k, ty) in self.types.iter().enumerate() {
            let at = rest.iter().position(|&b| b == delim || b == quote);
            let raw = match (k == last, at) {
                (true, None) => rest,
                // No quote, no more fields after the last.
                (_, Some(at)) if rest[at] == delim && k < last => {
                    let raw = &rest[..at];
                    rest = &rest[at + 1..];
                    raw
                }
                _ => return None,
            };
            let text = || std::str::from_utf8(raw).ok();
            row.push(match ty {
                SqlType::String => Value::Str(small_str(text()?)),
                SqlType::BigInt => Value::BigInt(plain_int(raw)?),
                SqlType::Int => Value::Int(i32::try_from(plain_int(raw)?).ok()?),
                SqlType::Double => Value::Double(text()?.trim().parse().ok()?),
                SqlType::Timestamp(_) => Value::Timestamp(parse_timestamp(text()?.trim())?),
                SqlType::TimestampLtz(_) => {
                    let t = text()?.trim();
                    Value::TimestampLtz(parse_timestamp(t.strip_suffix('Z').unwrap_or(t))?)
                }
                _ => return None,
            });
        }
        while row.len() < self.width {
            row.push(Value::Null);
        }
        Some(row)
    }

    fn field(&mut self, line: &[u8], k: usize) -> Result<Value, String> {
        let (start, end, quoted) = self.fields[k];
        let mut raw = &line[start..end];
        let ty = self.types[k];
        // Plain digits read bytewise, as `str::parse` reads them.
        if !quoted
            && self.options.null_literal.is_none()
            && let Some(v) = plain_int(raw)
        {
            match ty {
                SqlType::BigInt => return Ok(Value::BigInt(v)),
                SqlType::Int => {
                    if let Ok(v) = i32::try_from(v) {
                        return Ok(Value::Int(v));
                    }
                }
                _ => {}
            }
        }
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
        if self.options.null_literal.as_deref() == Some(text)
            || (!quoted && text.is_empty() && ty != SqlType::String)
        {
            return Ok(Value::Null);
        }
        if ty == SqlType::String {
            return Ok(Value::Str(small_str(text)));
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

/// Bytes a string holds inline (`SmolStr`'s inline capacity).
const INLINE: usize = 23;

/// `text` as a string value: inline up to [`INLINE`] bytes, copied byte
/// by byte (a field is short: no `memcpy` call), else on the heap.
#[inline]
fn small_str(text: &str) -> SmolStr {
    match text.len() <= INLINE {
        true => SmolStr::new_inline(text),
        false => SmolStr::new(text),
    }
}

/// `-?[0-9]{1,18}` as an integer (no overflow), `None` for any other
/// bytes. What this reads, `str::parse` reads the same.
#[inline]
fn plain_int(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v = 0i64;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + i64::from(d);
    }
    Some(if negative { -v } else { v })
}

impl LineDecoder for CsvDecoder {
    type Out = Option<Row>;

    fn decode(&mut self, line: &[u8]) -> Result<Option<Row>, String> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if self.options.allow_comments && line.first() == Some(&b'#') {
            return Ok(None);
        }
        if self.plain
            && let Some(row) = self.plain(line)
        {
            return Ok(Some(row));
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
        let mut row = Vec::with_capacity(self.width);
        if !self.in_order {
            row.resize(self.width, Value::Null);
        }
        for k in 0..self.types.len() {
            let v = match self.field(line, k) {
                Ok(v) => v,
                Err(_) if lenient => Value::Null,
                Err(e) => return Err(format!("column {}: {e}", k + 1)),
            };
            match self.in_order {
                true => row.push(v),
                false => row[self.positions[k]] = v,
            }
        }
        while row.len() < self.width {
            row.push(Value::Null);
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

    #[test]
    fn plain_digits_read_as_str_parse_reads_them() {
        let texts = [
            "0",
            "-0",
            "7",
            "-7",
            "42",
            "+42",
            " 42",
            "42 ",
            "4a",
            "-",
            "",
            "--1",
            "007",
            "999999999999999999",
            "-999999999999999999",
            "9999999999999999999",
            "2147483647",
            "2147483648",
            "-2147483648",
            "-2147483649",
            "1.0",
            "1e3",
        ];
        for t in texts {
            if let Some(v) = plain_int(t.as_bytes()) {
                assert_eq!(t.parse::<i64>(), Ok(v), "{t:?}");
            }
            let mut d = decoder(vec![SqlType::Int, SqlType::BigInt], true);
            let line = format!("{t},{t}");
            let want = |ok: bool, v: Value| if ok { v } else { Value::Null };
            let int = t.trim().parse::<i32>();
            let big = t.trim().parse::<i64>();
            let expected = if t.is_empty() {
                vec![Value::Null, Value::Null]
            } else {
                vec![
                    want(int.is_ok(), Value::Int(int.unwrap_or(0))),
                    want(big.is_ok(), Value::BigInt(big.unwrap_or(0))),
                ]
            };
            assert_eq!(d.decode(line.as_bytes()), Ok(Some(expected)), "{t:?}");
        }
    }

    #[test]
    fn plain_lines_read_as_the_fields_read_them() {
        let types = vec![
            SqlType::String,
            SqlType::Int,
            SqlType::BigInt,
            SqlType::Double,
            SqlType::Timestamp(3),
            SqlType::TimestampLtz(3),
        ];
        let lines: &[&[u8]] = &[
            b"k1,42,-7,1.5,2024-01-01 00:00:01.5,2024-01-01 00:00:02Z",
            b",0,0,0,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b" a b ,+5, 9 ,1e3, 2024-01-01 00:00:00 ,2024-01-01T00:00:00",
            b"k,,,,,",
            b"k,2147483648,1,1,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b"k,1,99999999999999999999,1,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b"k,1,1,x,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b"k,1,1,1,2024-13-01 00:00:00,2024-01-01 00:00:00",
            b"k,1,1,1,2024-01-01 00:00:00",
            b"k,1,1,1,2024-01-01 00:00:00,2024-01-01 00:00:00,extra",
            b"\"k,\"\"x\",1,1,1,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b"k\xff,1,1,1,2024-01-01 00:00:00,2024-01-01 00:00:00",
            b"",
            b"-,-,-,-,-,-",
        ];
        for lenient in [false, true] {
            let mut plain = decoder(types.clone(), lenient);
            let mut fields = plain.clone();
            fields.plain = false;
            assert!(plain.plain);
            // The first two lines take the plain path.
            assert!(lines[..2].iter().all(|l| plain.plain(l).is_some()));
            for line in lines {
                assert_eq!(
                    plain.decode(line),
                    fields.decode(line),
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
    }

    #[test]
    fn strings_up_to_and_past_the_inline_capacity() {
        let mut d = decoder(vec![SqlType::String, SqlType::Int], false);
        for n in [0, 1, INLINE - 1, INLINE, INLINE + 1, 100] {
            let text = "x".repeat(n);
            let line = format!("{text},1");
            assert_eq!(
                d.decode(line.as_bytes()),
                Ok(Some(vec![Value::Str(text.as_str().into()), Value::Int(1)]))
            );
            assert_eq!(small_str(&text), text.as_str());
        }
    }
}
