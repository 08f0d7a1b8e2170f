//! The aggregates of a window or group aggregate (`COUNT`, `SUM`, `MIN`, `MAX`,
//! `AVG`, `COUNT(DISTINCT ..)`): each call's [`Acc`], and the calls as one
//! floe [`AggregateFunction`] over rows, so a `GROUP BY` runs on keyed
//! state ([`changelog`](super::changelog)). A window aggregate runs on
//! floe's own window operators (panes, state in checkpoints) with the
//! accumulators of [`window_aggregate`](super::window_aggregate), which
//! keeps the usual calls as plain integers and others as these.
//!
//! The input row is `[key.., argument of each call..]` (a `Calc` computed
//! it). `NULL` arguments are skipped; a `SUM`, `MIN`, `MAX` or `AVG` of no
//! values is `NULL`. Integer sums are exact in `i128` and wrap to the
//! result type at the end, which gives what Java's wrapping additions give
//! in any order; `AVG` of integers is the truncated quotient, as Flink's.

use super::bind::{AggCall, AggKind};
use super::expr::fits;
use super::value::{Row, SqlType, Value, rescale};
use crate::state::AggregateFunction;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// One call's accumulator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Acc {
    /// Rows or non-`NULL` values counted.
    Count(i64),
    /// A sum (integers and decimals in `int`, doubles in `float`) and how
    /// many values it holds.
    Sum {
        /// Integer or unscaled decimal sum.
        int: i128,
        /// Double sum.
        float: f64,
        /// Values summed.
        n: i64,
    },
    /// The least or greatest value so far (`NULL`: none yet).
    Extreme(Value),
    /// Distinct values and how often each was seen.
    Distinct(HashMap<Value, u64>),
}

/// A call as the aggregate runs it.
#[derive(Clone, Debug)]
pub(super) struct Spec {
    pub(super) kind: AggKind,
    /// The argument's column in the input row (`None`: `COUNT(*)`).
    pub(super) arg: Option<usize>,
    pub(super) distinct: bool,
    pub(super) ty: SqlType,
    /// The argument's type.
    pub(super) arg_ty: SqlType,
    /// The argument's decimal scale, for sums and averages of decimals.
    pub(super) arg_scale: u8,
}

/// The calls' specs, their arguments the input columns `args` (`None`:
/// `COUNT(*)`) of types `arg_types`.
pub(super) fn specs(
    calls: &[AggCall],
    args: &[Option<usize>],
    arg_types: &[SqlType],
) -> Arc<[Spec]> {
    calls
        .iter()
        .zip(args)
        .zip(arg_types)
        .map(|((c, a), t)| Spec {
            kind: c.kind,
            arg: *a,
            distinct: c.distinct,
            ty: c.ty,
            arg_ty: *t,
            arg_scale: match t {
                SqlType::Decimal(_, s) => *s,
                _ => 0,
            },
        })
        .collect()
}

/// A new accumulator of `spec` (`distinct_outside`: a `COUNT(DISTINCT ..)`
/// is a count its caller keeps).
pub(super) fn create(spec: &Spec, distinct_outside: bool) -> Acc {
    match (spec.kind, spec.distinct) {
        (AggKind::Count, true) if distinct_outside => Acc::Count(0),
        (AggKind::Count, true) => Acc::Distinct(HashMap::new()),
        (AggKind::Count, false) => Acc::Count(0),
        (AggKind::Sum | AggKind::Avg, _) => Acc::Sum {
            int: 0,
            float: 0.0,
            n: 0,
        },
        (AggKind::Min | AggKind::Max, _) => Acc::Extreme(Value::Null),
    }
}

/// The calls of one aggregate.
#[derive(Clone, Debug)]
pub struct RowAggregate {
    specs: Arc<[Spec]>,
    /// `COUNT(DISTINCT ..)` accumulators are plain counts that the caller
    /// keeps (the values seen live in its keyed map state).
    distinct_outside: bool,
}

impl RowAggregate {
    /// The aggregate of `calls`, whose arguments are the input columns
    /// `args` (`None`: `COUNT(*)`), of types `arg_types`.
    pub fn new(calls: &[AggCall], args: &[Option<usize>], arg_types: &[SqlType]) -> Self {
        RowAggregate {
            specs: specs(calls, args, arg_types),
            distinct_outside: false,
        }
    }

    /// As [`new`](Self::new), with each `COUNT(DISTINCT ..)` a count the
    /// caller increments for each value it had not seen (`add` leaves it).
    pub fn with_distinct_outside(
        calls: &[AggCall],
        args: &[Option<usize>],
        arg_types: &[SqlType],
    ) -> Self {
        RowAggregate {
            distinct_outside: true,
            ..RowAggregate::new(calls, args, arg_types)
        }
    }

    /// Adds the row of arguments `row` to the accumulators `acc`.
    fn add_values(&self, row: &[Value], acc: &mut [Acc]) {
        for (spec, a) in self.specs.iter().zip(acc.iter_mut()) {
            if spec.distinct && self.distinct_outside {
                continue;
            }
            add(spec, a, spec.arg.and_then(|i| row.get(i)));
        }
    }

    /// The `COUNT(DISTINCT ..)` calls: their index and argument column.
    pub fn distinct_arguments(&self) -> Vec<(usize, usize)> {
        self.specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.distinct && s.kind == AggKind::Count)
            .filter_map(|(i, s)| Some((i, s.arg?)))
            .collect()
    }
}

pub(super) fn add(spec: &Spec, acc: &mut Acc, v: Option<&Value>) {
    match (acc, v) {
        (Acc::Count(n), None) => *n += 1,
        (_, Some(Value::Null)) => {}
        (Acc::Count(n), Some(_)) => *n += 1,
        (Acc::Distinct(seen), Some(v)) => *seen.entry(v.clone()).or_insert(0) += 1,
        (Acc::Sum { int, float, n }, Some(v)) => {
            *n += 1;
            match v {
                Value::Double(d) => *float += d,
                other => {
                    let u = other.as_decimal(spec.arg_scale).unwrap_or(0);
                    *int = int.wrapping_add(u);
                }
            }
        }
        (Acc::Extreme(cur), Some(v)) => {
            let replace = match cur.sql_cmp(v) {
                None => cur.is_null(),
                Some(o) => match spec.kind {
                    AggKind::Min => o == Ordering::Greater,
                    _ => o == Ordering::Less,
                },
            };
            if replace {
                *cur = v.clone();
            }
        }
        (_, None) => {}
    }
}

pub(super) fn merge(spec: &Spec, a: Acc, b: Acc) -> Acc {
    match (a, b) {
        (Acc::Count(x), Acc::Count(y)) => Acc::Count(x + y),
        (
            Acc::Sum {
                int: i1,
                float: f1,
                n: n1,
            },
            Acc::Sum {
                int: i2,
                float: f2,
                n: n2,
            },
        ) => Acc::Sum {
            int: i1.wrapping_add(i2),
            float: f1 + f2,
            n: n1 + n2,
        },
        (Acc::Distinct(mut x), Acc::Distinct(y)) => {
            for (v, c) in y {
                *x.entry(v).or_insert(0) += c;
            }
            Acc::Distinct(x)
        }
        (Acc::Extreme(x), Acc::Extreme(y)) => {
            let mut acc = Acc::Extreme(x);
            add(spec, &mut acc, Some(&y));
            acc
        }
        (a, _) => a,
    }
}

pub(super) fn result(spec: &Spec, acc: &Acc) -> Value {
    match acc {
        Acc::Count(n) => Value::BigInt(*n),
        Acc::Distinct(seen) => Value::BigInt(seen.len() as i64),
        Acc::Extreme(v) => v.clone(),
        Acc::Sum { n: 0, .. } => Value::Null,
        Acc::Sum { int, float, n } => {
            let avg = spec.kind == AggKind::Avg;
            match spec.ty {
                SqlType::Double => Value::Double(if avg { float / *n as f64 } else { *float }),
                SqlType::Int => Value::Int(if avg { int / i128::from(*n) } else { *int } as i32),
                SqlType::BigInt => {
                    Value::BigInt(if avg { int / i128::from(*n) } else { *int } as i64)
                }
                SqlType::Decimal(p, s) => {
                    let v = if avg {
                        // int / n at scale s, rounded half up.
                        rescale(*int, spec.arg_scale, s).map(|x| {
                            let n = i128::from(*n);
                            let (q, r) = (x / n, x % n);
                            if r.abs() * 2 >= n { q + x.signum() } else { q }
                        })
                    } else {
                        rescale(*int, spec.arg_scale, s)
                    };
                    match v {
                        Some(v) if fits(v, p) => Value::Decimal(v, s),
                        _ => Value::Null,
                    }
                }
                _ => Value::Null,
            }
        }
    }
}

impl AggregateFunction<Row, Vec<Acc>, Row> for RowAggregate {
    fn create_accumulator(&self) -> Vec<Acc> {
        self.specs
            .iter()
            .map(|s| create(s, self.distinct_outside))
            .collect()
    }

    fn add(&self, row: &Row, acc: &mut Vec<Acc>) {
        self.add_values(row, acc);
    }

    fn get_result(&self, acc: &Vec<Acc>) -> Row {
        self.specs
            .iter()
            .zip(acc)
            .map(|(s, a)| result(s, a))
            .collect()
    }

    fn merge(&self, a: Vec<Acc>, b: Vec<Acc>) -> Vec<Acc> {
        self.specs
            .iter()
            .zip(a.into_iter().zip(b))
            .map(|(s, (x, y))| merge(s, x, y))
            .collect()
    }
}
