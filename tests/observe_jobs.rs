//! Two jobs in one process publish under distinct `job` labels.
//!
//! This file installs the process's one global `metrics` recorder
//! (Prometheus), runs two jobs with the same operator names at the same time
//! and reads the rendered text: each job's series carry its own name, and
//! each job's records and state entries equal what that job was given (the
//! counts and a `HashSet` of its keys), so no series is shared. Unnamed jobs
//! get distinct default names.

use floe::StreamExecutionEnvironment;
use std::collections::HashSet;

fn key(i: u64, keys: u64) -> u64 {
    (i * 2_654_435_761) % keys
}

/// A keyed count over `n` records with `keys` distinct keys.
fn job(name: Option<&str>, n: u64, keys: u64) -> (StreamExecutionEnvironment, u64) {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    if let Some(name) = name {
        env.set_job_name(name);
    }
    let collected = env
        .from_generator(n, move |i| (key(i, keys), 1u64))
        .name("Gen")
        .key_by_field(|t: &(u64, u64)| &t.0)
        .sum(|t: &mut (u64, u64)| &mut t.1)
        .name("Count")
        .collect();
    drop(collected);
    let distinct: HashSet<u64> = (0..n).map(|i| key(i, keys)).collect();
    (env, distinct.len() as u64)
}

/// The sum of a metric's series whose labels contain all of `labels`.
fn metric_sum(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    let mut sum = None;
    for line in text
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        if labels.iter().all(|l| series.contains(l)) {
            *sum.get_or_insert(0.0) += value.parse::<f64>().expect("a number");
        }
    }
    sum
}

#[test]
fn two_jobs_in_one_process_have_their_own_series() {
    let prometheus = floe::http::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let (env_a, keys_a) = job(Some("alpha"), 30_000, 53);
    let (env_b, keys_b) = job(Some("beta"), 50_000, 71);
    let a = env_a.execute_async().expect("alpha starts");
    let b = env_b.execute_async().expect("beta starts");
    futures::executor::block_on(a.wait()).expect("alpha finishes");
    futures::executor::block_on(b.wait()).expect("beta finishes");
    assert_eq!(a.status_snapshot().job, "alpha");
    assert_eq!(a.job_name(), "alpha");
    assert_eq!(b.status_snapshot().job, "beta");
    // Publish the final values (the end of each job did too).
    a.status_reporter().publish_metrics();
    b.status_reporter().publish_metrics();
    let text = prometheus.render();
    for (job, n, keys) in [("alpha", 30_000u64, keys_a), ("beta", 50_000, keys_b)] {
        let label = format!("job=\"{job}\"");
        assert_eq!(
            metric_sum(
                &text,
                "floe_records_in_total",
                &[&label, "operator=\"Count\""]
            ),
            Some(n as f64),
            "{text}"
        );
        assert_eq!(
            metric_sum(&text, "floe_state_entries", &[&label, "operator=\"Count\""]),
            Some(keys as f64),
            "{text}"
        );
        let status = if job == "alpha" { &a } else { &b }.status_snapshot();
        let count = status.operator("Count").expect("the count operator");
        assert_eq!(count.state_entries, Some(keys));
        assert_eq!(count.records_in, n);
    }
    // Every series of these metrics names its job.
    for line in text
        .lines()
        .filter(|l| l.starts_with("floe_records_in_total{"))
    {
        assert!(line.contains("job=\""), "{line}");
    }

    // Unnamed jobs get distinct names.
    let (env_c, _) = job(None, 100, 3);
    let (env_d, _) = job(None, 100, 3);
    let c = env_c.execute_async().expect("starts");
    let d = env_d.execute_async().expect("starts");
    futures::executor::block_on(c.wait()).expect("finishes");
    futures::executor::block_on(d.wait()).expect("finishes");
    let (jc, jd) = (c.status_snapshot().job, d.status_snapshot().job);
    assert_ne!(jc, jd);
    assert!(
        jc.starts_with("job-") && jd.starts_with("job-"),
        "{jc} {jd}"
    );
}
