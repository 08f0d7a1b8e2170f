//! Window assigners: which windows a record with a given timestamp belongs to.
//!
//! The rules are Flink's: a tumbling window of size `s` and offset `o` starts at
//! `t - ((t - o) mod s)` (with a non-negative remainder, so negative timestamps
//! work); a sliding window of size `s` and slide `l` assigns every window whose
//! start is `start(t, l) - k*l > t - s`; a session window starts as `[t, t+gap)`
//! and merges with every window it intersects (touching windows merge too).
//!
//! Every window a record is assigned lies inside the timestamp range: it
//! starts after `i64::MIN` and ends at or before `i64::MAX`. A timestamp
//! whose window would not (`i64::MIN` itself, Flink's "no timestamp" marker,
//! or one within a window length of either end) is refused by
//! [`WindowAssigner::try_assign`] rather than given a clamped window that does
//! not contain it. Window bounds are computed in `i128` for that check.
//!
//! A sliding assigner puts each record in up to `ceil(size / slide)` windows;
//! [`WindowAssigner::check_windows_per_record`] refuses more than a limit
//! ([`DEFAULT_MAX_WINDOWS_PER_RECORD`] unless raised) when the job is built.

use floe_actors::element::Timestamp;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A time window `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First timestamp in the window.
    pub start: Timestamp,
    /// First timestamp after the window.
    pub end: Timestamp,
}

impl TimeWindow {
    /// The window `[start, end)`.
    pub fn new(start: Timestamp, end: Timestamp) -> Self {
        TimeWindow { start, end }
    }

    /// The largest timestamp in the window: `end - 1`.
    #[inline]
    pub fn max_timestamp(&self) -> Timestamp {
        self.end - 1
    }

    /// True when the windows overlap or touch (Flink's `intersects`).
    #[inline]
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    #[inline]
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// The start of the window of `size` (shifted by `offset`) containing `ts`,
/// clamped to `i64::MIN` when it lies before it.
#[inline]
pub fn window_start(ts: Timestamp, offset: i64, size: i64) -> Timestamp {
    start_exact(ts, offset, size).max(i128::from(i64::MIN)) as i64
}

/// The start of the window of `size` (shifted by `offset`) containing `ts`,
/// exactly: it may lie before `i64::MIN`.
#[inline]
fn start_exact(ts: Timestamp, offset: i64, size: i64) -> i128 {
    // The remainder in i64 when `ts - offset` fits (the common case: no
    // 128-bit division per record).
    let rem = match ts.checked_sub(offset) {
        Some(d) => i128::from(d.rem_euclid(size)),
        None => (i128::from(ts) - i128::from(offset)).rem_euclid(i128::from(size)),
    };
    i128::from(ts) - rem
}

/// True when `[start, end)` lies inside the timestamp range (see the module
/// documentation).
#[inline]
fn in_range(start: i128, end: i128) -> bool {
    start > i128::from(i64::MIN) && end <= i128::from(i64::MAX)
}

/// How many windows a record may belong to unless the limit is raised
/// (`WindowedStream::max_windows_per_record`, `--max-windows-per-record`).
pub const DEFAULT_MAX_WINDOWS_PER_RECORD: u64 = 1000;

/// Session gap of a record, for dynamic session windows.
pub type GapFn<T> = Arc<dyn Fn(&T) -> i64 + Send + Sync>;

/// How records are grouped into windows.
pub enum WindowAssigner<T> {
    /// Fixed-size, non-overlapping windows.
    Tumbling {
        /// Window length (ms).
        size: i64,
        /// Shift of window starts (ms), `|offset| < size`.
        offset: i64,
    },
    /// Fixed-size windows starting every `slide`.
    Sliding {
        /// Window length (ms).
        size: i64,
        /// Distance between window starts (ms).
        slide: i64,
        /// Shift of window starts (ms), `|offset| < slide`.
        offset: i64,
    },
    /// Windows that grow by `step` from a common start up to `size`, then
    /// start again (Flink SQL's `CUMULATE`): `[s, s + step)`, `[s, s + 2 *
    /// step)`, .., `[s, s + size)` for every `s` that is a multiple of
    /// `size`. A record belongs to each of them that ends after it.
    Cumulative {
        /// How much each window is longer than the previous one (ms).
        step: i64,
        /// The longest window (ms), a multiple of `step`.
        size: i64,
    },
    /// Windows of activity separated by a gap of inactivity.
    Session {
        /// The gap: fixed, or computed from each record.
        gap: SessionGap<T>,
    },
    /// One window per key holding every record; it fires only through a
    /// custom trigger (count windows use it).
    Global,
    /// Tumbling or sliding windows over processing time: a record belongs to
    /// the windows of the time it is processed at, not of its timestamp.
    ProcessingTime(Box<WindowAssigner<T>>),
}

/// The gap of session windows.
pub enum SessionGap<T> {
    /// The same gap for every record.
    Static(i64),
    /// A gap per record.
    Dynamic(GapFn<T>),
}

impl<T> Clone for WindowAssigner<T> {
    fn clone(&self) -> Self {
        match self {
            WindowAssigner::Tumbling { size, offset } => WindowAssigner::Tumbling {
                size: *size,
                offset: *offset,
            },
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => WindowAssigner::Sliding {
                size: *size,
                slide: *slide,
                offset: *offset,
            },
            WindowAssigner::Cumulative { step, size } => WindowAssigner::Cumulative {
                step: *step,
                size: *size,
            },
            WindowAssigner::Session { gap } => WindowAssigner::Session {
                gap: match gap {
                    SessionGap::Static(g) => SessionGap::Static(*g),
                    SessionGap::Dynamic(f) => SessionGap::Dynamic(f.clone()),
                },
            },
            WindowAssigner::Global => WindowAssigner::Global,
            WindowAssigner::ProcessingTime(inner) => {
                WindowAssigner::ProcessingTime(Box::new((**inner).clone()))
            }
        }
    }
}

impl<T> WindowAssigner<T> {
    /// Tumbling event-time windows of `size` ms.
    pub fn tumbling(size: i64) -> Self {
        WindowAssigner::Tumbling { size, offset: 0 }
    }

    /// Sliding event-time windows of `size` ms every `slide` ms.
    pub fn sliding(size: i64, slide: i64) -> Self {
        WindowAssigner::Sliding {
            size,
            slide,
            offset: 0,
        }
    }

    /// Cumulative event-time windows growing by `step` ms up to `size` ms
    /// (see [`WindowAssigner::Cumulative`]).
    pub fn cumulative(step: i64, size: i64) -> Self {
        WindowAssigner::Cumulative { step, size }
    }

    /// Session windows with a fixed gap of `gap` ms.
    pub fn session(gap: i64) -> Self {
        WindowAssigner::Session {
            gap: SessionGap::Static(gap),
        }
    }

    /// Session windows whose gap comes from each record.
    pub fn dynamic_session(gap: impl Fn(&T) -> i64 + Send + Sync + 'static) -> Self {
        WindowAssigner::Session {
            gap: SessionGap::Dynamic(Arc::new(gap)),
        }
    }

    /// Tumbling processing-time windows of `size` ms.
    pub fn tumbling_processing_time(size: i64) -> Self {
        WindowAssigner::ProcessingTime(Box::new(Self::tumbling(size)))
    }

    /// Sliding processing-time windows of `size` ms every `slide` ms.
    pub fn sliding_processing_time(size: i64, slide: i64) -> Self {
        WindowAssigner::ProcessingTime(Box::new(Self::sliding(size, slide)))
    }

    /// True for processing-time windows.
    pub fn is_processing_time(&self) -> bool {
        matches!(self, WindowAssigner::ProcessingTime(_))
    }

    /// The single global window (fires only through a custom trigger).
    pub fn global() -> Self {
        WindowAssigner::Global
    }

    /// Shifts window starts by `offset` ms (tumbling and sliding).
    pub fn with_offset(self, offset: i64) -> Self {
        match self {
            WindowAssigner::Tumbling { size, .. } => WindowAssigner::Tumbling { size, offset },
            WindowAssigner::Sliding { size, slide, .. } => WindowAssigner::Sliding {
                size,
                slide,
                offset,
            },
            WindowAssigner::ProcessingTime(inner) => {
                WindowAssigner::ProcessingTime(Box::new(inner.with_offset(offset)))
            }
            other => other,
        }
    }

    /// Checks the parameters as Flink does.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::Config(m.to_string()));
        match self {
            WindowAssigner::Tumbling { size, offset } => {
                if *size <= 0 || offset.unsigned_abs() >= size.unsigned_abs() {
                    return bad("tumbling windows need size > 0 and |offset| < size");
                }
            }
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => {
                if *size <= 0 || *slide <= 0 || offset.unsigned_abs() >= slide.unsigned_abs() {
                    return bad("sliding windows need size > 0, slide > 0 and |offset| < slide");
                }
            }
            WindowAssigner::Cumulative { step, size } => {
                if *step <= 0 || *size <= 0 || *size % *step != 0 {
                    return bad(
                        "cumulative windows need step > 0 and a size that is a multiple of it",
                    );
                }
            }
            WindowAssigner::Session { gap } => {
                if let SessionGap::Static(g) = gap
                    && *g <= 0
                {
                    return bad("session windows need a gap > 0");
                }
            }
            WindowAssigner::Global => {}
            WindowAssigner::ProcessingTime(inner) => {
                if !matches!(
                    **inner,
                    WindowAssigner::Tumbling { .. } | WindowAssigner::Sliding { .. }
                ) {
                    return bad("processing-time windows are tumbling or sliding");
                }
                inner.validate()?;
            }
        }
        Ok(())
    }

    /// The most windows one record can belong to: `ceil(size / slide)` for
    /// sliding windows, 1 for the others. For valid parameters only.
    pub fn windows_per_record(&self) -> u64 {
        match self {
            WindowAssigner::Sliding { size, slide, .. } if *size > 0 && *slide > 0 => {
                size.unsigned_abs().div_ceil(slide.unsigned_abs())
            }
            WindowAssigner::Cumulative { step, size } if *step > 0 && *size > 0 => {
                size.unsigned_abs().div_ceil(step.unsigned_abs())
            }
            WindowAssigner::ProcessingTime(inner) => inner.windows_per_record(),
            _ => 1,
        }
    }

    /// Refuses an assigner that puts a record in more than `limit` windows
    /// (`sliding(i64::MAX, 1)` would make every record take forever).
    pub fn check_windows_per_record(&self, limit: u64) -> crate::Result<()> {
        let windows = self.windows_per_record();
        if windows <= limit {
            return Ok(());
        }
        let (size, slide) = match self {
            WindowAssigner::Sliding { size, slide, .. } => (*size, *slide),
            WindowAssigner::Cumulative { step, size } => (*size, *step),
            WindowAssigner::ProcessingTime(inner) => match **inner {
                WindowAssigner::Sliding { size, slide, .. } => (size, slide),
                _ => (0, 0),
            },
            _ => (0, 0),
        };
        Err(crate::Error::TooManyWindows {
            size,
            slide,
            windows,
            limit,
        })
    }

    /// True for session windows, whose windows merge.
    pub fn is_merging(&self) -> bool {
        matches!(self, WindowAssigner::Session { .. })
    }

    /// Calls `f` with every window `value` (at `ts`) belongs to; a timestamp
    /// whose windows do not fit in the timestamp range gets none (see
    /// [`try_assign`](Self::try_assign)).
    #[inline]
    pub fn assign(&self, value: &T, ts: Timestamp, f: impl FnMut(TimeWindow)) {
        let _ = self.try_assign(value, ts, f);
    }

    /// Calls `f` with every window `value` (at `ts`) belongs to, latest start
    /// first; fails with [`Error::TimestampOutOfRange`](crate::Error::TimestampOutOfRange),
    /// calling `f` for none, when one of them would start at or before
    /// `i64::MIN` or end after `i64::MAX`. The window operators use this one.
    #[inline]
    pub fn try_assign(
        &self,
        value: &T,
        ts: Timestamp,
        mut f: impl FnMut(TimeWindow),
    ) -> crate::Result<()> {
        let out_of_range = || crate::Error::TimestampOutOfRange { timestamp: ts };
        match self {
            WindowAssigner::Tumbling { size, offset } => {
                let start = start_exact(ts, *offset, *size);
                let end = start + i128::from(*size);
                if !in_range(start, end) {
                    return Err(out_of_range());
                }
                f(TimeWindow::new(start as i64, end as i64));
            }
            WindowAssigner::Sliding {
                size,
                slide,
                offset,
            } => {
                // The latest window starts at `last`, `rem` before `ts`; the
                // windows are `last - k*slide` for k in 0..=k_max, those that
                // still contain `ts` (none when `ts` falls in a gap).
                let last = start_exact(ts, *offset, *slide);
                let rem = (i128::from(ts) - last) as i64;
                let reach = *size - 1 - rem;
                if reach < 0 {
                    return Ok(());
                }
                let k_max = reach / *slide;
                let earliest = last - i128::from(k_max) * i128::from(*slide);
                if !in_range(earliest, last + i128::from(*size)) {
                    return Err(out_of_range());
                }
                let last = last as i64;
                for k in 0..=k_max {
                    let start = last - k * *slide;
                    f(TimeWindow::new(start, start + *size));
                }
            }
            WindowAssigner::Cumulative { step, size } => {
                // The windows start where `ts`'s window of `size` does and
                // end at the first step boundary after `ts`, or later.
                let start = start_exact(ts, 0, *size);
                let end = start + i128::from(*size);
                if !in_range(start, end) {
                    return Err(out_of_range());
                }
                let first = (i128::from(ts) - start) / i128::from(*step) + 1;
                let (start, steps) = (start as i64, *size / *step);
                for k in first as i64..=steps {
                    f(TimeWindow::new(start, start + k * *step));
                }
            }
            WindowAssigner::Session { gap } => {
                let g = match gap {
                    SessionGap::Static(g) => *g,
                    SessionGap::Dynamic(gf) => gf(value),
                };
                if g > 0 && !in_range(i128::from(ts), i128::from(ts) + i128::from(g)) {
                    return Err(out_of_range());
                }
                // A gap <= 0 is the operator's to report.
                f(TimeWindow::new(ts, ts.saturating_add(g)));
            }
            WindowAssigner::Global => f(TimeWindow::new(i64::MIN, i64::MAX)),
            WindowAssigner::ProcessingTime(inner) => inner.try_assign(value, ts, f)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn windows(a: &WindowAssigner<()>, ts: i64) -> Vec<TimeWindow> {
        let mut v = Vec::new();
        a.assign(&(), ts, |w| v.push(w));
        v
    }

    #[test]
    fn tumbling_examples() {
        let a = WindowAssigner::<()>::tumbling(1000);
        assert_eq!(windows(&a, 0), vec![TimeWindow::new(0, 1000)]);
        assert_eq!(windows(&a, 999), vec![TimeWindow::new(0, 1000)]);
        assert_eq!(windows(&a, -1), vec![TimeWindow::new(-1000, 0)]);
        let o = WindowAssigner::<()>::tumbling(1000).with_offset(100);
        assert_eq!(windows(&o, 50), vec![TimeWindow::new(-900, 100)]);
    }

    #[test]
    fn cumulative_examples() {
        let a = WindowAssigner::<()>::cumulative(2, 6);
        assert_eq!(
            windows(&a, 3),
            vec![TimeWindow::new(0, 4), TimeWindow::new(0, 6)]
        );
        assert_eq!(
            windows(&a, 6),
            (1..=3)
                .map(|k| TimeWindow::new(6, 6 + 2 * k))
                .collect::<Vec<_>>()
        );
        assert_eq!(windows(&a, -1), vec![TimeWindow::new(-6, 0)]);
        assert_eq!(a.windows_per_record(), 3);
    }

    #[test]
    fn sliding_examples() {
        let a = WindowAssigner::<()>::sliding(10, 4);
        assert_eq!(
            windows(&a, 9),
            vec![
                TimeWindow::new(8, 18),
                TimeWindow::new(4, 14),
                TimeWindow::new(0, 10)
            ]
        );
    }

    proptest! {
        #[test]
        fn tumbling_contains_exactly_once(ts in -1_000_000i64..1_000_000, size in 1i64..5000, off in 0i64..5000) {
            let offset = off % size;
            let a = WindowAssigner::<()>::tumbling(size).with_offset(offset);
            let w = windows(&a, ts);
            prop_assert_eq!(w.len(), 1);
            prop_assert!(w[0].start <= ts && ts < w[0].end);
            prop_assert_eq!((w[0].start - offset).rem_euclid(size), 0);
        }

        #[test]
        fn sliding_matches_brute_force(ts in -100_000i64..100_000, size in 1i64..300, slide in 1i64..300, off in 0i64..300) {
            let offset = off % slide;
            let a = WindowAssigner::<()>::sliding(size, slide).with_offset(offset);
            let mut got = windows(&a, ts);
            got.sort();
            // Every window start s ≡ offset (mod slide) with s <= ts < s + size.
            let mut want = Vec::new();
            let mut s = window_start(ts - size + 1, offset, slide);
            if s < ts - size + 1 { s += slide; }
            while s <= ts {
                want.push(TimeWindow::new(s, s + size));
                s += slide;
            }
            prop_assert_eq!(got, want);
        }
    }
}
