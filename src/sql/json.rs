//! The `json` format, as Flink's: one JSON object per row (a line of a
//! `filesystem` table, the value of a Kafka record), its field names the
//! table's column names.
//!
//! **Reading** follows Flink's `JsonToRowDataConverters`: a field missing
//! from the object is `NULL` (`'json.fail-on-missing-field' = 'true'`
//! fails instead), a field of no column is ignored, JSON `null` is `NULL`.
//! A number or a string converts to a number column (`"12"` is `12`), any
//! value converts to a `STRING` column (a non-text value as its JSON text),
//! a boolean column is `true` for `true` or the text `true` (any case) and
//! `false` for anything else. Timestamps are text, `yyyy-MM-dd
//! HH:mm:ss[.fraction]` (`TIMESTAMP_LTZ` with a trailing `Z`). A row that
//! is not a JSON object or a field that does not convert fails the job,
//! unless `'json.ignore-parse-errors' = 'true'` (then such a field is
//! `NULL` and such a row is skipped). The object is read in place
//! (`serde_json` with borrowed raw values): a row costs its values'
//! allocations only.
//!
//! **Writing** follows Flink's `RowDataToJsonConverters` with its default
//! options: `{"a":1,"b":"x","c":null}` in column order, no spaces, `NULL` as
//! `null`, timestamps as Flink's `SQL` standard writes them (`2024-01-01
//! 12:00:00.12`: the fraction without trailing zeros, `Z` after a
//! `TIMESTAMP_LTZ`), decimals as Java's `BigDecimal.toString`, doubles as
//! `Double.toString`.

use super::expr::{fits, parse_decimal};
use super::value::{Row, SqlType, Value, parse_timestamp};
use crate::connectors::file_source::LineDecoder;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Options of the `json` format.
#[derive(Clone, Debug, Default)]
pub struct JsonOptions {
    /// `'json.ignore-parse-errors'`: a field that does not convert is
    /// `NULL`, a line that is not an object is skipped.
    pub ignore_parse_errors: bool,
    /// `'json.fail-on-missing-field'`: a missing field fails the job.
    pub fail_on_missing_field: bool,
}

/// The columns a JSON object is read into or written from.
#[derive(Debug)]
struct Schema {
    names: Vec<String>,
    types: Vec<SqlType>,
    /// Where each physical column goes in the row.
    positions: Vec<usize>,
    by_name: HashMap<String, usize>,
    width: usize,
    options: JsonOptions,
}

/// Decodes JSON objects into rows (`None`: a row skipped).
#[derive(Clone, Debug)]
pub struct JsonDecoder {
    schema: Arc<Schema>,
    /// Which fields the object being decoded had (reused).
    seen: Vec<bool>,
}

impl JsonDecoder {
    /// A decoder of rows `width` wide whose physical columns are `names`
    /// of `types`, at `positions`.
    pub fn new(
        names: Vec<String>,
        types: Vec<SqlType>,
        positions: Vec<usize>,
        width: usize,
        options: JsonOptions,
    ) -> Self {
        let by_name = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let n = names.len();
        JsonDecoder {
            schema: Arc::new(Schema {
                names,
                types,
                positions,
                by_name,
                width,
                options,
            }),
            seen: vec![false; n],
        }
    }

    /// Decodes one JSON object (a line, a record's value). Blank input is
    /// no row.
    pub fn decode_bytes(&mut self, bytes: &[u8]) -> Result<Option<Row>, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let lenient = self.schema.options.ignore_parse_errors;
        self.seen.iter_mut().for_each(|s| *s = false);
        let mut row = vec![Value::Null; self.schema.width];
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let filled = RowSeed {
            schema: &self.schema,
            row: &mut row,
            seen: &mut self.seen,
        }
        .deserialize(&mut de)
        .and_then(|()| de.end());
        if let Err(e) = filled {
            return if lenient {
                Ok(None)
            } else {
                Err(format!("not a valid JSON object: {e}"))
            };
        }
        if self.schema.options.fail_on_missing_field
            && let Some(k) = self.seen.iter().position(|s| !s)
        {
            return Err(format!(
                "could not find field with name '{}'",
                self.schema.names[k]
            ));
        }
        Ok(Some(row))
    }
}

impl LineDecoder for JsonDecoder {
    type Out = Option<Row>;

    fn decode(&mut self, line: &[u8]) -> Result<Option<Row>, String> {
        self.decode_bytes(line)
    }
}

/// Fills a row from an object's fields.
struct RowSeed<'s> {
    schema: &'s Schema,
    row: &'s mut Row,
    seen: &'s mut [bool],
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key_seed(KeySeed(self.schema))? {
            let Some(k) = k else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let raw: &RawValue = map.next_value()?;
            let ty = self.schema.types[k];
            let v = match convert(raw.get(), ty) {
                Ok(v) => v,
                Err(_) if self.schema.options.ignore_parse_errors => Value::Null,
                Err(e) => {
                    return Err(de::Error::custom(format!(
                        "field '{}': {e}",
                        self.schema.names[k]
                    )));
                }
            };
            self.row[self.schema.positions[k]] = v;
            self.seen[k] = true;
        }
        Ok(())
    }
}

/// A field name, as the index of its column (`None`: no such column).
struct KeySeed<'s>(&'s Schema);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.by_name.get(v).copied())
    }
}

/// The text of a JSON string literal (`raw` with its quotes), unescaped.
fn unquote(raw: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    let inner = &raw[1..raw.len() - 1];
    if !inner.contains('\\') {
        return Ok(inner.into());
    }
    serde_json::from_str::<String>(raw)
        .map(Into::into)
        .map_err(|e| e.to_string())
}

/// A JSON value (its text) as a value of `ty`, by Flink's rules.
fn convert(raw: &str, ty: SqlType) -> Result<Value, String> {
    let raw = raw.trim();
    if raw == "null" {
        return Ok(Value::Null);
    }
    let quoted = raw.starts_with('"');
    // Jackson's `asText()`: a string's text, a number's or boolean's
    // literal, nothing for an object or array.
    let text = if quoted {
        unquote(raw)?
    } else if raw.starts_with(['{', '[']) {
        "".into()
    } else {
        raw.into()
    };
    let bad = || format!("'{raw}' is not a valid {ty}");
    let number = !quoted && !raw.starts_with(['{', '[', 't', 'f']);
    Ok(match ty {
        SqlType::String if quoted => Value::Str(text.as_ref().into()),
        // A non-text value: its JSON text (`node.toString()`).
        SqlType::String => Value::Str(raw.into()),
        SqlType::Boolean => Value::Bool(text.trim().eq_ignore_ascii_case("true")),
        SqlType::Int | SqlType::BigInt => {
            let t = text.trim();
            let v: i64 = match t.parse::<i64>() {
                Ok(v) => v,
                // A fractional number truncates, as `asInt()` does.
                Err(_) if number => {
                    let d: f64 = t.parse().map_err(|_| bad())?;
                    if !(i64::MIN as f64..=i64::MAX as f64).contains(&d) {
                        return Err(bad());
                    }
                    d.trunc() as i64
                }
                Err(_) => return Err(bad()),
            };
            match ty {
                SqlType::Int => Value::Int(i32::try_from(v).map_err(|_| bad())?),
                _ => Value::BigInt(v),
            }
        }
        SqlType::Double => Value::Double(text.trim().parse().map_err(|_| bad())?),
        SqlType::Decimal(p, s) => {
            let t = text.as_ref();
            let u = match parse_decimal(t, s) {
                Some(u) => u,
                None => {
                    let d: f64 = t.parse().map_err(|_| bad())?;
                    if !d.is_finite() {
                        return Err(bad());
                    }
                    parse_decimal(&format!("{d}"), s).ok_or_else(bad)?
                }
            };
            if fits(u, p) {
                Value::Decimal(u, s)
            } else {
                Value::Null
            }
        }
        SqlType::Timestamp(_) => Value::Timestamp(parse_timestamp(&text).ok_or_else(bad)?),
        SqlType::TimestampLtz(_) => {
            let t = text.trim();
            let t = t.strip_suffix('Z').unwrap_or(t);
            Value::TimestampLtz(parse_timestamp(t).ok_or_else(bad)?)
        }
        SqlType::Null => Value::Null,
    })
}

/// How the `json` format writes a row: the field names, in column order.
#[derive(Clone, Debug)]
pub struct JsonFormat {
    /// The JSON field name of each column (quoted and escaped).
    keys: Vec<String>,
}

impl JsonFormat {
    /// A format writing the columns `names`.
    pub fn new(names: &[String]) -> Self {
        let keys = names
            .iter()
            .map(|n| serde_json::to_string(n).unwrap_or_else(|_| format!("\"{n}\"")))
            .collect();
        JsonFormat { keys }
    }

    /// Writes the values of a row (one per column) as one JSON object.
    pub fn write<'v>(
        &self,
        out: &mut impl fmt::Write,
        row: impl IntoIterator<Item = &'v Value>,
    ) -> fmt::Result {
        out.write_char('{')?;
        for (i, (k, v)) in self.keys.iter().zip(row).enumerate() {
            if i > 0 {
                out.write_char(',')?;
            }
            out.write_str(k)?;
            out.write_char(':')?;
            write_value(out, v)?;
        }
        out.write_char('}')
    }
}

fn write_value(out: &mut impl fmt::Write, v: &Value) -> fmt::Result {
    match v {
        Value::Null => out.write_str("null"),
        Value::Str(s) => write_string(out, s),
        Value::Timestamp(ms) | Value::TimestampLtz(ms) => {
            out.write_char('"')?;
            super::value::write_sql_timestamp(out, *ms)?;
            if matches!(v, Value::TimestampLtz(_)) {
                out.write_char('Z')?;
            }
            out.write_char('"')
        }
        // A double that is no JSON number is written as Jackson writes it
        // (a string).
        Value::Double(d) if !d.is_finite() => {
            out.write_char('"')?;
            v.write_print(out)?;
            out.write_char('"')
        }
        other => other.write_print(out),
    }
}

/// A JSON string literal, escaped as Jackson escapes it (`"`, `\` and the
/// control characters).
fn write_string(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            '\u{8}' => out.write_str("\\b")?,
            '\u{c}' => out.write_str("\\f")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04X}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// A row as one line of the `json` format (the format shared by every row
/// of a sink).
#[derive(Clone, Debug)]
pub struct JsonLine(pub Row, pub Arc<JsonFormat>);

impl fmt::Display for JsonLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.1.write(f, &self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder(options: JsonOptions) -> JsonDecoder {
        JsonDecoder::new(
            vec!["s".into(), "n".into(), "d".into(), "ts".into(), "b".into()],
            vec![
                SqlType::String,
                SqlType::Int,
                SqlType::Decimal(5, 2),
                SqlType::Timestamp(3),
                SqlType::Boolean,
            ],
            vec![0, 1, 2, 3, 4],
            5,
            options,
        )
    }

    #[test]
    fn objects_read_by_field_name_with_flinks_conversions() {
        let mut d = decoder(JsonOptions::default());
        let row = d
            .decode_bytes(
                br#"{"n":"7","x":[1,{"y":2}],"s":"a\"b","d":1.005,"ts":"1970-01-01 00:00:01.5","b":"TRUE"}"#,
            )
            .expect("decodes")
            .expect("a row");
        assert_eq!(
            row,
            vec![
                Value::Str("a\"b".into()),
                Value::Int(7),
                Value::Decimal(101, 2),
                Value::Timestamp(1500),
                Value::Bool(true),
            ]
        );
        let row = d
            .decode_bytes(br#"{"s":12,"n":3.9,"b":1}"#)
            .expect("decodes")
            .expect("a row");
        assert_eq!(
            row,
            vec![
                Value::Str("12".into()),
                Value::Int(3),
                Value::Null,
                Value::Null,
                Value::Bool(false)
            ]
        );
        assert!(d.decode_bytes(br#"{"n":"x"}"#).is_err());
        assert!(d.decode_bytes(b"[1]").is_err());
        assert!(d.decode_bytes(br#"{"n":1} x"#).is_err());
        assert_eq!(d.decode_bytes(b"  "), Ok(None));
        let mut strict = decoder(JsonOptions {
            fail_on_missing_field: true,
            ..JsonOptions::default()
        });
        let e = strict.decode_bytes(br#"{"s":"a"}"#).expect_err("missing");
        assert!(e.contains("'n'"), "{e}");
        let mut lenient = decoder(JsonOptions {
            ignore_parse_errors: true,
            ..JsonOptions::default()
        });
        assert_eq!(lenient.decode_bytes(b"nope"), Ok(None));
        assert_eq!(
            lenient.decode_bytes(br#"{"n":"x","s":"a"}"#),
            Ok(Some(vec![
                Value::Str("a".into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null
            ]))
        );
    }

    #[test]
    fn rows_write_as_flinks_json_format() {
        let f = Arc::new(JsonFormat::new(&[
            "s".into(),
            "n".into(),
            "d".into(),
            "ts".into(),
            "l".into(),
            "x".into(),
            "e".into(),
        ]));
        let line = JsonLine(
            vec![
                Value::Str("a\"\n\u{1}é".into()),
                Value::BigInt(-3),
                Value::Decimal(1250, 2),
                Value::Timestamp(1_120),
                Value::TimestampLtz(0),
                Value::Null,
                Value::Double(1e7),
            ],
            f,
        );
        assert_eq!(
            line.to_string(),
            r#"{"s":"a\"\n\u0001é","n":-3,"d":12.50,"ts":"1970-01-01 00:00:01.12","l":"1970-01-01 00:00:00Z","x":null,"e":1.0E7}"#
        );
    }
}
