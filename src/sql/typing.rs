//! Types of the SQL this planner reads: column types as written, literals,
//! intervals, and Flink's rules for arithmetic results, comparisons, casts
//! and what a sink column takes without a cast.

use super::error::{SqlResult, err};
use super::expr::{Arith, Expr};
use super::value::{SqlType, Value};
use sqlparser::ast::{self, DataType, DateTimeField, ExactNumberInfo, Spanned, TimezoneInfo};
use sqlparser::tokenizer::Span;

/// The SQL type a column type of a `CREATE TABLE` or `CAST` names.
pub fn sql_type(dt: &DataType, at: Span) -> SqlResult<SqlType> {
    let precision = |p: Option<u64>| -> SqlResult<u8> {
        match p {
            None => Ok(3),
            Some(p) if p <= 9 => Ok(p as u8),
            Some(p) => Err(err!(
                TypeMismatch,
                at,
                "timestamp precision {p} is out of range 0..=9"
            )),
        }
    };
    Ok(match dt {
        DataType::String(_) | DataType::Varchar(_) | DataType::Char(_) | DataType::Text => {
            SqlType::String
        }
        DataType::Int(_) | DataType::Integer(_) => SqlType::Int,
        DataType::BigInt(_) => SqlType::BigInt,
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float64 => SqlType::Double,
        DataType::Bool | DataType::Boolean => SqlType::Boolean,
        DataType::Decimal(info) | DataType::Dec(info) | DataType::Numeric(info) => {
            let (p, s) = match info {
                ExactNumberInfo::None => (10, 0),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
            };
            if !(1..=38).contains(&p) || s > p {
                return Err(err!(
                    TypeMismatch,
                    at,
                    "DECIMAL({p}, {s}) is out of range: precision 1..=38, scale 0..=precision"
                ));
            }
            SqlType::Decimal(p as u8, s as u8)
        }
        DataType::Timestamp(p, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => {
            SqlType::Timestamp(precision(*p)?)
        }
        DataType::Custom(name, args) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
            let p = match args.first() {
                Some(a) => Some(a.parse::<u64>().map_err(|_| {
                    err!(
                        TypeMismatch,
                        at,
                        "TIMESTAMP_LTZ precision '{a}' is not a number"
                    )
                })?),
                None => None,
            };
            SqlType::TimestampLtz(precision(p)?)
        }
        other => {
            return Err(err!(
                Unsupported,
                at,
                "type {other} is not supported (STRING, VARCHAR, BOOLEAN, INT, BIGINT, DOUBLE, \
                 DECIMAL(p, s), TIMESTAMP(3), TIMESTAMP_LTZ(3) are)"
            ));
        }
    })
}

/// The milliseconds of an `INTERVAL 'n' UNIT` literal.
pub fn interval_millis(e: &ast::Expr) -> SqlResult<i64> {
    let ast::Expr::Interval(i) = e else {
        return Err(err!(
            Unsupported,
            e.span(),
            "expected an INTERVAL literal, found {e}"
        ));
    };
    let text = match &*i.value {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::Number(s, _) => s.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    };
    let n: i64 = text.trim().parse().map_err(|_| {
        err!(
            Unsupported,
            e.span(),
            "interval '{text}' is not a whole number (only 'n' UNIT intervals are supported)"
        )
    })?;
    let unit: i64 = match (&i.leading_field, &i.last_field) {
        (Some(f), None) => match f {
            DateTimeField::Millisecond | DateTimeField::Milliseconds => 1,
            DateTimeField::Second | DateTimeField::Seconds => 1000,
            DateTimeField::Minute | DateTimeField::Minutes => 60_000,
            DateTimeField::Hour | DateTimeField::Hours => 3_600_000,
            DateTimeField::Day | DateTimeField::Days => 86_400_000,
            other => {
                return Err(err!(
                    Unsupported,
                    e.span(),
                    "interval unit {other} is not supported (SECOND, MINUTE, HOUR, DAY are)"
                ));
            }
        },
        _ => {
            return Err(err!(
                Unsupported,
                e.span(),
                "interval {e} is not supported: write INTERVAL 'n' SECOND|MINUTE|HOUR|DAY"
            ));
        }
    };
    n.checked_mul(unit)
        .ok_or_else(|| err!(Unsupported, e.span(), "interval {e} is too long"))
}

/// The type of a literal number as Flink reads it: an integer that fits is
/// `INT` (else `BIGINT`), `1.5` is a `DECIMAL`, `1.5E3` a `DOUBLE`.
pub(crate) fn number(text: &str, at: Span) -> SqlResult<(Value, SqlType)> {
    if text.contains(['e', 'E']) {
        let d: f64 = text
            .parse()
            .map_err(|_| err!(Syntax, at, "'{text}' is not a number"))?;
        return Ok((Value::Double(d), SqlType::Double));
    }
    if !text.contains('.') {
        if let Ok(i) = text.parse::<i32>() {
            return Ok((Value::Int(i), SqlType::Int));
        }
        if let Ok(i) = text.parse::<i64>() {
            return Ok((Value::BigInt(i), SqlType::BigInt));
        }
    }
    let scale = text.split_once('.').map_or(0, |(_, f)| f.len());
    let digits = text.bytes().filter(u8::is_ascii_digit).count().max(1);
    match super::expr::parse_decimal(text, scale as u8) {
        Some(u) if digits <= 38 => Ok((
            Value::Decimal(u, scale as u8),
            SqlType::Decimal(digits as u8, scale as u8),
        )),
        _ => Err(err!(Unsupported, at, "number {text} is out of range")),
    }
}

/// The type of `a op b` for arithmetic, as Flink infers it.
pub(crate) fn arith_type(op: Arith, a: SqlType, b: SqlType) -> Option<SqlType> {
    use SqlType as T;
    let dec = |t: T| match t {
        T::Int => Some((10u8, 0u8)),
        T::BigInt => Some((19, 0)),
        T::Decimal(p, s) => Some((p, s)),
        _ => None,
    };
    if !(a.is_numeric() || a == T::Null) || !(b.is_numeric() || b == T::Null) {
        return None;
    }
    let common = T::common(a, b)?;
    let (T::Decimal(..), Some((p1, s1)), Some((p2, s2))) = (common, dec(a), dec(b)) else {
        return Some(common);
    };
    let (p1, s1, p2, s2) = (u32::from(p1), u32::from(s1), u32::from(p2), u32::from(s2));
    let bounded = |p: u32, s: u32| {
        if p <= 38 {
            T::Decimal(p as u8, s as u8)
        } else {
            let int = p - s;
            let s = s.min(38u32.saturating_sub(int).max(s.min(6)));
            T::Decimal(38, s as u8)
        }
    };
    Some(match op {
        Arith::Add | Arith::Sub => {
            let s = s1.max(s2);
            bounded((p1 - s1).max(p2 - s2) + s + 1, s)
        }
        Arith::Mul => bounded(p1 + p2 + 1, s1 + s2),
        Arith::Div => {
            let s = 6u32.max(s1 + p2 + 1);
            bounded(p1 - s1 + s2 + s, s)
        }
        Arith::Mod => {
            let s = s1.max(s2);
            bounded((p1 - s1).min(p2 - s2) + s, s)
        }
    })
}

/// Whether a value of type `from` may be written where `to` is expected
/// without a `CAST` (a sink column): the same type, or a wider number.
pub fn assignable(from: SqlType, to: SqlType) -> bool {
    use SqlType as T;
    match (from, to) {
        (T::Null, _) => true,
        (a, b) if a == b => true,
        (T::Int, T::BigInt | T::Double | T::Decimal(..)) => true,
        (T::BigInt, T::Double | T::Decimal(..)) => true,
        (T::Decimal(..), T::Decimal(..) | T::Double) => true,
        (T::Timestamp(_), T::Timestamp(_)) | (T::TimestampLtz(_), T::TimestampLtz(_)) => true,
        _ => false,
    }
}

pub(crate) fn literal(v: &ast::Value, at: Span) -> SqlResult<(Expr, SqlType)> {
    let (v, t) = match v {
        ast::Value::Number(n, _) => number(n, at)?,
        ast::Value::SingleQuotedString(s) => (Value::Str(s.as_str().into()), SqlType::String),
        ast::Value::Boolean(b) => (Value::Bool(*b), SqlType::Boolean),
        ast::Value::Null => (Value::Null, SqlType::Null),
        other => return Err(err!(Unsupported, at, "literal {other} is not supported")),
    };
    Ok((Expr::Literal(v), t))
}

pub(crate) fn comparable(a: SqlType, b: SqlType, at: Span) -> SqlResult<()> {
    let ok = SqlType::common(a, b).is_some()
        || (a.is_numeric() && b.is_numeric())
        || (a == SqlType::String && b == SqlType::String);
    match ok {
        true => Ok(()),
        false => Err(err!(
            TypeMismatch,
            at,
            "cannot compare values of type {a} and {b}"
        )),
    }
}

pub(crate) fn castable(from: SqlType, to: SqlType, at: Span) -> SqlResult<()> {
    use SqlType as T;
    let ok = match (from, to) {
        (T::Null, _) | (_, T::String) | (T::String, _) => true,
        (a, b) if a.is_numeric() && b.is_numeric() => true,
        (T::Boolean, b) if b.is_numeric() => true,
        (a, b) => (a.is_timestamp() && b.is_timestamp()) || a == b,
    };
    match ok {
        true => Ok(()),
        false => Err(err!(TypeMismatch, at, "cannot cast {from} to {to}")),
    }
}
