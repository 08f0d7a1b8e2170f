//! The pane-based operator against a brute-force model that keeps one sum
//! per (key, window), and against the per-window operator, step by step
//! on random inputs with late records and allowed lateness.

use super::*;
use crate::window::function::{Sum, WindowFunction};
use crate::window::operator::WindowOp;
use floe_actors::element::MAX_WATERMARK;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// (key, value); the event time travels in the record.
type Ev = (u8, i64);
/// (key, start, end, sum), and the record's timestamp.
type Fired = ((u8, i64, i64, i64), Option<Timestamp>);

#[derive(Clone, Debug)]
pub(super) enum Step {
    Record { key: u8, ts: i64, value: i64 },
    Watermark(i64),
}

fn key_of(e: &Ev) -> &u8 {
    &e.0
}

fn value_of(e: &Ev) -> i64 {
    e.1
}

fn spec(assigner: WindowAssigner<Ev>, lateness: i64, panes: bool) -> WindowSpec<Ev> {
    WindowSpec {
        assigner,
        allowed_lateness: lateness,
        late_tag: None,
        panes,
    }
}

fn window_fn() -> WindowFunction<u8, i64, (u8, i64, i64, i64)> {
    Arc::new(|k: &u8, w: &TimeWindow, r: i64, out: &mut Vec<_>| out.push((*k, w.start, w.end, r)))
}

/// Resumes `op` until it holds nothing pending.
pub(super) fn resume_all<IN, OUT, O: Operator<IN, OUT> + ?Sized>(
    op: &mut O,
    out: &mut Output<'_, OUT>,
) {
    while op.has_pending() {
        op.resume(out).expect("resumed");
    }
}

/// The records `f` emits into an output of its own.
pub(super) fn emitted<OUT>(f: impl FnOnce(&mut Output<'_, OUT>)) -> Vec<Record<OUT>> {
    let mut records = Vec::new();
    let mut watermarks = Vec::new();
    f(&mut Output {
        records: &mut records,
        sides: &mut [],
        watermarks: &mut watermarks,
    });
    records
}

/// The records' values and timestamps, sorted.
pub(super) fn sorted<V: Ord>(records: Vec<Record<V>>) -> Vec<(V, Option<Timestamp>)> {
    let mut got: Vec<_> = records
        .into_iter()
        .map(|r| (r.value, r.timestamp))
        .collect();
    got.sort();
    got
}

/// Runs `steps`; the sorted output of each step. With `resume`, pending
/// firings are resumed after each step as the runtime does; without, the
/// next step must emit them first (and the last step resumes).
fn drive<O: Operator<Ev, (u8, i64, i64, i64)>>(
    op: &mut O,
    steps: &[Step],
    resume: bool,
) -> Vec<Vec<Fired>> {
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            sorted(emitted(|out| {
                match *step {
                    Step::Record { key, ts, value } => op
                        .process_batch(vec![Record::with_timestamp((key, value), ts)], out)
                        .expect("record processed"),
                    Step::Watermark(wm) => op.on_watermark(wm, out).expect("watermark"),
                }
                if resume || i + 1 == steps.len() {
                    resume_all(op, out);
                }
            }))
        })
        .collect()
}

/// Runs `steps` as the runtime does with an operator that takes input
/// while pending: after a watermark, one part of the firing at a time,
/// with a record or a watermark let in between parts when the operator
/// admits it, and its pending output emitted first when not. All outputs,
/// sorted, and how many steps came in ahead of pending output.
fn drive_interleaved<O: Operator<Ev, (u8, i64, i64, i64)>>(
    op: &mut O,
    steps: &[Step],
) -> (Vec<Fired>, usize) {
    let mut admitted = 0;
    let records = emitted(|out| drive_steps(op, steps, out, &mut admitted));
    (sorted(records), admitted)
}

/// [`drive_interleaved`]'s steps, into `out`.
fn drive_steps<O: Operator<Ev, (u8, i64, i64, i64)>>(
    op: &mut O,
    steps: &[Step],
    out: &mut Output<'_, (u8, i64, i64, i64)>,
    admitted: &mut usize,
) {
    for step in steps {
        match *step {
            Step::Record { key, ts, value } => {
                let batch = vec![Record::with_timestamp((key, value), ts)];
                if op.has_pending() && op.admits_while_pending(&batch) {
                    *admitted += 1;
                } else {
                    resume_all(op, out);
                }
                op.process_batch(batch, out).expect("record processed");
            }
            Step::Watermark(wm) => {
                if op.has_pending() && op.admits_watermark_while_pending() {
                    *admitted += 1;
                } else {
                    resume_all(op, out);
                }
                op.on_watermark(wm, out).expect("watermark");
            }
        }
        if op.has_pending() {
            op.resume(out).expect("resumed");
        }
    }
    resume_all(op, out);
}

/// The sum model's result.
fn sum(values: &[i64]) -> i64 {
    values.iter().sum()
}

/// All outputs of a run, sorted.
fn all(steps: Vec<Vec<Fired>>) -> Vec<Fired> {
    let mut v: Vec<Fired> = steps.into_iter().flatten().collect();
    v.sort();
    v
}

/// Flink's semantics from the raw values of each (key, window start);
/// windows are enumerated from their definition, not by the assigner, and
/// a window's result is `result` of its values.
pub(super) struct Model<R> {
    size: i64,
    slide: i64,
    offset: i64,
    lateness: i64,
    watermark: i64,
    values: BTreeMap<(u8, i64), Vec<i64>>,
    /// Records no window took any more.
    late: u64,
    result: ResultFn<R>,
}

/// How a model computes a window's result from its values.
type ResultFn<R> = Box<dyn Fn(&[i64]) -> R>;

/// A model's firing: (key, start, end, result), and the record's timestamp.
pub(super) type Firing<R> = ((u8, i64, i64, R), Option<Timestamp>);

impl<R: Ord> Model<R> {
    /// A model of sliding windows (`size`, `slide`, `offset`) allowing
    /// `lateness`.
    pub(super) fn new(
        (size, slide, offset): (i64, i64, i64),
        lateness: i64,
        result: impl Fn(&[i64]) -> R + 'static,
    ) -> Self {
        Model {
            size,
            slide,
            offset,
            lateness,
            watermark: MIN_WATERMARK,
            values: BTreeMap::new(),
            late: 0,
            result: Box::new(result),
        }
    }

    fn starts(&self, ts: i64) -> Vec<i64> {
        let mut s = ts - (ts - self.offset).rem_euclid(self.slide);
        let mut v = Vec::new();
        while s + self.size > ts {
            v.push(s);
            s -= self.slide;
        }
        v
    }

    fn closed(&self, start: i64) -> bool {
        (start + self.size - 1).saturating_add(self.lateness) <= self.watermark
    }

    fn fired(&self, key: u8, start: i64) -> Firing<R> {
        let end = start + self.size;
        let result = (self.result)(&self.values[&(key, start)]);
        ((key, start, end, result), Some(end - 1))
    }

    /// What `step` fires, sorted.
    pub(super) fn step(&mut self, step: &Step) -> Vec<Firing<R>> {
        let mut out = Vec::new();
        match *step {
            Step::Record { key, ts, value } => {
                let live: Vec<i64> = self
                    .starts(ts)
                    .into_iter()
                    .filter(|&s| !self.closed(s))
                    .collect();
                if live.is_empty() && ts.saturating_add(self.lateness) <= self.watermark {
                    self.late += 1;
                }
                for s in live {
                    self.values.entry((key, s)).or_default().push(value);
                    if s + self.size - 1 <= self.watermark {
                        out.push(self.fired(key, s));
                    }
                }
            }
            Step::Watermark(wm) if wm > self.watermark => {
                for &(key, s) in self.values.keys() {
                    let max = s + self.size - 1;
                    if self.watermark < max && max <= wm {
                        out.push(self.fired(key, s));
                    }
                }
                self.watermark = wm;
                let values = std::mem::take(&mut self.values);
                self.values = values
                    .into_iter()
                    .filter(|&((_, s), _)| !self.closed(s))
                    .collect();
            }
            Step::Watermark(_) => {}
        }
        out.sort();
        out
    }
}

/// Records around a wandering clock, some far behind it (late), and
/// watermarks a little behind the clock; a final `MAX_WATERMARK`.
fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (0u8..10, 0u8..4, -40i64..=4, 0i64..=3, 1i64..100, 0i64..=6);
    (-60i64..60, prop::collection::vec(step, 1..150)).prop_map(|(start, raw)| {
        let mut steps = wander(start, raw);
        steps.push(Step::Watermark(MAX_WATERMARK));
        steps
    })
}

/// Draws `(kind, key, behind, advance, value, bound)` into steps around a
/// clock starting at `start`: records (kinds 0–6) mostly near the clock, a
/// few far behind it; watermarks (kinds 7–9) `bound` behind it.
pub(super) fn wander(start: i64, raw: Vec<(u8, u8, i64, i64, i64, i64)>) -> Vec<Step> {
    let mut clock = start;
    raw.into_iter()
        .map(|(kind, key, behind, advance, value, bound)| {
            clock += advance;
            if kind < 7 {
                let ts = if behind < -30 {
                    clock + behind * 2
                } else {
                    clock + behind.max(-3)
                };
                Step::Record { key, ts, value }
            } else {
                Step::Watermark(clock - bound)
            }
        })
        .collect()
}

/// Records from two event-time fronts far apart, interleaved (what two
/// source subtasks reading distant splits of a file send), with the
/// watermark held behind the slower front: hundreds of panes open at
/// once, each record finding its own. Same firings as the model.
#[test]
fn records_from_distant_fronts_find_their_panes() {
    let mut steps = Vec::new();
    for i in 0..600i64 {
        let key = (i % 7) as u8;
        steps.push(Step::Record {
            key,
            ts: i,
            value: 1 + i % 5,
        });
        steps.push(Step::Record {
            key,
            ts: 5_000 + 3 * i,
            value: 2,
        });
        if i % 50 == 49 {
            steps.push(Step::Watermark(i - 20));
        }
    }
    steps.push(Step::Watermark(MAX_WATERMARK));
    for (size, slide) in [(4, 4), (12, 3)] {
        let mut model = Model::new((size, slide, 0), 0, sum);
        let want: Vec<Vec<Fired>> = steps.iter().map(|s| model.step(s)).collect();
        let mut op = SlicedWindowOp::new(
            KeyFn::Borrowed(key_of),
            spec(WindowAssigner::sliding(size, slide), 0, true),
            Arc::new(Sum::of(value_of as fn(&Ev) -> i64)),
            window_fn(),
        )
        .expect("sliding windows slice");
        assert_eq!(
            all(drive(&mut op, &steps, true)),
            all(want),
            "{size}/{slide}"
        );
        assert!(op.panes.first().is_none());
    }
}

/// A watermark that passes many windows fires them a part at a time;
/// records past the watermark and a newer watermark come in between the
/// parts, a late record only once the windows it is late against have
/// fired (it then fires them again). Same firings and late count as the
/// model, and records did come in ahead of the firing.
#[test]
fn records_past_the_watermark_come_in_while_windows_fire() {
    let mut steps = Vec::new();
    for ts in 0..300i64 {
        steps.push(Step::Record {
            key: (ts % 5) as u8,
            ts,
            value: 1 + ts % 7,
        });
    }
    steps.push(Step::Watermark(200));
    for ts in 201..260i64 {
        steps.push(Step::Record {
            key: (ts % 3) as u8,
            ts,
            value: 2,
        });
        if ts == 210 {
            // A watermark while the windows of the last one fire.
            steps.push(Step::Watermark(206));
        }
        if ts % 20 == 0 {
            // Late against windows still to fire, within the allowed
            // lateness: it fires them again, after their first firing.
            steps.push(Step::Record {
                key: 9,
                ts: ts - 100,
                value: 100,
            });
        }
    }
    steps.push(Step::Watermark(MAX_WATERMARK));
    let mut model = Model::new((12, 3, 0), 100, sum);
    let want: Vec<Vec<Fired>> = steps.iter().map(|s| model.step(s)).collect();
    let mut op = SlicedWindowOp::new(
        KeyFn::Borrowed(key_of),
        spec(WindowAssigner::sliding(12, 3), 100, true),
        Arc::new(Sum::of(value_of as fn(&Ev) -> i64)),
        window_fn(),
    )
    .expect("sliding windows slice");
    op.fire_chunk = 1;
    let (got, admitted) = drive_interleaved(&mut op, &steps);
    assert_eq!(got, all(want));
    assert_eq!(op.late.late, model.late);
    assert!(
        admitted >= 10,
        "{admitted} records came in while windows fired"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn panes_match_per_window_sums(
        size in 1i64..=12,
        slide in 1i64..=15,
        off in 0i64..15,
        lateness in prop_oneof![Just(0i64), 1i64..=12, Just(i64::MAX)],
        chunk in prop_oneof![Just(1usize), Just(3), Just(FIRE_CHUNK)],
        steps in steps(),
    ) {
        let offset = off % slide;
        let assigner = || WindowAssigner::sliding(size, slide).with_offset(offset);
        let agg = Arc::new(Sum::of(value_of as fn(&Ev) -> i64));
        let sliced = || {
            let mut op = SlicedWindowOp::new(
                KeyFn::Borrowed(key_of),
                spec(assigner(), lateness, true),
                agg.clone(),
                window_fn(),
            )
            .expect("sliding windows slice");
            op.fire_chunk = chunk;
            op
        };
        let mut per_window = WindowOp::new(
            KeyFn::Borrowed(key_of),
            spec(assigner(), lateness, false),
            agg.clone(),
            window_fn(),
        );
        let mut model = Model::new((size, slide, offset), lateness, sum);
        let want: Vec<Vec<Fired>> = steps.iter().map(|s| model.step(s)).collect();
        let mut op = sliced();
        let got = drive(&mut op, &steps, true);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g, w, "step {} ({:?})", i, &steps[i]);
        }
        prop_assert_eq!(op.late.late, model.late);
        prop_assert!(op.panes.first().is_none(), "panes left after the last watermark");
        prop_assert_eq!(drive(&mut per_window, &steps, true), want.clone());
        // Not resumed: the next record or watermark fires what is left
        // first, so the records see the same windows.
        let mut op = sliced();
        prop_assert_eq!(all(drive(&mut op, &steps, false)), all(want.clone()));
        prop_assert_eq!(op.late.late, model.late);
        // Resumed a part at a time, records past the watermark let in
        // between the parts: the same firings.
        let mut op = sliced();
        prop_assert_eq!(drive_interleaved(&mut op, &steps).0, all(want));
        prop_assert_eq!(op.late.late, model.late);
    }
}
