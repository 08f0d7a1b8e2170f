//! Window functions: incremental aggregation and whole-window processing.

use super::assigner::TimeWindow;
use std::marker::PhantomData;
use std::sync::Arc;

// The aggregate function is what aggregating state takes too; it lives with
// the state (below the windows) and keeps its path here.
pub use crate::state::{AggregateError, AggregateFunction};

/// The checked sum of an `i64` field: the default way to sum in a window.
///
/// The accumulator is an `i128`, so adding and merging never overflow (it
/// would take 2^64 records) and the result does not depend on the order in
/// which records, panes or sessions are combined; a window whose exact sum is
/// outside `i64` fails with [`AggregateError::Overflow`] instead of wrapping.
///
/// # Examples
/// ```
/// use floe::window::{AggregateFunction, AggregateError, Sum};
///
/// let sum = Sum::of(|v: &i64| *v);
/// let mut acc = sum.create_accumulator();
/// sum.add(&i64::MAX, &mut acc);
/// assert_eq!(sum.try_get_result(&acc), Ok(i64::MAX));
/// sum.add(&1, &mut acc);
/// assert!(matches!(sum.try_get_result(&acc), Err(AggregateError::Overflow { .. })));
/// ```
pub struct Sum<F> {
    field: F,
}

impl<F> Sum<F> {
    /// Sums `field(record)`.
    pub fn of(field: F) -> Self {
        Sum { field }
    }
}

impl<T, F> AggregateFunction<T, i128, i64> for Sum<F>
where
    F: Fn(&T) -> i64 + Send + Sync + 'static,
{
    fn create_accumulator(&self) -> i128 {
        0
    }
    #[inline]
    fn add(&self, value: &T, acc: &mut i128) {
        // Saturating: past 2^64 records it stays out of range, still reported.
        *acc = acc.saturating_add(i128::from((self.field)(value)));
    }
    /// The sum, clamped to the `i64` range; the operators use
    /// `try_get_result`, which reports the overflow instead.
    fn get_result(&self, acc: &i128) -> i64 {
        (*acc).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
    fn merge(&self, a: i128, b: i128) -> i128 {
        a.saturating_add(b)
    }
    fn try_get_result(&self, acc: &i128) -> Result<i64, AggregateError> {
        checked_sum(*acc)
    }
    #[inline]
    fn retract(&self, acc: &mut i128, part: &i128) -> bool {
        retract_sum(acc, part)
    }
}

/// `sum` as an `i64`, or the overflow.
#[inline]
pub fn checked_sum(sum: i128) -> Result<i64, AggregateError> {
    i64::try_from(sum).map_err(|_| AggregateError::Overflow { sum })
}

/// Retracts `part` from the sum `acc`, unless either has saturated (then
/// the difference would not be exact).
#[inline]
pub fn retract_sum(acc: &mut i128, part: &i128) -> bool {
    let saturated = |v: i128| v == i128::MAX || v == i128::MIN;
    if saturated(*acc) || saturated(*part) {
        return false;
    }
    *acc -= part;
    true
}

/// Turns a window's aggregate into output records, with the key and the window.
pub type WindowFunction<K, R, OUT> = Arc<DynWindowFunction<K, R, OUT>>;

/// The function behind a [`WindowFunction`], of any type.
pub type DynWindowFunction<K, R, OUT> = dyn Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + Send + Sync;

/// `reduce(f)` as an aggregate: the accumulator is the reduced record.
pub struct ReduceAggregate<T, F> {
    f: F,
    _t: PhantomData<fn(T)>,
}

impl<T, F> ReduceAggregate<T, F> {
    /// Reduces with `f(accumulated, new)`.
    pub fn new(f: F) -> Self {
        ReduceAggregate { f, _t: PhantomData }
    }
}

impl<T, F> AggregateFunction<T, Option<T>, T> for ReduceAggregate<T, F>
where
    T: Clone + Send + 'static,
    F: Fn(T, T) -> T + Send + Sync + 'static,
{
    fn create_accumulator(&self) -> Option<T> {
        None
    }
    fn add(&self, value: &T, acc: &mut Option<T>) {
        *acc = Some(match acc.take() {
            Some(a) => (self.f)(a, value.clone()),
            None => value.clone(),
        });
    }
    fn get_result(&self, acc: &Option<T>) -> T {
        acc.clone()
            .expect("a window with state holds at least one record")
    }
    fn merge(&self, a: Option<T>, b: Option<T>) -> Option<T> {
        match (a, b) {
            (Some(a), Some(b)) => Some((self.f)(a, b)),
            (a, None) => a,
            (None, b) => b,
        }
    }
}

/// Keeps every record of the window (for whole-window process functions).
pub struct CollectAll;

impl<T: Clone + Send + 'static> AggregateFunction<T, Vec<T>, Vec<T>> for CollectAll {
    fn create_accumulator(&self) -> Vec<T> {
        Vec::new()
    }
    fn add(&self, value: &T, acc: &mut Vec<T>) {
        acc.push(value.clone());
    }
    fn get_result(&self, acc: &Vec<T>) -> Vec<T> {
        acc.clone()
    }
    fn merge(&self, mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
        a.extend(b);
        a
    }
}
