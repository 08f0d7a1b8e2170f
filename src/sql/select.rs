//! The parts of a `SELECT` the planner reads outside its `FROM`: the
//! select list, `DESCRIPTOR(col)`, what an expression uses, and the casts
//! putting the inputs of a `UNION ALL` in common types.

use super::bind::{Binder, Column, Scope};
use super::error::{SqlResult, err};
use super::expr::Expr;
use super::planner::Plan;
use super::value::SqlType;
use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, Spanned};

/// The column index of `DESCRIPTOR(col)` in `input`.
pub(crate) fn descriptor(e: &ast::Expr, input: &Plan, table: &str) -> SqlResult<usize> {
    let col = match e {
        ast::Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("DESCRIPTOR") => match &f
            .args
        {
            FunctionArguments::List(l) => match l.args.as_slice() {
                [FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::Identifier(i)))] => Some(i),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    };
    let Some(col) = col else {
        return Err(err!(
            TypeMismatch,
            e.span(),
            "the second argument of a window function is DESCRIPTOR(column), not {e}"
        ));
    };
    input
        .columns()
        .iter()
        .position(|c| c.name == col.value)
        .ok_or_else(|| {
            err!(
                UnknownColumn,
                col.span,
                "unknown column '{}' in table '{table}'",
                col.value
            )
        })
}

/// The select list bound: expressions and output columns.
pub(crate) fn select_list(
    binder: &mut Binder,
    items: &[SelectItem],
    scope: &Scope,
) -> SqlResult<(Vec<Expr>, Vec<Column>)> {
    let mut exprs = Vec::new();
    let mut columns = Vec::new();
    for item in items {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            SelectItem::Wildcard(_) => {
                for c in scope.columns {
                    let id = ast::Ident::new(c.name.clone());
                    let (x, _) = binder.bind(&ast::Expr::Identifier(id)).map_err(|_| {
                        err!(
                            Invalid,
                            item.span(),
                            "SELECT * in an aggregate: column '{}' is not being grouped",
                            c.name
                        )
                    })?;
                    exprs.push(x);
                    columns.push(c.clone());
                }
                continue;
            }
            other => {
                return Err(err!(
                    Unsupported,
                    other.span(),
                    "select item {other} is not supported"
                ));
            }
        };
        let (x, ty) = binder.bind(e)?;
        let plain = match e {
            ast::Expr::Identifier(i) => Some(i.value.clone()),
            ast::Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.clone()),
            _ => None,
        };
        let rowtime = plain
            .as_ref()
            .and_then(|p| scope.columns.iter().find(|c| c.name == *p))
            .is_some_and(|c| c.rowtime);
        let name = alias
            .or(plain)
            .unwrap_or_else(|| format!("EXPR${}", columns.len()));
        exprs.push(x);
        columns.push(Column { name, ty, rowtime });
    }
    Ok((exprs, columns))
}

pub(crate) fn calc(
    input: Plan,
    filter: Option<Expr>,
    project: Vec<Expr>,
    columns: Vec<Column>,
    s: &ast::Select,
) -> Plan {
    let mut text = format!("select=[{}]", projection_text(&s.projection));
    if let Some(w) = &s.selection {
        text.push_str(&format!(", where=[{w}]"));
    }
    Plan::Calc {
        input: Box::new(input),
        filter,
        project,
        columns,
        text,
    }
}

pub(crate) fn projection_text(items: &[SelectItem]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The largest column an expression reads.
pub(crate) fn max_column(e: &Expr) -> Option<usize> {
    let mut max = None;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            Expr::Column(i) => max = max.max(Some(*i)),
            Expr::Literal(_) => {}
            Expr::Arith(_, _, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                stack.push(a);
                stack.push(b);
            }
            Expr::Like(a, b, _) => {
                stack.push(a);
                stack.push(b);
            }
            Expr::AddMillis(a, _) | Expr::Not(a) | Expr::IsNull(a, _) | Expr::Cast(a, _, _) => {
                stack.push(a)
            }
            Expr::Case(whens, e) => {
                stack.push(e);
                for (c, v) in whens {
                    stack.push(c);
                    stack.push(v);
                }
            }
            Expr::Coalesce(v) | Expr::Call(_, v) => stack.extend(v.iter()),
            Expr::InList(a, v, _) => {
                stack.push(a);
                stack.extend(v.iter());
            }
        }
    }
    max
}

/// Whether a select list calls an aggregate function (outside a subquery).
pub(crate) fn has_aggregate(items: &[SelectItem]) -> bool {
    fn walk(e: &ast::Expr) -> bool {
        use ast::Expr as E;
        match e {
            E::Function(f) => {
                let name = f.name.to_string().to_ascii_uppercase();
                matches!(name.as_str(), "COUNT" | "SUM" | "MIN" | "MAX" | "AVG") || match &f.args {
                    FunctionArguments::List(l) => l.args.iter().any(
                        |a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) if walk(x)),
                    ),
                    _ => false,
                }
            }
            E::BinaryOp { left, right, .. } => walk(left) || walk(right),
            E::UnaryOp { expr, .. } | E::Nested(expr) | E::Cast { expr, .. } => walk(expr),
            E::Case {
                operand,
                conditions,
                else_result,
                ..
            } => {
                operand.as_deref().is_some_and(walk)
                    || conditions
                        .iter()
                        .any(|c| walk(&c.condition) || walk(&c.result))
                    || else_result.as_deref().is_some_and(walk)
            }
            _ => false,
        }
    }
    items.iter().any(|i| match i {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => walk(e),
        _ => false,
    })
}

/// `plan` with its columns cast to `types` where they differ: the inputs
/// of a `UNION ALL` in their common types (Flink's least restrictive
/// type: `DECIMAL(12, 3)` and `DECIMAL(23, 3)` give `DECIMAL(23, 3)`).
pub(crate) fn widen(plan: Plan, types: &[SqlType]) -> Plan {
    let columns = plan.columns();
    if columns.iter().zip(types).all(|(c, t)| c.ty == *t) {
        return plan;
    }
    let project = columns
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (c, &t))| match c.ty == t {
            true => Expr::Column(i),
            false => Expr::Cast(Box::new(Expr::Column(i)), t, false),
        })
        .collect();
    let columns = columns
        .iter()
        .zip(types)
        .map(|(c, &ty)| Column {
            name: c.name.clone(),
            ty,
            rowtime: c.rowtime && c.ty == ty,
        })
        .collect();
    Plan::Calc {
        input: Box::new(plan),
        filter: None,
        project,
        columns,
        text: "select=[UNION ALL types]".into(),
    }
}

/// A `HAVING` condition bound in the grouped scope; it must be BOOLEAN.
pub(super) fn bind_having(
    binder: &mut super::bind::Binder,
    having: Option<&sqlparser::ast::Expr>,
) -> super::error::SqlResult<Option<super::expr::Expr>> {
    use sqlparser::ast::Spanned;
    let Some(h) = having else {
        return Ok(None);
    };
    let (x, ty) = binder.bind(h)?;
    if !matches!(
        ty,
        super::value::SqlType::Boolean | super::value::SqlType::Null
    ) {
        return Err(super::error::err!(
            TypeMismatch,
            h.span(),
            "HAVING must be BOOLEAN, not {ty}"
        ));
    }
    Ok(Some(x))
}
