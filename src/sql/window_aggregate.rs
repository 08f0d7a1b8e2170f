//! A window aggregate's rows and accumulators, shaped for the window
//! operator's hot path: per row, no allocation for a key of one column or
//! for up to one argument, and no `Value`-generic accumulator for the usual
//! calls.
//!
//! - [`SmallRow`]: a key or the calls' arguments, one value inline (a row
//!   of several in a vector); a [`GroupKey`] is one with its hash.
//! - [`Accs`]: a (key, window)'s accumulators. When every call is a
//!   `COUNT`, a `SUM` of `INT`, `BIGINT` or `DOUBLE`, or a `MIN` or `MAX`
//!   of `INT`, `BIGINT` or a timestamp, and there are at most [`WORDS`]
//!   calls, each call is two integers in place ([`Word`]); otherwise each
//!   is the [`Acc`] of [`aggregate`](super::aggregate). A value a word
//!   does not take (another type than the argument's, which typing rules
//!   out) turns the accumulators into [`Acc`]s first, so the results are
//!   those of the [`Acc`]s in every case: a sum of integers wraps in `i64`
//!   as the exact `i128` sum wraps to `INT` or `BIGINT` at the end (both
//!   are the sum modulo 2^64), and a sum of doubles adds in the same order.

use super::aggregate::{Acc, Spec, add, create, merge, result, specs};
use super::bind::{AggCall, AggKind};
use super::value::{Row, SqlType, Value};
use crate::state::AggregateFunction;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Calls whose accumulators can be [`Word`]s.
pub const WORDS: usize = 3;

/// A few values: one inline, none or several in a vector (none allocates
/// nothing). A row of one value is always [`SmallRow::One`].
#[derive(Clone, Debug)]
pub enum SmallRow {
    /// One value.
    One(Value),
    /// None, or two or more.
    Many(Vec<Value>),
}

impl SmallRow {
    /// The values of `values`.
    pub fn from_vec(mut values: Vec<Value>) -> Self {
        match (values.len(), values.pop()) {
            (1, Some(v)) => SmallRow::One(v),
            (_, last) => {
                values.extend(last);
                SmallRow::Many(values)
            }
        }
    }

    /// The values.
    #[inline]
    pub fn as_slice(&self) -> &[Value] {
        match self {
            SmallRow::One(v) => std::slice::from_ref(v),
            SmallRow::Many(v) => v,
        }
    }
}

impl PartialEq for SmallRow {
    #[inline]
    fn eq(&self, other: &SmallRow) -> bool {
        match (self, other) {
            (SmallRow::One(a), SmallRow::One(b)) => a == b,
            _ => self.as_slice() == other.as_slice(),
        }
    }
}

impl Eq for SmallRow {}

impl Hash for SmallRow {
    /// As the `Vec<Value>` of the values hashes.
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl Serialize for SmallRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.as_slice())
    }
}

impl<'de> Deserialize<'de> for SmallRow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Value>::deserialize(d).map(SmallRow::from_vec)
    }
}

/// A window aggregate's grouping key: its values and their stable hash,
/// computed once, where the row is split. The key hashes as that one word,
/// so the exchange and the window operator's key index do not hash the
/// values again; it serializes as its values (the hash is computed again
/// when it is read).
#[derive(Clone, Debug)]
pub struct GroupKey {
    hash: u64,
    values: SmallRow,
}

impl GroupKey {
    /// The key of `values`.
    #[inline]
    pub fn new(values: SmallRow) -> Self {
        GroupKey {
            hash: floe_actors::keygroup::stable_hash(values.as_slice()),
            values,
        }
    }

    /// The values.
    #[inline]
    pub fn as_slice(&self) -> &[Value] {
        self.values.as_slice()
    }
}

impl PartialEq for GroupKey {
    #[inline]
    fn eq(&self, other: &GroupKey) -> bool {
        self.hash == other.hash && self.values == other.values
    }
}

impl Eq for GroupKey {}

impl Hash for GroupKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash)
    }
}

impl Serialize for GroupKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(s)
    }
}

impl<'de> Deserialize<'de> for GroupKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SmallRow::deserialize(d).map(GroupKey::new)
    }
}

/// A window aggregate's input row: its grouping key, and the arguments of
/// its calls (the key a field, so the exchange and the window operator
/// read it in place).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupRow {
    /// The grouping columns' values.
    pub key: GroupKey,
    /// Each call's argument (a `COUNT(*)` has none).
    pub args: SmallRow,
}

/// One call's accumulator as two integers: a count in `n` (of rows, or of
/// values not `NULL`), with a wrapping integer sum, a double sum's bits, or
/// the least or greatest value so far in `v`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Word {
    /// The sum or the extreme value.
    pub v: i64,
    /// Values seen.
    pub n: i64,
}

/// The accumulators of one key and window (or pane).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Accs {
    /// One [`Word`] per call, in call order (the rest unused).
    Words([Word; WORDS]),
    /// One [`Acc`] per call.
    Values(Vec<Acc>),
}

/// What a call's [`Word`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `COUNT(*)`, `COUNT(x)`.
    Count,
    /// `SUM` of `INT` or `BIGINT`: the sum wrapping in `i64`.
    SumInt,
    /// `SUM` of `DOUBLE`: the sum's bits.
    SumDouble,
    /// `MIN` (`true`) or `MAX` of values of `ty`, an integer or a
    /// timestamp.
    Extreme { min: bool, ty: SqlType },
}

impl Shape {
    /// The shape of `spec`'s word, if it has one.
    fn of(spec: &Spec) -> Option<Shape> {
        let integer = matches!(
            spec.arg_ty,
            SqlType::Int | SqlType::BigInt | SqlType::Timestamp(_) | SqlType::TimestampLtz(_)
        );
        Some(match (spec.kind, spec.distinct, spec.arg_ty) {
            (AggKind::Count, false, _) => Shape::Count,
            (AggKind::Sum, _, SqlType::Int | SqlType::BigInt) => Shape::SumInt,
            (AggKind::Sum, _, SqlType::Double) => Shape::SumDouble,
            (AggKind::Min | AggKind::Max, _, ty) if integer => Shape::Extreme {
                min: spec.kind == AggKind::Min,
                ty,
            },
            _ => return None,
        })
    }

    /// The extreme's value as an integer, if `v` is one of type `ty`.
    #[inline]
    fn integer(ty: SqlType, v: &Value) -> Option<i64> {
        match (ty, v) {
            (SqlType::Int, Value::Int(x)) => Some(i64::from(*x)),
            (SqlType::BigInt, Value::BigInt(x))
            | (SqlType::Timestamp(_), Value::Timestamp(x))
            | (SqlType::TimestampLtz(_), Value::TimestampLtz(x)) => Some(*x),
            _ => None,
        }
    }

    /// Adds `v` (`None`: `COUNT(*)`'s row) to `w`; `false` (and `w` as it
    /// was) for a value the word does not take.
    #[inline]
    fn add(self, w: &mut Word, v: Option<&Value>) -> bool {
        match (self, v) {
            (_, Some(Value::Null)) => {}
            (Shape::Count, _) => w.n += 1,
            (Shape::SumInt, Some(Value::Int(x))) => {
                w.v = w.v.wrapping_add(i64::from(*x));
                w.n += 1;
            }
            (Shape::SumInt, Some(Value::BigInt(x))) => {
                w.v = w.v.wrapping_add(*x);
                w.n += 1;
            }
            (Shape::SumDouble, Some(Value::Double(x))) => {
                w.v = (f64::from_bits(w.v as u64) + x).to_bits() as i64;
                w.n += 1;
            }
            (Shape::Extreme { min, ty }, Some(v)) => {
                let Some(x) = Shape::integer(ty, v) else {
                    return false;
                };
                if w.n == 0 || (min && x < w.v) || (!min && x > w.v) {
                    w.v = x;
                }
                w.n += 1;
            }
            _ => return false,
        }
        true
    }

    /// `a` and `b` merged.
    #[inline]
    fn merge(self, a: Word, b: Word) -> Word {
        let v = match self {
            Shape::Count => 0,
            Shape::SumInt => a.v.wrapping_add(b.v),
            Shape::SumDouble => {
                (f64::from_bits(a.v as u64) + f64::from_bits(b.v as u64)).to_bits() as i64
            }
            Shape::Extreme { .. } if b.n == 0 => a.v,
            Shape::Extreme { .. } if a.n == 0 => b.v,
            Shape::Extreme { min: true, .. } => a.v.min(b.v),
            Shape::Extreme { min: false, .. } => a.v.max(b.v),
        };
        Word { v, n: a.n + b.n }
    }

    /// Takes `part` back out of `w`, if exactly possible.
    #[inline]
    fn retract(self, w: &mut Word, part: Word) -> bool {
        match self {
            Shape::Count => w.n -= part.n,
            Shape::SumInt => {
                w.v = w.v.wrapping_sub(part.v);
                w.n -= part.n;
            }
            Shape::SumDouble | Shape::Extreme { .. } => return false,
        }
        true
    }

    /// `w` as the [`Acc`] of the same values.
    fn acc(self, w: Word) -> Acc {
        match self {
            Shape::Count => Acc::Count(w.n),
            Shape::SumInt => Acc::Sum {
                int: i128::from(w.v),
                float: 0.0,
                n: w.n,
            },
            Shape::SumDouble => Acc::Sum {
                int: 0,
                float: f64::from_bits(w.v as u64),
                n: w.n,
            },
            Shape::Extreme { .. } if w.n == 0 => Acc::Extreme(Value::Null),
            Shape::Extreme { ty, .. } => Acc::Extreme(match ty {
                // Only `INT` values made it.
                SqlType::Int => Value::Int(w.v as i32),
                SqlType::Timestamp(_) => Value::Timestamp(w.v),
                SqlType::TimestampLtz(_) => Value::TimestampLtz(w.v),
                _ => Value::BigInt(w.v),
            }),
        }
    }

    /// The result of `w` for a call of result type `ty`.
    #[inline]
    fn result(self, w: Word, ty: SqlType) -> Value {
        match self {
            Shape::Count => Value::BigInt(w.n),
            _ if w.n == 0 => Value::Null,
            Shape::SumInt if ty == SqlType::Int => Value::Int(w.v as i32),
            Shape::SumInt => Value::BigInt(w.v),
            Shape::SumDouble => Value::Double(f64::from_bits(w.v as u64)),
            Shape::Extreme { .. } => match self.acc(w) {
                Acc::Extreme(v) => v,
                _ => Value::Null,
            },
        }
    }
}

/// A window aggregate's results, one per call.
#[derive(Clone, Debug)]
pub enum Results {
    /// The first `len` values.
    Inline([Value; WORDS], usize),
    /// Each call's.
    Heap(Row),
}

impl Results {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Results::Inline(_, n) => *n,
            Results::Heap(r) => r.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Result `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&Value> {
        match self {
            Results::Inline(values, n) => values[..*n].get(i),
            Results::Heap(r) => r.get(i),
        }
    }

    /// Result `i` (`NULL` past the last), moved out when `take` (then
    /// `NULL` is left in its place).
    #[inline]
    pub fn value(&mut self, i: usize, take: bool) -> Value {
        let v = match self {
            Results::Inline(values, n) => values[..*n].get_mut(i),
            Results::Heap(r) => r.get_mut(i),
        };
        match (v, take) {
            (Some(v), true) => std::mem::replace(v, Value::Null),
            (Some(v), false) => v.clone(),
            (None, _) => Value::Null,
        }
    }

    /// Moves the results to the end of `row`.
    #[inline]
    pub fn append_to(self, row: &mut Row) {
        match self {
            Results::Inline(values, n) => row.extend(values.into_iter().take(n)),
            Results::Heap(mut r) => row.append(&mut r),
        }
    }
}

/// The calls of a window aggregate, over [`GroupRow`]s.
#[derive(Clone, Debug)]
pub struct WindowAggregate {
    specs: Arc<[Spec]>,
    /// Each call's word, when all have one.
    shapes: Option<Arc<[Shape]>>,
}

impl WindowAggregate {
    /// The aggregate of `calls`, whose arguments are the argument columns
    /// `args` (`None`: `COUNT(*)`), of types `arg_types`.
    pub fn new(calls: &[AggCall], args: &[Option<usize>], arg_types: &[SqlType]) -> Self {
        let specs = specs(calls, args, arg_types);
        let shapes: Option<Arc<[Shape]>> = (specs.len() <= WORDS)
            .then(|| {
                specs
                    .iter()
                    .map(Shape::of)
                    .collect::<Option<Arc<[Shape]>>>()
            })
            .flatten();
        WindowAggregate { specs, shapes }
    }

    /// `words` as [`Acc`]s.
    fn values(&self, shapes: &[Shape], words: &[Word; WORDS]) -> Vec<Acc> {
        shapes.iter().zip(words).map(|(s, w)| s.acc(*w)).collect()
    }

    /// `acc` as [`Acc`]s.
    fn accs_values(&self, acc: Accs) -> Vec<Acc> {
        match (acc, &self.shapes) {
            (Accs::Values(v), _) => v,
            (Accs::Words(w), Some(shapes)) => self.values(shapes, &w),
            (Accs::Words(_), None) => self.create_values(),
        }
    }

    fn create_values(&self) -> Vec<Acc> {
        self.specs.iter().map(|s| create(s, false)).collect()
    }

    /// Adds the calls from `from` on of `args` to `accs`.
    fn add_values(&self, from: usize, args: &[Value], accs: &mut [Acc]) {
        for (spec, a) in self.specs.iter().zip(accs.iter_mut()).skip(from) {
            add(spec, a, spec.arg.and_then(|i| args.get(i)));
        }
    }
}

impl AggregateFunction<GroupRow, Accs, Results> for WindowAggregate {
    fn create_accumulator(&self) -> Accs {
        match self.shapes {
            Some(_) => Accs::Words([Word::default(); WORDS]),
            None => Accs::Values(self.create_values()),
        }
    }

    #[inline]
    fn add(&self, row: &GroupRow, acc: &mut Accs) {
        let args = row.args.as_slice();
        if let (Accs::Words(words), Some(shapes)) = (&mut *acc, &self.shapes) {
            for (i, ((shape, spec), w)) in shapes
                .iter()
                .zip(self.specs.iter())
                .zip(words.iter_mut())
                .enumerate()
            {
                if !shape.add(w, spec.arg.and_then(|a| args.get(a))) {
                    // A value the word does not take: the calls so far
                    // have the row, the rest take it as `Acc`s.
                    let mut values = self.values(shapes, words);
                    self.add_values(i, args, &mut values);
                    *acc = Accs::Values(values);
                    return;
                }
            }
            return;
        }
        if let Accs::Values(values) = acc {
            self.add_values(0, args, values);
        }
    }

    fn get_result(&self, acc: &Accs) -> Results {
        match (acc, &self.shapes) {
            (Accs::Words(words), Some(shapes)) => {
                let mut out: [Value; WORDS] = std::array::from_fn(|_| Value::Null);
                for (((o, shape), spec), w) in out
                    .iter_mut()
                    .zip(shapes.iter())
                    .zip(self.specs.iter())
                    .zip(words)
                {
                    *o = shape.result(*w, spec.ty);
                }
                Results::Inline(out, shapes.len())
            }
            (Accs::Values(values), _) => Results::Heap(
                self.specs
                    .iter()
                    .zip(values)
                    .map(|(s, a)| result(s, a))
                    .collect(),
            ),
            (Accs::Words(_), None) => Results::Heap(
                self.create_values()
                    .iter()
                    .zip(self.specs.iter())
                    .map(|(a, s)| result(s, a))
                    .collect(),
            ),
        }
    }

    fn merge(&self, a: Accs, b: Accs) -> Accs {
        match (a, b, &self.shapes) {
            (Accs::Words(mut x), Accs::Words(y), Some(shapes)) => {
                for ((shape, x), y) in shapes.iter().zip(x.iter_mut()).zip(y) {
                    *x = shape.merge(*x, y);
                }
                Accs::Words(x)
            }
            (a, b, _) => Accs::Values(
                self.specs
                    .iter()
                    .zip(self.accs_values(a).into_iter().zip(self.accs_values(b)))
                    .map(|(s, (x, y))| merge(s, x, y))
                    .collect(),
            ),
        }
    }

    /// Exact for counts and sums of integers (wrapping), refused otherwise.
    fn retract(&self, acc: &mut Accs, part: &Accs) -> bool {
        let (Accs::Words(words), Accs::Words(p), Some(shapes)) = (acc, part, &self.shapes) else {
            return false;
        };
        if shapes
            .iter()
            .any(|s| !matches!(s, Shape::Count | Shape::SumInt))
        {
            return false;
        }
        for ((shape, w), p) in shapes.iter().zip(words.iter_mut()).zip(p) {
            shape.retract(w, *p);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::aggregate::RowAggregate;
    use crate::sql::expr::Expr;
    use crate::text::mix64;

    fn call(kind: AggKind, arg_ty: Option<SqlType>) -> AggCall {
        AggCall {
            kind,
            arg: arg_ty.map(|_| Expr::Column(0)),
            distinct: false,
            ty: match kind {
                AggKind::Count => SqlType::BigInt,
                _ => arg_ty.unwrap_or(SqlType::BigInt),
            },
            arg_ty: arg_ty.unwrap_or(SqlType::BigInt),
            text: String::new(),
        }
    }

    /// A value of `ty` (`NULL` one time in six), near the ends of the
    /// integers' ranges one time in four, so sums overflow; one time in
    /// `odd` (0: never) a value of another type.
    fn value(ty: SqlType, h: u64, odd: u64) -> Value {
        if h.is_multiple_of(6) {
            return Value::Null;
        }
        let big = (h >> 3).is_multiple_of(4);
        let x = (h >> 8) as i64 % 1000 - 300;
        if odd > 0 && (h >> 20).is_multiple_of(odd) {
            return match ty {
                SqlType::Int => Value::BigInt(x),
                SqlType::Double => Value::Int(x as i32),
                _ => Value::Decimal(i128::from(x) * 10, 1),
            };
        }
        match ty {
            SqlType::Int if big => Value::Int(i32::MAX - x.abs() as i32),
            SqlType::Int => Value::Int(x as i32),
            SqlType::BigInt if big => Value::BigInt(i64::MIN + x.abs()),
            SqlType::BigInt => Value::BigInt(x),
            SqlType::Double => Value::Double(x as f64 / 4.0),
            SqlType::Timestamp(_) => Value::Timestamp(x * 1000),
            SqlType::TimestampLtz(_) => Value::TimestampLtz(x * 7),
            _ => Value::Str(format!("s{}", x.rem_euclid(37)).into()),
        }
    }

    /// `calls` over seeded rows in three panes, by [`WindowAggregate`] and
    /// by [`RowAggregate`] (the `Acc`s of every call): the same results,
    /// for each pane and for the panes merged; a retraction, when taken,
    /// gives the merge of the other panes.
    fn check(calls: &[AggCall], odd: u64, words: bool) {
        let args: Vec<Option<usize>> = calls
            .iter()
            .scan(0, |n, c| {
                Some(c.arg.as_ref().map(|_| {
                    *n += 1;
                    *n - 1
                }))
            })
            .collect();
        let types: Vec<SqlType> = calls.iter().map(|c| c.arg_ty).collect();
        let window = WindowAggregate::new(calls, &args, &types);
        let oracle = RowAggregate::new(calls, &args, &types);
        assert_eq!(window.shapes.is_some(), words);
        let results = |r: Results| {
            let mut row = Vec::new();
            r.append_to(&mut row);
            row
        };
        for seed in 0..20u64 {
            let mut panes = Vec::new();
            for p in 0..3u64 {
                let (mut acc, mut want) =
                    (window.create_accumulator(), oracle.create_accumulator());
                for i in 0..(seed * 7 + p * 13) % 40 {
                    let h = mix64((seed << 32) ^ (p << 16) ^ i);
                    let row: Row = calls
                        .iter()
                        .filter(|c| c.arg.is_some())
                        .enumerate()
                        .map(|(j, c)| value(c.arg_ty, mix64(h ^ j as u64), odd))
                        .collect();
                    window.add(
                        &GroupRow {
                            key: GroupKey::new(SmallRow::Many(Vec::new())),
                            args: SmallRow::from_vec(row.clone()),
                        },
                        &mut acc,
                    );
                    oracle.add(&row, &mut want);
                }
                assert_eq!(results(window.get_result(&acc)), oracle.get_result(&want));
                panes.push((acc, want));
            }
            let (mut acc, mut want) = (window.create_accumulator(), oracle.create_accumulator());
            for (a, w) in &panes {
                acc = window.merge(acc, a.clone());
                want = oracle.merge(want, w.clone());
            }
            assert_eq!(results(window.get_result(&acc)), oracle.get_result(&want));
            let (first, _) = &panes[0];
            if window.retract(&mut acc, first) {
                let rest = panes[1..]
                    .iter()
                    .fold(oracle.create_accumulator(), |w, (_, x)| {
                        oracle.merge(w, x.clone())
                    });
                assert_eq!(results(window.get_result(&acc)), oracle.get_result(&rest));
            }
        }
    }

    #[test]
    fn words_give_the_results_of_the_general_accumulators() {
        use AggKind::*;
        let (int, big, double) = (SqlType::Int, SqlType::BigInt, SqlType::Double);
        for odd in [0, 5] {
            check(
                &[
                    call(Count, None),
                    call(Count, Some(int)),
                    call(Sum, Some(int)),
                ],
                odd,
                true,
            );
            check(
                &[
                    call(Sum, Some(big)),
                    call(Min, Some(int)),
                    call(Max, Some(big)),
                ],
                odd,
                true,
            );
            check(
                &[
                    call(Sum, Some(double)),
                    call(Min, Some(SqlType::Timestamp(3))),
                    call(Max, Some(SqlType::TimestampLtz(3))),
                ],
                odd,
                true,
            );
            // Strings, and more calls than words: `Acc`s throughout.
            check(
                &[
                    call(Min, Some(SqlType::String)),
                    call(Max, Some(SqlType::String)),
                ],
                odd,
                false,
            );
            check(
                &[
                    call(Count, None),
                    call(Sum, Some(int)),
                    call(Min, Some(int)),
                    call(Max, Some(int)),
                ],
                odd,
                false,
            );
        }
    }

    #[test]
    fn keys_hash_and_serialize_by_their_values() {
        let a = GroupKey::new(SmallRow::from_vec(vec![Value::Str("k1".into())]));
        let b = GroupKey::new(SmallRow::Many(vec![Value::Str("k1".into())]));
        assert_eq!(a, b);
        let bytes = postcard::to_allocvec(&a).expect("serializes");
        assert_eq!(
            bytes,
            postcard::to_allocvec(&vec![Value::Str("k1".into())]).expect("serializes")
        );
        let back: GroupKey = postcard::from_bytes(&bytes).expect("deserializes");
        assert_eq!(back, a);
        assert_eq!(
            floe_actors::keygroup::stable_hash(&back),
            floe_actors::keygroup::stable_hash(&a)
        );
        let two = GroupKey::new(SmallRow::from_vec(vec![Value::Int(1), Value::Null]));
        assert_ne!(two, a);
        assert_eq!(two.as_slice(), &[Value::Int(1), Value::Null]);
    }
}
