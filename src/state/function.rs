//! [`AggregateFunction`]: incremental aggregation, as Flink's
//! `AggregateFunction`, and [`AggregateError`], why an aggregate has no
//! result.
//!
//! Aggregating state ([`AggregatingState`](super::AggregatingState)) and the
//! window operators both take one, so it sits with the state, below the
//! windows; `floe::window` re-exports it.

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
    /// The result of an accumulator, or why there is none. The window
    /// operators call this one: a failure ends the job with
    /// [`Error::Aggregate`](crate::Error::Aggregate) naming the key and the
    /// window. The default is `get_result`, which cannot fail; an aggregate
    /// whose result may not exist (a checked sum, see
    /// [`Sum`](crate::window::Sum)) overrides it.
    fn try_get_result(&self, acc: &ACC) -> Result<OUT, AggregateError> {
        Ok(self.get_result(acc))
    }
    /// Takes `part`, merged into `acc` earlier, back out of `acc`, and
    /// returns whether it could; the default cannot (a minimum, a
    /// maximum). When it can, the result must be exact: retracting `b`
    /// from `merge(a, b)` gives `a` again. Sliding windows kept on the heap
    /// use it to move a window's merged accumulators from one window to
    /// the next (the panes that leave retracted, the panes that enter
    /// merged) instead of merging every pane of each window; an aggregate
    /// that cannot retract has each window merged from its panes.
    fn retract(&self, _acc: &mut ACC, _part: &ACC) -> bool {
        false
    }
}

/// Why an aggregate has no result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AggregateError {
    /// The exact sum is outside the `i64` range.
    #[error("the sum {sum} overflows i64")]
    Overflow {
        /// The exact sum.
        sum: i128,
    },
}
