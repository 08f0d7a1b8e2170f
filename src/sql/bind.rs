//! Binding: a parsed expression against the columns in scope, into a typed
//! [`Expr`], with the errors a user can act on (an unknown column, operands
//! of types that do not go together, a construct floe does not run).
//!
//! In an aggregating query ([`AggScope`]) a column must be grouped, and an
//! aggregate call becomes a column of the aggregated row: the row after a
//! grouping is `[grouped columns.., aggregate results..]`.

use super::date_format::{self, Patterns};
use super::error::{SqlResult, err};
use super::expr::{Arith, Cmp, Expr, Func};
use super::typing::{arith_type, castable, comparable, literal};
pub use super::typing::{assignable, interval_millis, sql_type};
use super::value::{SqlType, Value};
use sqlparser::ast::{
    self, BinaryOperator, CastKind, FunctionArg, FunctionArgExpr, FunctionArguments, Spanned,
    TrimWhereField, UnaryOperator,
};
use sqlparser::tokenizer::Span;

/// A column of a table, a view or a query's result.
#[derive(Clone, Debug)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: SqlType,
    /// Whether it is the event-time attribute (watermarks follow it).
    pub rowtime: bool,
}

/// The columns an expression may name, and the name of what holds them.
pub struct Scope<'a> {
    /// The columns, in row order.
    pub columns: &'a [Column],
    /// The table, view or function the columns come from (for messages).
    pub table: &'a str,
    /// Names a column may be qualified with (`c.user_id`).
    pub qualifiers: Vec<String>,
}

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggKind {
    /// `COUNT(*)`, `COUNT(x)`, `COUNT(DISTINCT x)`.
    Count,
    /// `SUM(x)`.
    Sum,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
    /// `AVG(x)`.
    Avg,
}

/// One aggregate call of a grouping.
#[derive(Clone, Debug)]
pub struct AggCall {
    /// Which aggregate.
    pub kind: AggKind,
    /// Its argument, over the grouped rows (`None`: `COUNT(*)`).
    pub arg: Option<Expr>,
    /// `DISTINCT`.
    pub distinct: bool,
    /// The result's type.
    pub ty: SqlType,
    /// The argument's type (`BIGINT` for `COUNT(*)`).
    pub arg_ty: SqlType,
    /// As written (for `EXPLAIN`).
    pub text: String,
}

/// The grouping an aggregating query's expressions are bound in.
pub struct AggScope {
    /// The grouped input columns, in the aggregated row's order.
    pub group: Vec<usize>,
    /// The aggregate calls found so far.
    pub calls: Vec<AggCall>,
}

/// Binds expressions of one scope (and, for an aggregating query, one
/// grouping).
pub struct Binder<'a> {
    scope: &'a Scope<'a>,
    agg: Option<AggScope>,
}

impl<'a> Binder<'a> {
    /// A binder of row expressions over `scope`.
    pub fn new(scope: &'a Scope<'a>) -> Self {
        Binder { scope, agg: None }
    }

    /// A binder of an aggregating query's expressions over `scope`
    /// grouped by the columns `group`.
    pub fn grouped(scope: &'a Scope<'a>, group: Vec<usize>) -> Self {
        Binder {
            scope,
            agg: Some(AggScope {
                group,
                calls: Vec::new(),
            }),
        }
    }

    /// The aggregate calls found (an aggregating binder).
    pub fn into_calls(self) -> Vec<AggCall> {
        self.agg.map(|a| a.calls).unwrap_or_default()
    }

    /// The index of the column `parts` names (`c` or `t.c`), in scope.
    pub fn column(&self, parts: &[ast::Ident], at: Span) -> SqlResult<usize> {
        let (qualifier, name) = match parts {
            [name] => (None, name),
            [q, name] => (Some(q), name),
            _ => {
                return Err(err!(
                    Unsupported,
                    at,
                    "column reference {} is not supported",
                    parts
                        .iter()
                        .map(|p| p.value.as_str())
                        .collect::<Vec<_>>()
                        .join(".")
                ));
            }
        };
        if let Some(q) = qualifier
            && !self.scope.qualifiers.contains(&q.value)
        {
            return Err(err!(
                UnknownTable,
                q.span,
                "unknown table '{}' in column reference '{}.{}'",
                q.value,
                q.value,
                name.value
            ));
        }
        self.scope
            .columns
            .iter()
            .position(|c| c.name == name.value)
            .ok_or_else(|| {
                err!(
                    UnknownColumn,
                    name.span,
                    "unknown column '{}' in {}",
                    name.value,
                    self.scope.table
                )
            })
    }

    /// Binds `e`: the typed expression and its type.
    pub fn bind(&mut self, e: &ast::Expr) -> SqlResult<(Expr, SqlType)> {
        use ast::Expr as E;
        let at = e.span();
        match e {
            E::Identifier(id) => self.column_ref(std::slice::from_ref(id), at),
            E::CompoundIdentifier(parts) => self.column_ref(parts, at),
            E::Nested(inner) => self.bind(inner),
            E::Value(v) => literal(&v.value, at),
            E::TypedString(ts) => {
                let ty = sql_type(&ts.data_type, at)?;
                let text = match &ts.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                };
                let v = super::expr::cast(&Value::Str(text.as_str().into()), ty)
                    .map_err(|m| err!(TypeMismatch, at, "{m}"))?;
                Ok((Expr::Literal(v), ty))
            }
            E::UnaryOp { op, expr } => {
                let (x, ty) = self.bind(expr)?;
                match op {
                    UnaryOperator::Not => {
                        self.expect_bool(ty, expr)?;
                        Ok((Expr::Not(Box::new(x)), SqlType::Boolean))
                    }
                    UnaryOperator::Plus if ty.is_numeric() => Ok((x, ty)),
                    UnaryOperator::Minus if ty.is_numeric() => {
                        // 0 - x, computed in x's own type.
                        let zero = Expr::Literal(Value::Int(0));
                        Ok((Expr::Arith(Arith::Sub, ty, Box::new(zero), Box::new(x)), ty))
                    }
                    _ => Err(err!(
                        TypeMismatch,
                        at,
                        "cannot apply '{op}' to an operand of type {ty}"
                    )),
                }
            }
            E::BinaryOp { left, op, right } => self.binary(left, op, right, at),
            E::IsNull(x) | E::IsNotNull(x) => {
                let (x, _) = self.bind(x)?;
                Ok((
                    Expr::IsNull(Box::new(x), matches!(e, E::IsNotNull(_))),
                    SqlType::Boolean,
                ))
            }
            E::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let ge = self.compare(Cmp::Ge, expr, low, at)?;
                let le = self.compare(Cmp::Le, expr, high, at)?;
                let both = Expr::And(Box::new(ge), Box::new(le));
                let out = if *negated {
                    Expr::Not(Box::new(both))
                } else {
                    both
                };
                Ok((out, SqlType::Boolean))
            }
            E::InList {
                expr,
                list,
                negated,
            } => {
                let (x, tx) = self.bind(expr)?;
                let mut items = Vec::new();
                for item in list {
                    let (i, ti) = self.bind(item)?;
                    comparable(tx, ti, item.span())?;
                    items.push(i);
                }
                Ok((Expr::InList(Box::new(x), items, *negated), SqlType::Boolean))
            }
            E::Like {
                negated,
                any: false,
                expr,
                pattern,
                escape_char: None,
            } => {
                let (x, tx) = self.bind(expr)?;
                let (p, tp) = self.bind(pattern)?;
                for (t, s) in [(tx, expr.span()), (tp, pattern.span())] {
                    if !matches!(t, SqlType::String | SqlType::Null) {
                        return Err(err!(TypeMismatch, s, "LIKE needs STRING operands, not {t}"));
                    }
                }
                Ok((
                    Expr::Like(Box::new(x), Box::new(p), *negated),
                    SqlType::Boolean,
                ))
            }
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => self.case(operand.as_deref(), conditions, else_result.as_deref(), at),
            E::Cast {
                kind,
                expr,
                data_type,
                format: None,
            } => {
                let to = sql_type(data_type, at)?;
                let (x, from) = self.bind(expr)?;
                let try_cast = matches!(kind, CastKind::TryCast | CastKind::SafeCast);
                castable(from, to, at)?;
                Ok((Expr::Cast(Box::new(x), to, try_cast), to))
            }
            E::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                let mut args = vec![self.string_arg(expr)?];
                for part in [substring_from, substring_for].into_iter().flatten() {
                    let (x, t) = self.bind(part)?;
                    if !matches!(t, SqlType::Int | SqlType::BigInt | SqlType::Null) {
                        return Err(err!(
                            TypeMismatch,
                            part.span(),
                            "SUBSTRING positions are integers, not {t}"
                        ));
                    }
                    args.push(x);
                }
                if substring_from.is_none() {
                    args.push(Expr::Literal(Value::Int(1)));
                }
                Ok((Expr::Call(Func::Substring, args), SqlType::String))
            }
            E::Trim {
                expr,
                trim_where,
                trim_what,
                trim_characters: None,
            } => {
                let side = match trim_where {
                    Some(TrimWhereField::Leading) => 1,
                    Some(TrimWhereField::Trailing) => 2,
                    _ => 0,
                };
                let mut args = vec![self.string_arg(expr)?];
                if let Some(what) = trim_what {
                    args.push(self.string_arg(what)?);
                }
                Ok((Expr::Call(Func::Trim(side), args), SqlType::String))
            }
            E::Function(f) => self.function(f, at),
            E::Interval(_) => Err(err!(
                Unsupported,
                at,
                "an INTERVAL is supported only added to or subtracted from a timestamp"
            )),
            other => Err(err!(Unsupported, at, "expression {other} is not supported")),
        }
    }

    fn column_ref(&mut self, parts: &[ast::Ident], at: Span) -> SqlResult<(Expr, SqlType)> {
        let i = self.column(parts, at)?;
        let ty = self.scope.columns[i].ty;
        match &self.agg {
            None => Ok((Expr::Column(i), ty)),
            Some(agg) => match agg.group.iter().position(|g| *g == i) {
                Some(pos) => Ok((Expr::Column(pos), ty)),
                None => Err(err!(
                    Invalid,
                    at,
                    "expression '{}' is not being grouped",
                    self.scope.columns[i].name
                )),
            },
        }
    }

    fn expect_bool(&self, ty: SqlType, e: &ast::Expr) -> SqlResult<()> {
        match ty {
            SqlType::Boolean | SqlType::Null => Ok(()),
            other => Err(err!(
                TypeMismatch,
                e.span(),
                "expected a BOOLEAN, but '{e}' is of type {other}"
            )),
        }
    }

    fn string_arg(&mut self, e: &ast::Expr) -> SqlResult<Expr> {
        let (x, t) = self.bind(e)?;
        match t {
            SqlType::String | SqlType::Null => Ok(x),
            other => Err(err!(
                TypeMismatch,
                e.span(),
                "expected a STRING, but '{e}' is of type {other}"
            )),
        }
    }

    fn compare(&mut self, op: Cmp, l: &ast::Expr, r: &ast::Expr, at: Span) -> SqlResult<Expr> {
        let (a, ta) = self.bind(l)?;
        let (b, tb) = self.bind(r)?;
        comparable(ta, tb, at)?;
        Ok(Expr::Cmp(op, Box::new(a), Box::new(b)))
    }

    fn binary(
        &mut self,
        l: &ast::Expr,
        op: &BinaryOperator,
        r: &ast::Expr,
        at: Span,
    ) -> SqlResult<(Expr, SqlType)> {
        use BinaryOperator as B;
        let cmp = match op {
            B::Eq => Some(Cmp::Eq),
            B::NotEq => Some(Cmp::Ne),
            B::Lt => Some(Cmp::Lt),
            B::LtEq => Some(Cmp::Le),
            B::Gt => Some(Cmp::Gt),
            B::GtEq => Some(Cmp::Ge),
            _ => None,
        };
        if let Some(c) = cmp {
            return Ok((self.compare(c, l, r, at)?, SqlType::Boolean));
        }
        if matches!(op, B::And | B::Or) {
            let (a, ta) = self.bind(l)?;
            self.expect_bool(ta, l)?;
            let (b, tb) = self.bind(r)?;
            self.expect_bool(tb, r)?;
            let out = match op {
                B::And => Expr::And(Box::new(a), Box::new(b)),
                _ => Expr::Or(Box::new(a), Box::new(b)),
            };
            return Ok((out, SqlType::Boolean));
        }
        if matches!(op, B::StringConcat) {
            let args = vec![self.string_arg(l)?, self.string_arg(r)?];
            return Ok((Expr::Call(Func::Concat, args), SqlType::String));
        }
        let arith = match op {
            B::Plus => Arith::Add,
            B::Minus => Arith::Sub,
            B::Multiply => Arith::Mul,
            B::Divide => Arith::Div,
            B::Modulo => Arith::Mod,
            other => {
                return Err(err!(Unsupported, at, "operator {other} is not supported"));
            }
        };
        // A timestamp plus or minus an interval.
        if let (ast::Expr::Interval(_), Arith::Add | Arith::Sub) = (r, arith) {
            let (a, ta) = self.bind(l)?;
            if !ta.is_timestamp() {
                return Err(err!(
                    TypeMismatch,
                    at,
                    "an INTERVAL is added to a timestamp, not to {ta}"
                ));
            }
            let ms = interval_millis(r)?;
            let ms = if arith == Arith::Sub { -ms } else { ms };
            return Ok((Expr::AddMillis(Box::new(a), ms), ta));
        }
        let (a, ta) = self.bind(l)?;
        let (b, tb) = self.bind(r)?;
        let ty = arith_type(arith, ta, tb).ok_or_else(|| {
            err!(
                TypeMismatch,
                at,
                "cannot apply '{op}' to arguments of type {ta} and {tb}"
            )
        })?;
        Ok((Expr::Arith(arith, ty, Box::new(a), Box::new(b)), ty))
    }

    fn case(
        &mut self,
        operand: Option<&ast::Expr>,
        conditions: &[ast::CaseWhen],
        otherwise: Option<&ast::Expr>,
        at: Span,
    ) -> SqlResult<(Expr, SqlType)> {
        let mut whens = Vec::new();
        let mut ty = SqlType::Null;
        let mut results = Vec::new();
        for w in conditions {
            let cond = match operand {
                Some(x) => self.compare(Cmp::Eq, x, &w.condition, w.condition.span())?,
                None => {
                    let (c, tc) = self.bind(&w.condition)?;
                    self.expect_bool(tc, &w.condition)?;
                    c
                }
            };
            let (v, tv) = self.bind(&w.result)?;
            ty = SqlType::common(ty, tv).ok_or_else(|| {
                err!(
                    TypeMismatch,
                    w.result.span(),
                    "CASE branches of types {ty} and {tv} have no common type"
                )
            })?;
            results.push(tv);
            whens.push((cond, v));
        }
        let otherwise = match otherwise {
            Some(e) => {
                let (v, tv) = self.bind(e)?;
                ty = SqlType::common(ty, tv).ok_or_else(|| {
                    err!(
                        TypeMismatch,
                        e.span(),
                        "CASE branches of types {ty} and {tv} have no common type"
                    )
                })?;
                results.push(tv);
                v
            }
            None => Expr::Literal(Value::Null),
        };
        if ty == SqlType::Null {
            return Err(err!(TypeMismatch, at, "a CASE of NULLs only has no type"));
        }
        // Every branch gives a value of the CASE's type.
        let to = |e: Expr, t: SqlType| match t == ty || t == SqlType::Null {
            true => e,
            false => Expr::Cast(Box::new(e), ty, false),
        };
        let mut types = results.into_iter();
        let whens = whens
            .into_iter()
            .map(|(c, v)| {
                let t = types.next().unwrap_or(ty);
                (c, to(v, t))
            })
            .collect();
        let otherwise = to(otherwise, types.next().unwrap_or(ty));
        Ok((Expr::Case(whens, Box::new(otherwise)), ty))
    }

    fn args(f: &ast::Function, at: Span) -> SqlResult<(Vec<&ast::Expr>, bool, bool)> {
        let list = match &f.args {
            FunctionArguments::None => return Ok((Vec::new(), false, false)),
            FunctionArguments::List(list) => list,
            FunctionArguments::Subquery(_) => {
                return Err(err!(
                    Unsupported,
                    at,
                    "a subquery argument is not supported"
                ));
            }
        };
        let distinct = matches!(
            list.duplicate_treatment,
            Some(ast::DuplicateTreatment::Distinct)
        );
        let mut out = Vec::new();
        let mut star = false;
        for a in &list.args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(e),
                FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => star = true,
                other => {
                    return Err(err!(Unsupported, at, "argument {other} is not supported"));
                }
            }
        }
        if f.filter.is_some() || f.over.is_some() || !list.clauses.is_empty() {
            return Err(err!(
                Unsupported,
                at,
                "FILTER, OVER and ordered aggregates are not supported"
            ));
        }
        Ok((out, distinct, star))
    }

    fn function(&mut self, f: &ast::Function, at: Span) -> SqlResult<(Expr, SqlType)> {
        let name = f.name.to_string().to_ascii_uppercase();
        let (args, distinct, star) = Self::args(f, at)?;
        let agg = match name.as_str() {
            "COUNT" => Some(AggKind::Count),
            "SUM" => Some(AggKind::Sum),
            "MIN" => Some(AggKind::Min),
            "MAX" => Some(AggKind::Max),
            "AVG" => Some(AggKind::Avg),
            _ => None,
        };
        if let Some(kind) = agg {
            return self.aggregate(kind, &args, distinct, star, f, at);
        }
        let arity = |n: std::ops::RangeInclusive<usize>| -> SqlResult<()> {
            match n.contains(&args.len()) && !star {
                true => Ok(()),
                false => Err(err!(
                    TypeMismatch,
                    at,
                    "{name} takes {} argument(s), not {}",
                    if n.start() == n.end() {
                        n.start().to_string()
                    } else {
                        format!("{} to {}", n.start(), n.end())
                    },
                    args.len()
                )),
            }
        };
        match name.as_str() {
            "UPPER" | "LOWER" | "CHAR_LENGTH" | "CHARACTER_LENGTH" => {
                arity(1..=1)?;
                let x = self.string_arg(args[0])?;
                let (func, ty) = match name.as_str() {
                    "UPPER" => (Func::Upper, SqlType::String),
                    "LOWER" => (Func::Lower, SqlType::String),
                    _ => (Func::CharLength, SqlType::Int),
                };
                Ok((Expr::Call(func, vec![x]), ty))
            }
            "CONCAT" => {
                arity(1..=usize::MAX)?;
                let xs = args
                    .iter()
                    .map(|a| self.string_arg(a))
                    .collect::<SqlResult<_>>()?;
                Ok((Expr::Call(Func::Concat, xs), SqlType::String))
            }
            "COALESCE" | "IFNULL" => {
                arity(if name == "IFNULL" {
                    2..=2
                } else {
                    1..=usize::MAX
                })?;
                let mut ty = SqlType::Null;
                let mut xs = Vec::new();
                for a in &args {
                    let (x, t) = self.bind(a)?;
                    ty = SqlType::common(ty, t).ok_or_else(|| {
                        err!(
                            TypeMismatch,
                            a.span(),
                            "{name} arguments of types {ty} and {t} have no common type"
                        )
                    })?;
                    xs.push((x, t));
                }
                let xs = xs
                    .into_iter()
                    .map(|(x, t)| match t == ty || t == SqlType::Null {
                        true => x,
                        false => Expr::Cast(Box::new(x), ty, false),
                    })
                    .collect();
                Ok((Expr::Coalesce(xs), ty))
            }
            "ABS" => {
                arity(1..=1)?;
                let (x, t) = self.bind(args[0])?;
                if !t.is_numeric() {
                    return Err(err!(TypeMismatch, at, "ABS needs a number, not {t}"));
                }
                Ok((Expr::Call(Func::Abs, vec![x]), t))
            }
            "MOD" => {
                arity(2..=2)?;
                self.binary(args[0], &BinaryOperator::Modulo, args[1], at)
            }
            "TO_TIMESTAMP_LTZ" => {
                arity(2..=2)?;
                let (x, t) = self.bind(args[0])?;
                let (p, _) = self.bind(args[1])?;
                if !matches!(&p, Expr::Literal(Value::Int(0 | 3))) {
                    return Err(err!(
                        Unsupported,
                        args[1].span(),
                        "TO_TIMESTAMP_LTZ precision must be 0 or 3"
                    ));
                }
                if !matches!(t, SqlType::Int | SqlType::BigInt | SqlType::Null) {
                    return Err(err!(
                        TypeMismatch,
                        args[0].span(),
                        "TO_TIMESTAMP_LTZ needs an integer epoch, not {t}"
                    ));
                }
                Ok((
                    Expr::Call(Func::ToTimestampLtz, vec![x, p]),
                    SqlType::TimestampLtz(3),
                ))
            }
            "TO_TIMESTAMP" => {
                arity(1..=1)?;
                let x = self.string_arg(args[0])?;
                Ok((
                    Expr::Call(Func::ToTimestamp, vec![x]),
                    SqlType::Timestamp(3),
                ))
            }
            "DATE_FORMAT" => {
                arity(2..=2)?;
                let (x, t) = self.bind(args[0])?;
                let patterns = match t {
                    SqlType::Timestamp(_) | SqlType::TimestampLtz(_) | SqlType::Null => {
                        Patterns::DateTime
                    }
                    SqlType::String => Patterns::Simple,
                    other => {
                        return Err(err!(
                            TypeMismatch,
                            args[0].span(),
                            "DATE_FORMAT needs a TIMESTAMP or a STRING, not {other}"
                        ));
                    }
                };
                let pattern = self.string_arg(args[1])?;
                // A constant pattern is checked now, others per row.
                if let Expr::Literal(Value::Str(p)) = &pattern {
                    date_format::check(p, patterns)
                        .map_err(|why| err!(Invalid, args[1].span(), "{why}"))?;
                }
                Ok((
                    Expr::Call(Func::DateFormat(patterns), vec![x, pattern]),
                    SqlType::String,
                ))
            }
            _ => Err(err!(
                Unsupported,
                at,
                "function {} is not supported",
                f.name
            )),
        }
    }

    fn aggregate(
        &mut self,
        kind: AggKind,
        args: &[&ast::Expr],
        distinct: bool,
        star: bool,
        f: &ast::Function,
        at: Span,
    ) -> SqlResult<(Expr, SqlType)> {
        let Some(agg) = &self.agg else {
            return Err(err!(
                Invalid,
                at,
                "aggregate function {} is not allowed here",
                f.name
            ));
        };
        let offset = agg.group.len();
        if distinct && kind != AggKind::Count {
            return Err(err!(Unsupported, at, "DISTINCT is supported in COUNT only"));
        }
        let (arg, arg_ty) = match (kind, star, args) {
            (AggKind::Count, true, []) if !distinct => (None, SqlType::BigInt),
            (_, false, [a]) => {
                let mut inner = Binder::new(self.scope);
                let (x, t) = inner.bind(a)?;
                (Some(x), t)
            }
            _ => {
                return Err(err!(TypeMismatch, at, "{} takes one argument", f.name));
            }
        };
        let ty = match kind {
            AggKind::Count => SqlType::BigInt,
            AggKind::Min | AggKind::Max => arg_ty,
            AggKind::Sum | AggKind::Avg => match arg_ty {
                SqlType::Int | SqlType::BigInt | SqlType::Double => arg_ty,
                SqlType::Decimal(_, s) if kind == AggKind::Sum => SqlType::Decimal(38, s),
                SqlType::Decimal(_, s) => SqlType::Decimal(38, s.max(6)),
                other => {
                    return Err(err!(
                        TypeMismatch,
                        at,
                        "{} needs a number, not {other}",
                        f.name
                    ));
                }
            },
        };
        let agg = self.agg.as_mut().expect("checked above");
        agg.calls.push(AggCall {
            kind,
            arg,
            distinct,
            ty,
            arg_ty,
            text: ast::Expr::Function(f.clone()).to_string(),
        });
        Ok((Expr::Column(offset + agg.calls.len() - 1), ty))
    }
}
