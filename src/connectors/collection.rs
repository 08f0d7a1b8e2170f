//! Sources over in-memory data: a collection (replayable) and an iterator.

use super::{SourceFunction, SourcePoll};
use crate::Result;
use floe_actors::element::Record;
use std::sync::{Arc, Mutex};

/// Emits the elements of a shared vector in order (one subtask).
pub struct CollectionSource<T> {
    data: Arc<Vec<T>>,
    position: usize,
}

impl<T> CollectionSource<T> {
    /// A source over `data`, starting at the first element.
    pub fn new(data: Arc<Vec<T>>) -> Self {
        CollectionSource { data, position: 0 }
    }
}

impl<T: Clone + Send + Sync + 'static> SourceFunction<T> for CollectionSource<T> {
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        let end = (self.position + max).min(self.data.len());
        out.extend(
            self.data[self.position..end]
                .iter()
                .cloned()
                .map(Record::new),
        );
        self.position = end;
        Ok(if end == self.data.len() {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }

    fn snapshot_state(&mut self) -> Result<Vec<Vec<u8>>> {
        Ok(vec![super::encode_entry(&(self.position as u64))?])
    }

    fn restore_state(&mut self, entries: Vec<Vec<u8>>) -> Result<()> {
        // One subtask reads the collection; no entry means nothing is left.
        self.position = match entries.first() {
            Some(e) => super::decode_entry::<u64>(e)? as usize,
            None => self.data.len(),
        };
        self.position = self.position.min(self.data.len());
        Ok(())
    }
}

/// Emits the items of an iterator (one subtask; not replayable).
pub struct IteratorSource<I> {
    iter: Arc<Mutex<Option<I>>>,
    taken: Option<I>,
}

impl<I> IteratorSource<I> {
    /// A source that takes the iterator out of `iter` on first use.
    pub fn new(iter: Arc<Mutex<Option<I>>>) -> Self {
        IteratorSource { iter, taken: None }
    }
}

impl<T, I> SourceFunction<T> for IteratorSource<I>
where
    I: Iterator<Item = T> + Send + 'static,
{
    fn poll_batch(&mut self, max: usize, out: &mut Vec<Record<T>>) -> Result<SourcePoll> {
        if self.taken.is_none() {
            let mut slot = self
                .iter
                .lock()
                .map_err(|_| crate::Error::User("iterator source lock poisoned".into()))?;
            match slot.take() {
                Some(i) => self.taken = Some(i),
                None => {
                    return Err(crate::Error::User(
                        "an iterator source can run only once".into(),
                    ));
                }
            }
        }
        let it = self.taken.as_mut().expect("taken above");
        for _ in 0..max {
            match it.next() {
                Some(v) => out.push(Record::new(v)),
                None => return Ok(SourcePoll::Finished),
            }
        }
        Ok(SourcePoll::Ready)
    }
}
