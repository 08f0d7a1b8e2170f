//! What a snapshot captures of one state: the rows of the snapshot's read
//! transaction, in full or as the delta since the base checkpoint.

use super::cache::row_stamp;
use super::chunk;
use super::{Def, Reader, storage};
use crate::state::descriptor::StateMeta;
use crate::state::error::{BoxError, StateError};
use crate::state::snapshot::{CapturedState, GroupDelta};
use redb::{ReadTransaction, TableDefinition, TableError};
use std::ops::Bound;
use std::sync::Arc;

/// A state's capture: the read transaction of the snapshot's commit.
pub(super) struct RedbCaptured {
    pub(super) meta: StateMeta,
    pub(super) operator: String,
    pub(super) name: String,
    pub(super) read: Result<Arc<ReadTransaction>, Arc<StateError>>,
}

impl RedbCaptured {
    fn table(&self) -> Result<Option<Reader>, StateError> {
        let read = match &self.read {
            Ok(r) => r,
            Err(e) => return Err(storage(&self.operator, e.clone())),
        };
        let def: Def<'_> = TableDefinition::new(&self.name);
        match read.open_table(def) {
            Ok(t) => Ok(Some(t)),
            Err(TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(storage(&self.operator, e)),
        }
    }
}

/// The range of the rows of `key_group`.
fn group_range(key_group: u32) -> (Bound<[u8; 4]>, Bound<[u8; 4]>) {
    let end = match key_group.checked_add(1) {
        Some(e) => Bound::Excluded(e.to_be_bytes()),
        None => Bound::Unbounded,
    };
    (Bound::Included(key_group.to_be_bytes()), end)
}

impl CapturedState for RedbCaptured {
    fn meta(&self) -> &StateMeta {
        &self.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        let err = |e: BoxError| storage(&self.operator, e);
        let Some(table) = self.table()? else {
            return Ok(None);
        };
        let (start, end) = group_range(key_group);
        let range = (
            start.as_ref().map(|b| b.as_slice()),
            end.as_ref().map(|b| b.as_slice()),
        );
        let mut n: usize = 0;
        let mut body = Vec::new();
        let chunks = table.range::<&[u8]>(range).map_err(|e| err(e.into()))?;
        chunk::for_each_entry(chunks, |_, k, v| {
            // postcard of (K, Stamped { value, stamp }): the fields in order.
            body.extend_from_slice(k);
            body.extend_from_slice(&v[8..]);
            postcard::to_io(&row_stamp(v), &mut body)
                .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
            n += 1;
            Ok(())
        })
        .map_err(|e| err(e.into()))?;
        if n == 0 {
            return Ok(None);
        }
        let mut out = postcard::to_allocvec(&n).map_err(|e| err(e.into()))?;
        out.extend_from_slice(&body);
        Ok(Some(out))
    }
}

/// A state's capture for an incremental snapshot: the rows changed since
/// the base, read from the snapshot's read transaction.
pub(super) struct RedbDelta {
    pub(super) full: RedbCaptured,
    /// Changed row keys, sorted.
    pub(super) rows: Vec<Box<[u8]>>,
}

impl CapturedState for RedbDelta {
    fn meta(&self) -> &StateMeta {
        &self.full.meta
    }

    fn group_bytes(&self, key_group: u32) -> Result<Option<Vec<u8>>, StateError> {
        self.full.group_bytes(key_group)
    }

    fn group_delta(&self, key_group: u32) -> Result<Option<GroupDelta>, StateError> {
        let prefix = key_group.to_be_bytes();
        let start = self.rows.partition_point(|r| r[..4] < prefix[..]);
        let end = self.rows.partition_point(|r| r[..4] <= prefix[..]);
        if start == end {
            return Ok(None);
        }
        let err = |e: BoxError| storage(&self.full.operator, e);
        let table = self.full.table()?;
        let (mut puts, mut removed) = (Vec::new(), Vec::new());
        let (mut n_puts, mut n_removed) = (0usize, 0usize);
        for row in &self.rows[start..end] {
            let found = match &table {
                Some(t) => chunk::with_entry(t, row, |v| {
                    puts.extend_from_slice(&row[4..]);
                    puts.extend_from_slice(&v[8..]);
                    row_stamp(v)
                })
                .map_err(|e| err(e.into()))?,
                None => None,
            };
            match found {
                Some(stamp) => {
                    puts = postcard::to_extend(&stamp, puts).map_err(|e| err(e.into()))?;
                    n_puts += 1;
                }
                None => {
                    removed.extend_from_slice(&row[4..]);
                    n_removed += 1;
                }
            }
        }
        let with_len = |n: usize, body: Vec<u8>| -> Result<Vec<u8>, StateError> {
            let mut out = postcard::to_allocvec(&n).map_err(|e| err(e.into()))?;
            out.extend_from_slice(&body);
            Ok(out)
        };
        Ok(Some((
            with_len(n_puts, puts)?,
            with_len(n_removed, removed)?,
        )))
    }
}
