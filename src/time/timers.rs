//! Timers: one implementation for every operator that keeps them.
//!
//! A timer is a (key, timestamp) pair. A [`TimerQueue`] holds the timers of
//! one time domain: a timer is registered at most once per (key,
//! timestamp) — registering it again changes nothing — and it fires once,
//! after which it is gone. Due timers are taken out in timestamp order;
//! timers with the same timestamp come out in the order they were
//! registered. A [`TimerService`] is an event-time and a processing-time
//! queue plus the processing-time [`Clock`].
//!
//! Keyed process functions keep a `TimerService<K>` (`KeyedProcessOp` in
//! `crate::operators::keyed`); the window operators keep their firing and
//! cleanup timers keyed by (key, window): `WindowOp` a `TimerQueue` of event
//! time, `TriggeredWindowOp` a `TimerService` (its trigger may ask for
//! either domain). The queues only keep the timers; the operator decides
//! when to look for due ones.

use super::clock::Clock;
use floe_actors::element::Timestamp;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

/// Which time a timer follows, as Flink's `TimeDomain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's timestamp.
    EventTime,
    /// Fires when the processing-time clock reaches the timer's timestamp.
    ProcessingTime,
}

/// The timers of one time domain: a queue ordered by time plus an index per
/// key that deduplicates registrations.
///
/// ```
/// use floe::time::timers::TimerQueue;
///
/// let mut timers = TimerQueue::default();
/// assert!(timers.register("a", 20));
/// assert!(timers.register("b", 10));
/// assert!(!timers.register("a", 20)); // already there
/// assert_eq!(timers.pop_due(15), Some((10, "b")));
/// assert_eq!(timers.pop_due(15), None);
/// assert_eq!(timers.pop_due(20), Some((20, "a")));
/// assert!(timers.is_empty());
/// ```
pub struct TimerQueue<K> {
    by_time: BTreeMap<Timestamp, VecDeque<K>>,
    /// Per key its pending timestamps, so that a registration is
    /// deduplicated and a deletion found without a scan. `None` in a queue
    /// whose owner registers each timer once by construction
    /// ([`unindexed`](Self::unindexed)): no hashing per timer.
    by_key: Option<FxHashMap<K, BTreeSet<Timestamp>>>,
    len: usize,
}

impl<K> Default for TimerQueue<K> {
    fn default() -> Self {
        TimerQueue {
            by_time: BTreeMap::new(),
            by_key: Some(FxHashMap::default()),
            len: 0,
        }
    }
}

impl<K> TimerQueue<K> {
    /// A queue without the per-key index, for an owner that never registers
    /// a pending (key, timestamp) again (the window operator: one firing
    /// and one cleanup timer per window, when the window is created).
    /// Registering costs a push, firing a pop; a registration is not
    /// deduplicated, and [`delete`](Self::delete) and
    /// [`contains`](Self::contains) scan the timers of their timestamp.
    ///
    /// ```
    /// use floe::time::timers::TimerQueue;
    ///
    /// let mut timers = TimerQueue::unindexed();
    /// assert!(timers.register("a", 20));
    /// assert!(timers.register("b", 20));
    /// assert!(timers.contains(&"b", 20));
    /// assert!(timers.delete(&"a", 20));
    /// assert_eq!(timers.pop_due(20), Some((20, "b")));
    /// assert!(timers.is_empty());
    /// ```
    pub fn unindexed() -> Self {
        TimerQueue {
            by_time: BTreeMap::new(),
            by_key: None,
            len: 0,
        }
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The earliest pending timestamp.
    pub fn next_timestamp(&self) -> Option<Timestamp> {
        self.by_time.keys().next().copied()
    }

    /// Drops every timer; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.len;
        self.by_time.clear();
        if let Some(index) = &mut self.by_key {
            index.clear();
        }
        self.len = 0;
        n
    }

    /// Every timer, in the order they would fire.
    pub fn iter(&self) -> impl Iterator<Item = (Timestamp, &K)> {
        self.by_time
            .iter()
            .flat_map(|(ts, keys)| keys.iter().map(move |k| (*ts, k)))
    }
}

impl<K: Hash + Eq + Clone> TimerQueue<K> {
    /// Adds the timer for `key` at `ts` unless it is pending; true when it
    /// was added (an [`unindexed`](Self::unindexed) queue always adds).
    pub fn register(&mut self, key: K, ts: Timestamp) -> bool {
        if let Some(index) = &mut self.by_key {
            match index.get_mut(&key) {
                Some(times) => {
                    if !times.insert(ts) {
                        return false;
                    }
                }
                None => {
                    index.insert(key.clone(), BTreeSet::from([ts]));
                }
            }
        }
        self.by_time.entry(ts).or_default().push_back(key);
        self.len += 1;
        true
    }

    /// Removes the timer for `key` at `ts`; true when it was pending.
    pub fn delete(&mut self, key: &K, ts: Timestamp) -> bool {
        if let Some(index) = &mut self.by_key {
            let Some(times) = index.get_mut(key) else {
                return false;
            };
            if !times.remove(&ts) {
                return false;
            }
            if times.is_empty() {
                index.remove(key);
            }
        }
        let Some(keys) = self.by_time.get_mut(&ts) else {
            return false;
        };
        let Some(i) = keys.iter().position(|k| k == key) else {
            return false;
        };
        keys.remove(i);
        if keys.is_empty() {
            self.by_time.remove(&ts);
        }
        self.len -= 1;
        true
    }

    /// Takes out the earliest timer if its timestamp is `<= limit` (among
    /// equal timestamps, the first registered).
    pub fn pop_due(&mut self, limit: Timestamp) -> Option<(Timestamp, K)> {
        let mut entry = self.by_time.first_entry()?;
        let ts = *entry.key();
        if ts > limit {
            return None;
        }
        let key = entry.get_mut().pop_front()?;
        if entry.get().is_empty() {
            entry.remove();
        }
        if let Some(index) = &mut self.by_key
            && let Some(times) = index.get_mut(&key)
        {
            times.remove(&ts);
            if times.is_empty() {
                index.remove(&key);
            }
        }
        self.len -= 1;
        Some((ts, key))
    }

    /// Whether the timer for `key` at `ts` is pending.
    pub fn contains(&self, key: &K, ts: Timestamp) -> bool {
        match &self.by_key {
            Some(index) => index.get(key).is_some_and(|t| t.contains(&ts)),
            None => self.by_time.get(&ts).is_some_and(|keys| keys.contains(key)),
        }
    }
}

/// Event-time and processing-time timers per key, and the processing-time
/// clock.
///
/// # Examples
/// ```
/// use floe::time::{ManualClock, TimeDomain, TimerService};
/// use std::sync::Arc;
///
/// let clock = ManualClock::new(0);
/// let mut timers = TimerService::new(Arc::new(clock.clone()));
/// timers.register(TimeDomain::EventTime, &"a", 20);
/// timers.register(TimeDomain::EventTime, &"b", 10);
/// timers.register(TimeDomain::EventTime, &"a", 20); // already there
/// assert_eq!(timers.pop_due(TimeDomain::EventTime, 15), Some((10, "b")));
/// assert_eq!(timers.pop_due(TimeDomain::EventTime, 15), None);
/// assert_eq!(timers.pop_due(TimeDomain::EventTime, 20), Some((20, "a")));
/// assert_eq!(timers.len(TimeDomain::EventTime), 0);
/// ```
pub struct TimerService<K> {
    event: TimerQueue<K>,
    processing: TimerQueue<K>,
    clock: Arc<dyn Clock>,
}

impl<K> TimerService<K> {
    /// No timers; processing time read from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        TimerService {
            event: TimerQueue::default(),
            processing: TimerQueue::default(),
            clock,
        }
    }

    /// The current processing time.
    pub fn current_processing_time(&self) -> Timestamp {
        self.clock.now_ms()
    }

    /// Number of pending timers of `domain`.
    pub fn len(&self, domain: TimeDomain) -> usize {
        self.queue(domain).len()
    }

    /// True when no timer of either domain is pending.
    pub fn is_empty(&self) -> bool {
        self.event.len == 0 && self.processing.len == 0
    }

    /// The earliest pending timestamp of `domain`.
    pub fn next_timestamp(&self, domain: TimeDomain) -> Option<Timestamp> {
        self.queue(domain).next_timestamp()
    }

    fn queue(&self, domain: TimeDomain) -> &TimerQueue<K> {
        match domain {
            TimeDomain::EventTime => &self.event,
            TimeDomain::ProcessingTime => &self.processing,
        }
    }

    fn queue_mut(&mut self, domain: TimeDomain) -> &mut TimerQueue<K> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }
}

impl<K: Hash + Eq + Clone> TimerService<K> {
    /// Registers a timer for `key` at `timestamp`; true when it was not
    /// registered yet.
    pub fn register(&mut self, domain: TimeDomain, key: &K, timestamp: Timestamp) -> bool {
        self.queue_mut(domain).register(key.clone(), timestamp)
    }

    /// Deletes the timer for `key` at `timestamp`; true when it was pending.
    pub fn delete(&mut self, domain: TimeDomain, key: &K, timestamp: Timestamp) -> bool {
        self.queue_mut(domain).delete(key, timestamp)
    }

    /// Whether the timer for `key` at `timestamp` is pending.
    pub fn contains(&self, domain: TimeDomain, key: &K, timestamp: Timestamp) -> bool {
        self.queue(domain).contains(key, timestamp)
    }

    /// Every registered timer, in time order per domain (event time first):
    /// what a checkpoint records.
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, Timestamp, &K)> {
        self.event
            .iter()
            .map(|(t, k)| (TimeDomain::EventTime, t, k))
            .chain(
                self.processing
                    .iter()
                    .map(|(t, k)| (TimeDomain::ProcessingTime, t, k)),
            )
    }

    /// Takes out the earliest timer of `domain` whose timestamp is `<= limit`
    /// (among equal timestamps, the first registered).
    pub fn pop_due(&mut self, domain: TimeDomain, limit: Timestamp) -> Option<(Timestamp, K)> {
        self.queue_mut(domain).pop_due(limit)
    }

    /// Drops every timer of `domain`; returns how many there were.
    pub fn clear(&mut self, domain: TimeDomain) -> usize {
        self.queue_mut(domain).clear()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ManualClock;
    use proptest::prelude::*;

    fn service() -> TimerService<u8> {
        TimerService::new(Arc::new(ManualClock::new(0)))
    }

    #[test]
    fn delete_then_register_again_fires_once() {
        let mut t = service();
        let d = TimeDomain::ProcessingTime;
        assert!(t.register(d, &1, 5));
        assert!(t.delete(d, &1, 5));
        assert!(!t.delete(d, &1, 5));
        assert!(t.register(d, &1, 5));
        assert_eq!(t.pop_due(d, 5), Some((5, 1)));
        assert_eq!(t.pop_due(d, i64::MAX), None);
        assert!(t.is_empty());
    }

    #[derive(Clone, Debug)]
    enum Step {
        Register(u8, i64),
        Delete(u8, i64),
        Pop(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..4, -5i64..20).prop_map(|(k, t)| Step::Register(k, t)),
            (0u8..4, -5i64..20).prop_map(|(k, t)| Step::Delete(k, t)),
            (-5i64..25).prop_map(Step::Pop),
        ]
    }

    proptest! {
        /// The queue behaves as a list of (ts, key) without duplicates,
        /// popped by (ts, registration order).
        #[test]
        fn matches_a_list_model(steps in proptest::collection::vec(step(), 0..200)) {
            let mut t = service();
            let d = TimeDomain::EventTime;
            let mut model: Vec<(i64, u64, u8)> = Vec::new(); // (ts, seq, key)
            let mut seq = 0u64;
            for s in steps {
                match s {
                    Step::Register(k, ts) => {
                        let fresh = !model.iter().any(|&(x, _, y)| x == ts && y == k);
                        prop_assert_eq!(t.register(d, &k, ts), fresh);
                        if fresh {
                            model.push((ts, seq, k));
                            seq += 1;
                        }
                    }
                    Step::Delete(k, ts) => {
                        let pos = model.iter().position(|&(x, _, y)| x == ts && y == k);
                        prop_assert_eq!(t.delete(d, &k, ts), pos.is_some());
                        if let Some(i) = pos {
                            model.remove(i);
                        }
                    }
                    Step::Pop(limit) => {
                        model.sort();
                        let want = match model.first() {
                            Some(&(ts, _, k)) if ts <= limit => {
                                model.remove(0);
                                Some((ts, k))
                            }
                            _ => None,
                        };
                        prop_assert_eq!(t.pop_due(d, limit), want);
                    }
                }
                prop_assert_eq!(t.len(d), model.len());
                prop_assert_eq!(t.next_timestamp(d), model.iter().map(|m| m.0).min());
            }
        }
    }

    proptest! {
        /// Fed no registration of a pending timer (the window operator's
        /// use), the unindexed queue behaves as the indexed one.
        #[test]
        fn unindexed_matches_indexed_without_duplicates(
            steps in proptest::collection::vec(step(), 0..200)
        ) {
            let mut indexed = TimerQueue::default();
            let mut unindexed = TimerQueue::unindexed();
            for s in steps {
                match s {
                    Step::Register(k, ts) => {
                        if indexed.contains(&k, ts) {
                            continue;
                        }
                        prop_assert!(indexed.register(k, ts));
                        prop_assert!(unindexed.register(k, ts));
                    }
                    Step::Delete(k, ts) => {
                        prop_assert_eq!(indexed.delete(&k, ts), unindexed.delete(&k, ts));
                    }
                    Step::Pop(limit) => {
                        prop_assert_eq!(indexed.pop_due(limit), unindexed.pop_due(limit));
                    }
                }
                prop_assert_eq!(indexed.len(), unindexed.len());
                for k in 0u8..4 {
                    for ts in -5i64..20 {
                        prop_assert_eq!(indexed.contains(&k, ts), unindexed.contains(&k, ts));
                    }
                }
            }
        }
    }
}
