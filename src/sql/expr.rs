//! Bound scalar expressions: typed, with columns resolved to positions,
//! evaluated on a row with SQL's `NULL` semantics.
//!
//! Rules, as Flink's: an operator with a `NULL` operand is `NULL`;
//! `AND`/`OR` are three-valued (`FALSE AND NULL` is `FALSE`, `TRUE OR NULL`
//! is `TRUE`); `WHERE` keeps a row only when its condition is `TRUE`.
//! Integer arithmetic wraps as Java's does, integer division truncates, and
//! an integer or decimal division by zero fails the job; a decimal that
//! outgrows its precision is `NULL`. A `CAST` that cannot convert fails the
//! job, a `TRY_CAST` gives `NULL`.

use super::date_format::{self, Patterns};
use super::value::{Row, SqlType, Value, parse_timestamp, rescale};
use smol_str::SmolStr;
use std::cmp::Ordering;

/// An arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`, `MOD`
    Mod,
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A scalar function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// `UPPER(s)`
    Upper,
    /// `LOWER(s)`
    Lower,
    /// `CHAR_LENGTH(s)`
    CharLength,
    /// `CONCAT(s, ..)`, `s || t`
    Concat,
    /// `SUBSTRING(s FROM i [FOR n])`
    Substring,
    /// `TRIM([BOTH|LEADING|TRAILING] [c FROM] s)`: 0 both, 1 leading, 2 trailing.
    Trim(u8),
    /// `ABS(x)`
    Abs,
    /// `TO_TIMESTAMP_LTZ(epoch, precision)`
    ToTimestampLtz,
    /// `TO_TIMESTAMP(s)`
    ToTimestamp,
    /// `DATE_FORMAT(t, pattern)`, the pattern in Java's language for the
    /// type of `t`.
    DateFormat(Patterns),
}

/// A typed expression over a row.
#[derive(Clone, Debug)]
pub enum Expr {
    /// The value of column `i`.
    Column(usize),
    /// A constant.
    Literal(Value),
    /// Arithmetic, computed in type `ty` (the result's).
    Arith(Arith, SqlType, Box<Expr>, Box<Expr>),
    /// A timestamp plus a number of milliseconds.
    AddMillis(Box<Expr>, i64),
    /// A comparison.
    Cmp(Cmp, Box<Expr>, Box<Expr>),
    /// `AND`
    And(Box<Expr>, Box<Expr>),
    /// `OR`
    Or(Box<Expr>, Box<Expr>),
    /// `NOT`
    Not(Box<Expr>),
    /// `IS [NOT] NULL` (`true`: `IS NOT NULL`).
    IsNull(Box<Expr>, bool),
    /// `CASE WHEN c THEN v .. ELSE e END` (a `CASE x WHEN ..` is bound to
    /// comparisons).
    Case(Vec<(Expr, Expr)>, Box<Expr>),
    /// `CAST` / `TRY_CAST` (`true`: `TRY_CAST`).
    Cast(Box<Expr>, SqlType, bool),
    /// `COALESCE(a, b, ..)`
    Coalesce(Vec<Expr>),
    /// `x [NOT] IN (a, b, ..)` (`true`: `NOT IN`).
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `x [NOT] LIKE pattern` (`true`: `NOT LIKE`).
    Like(Box<Expr>, Box<Expr>, bool),
    /// A scalar function.
    Call(Func, Vec<Expr>),
}

/// Why an expression has no value for a row (the job fails).
pub type EvalResult = Result<Value, String>;

impl Expr {
    /// The expression's value on `row`.
    #[inline]
    pub fn eval(&self, row: &[Value]) -> EvalResult {
        // A column or a constant without the call of the general case
        // (whose frame is large).
        match self {
            Expr::Column(i) => Ok(row.get(*i).cloned().unwrap_or(Value::Null)),
            Expr::Literal(v) => Ok(v.clone()),
            Expr::Call(Func::ToTimestampLtz, args) => to_timestamp_ltz(args, row),
            _ => self.eval_general(row),
        }
    }

    #[inline(never)]
    fn eval_general(&self, row: &[Value]) -> EvalResult {
        Ok(match self {
            Expr::Column(i) => row.get(*i).cloned().unwrap_or(Value::Null),
            Expr::Literal(v) => v.clone(),
            Expr::Arith(op, ty, l, r) => {
                let (a, b) = (l.eval(row)?, r.eval(row)?);
                if a.is_null() || b.is_null() {
                    return Ok(Value::Null);
                }
                arith(*op, *ty, &a, &b)?
            }
            Expr::AddMillis(e, ms) => match e.eval(row)? {
                Value::Timestamp(t) => Value::Timestamp(t.saturating_add(*ms)),
                Value::TimestampLtz(t) => Value::TimestampLtz(t.saturating_add(*ms)),
                _ => Value::Null,
            },
            Expr::Cmp(op, l, r) => {
                let (a, b) = (l.eval(row)?, r.eval(row)?);
                match a.sql_cmp(&b) {
                    None => Value::Null,
                    Some(o) => Value::Bool(match op {
                        Cmp::Eq => o == Ordering::Equal,
                        Cmp::Ne => o != Ordering::Equal,
                        Cmp::Lt => o == Ordering::Less,
                        Cmp::Le => o != Ordering::Greater,
                        Cmp::Gt => o == Ordering::Greater,
                        Cmp::Ge => o != Ordering::Less,
                    }),
                }
            }
            Expr::And(l, r) => match (truth(&l.eval(row)?), truth(&r.eval(row)?)) {
                (Some(false), _) | (_, Some(false)) => Value::Bool(false),
                (Some(true), Some(true)) => Value::Bool(true),
                _ => Value::Null,
            },
            Expr::Or(l, r) => match (truth(&l.eval(row)?), truth(&r.eval(row)?)) {
                (Some(true), _) | (_, Some(true)) => Value::Bool(true),
                (Some(false), Some(false)) => Value::Bool(false),
                _ => Value::Null,
            },
            Expr::Not(e) => match truth(&e.eval(row)?) {
                Some(b) => Value::Bool(!b),
                None => Value::Null,
            },
            Expr::IsNull(e, negated) => Value::Bool(e.eval(row)?.is_null() != *negated),
            Expr::Case(whens, otherwise) => {
                for (cond, then) in whens {
                    if truth(&cond.eval(row)?) == Some(true) {
                        return then.eval(row);
                    }
                }
                otherwise.eval(row)?
            }
            Expr::Cast(e, to, try_cast) => {
                let v = e.eval(row)?;
                match cast(&v, *to) {
                    Ok(v) => v,
                    Err(_) if *try_cast => Value::Null,
                    Err(m) => return Err(m),
                }
            }
            Expr::Coalesce(args) => {
                for a in args {
                    let v = a.eval(row)?;
                    if !v.is_null() {
                        return Ok(v);
                    }
                }
                Value::Null
            }
            Expr::InList(e, list, negated) => {
                let v = e.eval(row)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    match v.sql_cmp(&item.eval(row)?) {
                        Some(Ordering::Equal) => return Ok(Value::Bool(!negated)),
                        None => saw_null = true,
                        _ => {}
                    }
                }
                if saw_null {
                    Value::Null
                } else {
                    Value::Bool(*negated)
                }
            }
            Expr::Like(e, pattern, negated) => match (e.eval(row)?, pattern.eval(row)?) {
                (Value::Str(s), Value::Str(p)) => Value::Bool(like(&s, &p) != *negated),
                _ => Value::Null,
            },
            Expr::Call(f, args) => call(*f, args, row)?,
        })
    }

    /// Whether the expression is `TRUE` on `row` (a `WHERE` keeps the row).
    pub fn holds(&self, row: &[Value]) -> Result<bool, String> {
        Ok(truth(&self.eval(row)?) == Some(true))
    }
}

/// Evaluates `exprs` on `row` into a new row.
pub fn project(exprs: &[Expr], row: &[Value]) -> Result<Row, String> {
    exprs.iter().map(|e| e.eval(row)).collect()
}

fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn arith(op: Arith, ty: SqlType, a: &Value, b: &Value) -> EvalResult {
    let by_zero = || Err("division by zero".to_string());
    Ok(match ty {
        // INT wraps as Java's int: its operands as i32, the i64 result
        // truncated (for +, -, *, / and % the same as i32's wrapping ops).
        SqlType::Int | SqlType::BigInt => {
            let narrow = |v: &Value| {
                let v = v.as_i64().unwrap_or(0);
                if ty == SqlType::Int {
                    v as i32 as i64
                } else {
                    v
                }
            };
            let (x, y) = (narrow(a), narrow(b));
            let v = match op {
                Arith::Add => x.wrapping_add(y),
                Arith::Sub => x.wrapping_sub(y),
                Arith::Mul => x.wrapping_mul(y),
                Arith::Div if y == 0 => return by_zero(),
                Arith::Div => x.wrapping_div(y),
                Arith::Mod if y == 0 => return by_zero(),
                Arith::Mod => x.wrapping_rem(y),
            };
            if ty == SqlType::Int {
                Value::Int(v as i32)
            } else {
                Value::BigInt(v)
            }
        }
        SqlType::Double => {
            let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            Value::Double(match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x * y,
                Arith::Div => x / y,
                Arith::Mod => x % y,
            })
        }
        SqlType::Decimal(p, s) => {
            let sa = match a {
                Value::Decimal(_, s) => *s,
                _ => 0,
            };
            let sb = match b {
                Value::Decimal(_, s) => *s,
                _ => 0,
            };
            let (Some(x), Some(y)) = (a.as_decimal(sa), b.as_decimal(sb)) else {
                return Ok(Value::Null);
            };
            let exact = match op {
                Arith::Add | Arith::Sub => {
                    let m = sa.max(sb);
                    let (x, y) = (rescale(x, sa, m), rescale(y, sb, m));
                    match (x, y, op) {
                        (Some(x), Some(y), Arith::Add) => x.checked_add(y).map(|v| (v, m)),
                        (Some(x), Some(y), _) => x.checked_sub(y).map(|v| (v, m)),
                        _ => None,
                    }
                }
                Arith::Mul => x.checked_mul(y).map(|v| (v, sa + sb)),
                Arith::Div | Arith::Mod if y == 0 => return by_zero(),
                Arith::Div => {
                    // x / y at scale s: x * 10^(s + sb - sa) / y, rounded half up.
                    let shift = i32::from(s) + i32::from(sb) - i32::from(sa);
                    let num = if shift >= 0 {
                        10i128
                            .checked_pow(shift as u32 + 1)
                            .and_then(|f| x.checked_mul(f))
                    } else {
                        10i128.checked_pow((-shift) as u32).map(|f| x / f * 10)
                    };
                    num.map(|n| {
                        let q = n / y;
                        let r = if q % 10 >= 5 || q % 10 <= -5 {
                            q / 10 + q.signum()
                        } else {
                            q / 10
                        };
                        (r, s)
                    })
                }
                Arith::Mod => {
                    let m = sa.max(sb);
                    match (rescale(x, sa, m), rescale(y, sb, m)) {
                        (Some(x), Some(y)) => Some((x % y, m)),
                        _ => None,
                    }
                }
            };
            match exact.and_then(|(v, from)| rescale(v, from, s)) {
                Some(v) if fits(v, p) => Value::Decimal(v, s),
                _ => Value::Null,
            }
        }
        _ => Value::Null,
    })
}

/// Whether an unscaled decimal has at most `precision` digits.
pub fn fits(unscaled: i128, precision: u8) -> bool {
    10i128
        .checked_pow(u32::from(precision))
        .is_none_or(|limit| unscaled.abs() < limit)
}

/// `CAST(v AS to)`, or why it cannot be.
pub fn cast(v: &Value, to: SqlType) -> EvalResult {
    let fail = || Err(format!("cannot cast '{}' to {to}", v.to_sql_string()));
    Ok(match (v, to) {
        (Value::Null, _) => Value::Null,
        (_, SqlType::String) => Value::Str(match v {
            Value::Str(s) => s.clone(),
            other => SmolStr::from(other.to_sql_string()),
        }),
        (Value::Str(s), SqlType::Boolean) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return fail(),
        },
        (Value::Bool(b), SqlType::Boolean) => Value::Bool(*b),
        (Value::Str(s), SqlType::Int) => match s.trim().parse() {
            Ok(i) => Value::Int(i),
            Err(_) => return fail(),
        },
        (Value::Str(s), SqlType::BigInt) => match s.trim().parse() {
            Ok(i) => Value::BigInt(i),
            Err(_) => return fail(),
        },
        (Value::Str(s), SqlType::Double) => match s.trim().parse() {
            Ok(d) => Value::Double(d),
            Err(_) => return fail(),
        },
        (Value::Str(s), SqlType::Decimal(p, sc)) => match parse_decimal(s.trim(), sc) {
            Some(u) if fits(u, p) => Value::Decimal(u, sc),
            Some(_) => Value::Null,
            None => return fail(),
        },
        (Value::Str(s), SqlType::Timestamp(_)) => match parse_timestamp(s) {
            Some(t) => Value::Timestamp(t),
            None => return fail(),
        },
        (Value::Str(s), SqlType::TimestampLtz(_)) => match parse_timestamp(s) {
            Some(t) => Value::TimestampLtz(t),
            None => return fail(),
        },
        (Value::Bool(b), t) if t.is_numeric() => return cast(&Value::Int(i32::from(*b)), t),
        (Value::Timestamp(t) | Value::TimestampLtz(t), SqlType::Timestamp(_)) => {
            Value::Timestamp(*t)
        }
        (Value::Timestamp(t) | Value::TimestampLtz(t), SqlType::TimestampLtz(_)) => {
            Value::TimestampLtz(*t)
        }
        (_, SqlType::Int) => match v {
            Value::Double(d) => Value::Int(*d as i32),
            Value::Decimal(u, s) => Value::Int(rescale_down(*u, *s) as i32),
            _ => match v.as_i64() {
                Some(i) => Value::Int(i as i32),
                None => return fail(),
            },
        },
        (_, SqlType::BigInt) => match v {
            Value::Double(d) => Value::BigInt(*d as i64),
            Value::Decimal(u, s) => Value::BigInt(rescale_down(*u, *s) as i64),
            _ => match v.as_i64() {
                Some(i) => Value::BigInt(i),
                None => return fail(),
            },
        },
        (_, SqlType::Double) => match v.as_f64() {
            Some(d) => Value::Double(d),
            None => return fail(),
        },
        (_, SqlType::Decimal(p, s)) => {
            let u = match v {
                Value::Double(d) => parse_decimal(&format!("{d}"), s),
                other => other.as_decimal(s),
            };
            match u {
                Some(u) if fits(u, p) => Value::Decimal(u, s),
                Some(_) => Value::Null,
                None => return fail(),
            }
        }
        _ => return fail(),
    })
}

/// The integer part of a decimal (truncated toward zero).
fn rescale_down(unscaled: i128, scale: u8) -> i128 {
    unscaled / 10i128.pow(u32::from(scale.min(38)))
}

/// A decimal number's text as an unscaled value at `scale` (rounded half
/// up); `None` when it is not a number.
pub fn parse_decimal(text: &str, scale: u8) -> Option<i128> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || int.len() + frac.len() > 76
    {
        return None;
    }
    let mut u: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        u = u.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let v = rescale(u, u8::try_from(frac.len()).ok()?, scale)?;
    Some(if neg { -v } else { v })
}

fn str_arg(v: &Value) -> Option<&str> {
    match v {
        Value::Str(s) => Some(s.as_str()),
        _ => None,
    }
}

/// `TO_TIMESTAMP_LTZ(epoch[, precision])` (a computed event-time column,
/// evaluated per row), as [`call`] computes it, without its argument array.
fn to_timestamp_ltz(args: &[Expr], row: &[Value]) -> EvalResult {
    // Columns and constants read in place, others evaluated.
    let (epoch, precision) = match args {
        [e] => match in_place(e, row) {
            Some(e) => return Ok(ltz(e, None)),
            None => (e.eval(row)?, None),
        },
        [e, p] => match (in_place(e, row), in_place(p, row)) {
            (Some(e), Some(p)) => return Ok(ltz(e, Some(p))),
            _ => (e.eval(row)?, Some(p.eval(row)?)),
        },
        _ => return call(Func::ToTimestampLtz, args, row),
    };
    Ok(ltz(&epoch, precision.as_ref()))
}

/// The value of a column or a constant, in place.
#[inline]
fn in_place<'a>(e: &'a Expr, row: &'a [Value]) -> Option<&'a Value> {
    match e {
        Expr::Column(i) => Some(row.get(*i).unwrap_or(&Value::Null)),
        Expr::Literal(v) => Some(v),
        _ => None,
    }
}

/// `TO_TIMESTAMP_LTZ(epoch, precision)` of the arguments' values.
#[inline]
fn ltz(epoch: &Value, precision: Option<&Value>) -> Value {
    if epoch.is_null() || precision.is_some_and(Value::is_null) {
        return Value::Null;
    }
    let epoch = epoch.as_i64().unwrap_or(0);
    let precision = precision.and_then(Value::as_i64).unwrap_or(3);
    Value::TimestampLtz(if precision == 0 {
        epoch.saturating_mul(1000)
    } else {
        epoch
    })
}

fn call(f: Func, args: &[Expr], row: &[Value]) -> EvalResult {
    // The arguments' values on the stack (no allocation per row) for up to
    // four arguments.
    let mut inline: [Value; 4] = [Value::Null, Value::Null, Value::Null, Value::Null];
    let heap: Vec<Value>;
    let vals: &[Value] = if args.len() <= inline.len() {
        for (slot, a) in inline.iter_mut().zip(args) {
            *slot = a.eval(row)?;
        }
        &inline[..args.len()]
    } else {
        heap = args.iter().map(|a| a.eval(row)).collect::<Result<_, _>>()?;
        &heap
    };
    if f != Func::Concat && vals.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let s0 = vals.first().and_then(str_arg);
    Ok(match f {
        Func::Upper => s0.map_or(Value::Null, |s| Value::Str(s.to_uppercase().into())),
        Func::Lower => s0.map_or(Value::Null, |s| Value::Str(s.to_lowercase().into())),
        Func::CharLength => s0.map_or(Value::Null, |s| Value::Int(s.chars().count() as i32)),
        Func::Concat => {
            let mut out = String::new();
            for v in vals {
                match v {
                    Value::Null => return Ok(Value::Null),
                    Value::Str(s) => out.push_str(s),
                    other => out.push_str(&other.to_sql_string()),
                }
            }
            Value::Str(out.into())
        }
        Func::Substring => {
            let Some(s) = s0 else {
                return Ok(Value::Null);
            };
            let start = vals.get(1).and_then(Value::as_i64).unwrap_or(1);
            let len = vals.get(2).and_then(Value::as_i64);
            if len.is_some_and(|l| l < 0) {
                return Err(format!(
                    "SUBSTRING length must not be negative, got {len:?}"
                ));
            }
            // 1-based; a start before 1 eats into the length, as in Flink.
            let from = start.max(1) - 1;
            let take = match len {
                Some(l) => start.saturating_add(l).saturating_sub(1).max(0) - from,
                None => i64::MAX,
            };
            let text: String = s
                .chars()
                .skip(from as usize)
                .take(take.max(0) as usize)
                .collect();
            Value::Str(text.into())
        }
        Func::Trim(side) => {
            let Some(s) = s0 else {
                return Ok(Value::Null);
            };
            let chars: Vec<char> = match vals.get(1).and_then(str_arg) {
                Some(c) => c.chars().collect(),
                None => vec![' '],
            };
            let t = match side {
                1 => s.trim_start_matches(&chars[..]),
                2 => s.trim_end_matches(&chars[..]),
                _ => s.trim_matches(&chars[..]),
            };
            Value::Str(t.into())
        }
        Func::Abs => match &vals[0] {
            Value::Int(i) => Value::Int(i.wrapping_abs()),
            Value::BigInt(i) => Value::BigInt(i.wrapping_abs()),
            Value::Double(d) => Value::Double(d.abs()),
            Value::Decimal(u, s) => Value::Decimal(u.abs(), *s),
            _ => Value::Null,
        },
        Func::ToTimestampLtz => {
            let epoch = vals[0].as_i64().unwrap_or(0);
            let precision = vals.get(1).and_then(Value::as_i64).unwrap_or(3);
            Value::TimestampLtz(if precision == 0 {
                epoch.saturating_mul(1000)
            } else {
                epoch
            })
        }
        Func::ToTimestamp => match s0.and_then(parse_timestamp) {
            Some(t) => Value::Timestamp(t),
            None => Value::Null,
        },
        Func::DateFormat(patterns) => {
            let ms = match &vals[0] {
                Value::Timestamp(ms) | Value::TimestampLtz(ms) => Some(*ms),
                Value::Str(s) => date_format::parse_default(s),
                _ => None,
            };
            match (ms, vals.get(1).and_then(str_arg)) {
                (Some(ms), Some(pattern)) => {
                    let mut text = String::with_capacity(pattern.len() + 8);
                    date_format::format(ms, pattern, patterns, &mut text)?;
                    Value::Str(text.into())
                }
                _ => Value::Null,
            }
        }
    })
}

/// SQL `LIKE`: `%` any run of characters, `_` one character.
fn like(s: &str, pattern: &str) -> bool {
    let (s, p): (Vec<char>, Vec<char>) = (s.chars().collect(), pattern.chars().collect());
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while i < s.len() {
        if j < p.len() && (p[j] == '_' || p[j] == s[i]) {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == '%' {
            star = Some(j);
            mark = i;
            j += 1;
        } else if let Some(st) = star {
            j = st + 1;
            mark += 1;
            i = mark;
        } else {
            return false;
        }
    }
    p[j..].iter().all(|c| *c == '%')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_timestamp_ltz_reads_as_the_general_call() {
        let values = [
            Value::Null,
            Value::Int(-5),
            Value::BigInt(1_700_000_000_123),
            Value::BigInt(i64::MAX),
            Value::Int(0),
            Value::Int(3),
        ];
        for a in &values {
            for p in &values {
                let row = [a.clone(), p.clone()];
                for args in [
                    vec![Expr::Column(0)],
                    vec![Expr::Column(0), Expr::Column(1)],
                    vec![Expr::Column(0), Expr::Literal(Value::Int(0))],
                    vec![Expr::Coalesce(vec![Expr::Column(0)]), Expr::Column(1)],
                    vec![Expr::Coalesce(vec![Expr::Column(0)])],
                ] {
                    let e = Expr::Call(Func::ToTimestampLtz, args.clone());
                    let general = call(Func::ToTimestampLtz, &args, &row);
                    assert_eq!(e.eval(&row), general, "{row:?} {args:?}");
                }
            }
        }
    }

    #[test]
    fn int_arithmetic_wraps_as_javas_int_and_bigint_as_long() {
        let int = |x: i32| Value::Int(x);
        let cases = [
            (Arith::Add, i32::MAX, 1),
            (Arith::Sub, i32::MIN, 1),
            (Arith::Mul, 65_536, 65_536),
            (Arith::Div, i32::MIN, -1),
            (Arith::Mod, i32::MIN, -1),
            (Arith::Mod, -7, 3),
        ];
        for (op, x, y) in cases {
            let want = match op {
                Arith::Add => x.wrapping_add(y),
                Arith::Sub => x.wrapping_sub(y),
                Arith::Mul => x.wrapping_mul(y),
                Arith::Div => x.wrapping_div(y),
                Arith::Mod => x.wrapping_rem(y),
            };
            assert_eq!(arith(op, SqlType::Int, &int(x), &int(y)), Ok(int(want)));
        }
        let big = |x: i64| Value::BigInt(x);
        assert_eq!(
            arith(Arith::Add, SqlType::BigInt, &big(i64::MAX), &big(1)),
            Ok(big(i64::MIN))
        );
        assert_eq!(
            arith(Arith::Mul, SqlType::BigInt, &big(65_536), &big(65_536)),
            Ok(big(1 << 32))
        );
        assert!(arith(Arith::Div, SqlType::Int, &int(1), &int(0)).is_err());
    }

    fn lit(v: Value) -> Box<Expr> {
        Box::new(Expr::Literal(v))
    }

    #[test]
    fn null_semantics_are_three_valued() {
        let null = || lit(Value::Null);
        let t = || lit(Value::Bool(true));
        let f = || lit(Value::Bool(false));
        assert_eq!(Expr::And(f(), null()).eval(&[]), Ok(Value::Bool(false)));
        assert_eq!(Expr::And(t(), null()).eval(&[]), Ok(Value::Null));
        assert_eq!(Expr::Or(t(), null()).eval(&[]), Ok(Value::Bool(true)));
        assert_eq!(Expr::Not(null()).eval(&[]), Ok(Value::Null));
        let sum = Expr::Arith(Arith::Add, SqlType::Int, lit(Value::Int(1)), null());
        assert_eq!(sum.eval(&[]), Ok(Value::Null));
        let cmp = Expr::Cmp(Cmp::Eq, null(), null());
        assert!(!cmp.holds(&[]).expect("evaluates"));
    }

    #[test]
    fn arithmetic_follows_java_and_decimals_are_exact() {
        let add = Expr::Arith(
            Arith::Add,
            SqlType::Int,
            lit(Value::Int(i32::MAX)),
            lit(Value::Int(1)),
        );
        assert_eq!(add.eval(&[]), Ok(Value::Int(i32::MIN)));
        let div = Expr::Arith(
            Arith::Div,
            SqlType::Int,
            lit(Value::Int(7)),
            lit(Value::Int(2)),
        );
        assert_eq!(div.eval(&[]), Ok(Value::Int(3)));
        let zero = Expr::Arith(
            Arith::Div,
            SqlType::Int,
            lit(Value::Int(7)),
            lit(Value::Int(0)),
        );
        assert!(zero.eval(&[]).is_err());
        let mul = Expr::Arith(
            Arith::Mul,
            SqlType::Decimal(12, 2),
            lit(Value::Decimal(1050, 2)),
            lit(Value::Int(2)),
        );
        assert_eq!(mul.eval(&[]), Ok(Value::Decimal(2100, 2)));
        let div = Expr::Arith(
            Arith::Div,
            SqlType::Decimal(38, 6),
            lit(Value::Decimal(100, 2)),
            lit(Value::Int(3)),
        );
        assert_eq!(div.eval(&[]), Ok(Value::Decimal(333_333, 6)));
        assert_eq!(parse_decimal("-12.345", 2), Some(-1235));
        assert_eq!(parse_decimal("1e3", 0), None);
    }

    #[test]
    fn string_functions_and_like() {
        let s = || lit(Value::Str("  Hello  ".into()));
        let trim = Expr::Call(Func::Trim(0), vec![*s()]);
        assert_eq!(trim.eval(&[]), Ok(Value::Str("Hello".into())));
        let sub = Expr::Call(
            Func::Substring,
            vec![
                Expr::Literal(Value::Str("abcdef".into())),
                Expr::Literal(Value::Int(2)),
                Expr::Literal(Value::Int(3)),
            ],
        );
        assert_eq!(sub.eval(&[]), Ok(Value::Str("bcd".into())));
        assert!(like("abcde", "a%e"));
        assert!(like("abcde", "_bc%"));
        assert!(!like("abcde", "b%"));
        let cast_bad = Expr::Cast(lit(Value::Str("x".into())), SqlType::Int, false);
        assert!(cast_bad.eval(&[]).is_err());
        let try_bad = Expr::Cast(lit(Value::Str("x".into())), SqlType::Int, true);
        assert_eq!(try_bad.eval(&[]), Ok(Value::Null));
    }
}
