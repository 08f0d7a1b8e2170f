//! SQL types and values: what a row holds, how it compares, and how it is
//! written (Flink's CSV text and Flink's `print` text).
//!
//! A value knows how to write itself: a decimal carries its scale and a
//! timestamp whether it is `TIMESTAMP` or `TIMESTAMP_LTZ`, so a sink formats
//! a row without looking up its schema. Timestamps are milliseconds since
//! the epoch (`TIMESTAMP` as a wall clock in UTC, `TIMESTAMP_LTZ` as an
//! instant shown in UTC). Strings are inline up to 23 bytes (no allocation
//! of their own).

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;
use std::cmp::Ordering;
use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SqlType {
    /// `STRING`, `VARCHAR(n)`, `CHAR(n)`.
    String,
    /// `BOOLEAN`.
    Boolean,
    /// `INT`, `INTEGER` (32 bits, wrapping arithmetic as in Flink).
    Int,
    /// `BIGINT` (64 bits).
    BigInt,
    /// `DOUBLE`.
    Double,
    /// `DECIMAL(precision, scale)`.
    Decimal(u8, u8),
    /// `TIMESTAMP(p)`: a wall-clock date and time (millisecond resolution).
    Timestamp(u8),
    /// `TIMESTAMP_LTZ(p)`: an instant (millisecond resolution).
    TimestampLtz(u8),
    /// The type of a bare `NULL` literal, before it meets another type.
    Null,
}

impl SqlType {
    /// Whether the type is a number.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            SqlType::Int | SqlType::BigInt | SqlType::Double | SqlType::Decimal(..)
        )
    }

    /// Whether the type is a timestamp of either kind.
    pub fn is_timestamp(self) -> bool {
        matches!(self, SqlType::Timestamp(_) | SqlType::TimestampLtz(_))
    }

    /// The type both operands of an arithmetic or comparison are brought
    /// to (Flink's widening), if there is one.
    pub fn common(a: SqlType, b: SqlType) -> Option<SqlType> {
        use SqlType as T;
        Some(match (a, b) {
            (T::Null, x) | (x, T::Null) => x,
            (x, y) if x == y => x,
            (T::Int, T::BigInt) | (T::BigInt, T::Int) => T::BigInt,
            (T::Double, y) | (y, T::Double) if y.is_numeric() => T::Double,
            (T::Decimal(p, s), T::Int) | (T::Int, T::Decimal(p, s)) => decimal_join(p, s, 10, 0),
            (T::Decimal(p, s), T::BigInt) | (T::BigInt, T::Decimal(p, s)) => {
                decimal_join(p, s, 19, 0)
            }
            (T::Decimal(p1, s1), T::Decimal(p2, s2)) => decimal_join(p1, s1, p2, s2),
            (T::Timestamp(p), T::Timestamp(q)) => T::Timestamp(p.max(q)),
            (T::TimestampLtz(p), T::TimestampLtz(q)) => T::TimestampLtz(p.max(q)),
            _ => return None,
        })
    }
}

/// The decimal holding both `DECIMAL(p1, s1)` and `DECIMAL(p2, s2)`.
fn decimal_join(p1: u8, s1: u8, p2: u8, s2: u8) -> SqlType {
    let s = s1.max(s2);
    let int = (p1 - s1).max(p2 - s2);
    SqlType::Decimal((int + s).min(38), s)
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlType::String => f.write_str("STRING"),
            SqlType::Boolean => f.write_str("BOOLEAN"),
            SqlType::Int => f.write_str("INT"),
            SqlType::BigInt => f.write_str("BIGINT"),
            SqlType::Double => f.write_str("DOUBLE"),
            SqlType::Decimal(p, s) => write!(f, "DECIMAL({p}, {s})"),
            SqlType::Timestamp(p) => write!(f, "TIMESTAMP({p})"),
            SqlType::TimestampLtz(p) => write!(f, "TIMESTAMP_LTZ({p})"),
            SqlType::Null => f.write_str("NULL"),
        }
    }
}

/// One value of a row.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A `BOOLEAN`.
    Bool(bool),
    /// An `INT`.
    Int(i32),
    /// A `BIGINT`.
    BigInt(i64),
    /// A `DOUBLE`.
    Double(f64),
    /// A `DECIMAL`: the unscaled value and the scale.
    Decimal(i128, u8),
    /// A `STRING`.
    Str(SmolStr),
    /// A `TIMESTAMP`: milliseconds since 1970-01-01 00:00:00 (wall clock).
    Timestamp(i64),
    /// A `TIMESTAMP_LTZ`: milliseconds since the epoch.
    TimestampLtz(i64),
}

/// A row: its values in column order.
pub type Row = Vec<Value>;

impl Value {
    /// Whether the value is `NULL`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as a 64-bit integer (integers only).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(i64::from(*v)),
            Value::BigInt(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as a double (any number).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(f64::from(*v)),
            Value::BigInt(v) => Some(*v as f64),
            Value::Double(v) => Some(*v),
            Value::Decimal(u, s) => Some(*u as f64 / 10f64.powi(i32::from(*s))),
            _ => None,
        }
    }

    /// The value as a decimal unscaled to `scale` (integers and decimals).
    pub fn as_decimal(&self, scale: u8) -> Option<i128> {
        let (u, s) = match self {
            Value::Int(v) => (i128::from(*v), 0),
            Value::BigInt(v) => (i128::from(*v), 0),
            Value::Decimal(u, s) => (*u, *s),
            _ => return None,
        };
        rescale(u, s, scale)
    }

    /// The timestamp in milliseconds (either kind).
    pub fn as_millis(&self) -> Option<i64> {
        match self {
            Value::Timestamp(t) | Value::TimestampLtz(t) => Some(*t),
            _ => None,
        }
    }

    /// SQL comparison: `None` when either side is `NULL` or they do not
    /// compare.
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        use Value as V;
        match (self, other) {
            (V::Null, _) | (_, V::Null) => None,
            (V::Bool(a), V::Bool(b)) => Some(a.cmp(b)),
            (V::Str(a), V::Str(b)) => Some(a.as_str().cmp(b.as_str())),
            (V::Timestamp(a), V::Timestamp(b)) | (V::TimestampLtz(a), V::TimestampLtz(b)) => {
                Some(a.cmp(b))
            }
            (V::Double(_), _) | (_, V::Double(_)) => self.as_f64()?.partial_cmp(&other.as_f64()?),
            (V::Decimal(_, s), _) | (_, V::Decimal(_, s)) => {
                let scale = (*s).max(match (self, other) {
                    (V::Decimal(_, a), V::Decimal(_, b)) => (*a).max(*b),
                    _ => *s,
                });
                Some(self.as_decimal(scale)?.cmp(&other.as_decimal(scale)?))
            }
            _ => Some(self.as_i64()?.cmp(&other.as_i64()?)),
        }
    }
}

/// `unscaled * 10^(to - from)`, exactly (`None` on overflow); a smaller
/// scale rounds half up, as Flink's decimals do.
pub fn rescale(unscaled: i128, from: u8, to: u8) -> Option<i128> {
    match to.cmp(&from) {
        Ordering::Equal => Some(unscaled),
        Ordering::Greater => unscaled.checked_mul(10i128.checked_pow(u32::from(to - from))?),
        Ordering::Less => {
            let d = 10i128.checked_pow(u32::from(from - to))?;
            let (q, r) = (unscaled / d, unscaled % d);
            Some(if r.abs() * 2 >= d {
                q + unscaled.signum()
            } else {
                q
            })
        }
    }
}

// Grouping keys: `NULL` equals `NULL` and a double equals itself bit for
// bit, as Flink groups them.
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value as V;
        match (self, other) {
            (V::Null, V::Null) => true,
            (V::Bool(a), V::Bool(b)) => a == b,
            (V::Int(a), V::Int(b)) => a == b,
            (V::BigInt(a), V::BigInt(b)) => a == b,
            (V::Double(a), V::Double(b)) => a.to_bits() == b.to_bits(),
            (V::Decimal(a, s), V::Decimal(b, t)) => a == b && s == t,
            (V::Str(a), V::Str(b)) => a == b,
            (V::Timestamp(a), V::Timestamp(b)) => a == b,
            (V::TimestampLtz(a), V::TimestampLtz(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Value::Null => {}
            Value::Bool(v) => v.hash(state),
            Value::Int(v) => v.hash(state),
            Value::BigInt(v) | Value::Timestamp(v) | Value::TimestampLtz(v) => v.hash(state),
            Value::Double(v) => v.to_bits().hash(state),
            Value::Decimal(u, s) => (u, s).hash(state),
            Value::Str(v) => v.hash(state),
        }
    }
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Parses `yyyy-MM-dd HH:mm:ss[.fraction]` (or with `T`), as Flink's SQL
/// timestamp format reads it, into milliseconds (sub-millisecond digits
/// are cut). Also takes a date alone (midnight) and `HH:mm` without
/// seconds.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = match text.find([' ', 'T']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if !(-999_999..=999_999).contains(&y)
        || !(1..=12).contains(&m)
        || d == 0
        || d > days_in_month(y, m)
    {
        return None;
    }
    let mut ms = 0i64;
    if let Some(time) = time {
        let (hms, frac) = match time.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (time, None),
        };
        let mut t = hms.split(':');
        let h: i64 = t.next()?.parse().ok()?;
        let mi: i64 = t.next()?.parse().ok()?;
        let s: i64 = t.next().map_or(Some(0), |s| s.parse().ok())?;
        if t.next().is_some() || h > 23 || mi > 59 || s > 59 || h < 0 || mi < 0 || s < 0 {
            return None;
        }
        ms = ((h * 60 + mi) * 60 + s) * 1000;
        if let Some(frac) = frac {
            if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let mut digits = frac.bytes().take(3).map(|b| i64::from(b - b'0'));
            let mut f = 0;
            for _ in 0..3 {
                f = f * 10 + digits.next().unwrap_or(0);
            }
            ms += f;
        }
    }
    days_from_civil(y, m, d)
        .checked_mul(86_400_000)?
        .checked_add(ms)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A timestamp as Flink's SQL format writes it (`yyyy-MM-dd HH:mm:ss` and
/// the fraction without trailing zeros): CSV and JSON.
pub(crate) fn write_sql_timestamp(out: &mut impl fmt::Write, ms: i64) -> fmt::Result {
    write_timestamp(out, ms, ' ', TimeStyle::Sql)
}

/// How a timestamp's time of day is written.
#[derive(Clone, Copy)]
enum TimeStyle {
    /// Flink's SQL format: `HH:mm:ss` and the fraction without trailing
    /// zeros (CSV).
    Sql,
    /// Java's `LocalTime.toString`: seconds only when not zero, the
    /// fraction in groups of three digits (print).
    Java,
    /// Java's `Instant.toString`: seconds always, the fraction in groups
    /// of three digits (print).
    Instant,
    /// Seconds and the three digits of `TIMESTAMP(3)` always, as
    /// `CAST(ts AS STRING)` gives them.
    Cast,
}

fn write_timestamp(out: &mut impl fmt::Write, ms: i64, sep: char, style: TimeStyle) -> fmt::Result {
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    // `yyyy-MM-dd HH:mm:ss.fff`, digits put in place (a sink writes a
    // timestamp or two per row), then cut to what the style shows.
    let in_range = (0..=9999).contains(&y);
    let mut text = *b"0000-00-00 00:00:00.000";
    {
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                text[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        if in_range {
            put(0, 4, y);
        }
        put(5, 2, i64::from(m));
        put(8, 2, i64::from(d));
        put(11, 2, h);
        put(14, 2, mi);
        put(17, 2, s);
        put(20, 3, milli);
    }
    let mut len = match style {
        TimeStyle::Sql if milli == 0 => 19,
        // The fraction without trailing zeros.
        TimeStyle::Sql => 23 - text[20..].iter().rev().take_while(|&&c| c == b'0').count(),
        TimeStyle::Cast => 23,
        TimeStyle::Java | TimeStyle::Instant if milli != 0 => 23,
        TimeStyle::Java if s == 0 => 16,
        TimeStyle::Java | TimeStyle::Instant => 19,
    };
    let date_len = if in_range {
        10
    } else {
        write!(out, "{y:+05}")?;
        text.copy_within(4.., 0);
        len -= 4;
        6
    };
    let text = std::str::from_utf8(&text[..len]).map_err(|_| fmt::Error)?;
    out.write_str(&text[..date_len])?;
    out.write_char(sep)?;
    out.write_str(&text[date_len + 1..])
}

/// An integer in decimal, as `{v}` formats it (digits put in place, no
/// `fmt` machinery: a sink writes one or two per row).
fn write_int(out: &mut impl fmt::Write, v: i64) -> fmt::Result {
    write_int_padded(out, v, 1)
}

/// An integer in decimal, its digits zero-padded to `width` (a sign before
/// them).
pub(super) fn write_int_padded(out: &mut impl fmt::Write, v: i64, width: usize) -> fmt::Result {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = v.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.write_char('-')?;
    }
    for _ in digits.len() - at..width {
        out.write_char('0')?;
    }
    digits[at..]
        .iter()
        .try_for_each(|&d| out.write_char(char::from(d)))
}

/// Java's `Double.toString`: plain between 10^-3 and 10^7, else
/// `d.dddE±n`, always with a fractional digit; shortest round-trip digits.
fn write_double(out: &mut impl fmt::Write, v: f64) -> fmt::Result {
    if v.is_nan() {
        return out.write_str("NaN");
    }
    if v.is_infinite() {
        return out.write_str(if v > 0.0 { "Infinity" } else { "-Infinity" });
    }
    if v == 0.0 {
        return out.write_str(if v.is_sign_negative() { "-0.0" } else { "0.0" });
    }
    let a = v.abs();
    if (1e-3..1e7).contains(&a) {
        let s = format!("{v}");
        out.write_str(&s)?;
        if !s.contains('.') {
            out.write_str(".0")?;
        }
        return Ok(());
    }
    let s = format!("{v:e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    out.write_str(mantissa)?;
    if !mantissa.contains('.') {
        out.write_str(".0")?;
    }
    write!(out, "E{exp}")
}

/// Java's `BigDecimal.toPlainString`: digits and a point, never an
/// exponent (`12.50`, `0.00000010`), as Flink's `DecimalData.toString`,
/// `CAST(.. AS STRING)` and the `print` connector show a decimal.
fn write_decimal(out: &mut impl fmt::Write, unscaled: i128, scale: u8) -> fmt::Result {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let scale = usize::from(scale);
    if scale == 0 {
        write!(out, "{sign}{digits}")
    } else if digits.len() > scale {
        let (i, f) = digits.split_at(digits.len() - scale);
        write!(out, "{sign}{i}.{f}")
    } else {
        write!(out, "{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
    }
}

/// A decimal as Flink's `csv` format writes it: Java's
/// `BigDecimal.stripTrailingZeros().toString()` (its JSON node factory
/// strips the zeros): `12.5` for `12.50`, `0` for `0.00`, `1E+3` for
/// `1000.00`, `1E-7` for `0.00000010`.
fn write_decimal_csv(out: &mut impl fmt::Write, unscaled: i128, scale: u8) -> fmt::Result {
    if unscaled == 0 {
        return out.write_str("0");
    }
    let (mut unscaled, mut scale) = (unscaled, i64::from(scale));
    while unscaled % 10 == 0 {
        unscaled /= 10;
        scale -= 1;
    }
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let adjusted = digits.len() as i64 - 1 - scale;
    if scale == 0 {
        return write!(out, "{sign}{digits}");
    }
    if scale > 0 && adjusted >= -6 {
        // `scale` is at most 38 here.
        return write_decimal(out, unscaled, scale as u8);
    }
    let (first, rest) = digits.split_at(1);
    write!(out, "{sign}{first}")?;
    if !rest.is_empty() {
        write!(out, ".{rest}")?;
    }
    match adjusted {
        0 => Ok(()),
        a if a > 0 => write!(out, "E+{a}"),
        a => write!(out, "E{a}"),
    }
}

impl Value {
    /// Writes the value as Flink's CSV format does with `format`
    /// (`NULL`: the null literal, else nothing). A string is quoted as the
    /// format's CSV writer quotes it: when it is longer than 24 UTF-16
    /// units, or holds a character below the delimiter, the quote and the
    /// line feed (all three excluded) — a space, a comma, `#` … — with the
    /// quote doubled inside.
    pub fn write_csv(&self, out: &mut impl fmt::Write, format: &CsvFormat) -> fmt::Result {
        match self {
            Value::Null => out.write_str(format.null.as_deref().unwrap_or("")),
            Value::Str(s) => {
                let Some(q) = format.quote.map(char::from) else {
                    return out.write_str(s);
                };
                let safe = u32::from(format.delimiter.max(b'"').max(b'\n').max(q as u8)) + 1;
                let quote = if s.is_ascii() {
                    s.len() > 24 || s.bytes().any(|b| u32::from(b) < safe)
                } else {
                    s.encode_utf16().count() > 24 || s.chars().any(|c| (c as u32) < safe)
                };
                if !quote {
                    return out.write_str(s);
                }
                out.write_char(q)?;
                for c in s.chars() {
                    if c == q {
                        out.write_char(q)?;
                    }
                    out.write_char(c)?;
                }
                out.write_char(q)
            }
            // A timestamp is written as a string, and its space (below every
            // delimiter, quote and line feed) makes it quoted.
            Value::Timestamp(ms) | Value::TimestampLtz(ms) => {
                let q = format.quote.map(char::from);
                if let Some(q) = q {
                    out.write_char(q)?;
                }
                write_timestamp(out, *ms, ' ', TimeStyle::Sql)?;
                if matches!(self, Value::TimestampLtz(_)) {
                    out.write_char('Z')?;
                }
                match q {
                    Some(q) => out.write_char(q),
                    None => Ok(()),
                }
            }
            Value::Decimal(u, s) => write_decimal_csv(out, *u, *s),
            other => other.write_plain(out),
        }
    }

    /// Writes the value as Flink's `print` connector shows it (`null`,
    /// Java's `toString` of the value).
    pub fn write_print(&self, out: &mut impl fmt::Write) -> fmt::Result {
        match self {
            Value::Null => out.write_str("null"),
            Value::Str(s) => out.write_str(s),
            Value::Timestamp(ms) => write_timestamp(out, *ms, 'T', TimeStyle::Java),
            Value::TimestampLtz(ms) => {
                write_timestamp(out, *ms, 'T', TimeStyle::Instant)?;
                out.write_char('Z')
            }
            other => other.write_plain(out),
        }
    }

    fn write_plain(&self, out: &mut impl fmt::Write) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(out, "{b}"),
            Value::Int(v) => write_int(out, i64::from(*v)),
            Value::BigInt(v) => write_int(out, *v),
            Value::Double(v) => write_double(out, *v),
            Value::Decimal(u, s) => write_decimal(out, *u, *s),
            other => other.write_print(out),
        }
    }

    /// The value as `CAST(v AS STRING)` gives it.
    pub fn to_sql_string(&self) -> String {
        let mut s = String::new();
        let _ = match self {
            Value::Timestamp(ms) | Value::TimestampLtz(ms) => {
                write_timestamp(&mut s, *ms, ' ', TimeStyle::Cast)
            }
            other => other.write_print(&mut s),
        };
        s
    }
}

/// How the `csv` format writes a row: its delimiter, quote and null text.
#[derive(Clone, Debug)]
pub struct CsvFormat {
    /// Between fields.
    pub delimiter: u8,
    /// Around a field that needs it (`None`: never quoted).
    pub quote: Option<u8>,
    /// The text of `NULL` (`None`: an empty field).
    pub null: Option<String>,
}

impl Default for CsvFormat {
    fn default() -> Self {
        CsvFormat {
            delimiter: b',',
            quote: Some(b'"'),
            null: None,
        }
    }
}

/// A row as one line of Flink's CSV format (the format shared by every
/// row of a sink).
#[derive(Clone, Debug)]
pub struct CsvLine(pub Row, pub std::sync::Arc<CsvFormat>);

impl fmt::Display for CsvLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_char(char::from(self.1.delimiter))?;
            }
            v.write_csv(f, &self.1)?;
        }
        Ok(())
    }
}

/// A row as Flink's `print` connector shows an insertion: `+I[a, 1]`.
#[derive(Clone, Debug)]
pub struct PrintLine(pub Row);

impl fmt::Display for PrintLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_print_row(f, "+I", &self.0)
    }
}

/// A row as Flink's `print` connector shows it: its kind (`+I`, `-U`, ..)
/// and its values, `+I[a, 1]`.
pub fn write_print_row(out: &mut impl fmt::Write, kind: &str, row: &[Value]) -> fmt::Result {
    out.write_str(kind)?;
    out.write_char('[')?;
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.write_str(", ")?;
        }
        v.write_print(out)?;
    }
    out.write_char(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(v: Value) -> String {
        let mut s = String::new();
        v.write_csv(&mut s, &CsvFormat::default())
            .expect("a string");
        s
    }

    fn print(v: Value) -> String {
        let mut s = String::new();
        v.write_print(&mut s).expect("a string");
        s
    }

    #[test]
    fn timestamps_read_and_write_as_flink_formats_them() {
        let t = parse_timestamp("2020-03-01 12:34:56.120").expect("valid");
        assert_eq!(csv(Value::Timestamp(t)), "\"2020-03-01 12:34:56.12\"");
        assert_eq!(print(Value::Timestamp(t)), "2020-03-01T12:34:56.120");
        let whole = parse_timestamp("2020-03-01 12:00:00").expect("valid");
        assert_eq!(csv(Value::Timestamp(whole)), "\"2020-03-01 12:00:00\"");
        assert_eq!(print(Value::Timestamp(whole)), "2020-03-01T12:00");
        assert_eq!(csv(Value::TimestampLtz(whole)), "\"2020-03-01 12:00:00Z\"");
        assert_eq!(parse_timestamp("1970-01-01 00:00:01"), Some(1000));
        assert_eq!(parse_timestamp("1969-12-31 23:59:59.999"), Some(-1));
        assert_eq!(parse_timestamp("2021-02-29 00:00:00"), None);
        assert_eq!(parse_timestamp("2020-01-01 24:00:00"), None);
        assert_eq!(parse_timestamp("nope"), None);
        assert_eq!(print(Value::TimestampLtz(whole)), "2020-03-01T12:00:00Z");
        assert_eq!(print(Value::TimestampLtz(t)), "2020-03-01T12:34:56.120Z");
        // Years outside 0..=9999 carry their sign, as Java writes them.
        let far = days_from_civil(10_000, 1, 2) * 86_400_000 + 3_000;
        assert_eq!(csv(Value::Timestamp(far)), "\"+10000-01-02 00:00:03\"");
        assert_eq!(print(Value::Timestamp(far)), "+10000-01-02T00:00:03");
        let bc = days_from_civil(-1, 12, 31) * 86_400_000 + 500;
        assert_eq!(csv(Value::Timestamp(bc)), "\"-0001-12-31 00:00:00.5\"");
        for ms in [-86_400_001i64, 0, 1, 951_782_400_000, 4_102_444_800_123] {
            let text = csv(Value::Timestamp(ms));
            assert_eq!(parse_timestamp(text.trim_matches('"')), Some(ms));
        }
    }

    #[test]
    fn numbers_write_as_java_writes_them() {
        assert_eq!(csv(Value::Double(1.0)), "1.0");
        assert_eq!(csv(Value::Double(0.5)), "0.5");
        assert_eq!(csv(Value::Double(1e7)), "1.0E7");
        assert_eq!(csv(Value::Double(1.5e-4)), "1.5E-4");
        assert_eq!(csv(Value::Decimal(1234, 2)), "12.34");
        assert_eq!(csv(Value::Decimal(-5, 2)), "-0.05");
        assert_eq!(csv(Value::Decimal(0, 2)), "0");
        assert_eq!(csv(Value::Decimal(1250, 2)), "12.5");
        assert_eq!(csv(Value::Decimal(459_600, 2)), "4596");
        assert_eq!(csv(Value::Decimal(100_000, 2)), "1E+3");
        assert_eq!(csv(Value::Decimal(-1_200_000, 2)), "-1.2E+4");
        assert_eq!(csv(Value::Decimal(10, 8)), "1E-7");
        assert_eq!(csv(Value::Decimal(12, 8)), "1.2E-7");
        assert_eq!(csv(Value::Decimal(-50, 3)), "-0.05");
        assert_eq!(print(Value::Decimal(1250, 2)), "12.50");
        assert_eq!(print(Value::Decimal(10, 8)), "0.00000010");
        assert_eq!(Value::Decimal(100_000, 2).to_sql_string(), "1000.00");
        assert_eq!(
            Value::Timestamp(1_154_920).to_sql_string(),
            "1970-01-01 00:19:14.920"
        );
        assert_eq!(
            Value::TimestampLtz(0).to_sql_string(),
            "1970-01-01 00:00:00.000"
        );
        for v in [0, 7, -7, 10, -10, 99, 1234567890, i64::MAX, i64::MIN] {
            assert_eq!(csv(Value::BigInt(v)), format!("{v}"));
        }
        for v in [0, 42, -42, i32::MAX, i32::MIN] {
            assert_eq!(csv(Value::Int(v)), format!("{v}"));
        }
        assert_eq!(rescale(125, 2, 1), Some(13));
        assert_eq!(rescale(-125, 2, 1), Some(-13));
    }

    #[test]
    fn strings_are_quoted_only_when_needed() {
        assert_eq!(csv(Value::Str("a-b.c".into())), "a-b.c");
        assert_eq!(csv(Value::Str("a b".into())), "\"a b\"");
        assert_eq!(
            csv(Value::Str("x".repeat(25).into())),
            format!("\"{}\"", "x".repeat(25))
        );
        assert_eq!(csv(Value::Str("a,\"b\"".into())), "\"a,\"\"b\"\"\"");
        assert_eq!(
            PrintLine(vec![Value::Str("x".into()), Value::Null, Value::Int(3)]).to_string(),
            "+I[x, null, 3]"
        );
    }
}
