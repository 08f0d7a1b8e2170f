//! Window functions: incremental aggregation and whole-window processing.

use super::assigner::TimeWindow;
use std::marker::PhantomData;
use std::sync::Arc;

/// Incremental aggregation, as Flink's `AggregateFunction`.
pub trait AggregateFunction<IN, ACC, OUT>: Send + Sync + 'static {
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> ACC;
    /// Adds a record to an accumulator (by reference: a record in several
    /// windows is not copied for each).
    fn add(&self, value: &IN, acc: &mut ACC);
    /// The result of an accumulator.
    fn get_result(&self, acc: &ACC) -> OUT;
    /// Merges two accumulators (session windows).
    fn merge(&self, a: ACC, b: ACC) -> ACC;
}

/// Turns a window's aggregate into output records, with the key and the window.
pub type WindowFunction<K, R, OUT> = Arc<dyn Fn(&K, &TimeWindow, R, &mut Vec<OUT>) + Send + Sync>;

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
