//! `KeyedStream::sum` is exact, as the window sums are: an integer sum
//! that leaves its field's type fails the job with one error naming the
//! key (it used to wrap silently in release builds and panic in debug
//! ones). Sums that reach the type's bounds without leaving them are
//! emitted exactly, checked against a per-key fold in `i128` done here.

use floe::StreamExecutionEnvironment;
use std::collections::HashMap;

/// Each key's running sums in input order, in `i128`.
fn running_sums(data: &[(String, i128)]) -> Vec<(String, i128)> {
    let mut sums: HashMap<&str, i128> = HashMap::new();
    data.iter()
        .map(|(k, v)| {
            let s = sums.entry(k).or_insert(0);
            *s += v;
            (k.clone(), *s)
        })
        .collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Sums that end at `i64::MAX` and `i64::MIN` (one source subtask, so each
/// key's records arrive in input order): every running sum is the oracle's.
#[test]
fn i64_sums_reach_the_bounds_exactly() {
    let data: Vec<(String, i64)> = vec![
        ("a".into(), i64::MAX - 10),
        ("b".into(), i64::MIN + 3),
        ("a".into(), 4),
        ("c".into(), -7),
        ("b".into(), -3),
        ("a".into(), 6),
        ("c".into(), i64::MAX),
        ("a".into(), -1),
    ];
    let oracle = running_sums(
        &data
            .iter()
            .map(|(k, v)| (k.clone(), *v as i128))
            .collect::<Vec<_>>(),
    );
    assert!(oracle.iter().all(|(_, s)| i64::try_from(*s).is_ok()));
    for parallelism in [1, 2] {
        let env = StreamExecutionEnvironment::new();
        env.set_parallelism(parallelism);
        let out = env
            .from_collection(data.clone())
            .key_by(|t: &(String, i64)| t.0.clone())
            .sum(|t: &mut (String, i64)| &mut t.1)
            .collect();
        env.execute().expect("no sum leaves i64");
        let got: Vec<(String, i128)> = out
            .take()
            .into_iter()
            .map(|(k, v)| (k, v as i128))
            .collect();
        assert_eq!(sorted(got), sorted(oracle.clone()), "P={parallelism}");
    }
}

/// The error of a job whose sums overflow, as a string.
fn overflow_error<N>(data: Vec<(String, N)>, at_end: bool) -> String
where
    N: floe::operators::keyed::Numeric
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    let keyed = env
        .from_collection(data)
        .key_by(|t: &(String, N)| t.0.clone());
    let sums = if at_end {
        keyed.sum_at_end_of_input(|t: &mut (String, N)| &mut t.1)
    } else {
        keyed.sum(|t: &mut (String, N)| &mut t.1)
    };
    let _out = sums.collect();
    match env.execute() {
        Ok(_) => panic!("a sum that leaves its type fails the job"),
        Err(e) => e.to_string(),
    }
}

/// One key's sum leaves `i64` (the oracle says which: the only key whose
/// `i128` sum leaves the range); the job fails naming it, rolling or at the
/// end of input.
#[test]
fn an_i64_sum_that_overflows_fails_naming_its_key() {
    let data: Vec<(String, i64)> = vec![
        ("fine".into(), i64::MAX - 1),
        ("over".into(), i64::MAX - 1),
        ("fine".into(), 1),
        ("over".into(), 1),
        ("over".into(), 1),
    ];
    let over: Vec<String> = {
        let mut sums: HashMap<&str, i128> = HashMap::new();
        for (k, v) in &data {
            *sums.entry(k).or_insert(0) += *v as i128;
        }
        sums.into_iter()
            .filter(|(_, s)| i64::try_from(*s).is_err())
            .map(|(k, _)| k.to_string())
            .collect()
    };
    assert_eq!(over, ["over"]);
    for at_end in [false, true] {
        let e = overflow_error(data.clone(), at_end);
        assert!(
            e.contains(&format!("key \"{}\"", over[0])) && e.contains("overflows i64"),
            "at_end={at_end}: {e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// `u64` as the word count sums it: `u64::MAX` is reached, one more fails.
#[test]
fn a_u64_sum_that_overflows_fails_naming_its_key() {
    let data: Vec<(String, u64)> =
        vec![("w".into(), u64::MAX - 2), ("w".into(), 2), ("w".into(), 1)];
    assert!(
        (u64::MAX - 2).checked_add(2).is_some() && u64::MAX.checked_add(1).is_none(),
        "the third record is the first that does not fit"
    );
    for at_end in [false, true] {
        let e = overflow_error(data.clone(), at_end);
        assert!(
            e.contains("key \"w\"") && e.contains("overflows u64"),
            "at_end={at_end}: {e}"
        );
    }
}
