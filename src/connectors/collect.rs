//! Collects a stream into memory, for tests and for programs that embed floe.

use crate::operators::sink::SinkFunction;
use crate::{Error, Result};
use floe_actors::element::Batch;
use std::sync::{Arc, Mutex};

/// The collected records of a stream, readable once the job has finished.
#[derive(Clone, Debug)]
pub struct Collected<T> {
    data: Arc<Mutex<Vec<T>>>,
}

impl<T> Collected<T> {
    pub(crate) fn new() -> Self {
        Collected {
            data: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Takes the records collected so far (in arrival order per subtask).
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.data.lock().expect("collect lock poisoned"))
    }

    /// Number of records collected so far.
    pub fn len(&self) -> usize {
        self.data.lock().expect("collect lock poisoned").len()
    }

    /// True when nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn sink(&self) -> CollectSink<T> {
        CollectSink {
            data: self.data.clone(),
        }
    }
}

/// The sink behind [`Collected`].
pub struct CollectSink<T> {
    data: Arc<Mutex<Vec<T>>>,
}

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink {
            data: self.data.clone(),
        }
    }
}

impl<T: Send + 'static> SinkFunction<T> for CollectSink<T> {
    async fn write(&mut self, batch: Batch<T>) -> Result<()> {
        self.lock()?.extend(batch.into_iter().map(|r| r.value));
        Ok(())
    }
}

impl<T> CollectSink<T> {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Vec<T>>> {
        self.data
            .lock()
            .map_err(|_| Error::User("collect sink lock poisoned".into()))
    }
}
