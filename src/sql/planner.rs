//! Planning: a query into a tree of [`Plan`] nodes, each of which becomes
//! floe operators ([`exec`](super::exec)).
//!
//! The shapes planned: a projection and filter over a table, a view or a
//! subquery (`Calc`); a window table-valued function (`TUMBLE`, `HOP`,
//! `CUMULATE`, `SESSION`)
//! grouped by `window_start, window_end` and columns, with `COUNT`, `SUM`,
//! `MIN`, `MAX`, `AVG` (`WindowAggregate`, then a `Calc` for the select list
//! and `HAVING`); `UNION ALL`. A `GROUP BY` without a window produces
//! updates, which an append-only sink cannot take: it is refused as Flink
//! refuses it.

use super::bind::{AggCall, Binder, Column, Scope};
use super::dialect::table_argument;
use super::error::{SqlResult, err};
use super::expr::Expr;
use super::select::{
    bind_having, calc, descriptor, has_aggregate, max_column, projection_text, select_list, widen,
};
use super::table::{Connector, Table};
use super::value::SqlType;
use sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, ObjectName, Query, SetExpr,
    SetOperator, SetQuantifier, Spanned, TableFactor,
};
use sqlparser::tokenizer::Span;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What a name of the catalog stands for.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A table.
    Table(Arc<Table>),
    /// A view: its query, planned where it is used.
    View(Box<Query>),
}

/// The tables and views a script defined so far.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// By name (case-sensitive, as Flink's identifiers).
    pub entries: HashMap<String, Entry>,
    /// The tables whose rows are a DataStream (read-only).
    pub streams: HashSet<String>,
}

/// A window table-valued function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// `TUMBLE(.., size)`.
    Tumble {
        /// Window length (ms).
        size: i64,
    },
    /// `HOP(.., slide, size)`.
    Hop {
        /// Window length (ms).
        size: i64,
        /// Distance between window starts (ms).
        slide: i64,
    },
    /// `CUMULATE(.., step, size)`: windows from a common start growing by
    /// `step` up to `size`.
    Cumulate {
        /// How much each window grows (ms).
        step: i64,
        /// The longest window (ms).
        size: i64,
    },
    /// `SESSION(TABLE t PARTITION BY keys, .., gap)`: per key, rows less
    /// than `gap` apart share a window.
    Session {
        /// The gap (ms).
        gap: i64,
    },
}

/// A column of a window aggregate's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupItem {
    /// `window_start`.
    Start,
    /// `window_end`.
    End,
    /// `window_time` (the window's last millisecond, an event time).
    Time,
    /// The grouping key's column `i`.
    Key(usize),
}

/// A window aggregate.
#[derive(Clone, Debug)]
pub struct WindowAgg {
    /// The rows aggregated.
    pub input: Plan,
    /// The windows.
    pub window: Window,
    /// The key: input columns.
    pub keys: Vec<usize>,
    /// The output's grouped columns, in `GROUP BY` order.
    pub group: Vec<GroupItem>,
    /// The aggregates, after the grouped columns.
    pub calls: Vec<AggCall>,
    /// The output columns.
    pub columns: Vec<Column>,
    /// The event-time column's type (the type of `window_time`).
    pub time_ty: SqlType,
    /// The event-time column's name (for `EXPLAIN`).
    pub time_col: String,
}

/// A node of a query plan.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Reads a table.
    Scan(Arc<Table>),
    /// A filter and a projection.
    Calc {
        /// Its input.
        input: Box<Plan>,
        /// `WHERE` (or `HAVING`).
        filter: Option<Expr>,
        /// The output columns' expressions.
        project: Vec<Expr>,
        /// The output columns.
        columns: Vec<Column>,
        /// The select list and condition as written (for `EXPLAIN`).
        text: String,
    },
    /// A window aggregate.
    WindowAgg(Box<WindowAgg>),
    /// A non-windowed aggregate: its rows are updates.
    GroupAgg(Box<GroupAgg>),
    /// `UNION ALL`.
    Union(Vec<Plan>),
}

/// A `GROUP BY` without a window function (or aggregates without `GROUP
/// BY`): Flink's `GroupAggregate`, whose output is a changelog.
#[derive(Clone, Debug)]
pub struct GroupAgg {
    /// The rows aggregated.
    pub input: Plan,
    /// The key: input columns, in `GROUP BY` order (empty: one group).
    pub keys: Vec<usize>,
    /// The aggregates, after the keys.
    pub calls: Vec<AggCall>,
    /// The output columns: the keys, then the aggregates.
    pub columns: Vec<Column>,
    /// `GroupAggregate(groupBy=[..])`, for messages.
    pub text: String,
    /// Where its `SELECT` is.
    pub at: Span,
}

impl Plan {
    /// The output columns.
    pub fn columns(&self) -> &[Column] {
        match self {
            Plan::Scan(t) => &t.columns,
            Plan::Calc { columns, .. } => columns,
            Plan::WindowAgg(w) => &w.columns,
            Plan::GroupAgg(g) => &g.columns,
            Plan::Union(inputs) => inputs.first().map_or(&[], |p| p.columns()),
        }
    }

    /// The aggregate that makes this plan's rows updates, if one does.
    pub fn updating(&self) -> Option<&GroupAgg> {
        match self {
            Plan::Scan(_) | Plan::WindowAgg(_) => None,
            Plan::GroupAgg(g) => Some(g),
            Plan::Calc { input, .. } => input.updating(),
            Plan::Union(inputs) => inputs.iter().find_map(Plan::updating),
        }
    }

    /// For an updating plan, the output columns of its aggregate's key:
    /// for each key column, the first output column that carries it
    /// (`None` when a key column is not in the output, or under a
    /// `UNION ALL`).
    pub fn unique_key(&self) -> Option<Vec<usize>> {
        match self {
            Plan::GroupAgg(g) => Some((0..g.keys.len()).collect()),
            Plan::Calc { input, project, .. } => {
                let key = input.unique_key()?;
                key.iter()
                    .map(|&k| {
                        project.iter().position(|e| match e {
                            Expr::Column(c) => *c == k,
                            Expr::Cast(inner, _, _) => matches!(**inner, Expr::Column(c) if c == k),
                            _ => false,
                        })
                    })
                    .collect()
            }
            _ => None,
        }
    }
}

/// What a query's `FROM` gives.
enum From {
    /// Rows, under a name.
    Rows(Plan, String, Vec<String>),
    /// Rows with windows assigned (a window function), under a name.
    Windowed {
        input: Plan,
        window: Window,
        time_col: usize,
        name: String,
        qualifiers: Vec<String>,
        /// `SESSION`'s `PARTITION BY` columns (as written).
        partition: Vec<ast::Ident>,
    },
}

/// Plans queries over a catalog.
pub struct Planner<'c> {
    catalog: &'c Catalog,
    depth: usize,
}

impl<'c> Planner<'c> {
    /// A planner over `catalog`.
    pub fn new(catalog: &'c Catalog) -> Self {
        Planner { catalog, depth: 0 }
    }

    /// The plan of `q`.
    pub fn query(&mut self, q: &Query) -> SqlResult<Plan> {
        let at = q.span();
        if q.with.is_some() {
            return Err(err!(Unsupported, at, "WITH is not supported yet"));
        }
        if q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
            return Err(err!(
                Unsupported,
                at,
                "ORDER BY, LIMIT and FETCH are not supported in a streaming query"
            ));
        }
        self.depth += 1;
        if self.depth > 64 {
            return Err(err!(Unsupported, at, "the query is nested too deeply"));
        }
        let plan = self.set_expr(&q.body, at);
        self.depth -= 1;
        plan
    }

    fn set_expr(&mut self, body: &SetExpr, at: Span) -> SqlResult<Plan> {
        match body {
            SetExpr::Select(s) => self.select(s),
            SetExpr::Query(q) => self.query(q),
            SetExpr::SetOperation {
                op: SetOperator::Union,
                set_quantifier: SetQuantifier::All,
                left,
                right,
            } => {
                let l = self.set_expr(left, at)?;
                let r = self.set_expr(right, left.span())?;
                let (lc, rc) = (l.columns(), r.columns());
                if lc.len() != rc.len() {
                    return Err(err!(
                        TypeMismatch,
                        right.span(),
                        "UNION ALL of {} and {} columns",
                        lc.len(),
                        rc.len()
                    ));
                }
                let mut types = Vec::with_capacity(lc.len());
                for (a, b) in lc.iter().zip(rc) {
                    let Some(t) = SqlType::common(a.ty, b.ty) else {
                        return Err(err!(
                            TypeMismatch,
                            right.span(),
                            "UNION ALL column '{}' is {} on the left and {} on the right",
                            a.name,
                            a.ty,
                            b.ty
                        ));
                    };
                    types.push(t);
                }
                let (l, r) = (widen(l, &types), widen(r, &types));
                let mut inputs = match l {
                    Plan::Union(v) => v,
                    other => vec![other],
                };
                inputs.push(r);
                Ok(Plan::Union(inputs))
            }
            SetExpr::SetOperation { op, .. } => Err(err!(
                Unsupported,
                at,
                "{op} is not supported (UNION ALL is)"
            )),
            other => Err(err!(
                Unsupported,
                at,
                "query {} is not supported",
                other.to_string().split_whitespace().next().unwrap_or("")
            )),
        }
    }

    fn named(&mut self, name: &ObjectName, at: Span) -> SqlResult<Plan> {
        let key = name.to_string().replace('`', "");
        match self.catalog.entries.get(&key) {
            Some(Entry::Table(t)) if self.catalog.streams.contains(&key) => {
                Ok(Plan::Scan(t.clone()))
            }
            Some(Entry::Table(t)) => match t.connector {
                Connector::FileSystem { .. } | Connector::Kafka(_) => Ok(Plan::Scan(t.clone())),
                _ => Err(err!(
                    Invalid,
                    at,
                    "connector '{}' of table '{key}' can only be used as a sink, not as a source",
                    t.connector.kind()
                )),
            },
            Some(Entry::View(q)) => self.query(q),
            None => Err(err!(UnknownTable, at, "unknown table '{key}'")),
        }
    }

    fn from(&mut self, from: &[ast::TableWithJoins], at: Span) -> SqlResult<From> {
        let [one] = from else {
            return Err(err!(
                Unsupported,
                at,
                "a query reads one table (joins are not supported yet)"
            ));
        };
        if !one.joins.is_empty() {
            return Err(err!(Unsupported, at, "joins are not supported yet"));
        }
        let alias_of = |a: &Option<ast::TableAlias>| a.as_ref().map(|a| a.name.value.clone());
        match &one.relation {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let plan = self.named(name, one.relation.span())?;
                let label = name.to_string().replace('`', "");
                let mut qualifiers = vec![label.clone()];
                qualifiers.extend(alias_of(alias));
                Ok(From::Rows(plan, format!("table '{label}'"), qualifiers))
            }
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let plan = self.query(subquery)?;
                let qualifiers = alias_of(alias).into_iter().collect();
                Ok(From::Rows(plan, "the subquery".into(), qualifiers))
            }
            TableFactor::TableFunction { expr, alias } => {
                let mut f = self.window_function(expr)?;
                if let (From::Windowed { qualifiers, .. }, Some(a)) = (&mut f, alias_of(alias)) {
                    qualifiers.push(a);
                }
                Ok(f)
            }
            other => Err(err!(
                Unsupported,
                other.span(),
                "FROM {other} is not supported"
            )),
        }
    }

    fn window_function(&mut self, expr: &ast::Expr) -> SqlResult<From> {
        let at = expr.span();
        let ast::Expr::Function(f) = expr else {
            return Err(err!(Unsupported, at, "TABLE({expr}) is not supported"));
        };
        let name = f.name.to_string().to_ascii_uppercase();
        let args: Vec<&ast::Expr> = match &f.args {
            FunctionArguments::List(l) => l
                .args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                    other => Err(err!(
                        Unsupported,
                        at,
                        "argument {other} of {name} is not supported (write the arguments in \
                         order, unnamed)"
                    )),
                })
                .collect::<SqlResult<_>>()?,
            _ => Vec::new(),
        };
        let arity = match name.as_str() {
            "TUMBLE" | "SESSION" => 3,
            "HOP" | "CUMULATE" => 4,
            _ => {
                return Err(err!(
                    Unsupported,
                    at,
                    "table function {} is not supported (TUMBLE, HOP, CUMULATE and SESSION are)",
                    f.name
                ));
            }
        };
        if args.len() != arity {
            return Err(err!(
                TypeMismatch,
                at,
                "{name} takes {arity} arguments (TABLE t, DESCRIPTOR(col), {}), not {}",
                match name.as_str() {
                    "TUMBLE" => "size",
                    "SESSION" => "gap",
                    "CUMULATE" => "step, size",
                    _ => "slide, size",
                },
                args.len()
            ));
        }
        let Some((table, partition)) = table_argument(args[0]) else {
            return Err(err!(
                TypeMismatch,
                args[0].span(),
                "the first argument of {name} is TABLE name, not {}",
                args[0]
            ));
        };
        if !partition.is_empty() && name != "SESSION" {
            return Err(err!(
                Unsupported,
                args[0].span(),
                "PARTITION BY is supported in SESSION only"
            ));
        }
        let input = self.named(&table, args[0].span())?;
        let label = table.to_string().replace('`', "");
        if let Some(g) = input.updating() {
            return Err(err!(
                Unsupported,
                args[0].span(),
                "{name} over '{label}', whose rows are updates ({}), is not supported: a window \
                 function needs an append-only input",
                g.text
            ));
        }
        for k in &partition {
            if !input.columns().iter().any(|c| c.name == k.value) {
                return Err(err!(
                    UnknownColumn,
                    k.span,
                    "unknown column '{}' in table '{label}'",
                    k.value
                ));
            }
        }
        let time_col = descriptor(args[1], &input, &label)?;
        let c = &input.columns()[time_col];
        if !c.rowtime {
            return Err(err!(
                TypeMismatch,
                args[1].span(),
                "the window function requires the time column to be an event-time attribute \
                 (declared by a WATERMARK), but '{}' is {}",
                c.name,
                c.ty
            ));
        }
        let positive = |e: &ast::Expr| -> SqlResult<i64> {
            match super::bind::interval_millis(e)? {
                ms if ms > 0 => Ok(ms),
                _ => Err(err!(
                    TypeMismatch,
                    e.span(),
                    "a window interval must be positive"
                )),
            }
        };
        let window = match name.as_str() {
            "TUMBLE" => Window::Tumble {
                size: positive(args[2])?,
            },
            "SESSION" => Window::Session {
                gap: positive(args[2])?,
            },
            "CUMULATE" => {
                let (step, size) = (positive(args[2])?, positive(args[3])?);
                if size % step != 0 {
                    return Err(err!(
                        Unsupported,
                        at,
                        "CUMULATE requires the size to be an integral multiple of the step, but \
                         got size {size} ms and step {step} ms"
                    ));
                }
                Window::Cumulate { step, size }
            }
            _ => {
                let (slide, size) = (positive(args[2])?, positive(args[3])?);
                if size % slide != 0 {
                    return Err(err!(
                        Unsupported,
                        at,
                        "HOP requires the size to be an integral multiple of the slide, but got \
                         size {size} ms and slide {slide} ms"
                    ));
                }
                Window::Hop { size, slide }
            }
        };
        Ok(From::Windowed {
            input,
            window,
            time_col,
            name: format!("{name}(TABLE {label})"),
            qualifiers: vec![label],
            partition,
        })
    }

    fn select(&mut self, s: &ast::Select) -> SqlResult<Plan> {
        let at = s.span();
        if s.distinct.is_some() {
            return Err(err!(
                Unsupported,
                at,
                "SELECT DISTINCT is not supported yet"
            ));
        }
        let group_by = match &s.group_by {
            GroupByExpr::Expressions(exprs, mods) if mods.is_empty() => exprs.as_slice(),
            other => {
                return Err(err!(Unsupported, at, "{other} is not supported"));
            }
        };
        match self.from(&s.from, at)? {
            From::Rows(input, name, qualifiers) => {
                if !group_by.is_empty() || s.having.is_some() || has_aggregate(&s.projection) {
                    return self.group_select(s, group_by, input, name, qualifiers);
                }
                let columns = input.columns().to_vec();
                let scope = Scope {
                    columns: &columns,
                    table: &name,
                    qualifiers,
                };
                let filter = self.condition(&scope, s.selection.as_ref())?;
                let (project, out) = select_list(&mut Binder::new(&scope), &s.projection, &scope)?;
                Ok(calc(input, filter, project, out, s))
            }
            From::Windowed {
                input,
                window,
                time_col,
                name,
                qualifiers,
                partition,
            } => {
                let plan =
                    self.window_select(s, group_by, input, window, time_col, name, qualifiers)?;
                check_partition(&plan, window, &partition, at)?;
                Ok(plan)
            }
        }
    }

    pub(super) fn condition(
        &self,
        scope: &Scope,
        e: Option<&ast::Expr>,
    ) -> SqlResult<Option<Expr>> {
        let Some(e) = e else {
            return Ok(None);
        };
        let (x, ty) = Binder::new(scope).bind(e)?;
        if !matches!(ty, SqlType::Boolean | SqlType::Null) {
            return Err(err!(
                TypeMismatch,
                e.span(),
                "a condition must be BOOLEAN, but '{e}' is {ty}"
            ));
        }
        Ok(Some(x))
    }

    #[allow(clippy::too_many_arguments)]
    fn window_select(
        &mut self,
        s: &ast::Select,
        group_by: &[ast::Expr],
        input: Plan,
        window: Window,
        time_col: usize,
        name: String,
        qualifiers: Vec<String>,
    ) -> SqlResult<Plan> {
        let at = s.span();
        let n = input.columns().len();
        let time_ty = input.columns()[time_col].ty;
        let mut columns = input.columns().to_vec();
        for c in &mut columns {
            c.rowtime = false;
        }
        let window_ty = SqlType::Timestamp(3);
        for (col, ty, rowtime) in [
            ("window_start", window_ty, false),
            ("window_end", window_ty, false),
            ("window_time", time_ty, true),
        ] {
            columns.push(Column {
                name: col.into(),
                ty,
                rowtime,
            });
        }
        let scope = Scope {
            columns: &columns,
            table: &name,
            qualifiers,
        };
        if group_by.is_empty() {
            return Err(err!(
                Unsupported,
                at,
                "a window function without GROUP BY window_start, window_end is not supported yet"
            ));
        }
        let filter = self.condition(&scope, s.selection.as_ref())?;
        if let (Some(f), Some(w)) = (&filter, &s.selection)
            && max_column(f).is_some_and(|c| c >= n)
        {
            return Err(err!(
                Unsupported,
                w.span(),
                "a WHERE on window_start, window_end or window_time is not supported"
            ));
        }
        let binder = Binder::new(&scope);
        let mut group = Vec::new();
        let mut items = Vec::new();
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
            let i = binder.column(&parts, g.span())?;
            group.push(i);
            items.push(match i.checked_sub(n) {
                Some(0) => GroupItem::Start,
                Some(1) => GroupItem::End,
                Some(_) => GroupItem::Time,
                None => {
                    keys.push(i);
                    GroupItem::Key(keys.len() - 1)
                }
            });
        }
        if !(items.contains(&GroupItem::Start) && items.contains(&GroupItem::End)) {
            return Err(err!(
                Unsupported,
                at,
                "a window aggregate must GROUP BY both window_start and window_end"
            ));
        }
        let mut binder = Binder::grouped(&scope, group.clone());
        let (project, out) = select_list(&mut binder, &s.projection, &scope)?;
        let having = bind_having(&mut binder, s.having.as_ref())?;
        let calls = binder.into_calls();
        for c in &calls {
            if c.arg.as_ref().and_then(max_column).is_some_and(|m| m >= n) {
                return Err(err!(
                    Unsupported,
                    at,
                    "an aggregate of window_start, window_end or window_time is not supported"
                ));
            }
        }
        let mut agg_columns: Vec<Column> = group.iter().map(|&i| columns[i].clone()).collect();
        for (i, c) in calls.iter().enumerate() {
            agg_columns.push(Column {
                name: format!("EXPR${i}"),
                ty: c.ty,
                rowtime: false,
            });
        }
        // `window_time` (also renamed) stays an event-time attribute: the
        // scope marks no other column as one.
        let pre = match filter {
            Some(f) => {
                let project = (0..n).map(Expr::Column).collect();
                let cols = input.columns().to_vec();
                let text = format!(
                    "where=[{}]",
                    s.selection
                        .as_ref()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                );
                Plan::Calc {
                    input: Box::new(input),
                    filter: Some(f),
                    project,
                    columns: cols,
                    text,
                }
            }
            None => input,
        };
        let time_name = pre.columns()[time_col].name.clone();
        let agg = Plan::WindowAgg(Box::new(WindowAgg {
            input: pre,
            window,
            keys,
            group: items,
            calls,
            columns: agg_columns,
            time_ty,
            time_col: time_name,
        }));
        let text = format!(
            "select=[{}]{}",
            projection_text(&s.projection),
            s.having
                .as_ref()
                .map(|h| format!(", having=[{h}]"))
                .unwrap_or_default()
        );
        Ok(Plan::Calc {
            input: Box::new(agg),
            filter: having,
            project,
            columns: out,
            text,
        })
    }
}

/// A `SESSION` window aggregate's keys must be its `PARTITION BY` columns:
/// sessions are kept per key.
fn check_partition(
    plan: &Plan,
    window: Window,
    partition: &[ast::Ident],
    at: Span,
) -> SqlResult<()> {
    let Window::Session { .. } = window else {
        return Ok(());
    };
    let Plan::Calc { input, .. } = plan else {
        return Ok(());
    };
    let Plan::WindowAgg(w) = &**input else {
        return Ok(());
    };
    let in_cols = w.input.columns();
    let mut keys: Vec<&str> = w.keys.iter().map(|&k| in_cols[k].name.as_str()).collect();
    let mut parts: Vec<&str> = partition.iter().map(|i| i.value.as_str()).collect();
    keys.sort_unstable();
    parts.sort_unstable();
    if keys != parts {
        return Err(err!(
            Unsupported,
            at,
            "a SESSION window aggregate must GROUP BY window_start, window_end and exactly its \
             PARTITION BY columns ({})",
            if parts.is_empty() {
                "none".to_string()
            } else {
                parts.join(", ")
            }
        ));
    }
    Ok(())
}
