//! Planning a `GROUP BY` without a window function: Flink's
//! `GroupAggregate`, whose rows are updates (see
//! [`changelog`](super::changelog)). Where they may go is decided by the
//! sink (`INSERT INTO`): an upsert sink takes them, an append-only one
//! refuses them with Flink's message.

use super::bind::{Binder, Column, Scope};
use super::error::{SqlResult, err};
use super::expr::Expr;
use super::planner::{GroupAgg, Plan, Planner};
use super::select::{bind_having, projection_text, select_list};
use sqlparser::ast::{self, Spanned};

impl Planner<'_> {
    /// `SELECT keys.., aggregates.. FROM input [WHERE ..] GROUP BY keys
    /// [HAVING ..]`: a `Calc` for `WHERE`, the aggregate, a `Calc` for the
    /// select list and `HAVING`.
    pub(super) fn group_select(
        &mut self,
        s: &ast::Select,
        group_by: &[ast::Expr],
        input: Plan,
        name: String,
        qualifiers: Vec<String>,
    ) -> SqlResult<Plan> {
        let at = s.span();
        if let Some(g) = input.updating() {
            return Err(err!(
                Unsupported,
                at,
                "an aggregate over updates ({}) is not supported",
                g.text
            ));
        }
        let columns = input.columns().to_vec();
        let scope = Scope {
            columns: &columns,
            table: &name,
            qualifiers,
        };
        let filter = self.condition(&scope, s.selection.as_ref())?;
        let binder = Binder::new(&scope);
        let mut keys = Vec::new();
        for g in group_by {
            let parts = match g {
                ast::Expr::Identifier(i) => vec![i.clone()],
                ast::Expr::CompoundIdentifier(p) => p.clone(),
                other => {
                    return Err(err!(
                        Unsupported,
                        other.span(),
                        "GROUP BY {other}: only columns are supported"
                    ));
                }
            };
            keys.push(binder.column(&parts, g.span())?);
        }
        let mut binder = Binder::grouped(&scope, keys.clone());
        let (project, mut out) = select_list(&mut binder, &s.projection, &scope)?;
        let having = bind_having(&mut binder, s.having.as_ref())?;
        let calls = binder.into_calls();
        let mut agg_columns: Vec<Column> = keys.iter().map(|&i| columns[i].clone()).collect();
        for (i, c) in calls.iter().enumerate() {
            agg_columns.push(Column {
                name: format!("EXPR${i}"),
                ty: c.ty,
                rowtime: false,
            });
        }
        // An aggregate's rows have no event time.
        for c in agg_columns.iter_mut().chain(out.iter_mut()) {
            c.rowtime = false;
        }
        let key_names: Vec<String> = group_by.iter().map(|e| e.to_string()).collect();
        let text = format!("GroupAggregate(groupBy=[{}])", key_names.join(", "));
        let pre = match filter {
            Some(f) => Plan::Calc {
                project: (0..columns.len()).map(Expr::Column).collect(),
                columns: columns.clone(),
                input: Box::new(input),
                filter: Some(f),
                text: format!(
                    "where=[{}]",
                    s.selection
                        .as_ref()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                ),
            },
            None => input,
        };
        let agg = Plan::GroupAgg(Box::new(GroupAgg {
            input: pre,
            keys,
            calls,
            columns: agg_columns,
            text,
            at,
        }));
        Ok(Plan::Calc {
            input: Box::new(agg),
            filter: having,
            project,
            columns: out,
            text: format!(
                "select=[{}]{}",
                projection_text(&s.projection),
                s.having
                    .as_ref()
                    .map(|h| format!(", having=[{h}]"))
                    .unwrap_or_default()
            ),
        })
    }
}
