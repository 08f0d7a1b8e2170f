//! A parallel generator source: record `i` of `0..count` is `f(i)`.
//!
//! Each subtask owns a contiguous slice of the indices, so the set of records
//! does not depend on the parallelism. An optional rate limit (records per
//! second for the whole source) makes subtasks wait instead of spinning.

use super::{SourceContext, SourceFunction, SourcePoll};
use crate::Result;
use floe_actors::element::Record;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generates `f(i)` for the indices of one subtask's slice.
pub struct GeneratorSource<T> {
    f: Arc<dyn Fn(u64) -> T + Send + Sync>,
    next: u64,
    end: u64,
    /// Further `[next, end)` ranges to read after this one (a restore at
    /// lower parallelism hands a subtask several).
    more: Vec<(u64, u64)>,
    rate: Option<RateLimit>,
}

struct RateLimit {
    per_second: f64,
    started: Option<Instant>,
    emitted: u64,
}

impl<T> GeneratorSource<T> {
    /// The slice of `0..count` that `ctx` owns, optionally limited to
    /// `rate` records per second over all subtasks.
    pub fn new(
        f: Arc<dyn Fn(u64) -> T + Send + Sync>,
        count: u64,
        rate: Option<f64>,
        ctx: &SourceContext,
    ) -> Self {
        let (next, end) = ctx.split(count);
        GeneratorSource {
            f,
            next,
            end,
            more: Vec::new(),
            rate: rate.map(|r| RateLimit {
                per_second: r / ctx.parallelism as f64,
                started: None,
                emitted: 0,
            }),
        }
    }
}

impl<T: Send + 'static> SourceFunction<T> for GeneratorSource<T> {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        let mut n = (self.end - self.next).min(max as u64);
        if let Some(rate) = &mut self.rate {
            let started = *rate.started.get_or_insert_with(Instant::now);
            let allowed = (started.elapsed().as_secs_f64() * rate.per_second) as u64;
            let budget = allowed.saturating_sub(rate.emitted);
            if budget == 0 && n > 0 {
                let wait = Duration::from_secs_f64(1.0 / rate.per_second.max(1e-9));
                return Ok(SourcePoll::Wait(
                    wait.clamp(Duration::from_micros(200), Duration::from_millis(100)),
                ));
            }
            n = n.min(budget);
            rate.emitted += n;
        }
        let f = &self.f;
        out.extend((self.next..self.next + n).map(|i| Record::new(f(i))));
        self.next += n;
        if self.next >= self.end
            && let Some((next, end)) = self.more.pop()
        {
            (self.next, self.end) = (next, end);
        }
        Ok(if self.next >= self.end {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        // One entry per unread range, so a restore can deal them out.
        let mut entries = vec![super::encode_entry(&(self.next, self.end))?];
        for r in self.more.iter().rev() {
            entries.push(super::encode_entry(r)?);
        }
        Ok(entries)
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        let mut ranges = entries
            .iter()
            .map(|e| super::decode_entry::<(u64, u64)>(e))
            .collect::<Result<Vec<_>>>()?;
        ranges.retain(|(next, end)| next < end);
        ranges.reverse();
        (self.next, self.end) = ranges.pop().unwrap_or((0, 0));
        self.more = ranges;
        Ok(())
    }
}
