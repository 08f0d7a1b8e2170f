//! [`Numeric`]: the field types keyed aggregations sum and compare, and
//! the error of a sum that leaves its type.
//!
//! A keyed `sum` is exact, as the window sums are: an integer sum that
//! would wrap fails the job instead, naming the key.

use super::KeyFn;

/// Something that can be summed and compared: the field type of aggregations.
pub trait Numeric:
    Copy + PartialOrd + std::ops::Add<Output = Self> + std::fmt::Display + Send + Sync + 'static
{
    /// `self + other`, or `None` when the sum leaves the type (integers;
    /// a float sum goes to infinity as IEEE 754 says).
    fn checked_sum(self, other: Self) -> Option<Self>;
}

macro_rules! numeric_integers {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            #[inline]
            fn checked_sum(self, other: Self) -> Option<Self> {
                self.checked_add(other)
            }
        }
    )*};
}
numeric_integers!(
    i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);

macro_rules! numeric_floats {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            #[inline]
            fn checked_sum(self, other: Self) -> Option<Self> {
                Some(self + other)
            }
        }
    )*};
}
numeric_floats!(f32, f64);

/// The error of a keyed `sum` whose field left its type: it names the key.
#[cold]
pub(super) fn sum_overflow<T, K: serde::Serialize, N: Numeric>(
    key: &KeyFn<T, K>,
    value: &T,
    sum: N,
    add: N,
) -> crate::Error {
    key.with_key(value, |k| {
        crate::Error::sum_overflow(
            k,
            std::any::type_name::<N>(),
            sum.to_string(),
            add.to_string(),
        )
    })
}
