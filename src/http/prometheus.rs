//! floe's Prometheus recorder: a `metrics` facade recorder that keeps each
//! series (a metric name and its labels) in a map it can delete from, and
//! renders them in the Prometheus text format.
//!
//! Why not an off-the-shelf exporter: a series must leave memory when its
//! job is forgotten ([`PrometheusHandle::remove_series`]), or a service that
//! starts a job per request grows for ever; the exporter the crate used
//! before offered no deletion. Recording is never on a data path (floe
//! publishes its counters periodically and per checkpoint), so one lock
//! per kind of metric is enough.
//!
//! The text is what a Prometheus scraper expects: per family a `# HELP`
//! line (for described metrics), a `# TYPE` line, then one sample line per
//! series, label values escaped; histograms are real histograms (cumulative
//! `_bucket{le=…}` series ending in `+Inf`, `_sum`, `_count`). Families
//! are sorted by name and series by labels, so two renders of the same
//! values are the same text.

use super::HttpError;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Histogram buckets of a histogram whose name matches no configured
/// suffix: the Prometheus client libraries' defaults (seconds).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Builds a [`PrometheusRecorder`]: which buckets each histogram gets.
#[derive(Clone, Debug, Default)]
pub struct PrometheusBuilder {
    /// (name suffix, bucket upper bounds), the first match wins.
    buckets: Vec<(String, Vec<f64>)>,
}

impl PrometheusBuilder {
    /// A builder without bucket settings: every histogram gets
    /// [`DEFAULT_BUCKETS`] (see [`super::prometheus_builder`] for floe's).
    pub fn new() -> Self {
        PrometheusBuilder::default()
    }

    /// Histograms whose name ends in `suffix` get these bucket upper bounds
    /// (sorted here; `+Inf` is implied). An empty list is an error.
    pub fn set_buckets_for_suffix(
        mut self,
        suffix: impl Into<String>,
        buckets: &[f64],
    ) -> Result<Self, HttpError> {
        let suffix = suffix.into();
        let mut b: Vec<f64> = buckets.iter().copied().filter(|v| !v.is_nan()).collect();
        if b.is_empty() {
            return Err(HttpError::Recorder(format!(
                "no histogram buckets for the suffix {suffix:?}"
            )));
        }
        b.sort_by(f64::total_cmp);
        b.dedup();
        self.buckets.push((suffix, b));
        Ok(self)
    }

    /// The recorder (not installed): for `metrics::with_local_recorder`, or
    /// to install with `metrics::set_global_recorder`.
    pub fn build_recorder(self) -> PrometheusRecorder {
        PrometheusRecorder {
            inner: Arc::new(Registry {
                buckets: self
                    .buckets
                    .into_iter()
                    .map(|(s, b)| (s, Arc::from(b)))
                    .collect(),
                default_buckets: Arc::from(&DEFAULT_BUCKETS[..]),
                descriptions: RwLock::default(),
                counters: RwLock::default(),
                gauges: RwLock::default(),
                histograms: RwLock::default(),
            }),
        }
    }

    /// Installs the recorder as the process's global `metrics` recorder and
    /// returns the handle that renders it. A process has one global
    /// recorder: a second installation fails.
    pub fn install_recorder(self) -> Result<PrometheusHandle, HttpError> {
        let recorder = self.build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|e| HttpError::Recorder(e.to_string()))?;
        Ok(handle)
    }
}

/// The recorder: give it to the `metrics` facade; read it through its
/// [`handle`](Self::handle).
pub struct PrometheusRecorder {
    inner: Arc<Registry>,
}

impl PrometheusRecorder {
    /// A handle on this recorder's series (render, count, delete).
    pub fn handle(&self) -> PrometheusHandle {
        PrometheusHandle {
            inner: self.inner.clone(),
        }
    }
}

/// Reads and prunes a [`PrometheusRecorder`]'s series. Cloning is cheap:
/// every clone sees the same recorder.
#[derive(Clone)]
pub struct PrometheusHandle {
    inner: Arc<Registry>,
}

/// The series and descriptions a recorder holds.
struct Registry {
    buckets: Vec<(String, Arc<[f64]>)>,
    default_buckets: Arc<[f64]>,
    /// HELP text by metric name: the first description given wins.
    descriptions: RwLock<HashMap<String, SharedString>>,
    counters: RwLock<HashMap<Key, Arc<AtomicU64>>>,
    /// Values as `f64` bits (the facade's `AtomicU64` gauge).
    gauges: RwLock<HashMap<Key, Arc<AtomicU64>>>,
    histograms: RwLock<HashMap<Key, Arc<Buckets>>>,
}

/// A histogram's counts. A mutex, not atomics, so that a render sees the
/// buckets, the sum and the count of the same observations (observations
/// are one per checkpoint: never contended).
struct Buckets {
    bounds: Arc<[f64]>,
    counts: Mutex<BucketCounts>,
}

#[derive(Clone, Default)]
struct BucketCounts {
    /// Observations per bucket (not cumulative), one per bound.
    per_bucket: Vec<u64>,
    sum: f64,
    count: u64,
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        self.record_many(value, 1);
    }

    fn record_many(&self, value: f64, n: usize) {
        let n = n as u64;
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        // The first bucket whose bound is ≥ the value; above every bound
        // only `+Inf` (the count) holds it.
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            c.per_bucket[i] += n;
        }
        c.sum += value * n as f64;
        c.count += n;
    }
}

/// Reads a lock whose data stays consistent whatever panicked (each
/// critical section is one insert, lookup or retain).
fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// The handle of `key` in `map`, created by `new` on first use.
fn get_or_insert<V: Clone>(map: &RwLock<HashMap<Key, V>>, key: &Key, new: impl FnOnce() -> V) -> V {
    if let Some(v) = read(map).get(key) {
        return v.clone();
    }
    write(map).entry(key.clone()).or_insert_with(new).clone()
}

impl Registry {
    fn describe(&self, key: KeyName, description: SharedString) {
        if read(&self.descriptions).contains_key(key.as_str()) {
            return;
        }
        write(&self.descriptions)
            .entry(key.as_str().to_string())
            .or_insert(description);
    }

    fn bounds_for(&self, name: &str) -> Arc<[f64]> {
        self.buckets
            .iter()
            .find(|(suffix, _)| name.ends_with(suffix.as_str()))
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| self.default_buckets.clone())
    }
}

impl Recorder for PrometheusRecorder {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.inner.describe(key, description);
    }

    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.inner.describe(key, description);
    }

    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.inner.describe(key, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(get_or_insert(&self.inner.counters, key, Default::default))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(get_or_insert(&self.inner.gauges, key, || {
            Arc::new(AtomicU64::new(0.0f64.to_bits()))
        }))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(get_or_insert(&self.inner.histograms, key, || {
            let bounds = self.inner.bounds_for(key.name());
            let counts = Mutex::new(BucketCounts {
                per_bucket: vec![0; bounds.len()],
                ..BucketCounts::default()
            });
            Arc::new(Buckets { bounds, counts })
        }))
    }
}

fn has_label(key: &Key, label: &str, value: &str) -> bool {
    key.labels().any(|l| l.key() == label && l.value() == value)
}

impl PrometheusHandle {
    /// Deletes every series (counter, gauge, histogram) carrying the label
    /// `label="value"` — `("job", name)` forgets a job — and returns how
    /// many it deleted. A handle the facade gave out before keeps working
    /// but is no longer rendered; the next registration of the same series
    /// starts it anew.
    pub fn remove_series(&self, label: &str, value: &str) -> usize {
        fn prune<V>(map: &RwLock<HashMap<Key, V>>, label: &str, value: &str) -> usize {
            let mut m = write(map);
            let before = m.len();
            m.retain(|k, _| !has_label(k, label, value));
            before - m.len()
        }
        prune(&self.inner.counters, label, value)
            + prune(&self.inner.gauges, label, value)
            + prune(&self.inner.histograms, label, value)
    }

    /// How many series the recorder holds: a series is one metric name with
    /// one set of labels (a histogram counts once, whatever its buckets).
    pub fn series_count(&self) -> usize {
        read(&self.inner.counters).len()
            + read(&self.inner.gauges).len()
            + read(&self.inner.histograms).len()
    }

    /// How many series carry the label `label="value"`.
    pub fn series_with_label(&self, label: &str, value: &str) -> usize {
        let count = |keys: &mut dyn Iterator<Item = &Key>| {
            keys.filter(|k| has_label(k, label, value)).count()
        };
        count(&mut read(&self.inner.counters).keys())
            + count(&mut read(&self.inner.gauges).keys())
            + count(&mut read(&self.inner.histograms).keys())
    }

    /// Every series in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let descriptions = read(&self.inner.descriptions).clone();
        let mut out = String::new();
        let counters = families(&read(&self.inner.counters), |c| c.load(Ordering::Acquire));
        for (name, series) in &counters {
            header(&mut out, name, "counter", &descriptions);
            for (labels, v) in series {
                sample(&mut out, name, "", labels, None, &v.to_string());
            }
            out.push('\n');
        }
        let gauges = families(&read(&self.inner.gauges), |g| {
            f64::from_bits(g.load(Ordering::Acquire))
        });
        for (name, series) in &gauges {
            header(&mut out, name, "gauge", &descriptions);
            for (labels, v) in series {
                sample(&mut out, name, "", labels, None, &float(*v));
            }
            out.push('\n');
        }
        let histograms = families(&read(&self.inner.histograms), |h| {
            let c = h.counts.lock().unwrap_or_else(|p| p.into_inner()).clone();
            (h.bounds.clone(), c)
        });
        for (name, series) in &histograms {
            header(&mut out, name, "histogram", &descriptions);
            for (labels, (bounds, c)) in series {
                let mut cumulative = 0;
                for (i, bound) in bounds.iter().enumerate() {
                    cumulative += c.per_bucket.get(i).copied().unwrap_or(0);
                    let le = float(*bound);
                    sample(
                        &mut out,
                        name,
                        "_bucket",
                        labels,
                        Some(&le),
                        &cumulative.to_string(),
                    );
                }
                let count = c.count.to_string();
                sample(&mut out, name, "_bucket", labels, Some("+Inf"), &count);
                sample(&mut out, name, "_sum", labels, None, &float(c.sum));
                sample(&mut out, name, "_count", labels, None, &count);
            }
            out.push('\n');
        }
        out
    }
}

/// Series grouped by (sanitized) metric name, each as its rendered label
/// pairs (`job="a",operator="b"`) and a value read by `value`; sorted.
fn families<H, V>(
    map: &HashMap<Key, H>,
    value: impl Fn(&H) -> V,
) -> BTreeMap<String, BTreeMap<String, V>> {
    let mut out: BTreeMap<String, BTreeMap<String, V>> = BTreeMap::new();
    for (key, h) in map {
        let mut labels = String::new();
        for (i, l) in key.labels().enumerate() {
            if i > 0 {
                labels.push(',');
            }
            let _ = write!(
                labels,
                "{}=\"{}\"",
                sanitize_name(l.key(), false),
                escape(l.value(), true)
            );
        }
        out.entry(sanitize_name(key.name(), true))
            .or_default()
            .insert(labels, value(h));
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, descriptions: &HashMap<String, SharedString>) {
    if let Some(help) = descriptions.get(name) {
        let _ = writeln!(out, "# HELP {name} {}", escape(help, false));
    }
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line: `name_suffix{labels,le="…"} value`.
fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, le: Option<&str>, v: &str) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        out.push_str(labels);
        if let Some(le) = le {
            if !labels.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "le=\"{le}\"");
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(v);
    out.push('\n');
}

/// A float as the text format writes it (`+Inf`, `-Inf`, `NaN`; `1` for 1.0).
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

/// Escapes a label value (`\`, `"`, newline) or HELP text (`\`, newline).
fn escape(v: &str, quote: bool) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '"' if quote => s.push_str("\\\""),
            c => s.push(c),
        }
    }
    s
}

/// A metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or, without `colon`, a
/// label name (`[a-zA-Z_][a-zA-Z0-9_]*`): other characters become `_`.
fn sanitize_name(name: &str, colon: bool) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            let ok = c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
            if ok || (i > 0 && c.is_ascii_digit()) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> PrometheusRecorder {
        PrometheusBuilder::new()
            .set_buckets_for_suffix("_seconds", &[0.1, 1.0])
            .expect("buckets")
            .build_recorder()
    }

    #[test]
    fn renders_counters_gauges_histograms_with_help_and_escaped_labels() {
        let r = recorder();
        let h = r.handle();
        metrics::with_local_recorder(&r, || {
            metrics::describe_counter!("c_total", "Things.\nCounted \\ here.");
            metrics::counter!("c_total", "job" => "a\"b").increment(3);
            metrics::counter!("c_total", "job" => "a\"b").increment(2);
            metrics::gauge!("g", "job" => "x").set(1.5);
            metrics::gauge!("g.bad-name", "job" => "x").set(f64::INFINITY);
            let d = metrics::histogram!("d_seconds", "job" => "x");
            d.record(0.05);
            d.record(0.5);
            d.record(7.0);
        });
        let text = h.render();
        let expected = "\
# HELP c_total Things.\\nCounted \\\\ here.
# TYPE c_total counter
c_total{job=\"a\\\"b\"} 5

# TYPE g gauge
g{job=\"x\"} 1.5

# TYPE g_bad_name gauge
g_bad_name{job=\"x\"} +Inf

# TYPE d_seconds histogram
d_seconds_bucket{job=\"x\",le=\"0.1\"} 1
d_seconds_bucket{job=\"x\",le=\"1\"} 2
d_seconds_bucket{job=\"x\",le=\"+Inf\"} 3
d_seconds_sum{job=\"x\"} 7.55
d_seconds_count{job=\"x\"} 3

";
        assert_eq!(text, expected);
    }

    #[test]
    fn removing_a_label_deletes_exactly_its_series() {
        let r = recorder();
        let h = r.handle();
        metrics::with_local_recorder(&r, || {
            for job in ["a", "ab", "b"] {
                metrics::counter!("c_total", "job" => job, "op" => "x").increment(1);
                metrics::gauge!("g", "op" => "x", "job" => job).set(1.0);
                metrics::histogram!("d_seconds", "job" => job).record(1.0);
            }
            metrics::counter!("other_total").increment(1);
        });
        assert_eq!(h.series_count(), 10);
        assert_eq!(h.series_with_label("job", "a"), 3);
        assert_eq!(h.remove_series("job", "a"), 3);
        assert_eq!(h.series_with_label("job", "a"), 0);
        assert_eq!(h.series_with_label("job", "ab"), 3);
        assert_eq!(h.series_count(), 7);
        let text = h.render();
        assert!(!text.contains("job=\"a\""), "{text}");
        assert!(text.contains("job=\"ab\""), "{text}");
        // Recorded again, a deleted series starts anew.
        metrics::with_local_recorder(&r, || {
            metrics::counter!("c_total", "job" => "a", "op" => "x").increment(1);
        });
        assert!(h.render().contains("c_total{job=\"a\",op=\"x\"} 1"));
    }

    #[test]
    fn empty_buckets_are_refused() {
        assert!(
            PrometheusBuilder::new()
                .set_buckets_for_suffix("_x", &[])
                .is_err()
        );
    }
}
