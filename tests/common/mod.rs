//! Shared by `window_oracle.rs` and `window_api.rs`: a seeded generator of
//! `key,timestamp,value` records and an independent, single-threaded model of
//! Flink's keyed event-time windows (the oracle). Nothing here calls floe's
//! window code.
//!
//! The model, per record in input order:
//! 1. assign the record's windows (tumbling / sliding by formula; sessions:
//!    `[ts, ts + gap)` merged transitively with every intersecting — or
//!    touching — window of the key);
//! 2. a window whose cleanup time `end - 1 + allowed_lateness` is `<=` the
//!    current watermark is late and skipped; otherwise the record joins it, and
//!    if `end - 1 <=` watermark the window fires at once (a re-firing);
//! 3. a record all of whose windows were skipped, with
//!    `ts + allowed_lateness <= watermark`, is late;
//! 4. the watermark becomes `max(previous, max_ts_seen - ooo - 1)`; advancing
//!    from `prev` to `W` fires every window with `prev < end - 1 <= W` (its
//!    firing timer) and then purges every window with cleanup time `<= W`.
//!
//! At the end of input the watermark advances to `i64::MAX`.
//!
//! Window bounds are computed in `i128`: a record is windowable only when
//! every window it belongs to starts after `i64::MIN` and ends at or before
//! `i64::MAX` ([`windowable`]); sums are exact (`i128`), and a window whose
//! sum leaves `i64` is an overflow ([`overflowing`]).

#![allow(dead_code)]

use std::collections::BTreeMap;

mod rng;
#[allow(unused_imports)]
pub use rng::SplitMix;

/// One input record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rec {
    pub key: String,
    pub ts: i64,
    pub value: i64,
}

impl Rec {
    pub fn new(key: &str, ts: i64, value: i64) -> Self {
        Rec {
            key: key.to_string(),
            ts,
            value,
        }
    }

    /// The CLI input line `key,ts,value`.
    pub fn line(&self) -> String {
        format!("{},{},{}", self.key, self.ts, self.value)
    }

    /// As the tuple the library tests stream.
    pub fn tuple(&self) -> (String, i64, i64) {
        (self.key.clone(), self.ts, self.value)
    }
}

/// A window assigner, as the oracle understands it.
#[derive(Clone, Copy, Debug)]
pub enum Spec {
    Tumbling {
        size: i64,
        offset: i64,
    },
    Sliding {
        size: i64,
        slide: i64,
        offset: i64,
    },
    Session {
        gap: i64,
    },
    /// Session windows whose gap is computed from the record's value.
    DynamicSession {
        gap: fn(i64) -> i64,
    },
}

impl Spec {
    pub fn tumbling(size: i64) -> Spec {
        Spec::Tumbling { size, offset: 0 }
    }

    pub fn sliding(size: i64, slide: i64) -> Spec {
        Spec::Sliding {
            size,
            slide,
            offset: 0,
        }
    }

    pub fn session(gap: i64) -> Spec {
        Spec::Session { gap }
    }

    /// The largest window length (used to place "very late" records).
    pub fn span(&self) -> i64 {
        match *self {
            Spec::Tumbling { size, .. } | Spec::Sliding { size, .. } => size,
            Spec::Session { gap } => gap,
            Spec::DynamicSession { .. } => 100,
        }
    }
}

/// `[start, end)` windows of a record, exactly (bounds may lie outside
/// `i64`), in Flink's order (latest start first); for sessions the record's
/// own window.
pub fn assign_exact(spec: &Spec, ts: i64, value: i64) -> Vec<(i128, i128)> {
    let t = i128::from(ts);
    match *spec {
        Spec::Tumbling { size, offset } => {
            let (size, offset) = (i128::from(size), i128::from(offset));
            let start = t - (t - offset).rem_euclid(size);
            vec![(start, start + size)]
        }
        Spec::Sliding {
            size,
            slide,
            offset,
        } => {
            let (size, slide, offset) = (i128::from(size), i128::from(slide), i128::from(offset));
            let mut out = Vec::new();
            let mut s = t - (t - offset).rem_euclid(slide);
            while s > t - size {
                out.push((s, s + size));
                s -= slide;
            }
            out
        }
        Spec::Session { gap } => vec![(t, t + i128::from(gap))],
        Spec::DynamicSession { gap } => vec![(t, t + i128::from(gap(value)))],
    }
}

/// True when every window of the record lies inside the timestamp range:
/// starts after `i64::MIN`, ends at or before `i64::MAX`.
pub fn windowable(spec: &Spec, ts: i64, value: i64) -> bool {
    assign_exact(spec, ts, value)
        .iter()
        .all(|&(s, e)| s > i128::from(i64::MIN) && e <= i128::from(i64::MAX))
}

/// `[start, end)` windows of a windowable record (see [`assign_exact`]).
pub fn assign(spec: &Spec, ts: i64, value: i64) -> Vec<(i64, i64)> {
    assign_exact(spec, ts, value)
        .into_iter()
        .map(|(s, e)| {
            let fit =
                |v: i128| i64::try_from(v).expect("the model only windows windowable records");
            (fit(s), fit(e))
        })
        .collect()
}

/// One firing: the key, the window and the indices of the records in it.
#[derive(Clone, Debug)]
pub struct Firing {
    pub key: String,
    pub start: i64,
    pub end: i64,
    pub members: Vec<usize>,
}

/// What the oracle predicts for an input.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub firings: Vec<Firing>,
    /// Indices of the late records.
    pub late: Vec<usize>,
}

#[derive(Debug)]
struct Win {
    start: i64,
    end: i64,
    members: Vec<usize>,
}

struct Sim<'a> {
    recs: &'a [Rec],
    spec: Spec,
    lateness: i64,
    wm: i64,
    state: BTreeMap<String, Vec<Win>>,
    out: Outcome,
}

impl Sim<'_> {
    fn cleanup(&self, end: i64) -> i64 {
        (end - 1).saturating_add(self.lateness)
    }

    fn fire(&mut self, key: &str, w: &Win) {
        self.out.firings.push(Firing {
            key: key.to_string(),
            start: w.start,
            end: w.end,
            members: w.members.clone(),
        });
    }

    /// Adds record `i`; returns false when all its windows were skipped.
    fn element(&mut self, i: usize) -> bool {
        let r = &self.recs[i];
        let wm = self.wm;
        let merging = matches!(
            self.spec,
            Spec::Session { .. } | Spec::DynamicSession { .. }
        );
        let windows = assign(&self.spec, r.ts, r.value);
        let mut list = self.state.remove(&r.key).unwrap_or_default();
        let mut live = false;
        let mut to_fire = Vec::new();
        if merging {
            let (mut start, mut end) = windows[0];
            let mut absorbed = Vec::new();
            // Transitive closure: keep absorbing until nothing intersects.
            while let Some(j) = list
                .iter()
                .position(|w: &Win| w.start <= end && w.end >= start)
            {
                let w = list.swap_remove(j);
                start = start.min(w.start);
                end = end.max(w.end);
                absorbed.push(w);
            }
            if absorbed.is_empty() && self.cleanup(end) <= wm {
                // Late, not merged with anything: dropped.
            } else {
                live = true;
                let mut members: Vec<usize> =
                    absorbed.into_iter().flat_map(|w| w.members).collect();
                members.push(i);
                let w = Win {
                    start,
                    end,
                    members,
                };
                if end - 1 <= wm {
                    to_fire.push(list.len());
                }
                list.push(w);
            }
        } else {
            for (start, end) in windows {
                if self.cleanup(end) <= wm {
                    continue;
                }
                live = true;
                let j = match list.iter().position(|w| w.start == start && w.end == end) {
                    Some(j) => j,
                    None => {
                        list.push(Win {
                            start,
                            end,
                            members: Vec::new(),
                        });
                        list.len() - 1
                    }
                };
                list[j].members.push(i);
                if end - 1 <= wm {
                    to_fire.push(j);
                }
            }
        }
        for j in to_fire {
            let key = self.recs[i].key.clone();
            self.fire(&key, &list[j]);
        }
        if !list.is_empty() {
            self.state.insert(self.recs[i].key.clone(), list);
        }
        live
    }

    fn advance(&mut self, to: i64) {
        let prev = self.wm;
        if to <= prev {
            return;
        }
        self.wm = to;
        let mut state = std::mem::take(&mut self.state);
        for (key, list) in state.iter_mut() {
            for w in list.iter() {
                if prev < w.end - 1 && w.end - 1 <= to {
                    self.fire(key, w);
                }
            }
            list.retain(|w| self.cleanup(w.end) > to);
        }
        state.retain(|_, l| !l.is_empty());
        self.state = state;
    }
}

/// Runs the oracle over `recs` with per-record bounded-out-of-orderness
/// watermarks.
pub fn simulate(recs: &[Rec], spec: &Spec, ooo: i64, lateness: i64) -> Outcome {
    let mut sim = Sim {
        recs,
        spec: *spec,
        lateness,
        wm: i64::MIN,
        state: BTreeMap::new(),
        out: Outcome::default(),
    };
    let mut max_ts: Option<i64> = None;
    for (i, r) in recs.iter().enumerate() {
        let live = sim.element(i);
        if !live && r.ts.saturating_add(lateness) <= sim.wm {
            sim.out.late.push(i);
        }
        let m = max_ts.map_or(r.ts, |m| m.max(r.ts));
        max_ts = Some(m);
        sim.advance(m.saturating_sub(ooo).saturating_sub(1));
    }
    sim.advance(i64::MAX);
    sim.out
}

/// The aggregations of `floe run window --agg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agg {
    Sum,
    Count,
    Min,
    Max,
}

impl Agg {
    pub fn name(self) -> &'static str {
        match self {
            Agg::Sum => "sum",
            Agg::Count => "count",
            Agg::Min => "min",
            Agg::Max => "max",
        }
    }

    /// The exact aggregate of `values` (non-empty); only a sum can leave
    /// the `i64` range.
    pub fn exact(self, values: impl Iterator<Item = i64>) -> i128 {
        match self {
            Agg::Sum => values.map(i128::from).sum(),
            Agg::Count => values.count() as i128,
            Agg::Min => values.min().expect("a firing has records").into(),
            Agg::Max => values.max().expect("a firing has records").into(),
        }
    }

    /// The aggregate of `values` (non-empty), or `None` when it overflows
    /// `i64` (the CLI fails the job then).
    pub fn of(self, values: impl Iterator<Item = i64>) -> Option<i64> {
        i64::try_from(self.exact(values)).ok()
    }
}

/// The sorted `key,start,end,aggregate` lines the CLI should write, leaving
/// out the firings whose aggregate overflows (see [`overflowing`]).
pub fn expected_lines(recs: &[Rec], outcome: &Outcome, agg: Agg) -> Vec<String> {
    let mut v: Vec<String> = outcome
        .firings
        .iter()
        .filter_map(|f| {
            let a = agg.of(f.members.iter().map(|&i| recs[i].value))?;
            Some(format!("{},{},{},{}", f.key, f.start, f.end, a))
        })
        .collect();
    v.sort();
    v
}

/// The (key, start, end) of every firing whose aggregate overflows `i64`.
pub fn overflowing(
    recs: &[Rec],
    outcome: &Outcome,
    agg: Agg,
) -> std::collections::BTreeSet<(String, i64, i64)> {
    outcome
        .firings
        .iter()
        .filter(|f| agg.of(f.members.iter().map(|&i| recs[i].value)).is_none())
        .map(|f| (f.key.clone(), f.start, f.end))
        .collect()
}

/// The sorted late lines.
pub fn expected_late(recs: &[Rec], outcome: &Outcome) -> Vec<String> {
    let mut v: Vec<String> = outcome.late.iter().map(|&i| recs[i].line()).collect();
    v.sort();
    v
}

/// Shape of a generated input.
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Number of records.
    pub n: usize,
    /// Keys are `k0 .. k{keys-1}`.
    pub keys: u64,
    /// The first "current time".
    pub start: i64,
    /// Current time advances by `0..=max_step` per record.
    pub max_step: u64,
    /// A record's timestamp is `current - 0..=jitter`.
    pub jitter: u64,
    /// Per mille of records placed far in the past ...
    pub very_late_permille: u64,
    /// ... by `min + 0..span` ms.
    pub very_late_by: (u64, u64),
    /// Per mille of steps that jump ahead by `pause` (session boundaries).
    pub pause_permille: u64,
    pub pause: u64,
    /// Values are in `-values..=values` ...
    pub values: i64,
    /// ... except this per mille, anywhere in i64 shifted right by
    /// `huge_shift` (unshifted, sums of two may overflow).
    pub huge_permille: u64,
    pub huge_shift: u32,
}

impl GenParams {
    /// In-order timestamps (non-decreasing), no late records.
    pub fn in_order(n: usize, keys: u64, start: i64, max_step: u64) -> Self {
        GenParams {
            n,
            keys,
            start,
            max_step,
            jitter: 0,
            very_late_permille: 0,
            very_late_by: (0, 1),
            pause_permille: 0,
            pause: 0,
            values: 1000,
            huge_permille: 0,
            huge_shift: 0,
        }
    }

    /// Out-of-order by up to `jitter`, with some very late records.
    pub fn jittered(n: usize, keys: u64, start: i64, max_step: u64, jitter: u64) -> Self {
        GenParams {
            jitter,
            very_late_permille: 20,
            very_late_by: (jitter + 50, 400),
            ..Self::in_order(n, keys, start, max_step)
        }
    }

    pub fn with_pauses(mut self, permille: u64, pause: u64) -> Self {
        self.pause_permille = permille;
        self.pause = pause;
        self
    }

    pub fn with_huge_values(mut self, permille: u64) -> Self {
        self.huge_permille = permille;
        self.huge_shift = 0;
        self
    }

    /// Values of up to `2^(63 - shift)` in magnitude, this per mille.
    pub fn with_large_values(mut self, permille: u64, shift: u32) -> Self {
        self.huge_permille = permille;
        self.huge_shift = shift;
        self
    }

    pub fn with_very_late(mut self, permille: u64, min: u64, span: u64) -> Self {
        self.very_late_permille = permille;
        self.very_late_by = (min, span.max(1));
        self
    }
}

/// Seeded records following `p`.
pub fn generate(seed: u64, p: &GenParams) -> Vec<Rec> {
    let mut rng = SplitMix(seed);
    let mut now = p.start;
    (0..p.n)
        .map(|_| {
            now += rng.below(p.max_step + 1) as i64;
            if p.pause_permille > 0 && rng.chance(p.pause_permille) {
                now += p.pause as i64;
            }
            let mut ts = now - rng.below(p.jitter + 1) as i64;
            if p.very_late_permille > 0 && rng.chance(p.very_late_permille) {
                ts = now - (p.very_late_by.0 + rng.below(p.very_late_by.1)) as i64;
            }
            let value = if p.huge_permille > 0 && rng.chance(p.huge_permille) {
                (rng.next() as i64) >> p.huge_shift
            } else {
                rng.range(-p.values, p.values)
            };
            Rec {
                key: format!("k{}", rng.below(p.keys)),
                ts,
                value,
            }
        })
        .collect()
}

/// Sorted multiset difference, for readable failure messages: up to `max`
/// items only in `want` and only in `got`.
pub fn diff<T: Ord + Clone + std::fmt::Debug>(
    want: &[T],
    got: &[T],
    max: usize,
) -> (Vec<T>, Vec<T>) {
    let (mut i, mut j) = (0, 0);
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    while i < want.len() || j < got.len() {
        match (want.get(i), got.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                missing.push(a.clone());
                i += 1;
            }
            (Some(_), Some(b)) => {
                extra.push(b.clone());
                j += 1;
            }
            (Some(a), None) => {
                missing.push(a.clone());
                i += 1;
            }
            (None, Some(b)) => {
                extra.push(b.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    missing.truncate(max);
    extra.truncate(max);
    (missing, extra)
}
