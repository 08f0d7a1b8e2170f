//! The row layout of a state's table: each row ("chunk") holds a run of
//! consecutive entries of one key group, so a flush writes one B-tree row
//! per run of changed keys instead of one per key.
//!
//! An *entry* is what the table logically holds: its row key is the key
//! group as a big-endian `u32` followed by the postcard bytes of the key; its
//! payload is the TTL stamp as a big-endian `i64` followed by the postcard
//! bytes of the value. A chunk's row key is the row key of its first entry;
//! its value is the number of entries (`u32`, little-endian) followed by the
//! entries in key order, each as `varint key length, key, varint payload
//! length, payload` (the key without its key group). The chunks of a key
//! group do not overlap: an entry belongs to the last chunk of its key group
//! whose row key is not above the entry's (or to the group's first chunk).
//!
//! Why: inserting one B-tree row per key made the flushes of a state of
//! mostly new keys cost most of the job (shifting leaf offsets, copying
//! pages per row). Merging a flush's sorted changes into the chunks they
//! fall in costs a copy of those chunks and a handful of B-tree rows; keys
//! that arrive in order within a key group (a count over new words) append
//! to the group's last chunk. A random change rewrites one chunk (at most
//! [`MAX_CHUNK_BYTES`], soft) where a row per key copied one B-tree page.

use redb::{ReadableTable, Table};
use std::ops::Bound;

/// The most entries a chunk holds.
pub(super) const MAX_CHUNK_ENTRIES: usize = 64;
/// The bytes a chunk aims to stay under (an entry larger than that is a
/// chunk of its own).
pub(super) const MAX_CHUNK_BYTES: usize = 2048;

type Bytes = &'static [u8];

fn corrupt() -> redb::Error {
    redb::Error::Corrupted("malformed state chunk".into())
}

fn put_varint(buf: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

fn get_varint(b: &[u8], pos: &mut usize) -> Option<usize> {
    let mut n: usize = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        n |= usize::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The number of entries of `chunk`.
pub(super) fn count(chunk: &[u8]) -> Result<usize, redb::Error> {
    let head: [u8; 4] = chunk
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(corrupt)?;
    Ok(u32::from_le_bytes(head) as usize)
}

/// The entries of a chunk: `(key without key group, payload)`, in key order.
pub(super) struct Entries<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// The entries of `chunk`.
pub(super) fn entries(chunk: &[u8]) -> Entries<'_> {
    Entries {
        bytes: chunk,
        pos: 4.min(chunk.len()),
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), redb::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let b = self.bytes;
        let mut pos = self.pos;
        let parsed = (|| {
            let klen = get_varint(b, &mut pos)?;
            let key = b.get(pos..pos.checked_add(klen)?)?;
            pos += klen;
            let plen = get_varint(b, &mut pos)?;
            let payload = b.get(pos..pos.checked_add(plen)?)?;
            pos += plen;
            Some((key, payload))
        })();
        match parsed {
            Some(e) => {
                self.pos = pos;
                Some(Ok(e))
            }
            None => {
                self.pos = b.len();
                Some(Err(corrupt()))
            }
        }
    }
}

/// The first row key after the rows of the key group `prefix` (`None`: the
/// last key group).
fn group_end(prefix: &[u8]) -> Option<[u8; 4]> {
    let g = u32::from_be_bytes(prefix.try_into().ok()?);
    g.checked_add(1).map(u32::to_be_bytes)
}

fn upper(end: &Option<[u8; 4]>) -> Bound<&[u8]> {
    match end {
        Some(e) => Bound::Excluded(e.as_slice()),
        None => Bound::Unbounded,
    }
}

/// The range of the chunks of the key group `key_group`.
pub(super) fn group_bounds(key_group: u32) -> ([u8; 4], Option<[u8; 4]>) {
    (
        key_group.to_be_bytes(),
        key_group.checked_add(1).map(u32::to_be_bytes),
    )
}

/// Calls `f` with the payload of the entry `row` (key group ++ key), if the
/// table holds it.
pub(super) fn with_entry<T, R>(
    table: &T,
    row: &[u8],
    f: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>, redb::Error>
where
    T: ReadableTable<Bytes, Bytes>,
{
    let Some(prefix) = row.get(..4) else {
        return Ok(None);
    };
    let mut range = table.range::<&[u8]>((Bound::Included(prefix), Bound::Included(row)))?;
    let Some(last) = range.next_back() else {
        return Ok(None);
    };
    let (_, chunk) = last?;
    let key = &row[4..];
    for e in entries(chunk.value()) {
        let (k, payload) = e?;
        match k.cmp(key) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => return Ok(Some(f(payload))),
            std::cmp::Ordering::Greater => break,
        }
    }
    Ok(None)
}

/// Calls `f(key_group_prefix, key, payload)` for every entry of the chunks
/// `chunks` yields, in order.
pub(super) fn for_each_entry<'r>(
    chunks: impl Iterator<
        Item = Result<
            (redb::AccessGuard<'r, Bytes>, redb::AccessGuard<'r, Bytes>),
            redb::StorageError,
        >,
    >,
    mut f: impl FnMut(&[u8], &[u8], &[u8]) -> Result<(), redb::Error>,
) -> Result<(), redb::Error> {
    for chunk in chunks {
        let (k, v) = chunk?;
        let prefix = k.value().get(..4).ok_or_else(corrupt)?;
        for e in entries(v.value()) {
            let (key, payload) = e?;
            f(prefix, key, payload)?;
        }
    }
    Ok(())
}

/// A change of one entry: its row key (key group ++ key) and its new
/// payload (`None`: the entry is removed).
#[derive(Clone, Copy, Debug)]
pub(super) struct Change<'a> {
    pub(super) row: &'a [u8],
    pub(super) payload: Option<&'a [u8]>,
}

/// Buffers reused across merges (no allocation per entry).
#[derive(Default)]
pub(super) struct Scratch {
    /// The chunk being merged, copied out of the table.
    old: Vec<u8>,
    old_key: Vec<u8>,
    limit: Vec<u8>,
    /// The merged entries, encoded end to end.
    merged: Vec<u8>,
    /// Per merged entry: its start in `merged`, and its key's range.
    bounds: Vec<(usize, usize, usize)>,
    chunk: Vec<u8>,
    row: Vec<u8>,
}

fn push_entry(s: &mut Scratch, key: &[u8], payload: &[u8]) {
    let start = s.merged.len();
    put_varint(&mut s.merged, key.len());
    let key_start = s.merged.len();
    s.merged.extend_from_slice(key);
    let key_end = s.merged.len();
    put_varint(&mut s.merged, payload.len());
    s.merged.extend_from_slice(payload);
    s.bounds.push((start, key_start, key_end));
}

/// Applies `changes` (sorted by row key, no key twice) to `table`; returns
/// the change in the number of entries it holds.
pub(super) fn apply(
    table: &mut Table<'_, Bytes, Bytes>,
    changes: &[Change<'_>],
    s: &mut Scratch,
) -> Result<i64, redb::Error> {
    let mut delta: i64 = 0;
    let mut i = 0;
    while i < changes.len() {
        let row = changes[i].row;
        let prefix = row.get(..4).ok_or_else(corrupt)?;
        let end = group_end(prefix);
        // The chunk `row` falls in: the last one at or below it in its key
        // group, else the group's first one.
        s.old.clear();
        s.old_key.clear();
        let mut found = false;
        {
            let mut below =
                table.range::<&[u8]>((Bound::Included(prefix), Bound::Included(row)))?;
            if let Some(c) = below.next_back() {
                let (k, v) = c?;
                s.old_key.extend_from_slice(k.value());
                s.old.extend_from_slice(v.value());
                found = true;
            }
        }
        if !found {
            let mut above = table.range::<&[u8]>((Bound::Excluded(row), upper(&end)))?;
            if let Some(c) = above.next() {
                let (k, v) = c?;
                s.old_key.extend_from_slice(k.value());
                s.old.extend_from_slice(v.value());
                found = true;
            }
        }
        // The changes up to the next chunk of the group go into this one.
        s.limit.clear();
        let mut limited = false;
        if found {
            let mut next =
                table.range::<&[u8]>((Bound::Excluded(s.old_key.as_slice()), upper(&end)))?;
            if let Some(c) = next.next() {
                let (k, _) = c?;
                s.limit.extend_from_slice(k.value());
                limited = true;
            }
        }
        let mut j = i;
        while j < changes.len()
            && changes[j].row.get(..4) == Some(prefix)
            && (!limited || changes[j].row < s.limit.as_slice())
        {
            j += 1;
        }
        // Merge the chunk's entries with changes[i..j].
        s.merged.clear();
        s.bounds.clear();
        let old = std::mem::take(&mut s.old);
        let mut olds = entries(if found { &old } else { &[] }).peekable();
        let mut news = changes[i..j].iter().peekable();
        loop {
            let order = match (olds.peek(), news.peek()) {
                (None, None) => break,
                (Some(Err(_)), _) => return Err(corrupt()),
                (Some(Ok(_)), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(Ok((k, _))), Some(c)) => (*k).cmp(&c.row[4..]),
            };
            match order {
                std::cmp::Ordering::Less => {
                    if let Some(Ok((k, p))) = olds.next() {
                        push_entry(s, k, p);
                    }
                }
                std::cmp::Ordering::Equal => {
                    olds.next();
                    if let Some(c) = news.next() {
                        match c.payload {
                            Some(p) => push_entry(s, &c.row[4..], p),
                            None => delta -= 1,
                        }
                    }
                }
                std::cmp::Ordering::Greater => {
                    if let Some(c) = news.next()
                        && let Some(p) = c.payload
                    {
                        push_entry(s, &c.row[4..], p);
                        delta += 1;
                    }
                }
            }
        }
        s.old = old;
        write_chunks(table, prefix, found, s)?;
        i = j;
    }
    Ok(delta)
}

/// Replaces the chunk `s.old_key` (if `found`) by the entries of
/// `s.merged`, cut into chunks of even size.
fn write_chunks(
    table: &mut Table<'_, Bytes, Bytes>,
    prefix: &[u8],
    found: bool,
    s: &mut Scratch,
) -> Result<(), redb::Error> {
    let n = s.bounds.len();
    let first_key = s.bounds.first().map(|&(_, a, b)| &s.merged[a..b]);
    if found && first_key != s.old_key.get(4..) {
        table.remove(s.old_key.as_slice())?;
    }
    if n == 0 {
        return Ok(());
    }
    let total = s.merged.len();
    let pieces = n
        .div_ceil(MAX_CHUNK_ENTRIES)
        .max(total.div_ceil(MAX_CHUNK_BYTES))
        .max(1);
    let per_entries = n.div_ceil(pieces);
    let per_bytes = total.div_ceil(pieces);
    let mut a = 0;
    while a < n {
        // Close the chunk at the entry count or the byte size of an even cut.
        let start = s.bounds[a].0;
        let mut b = a + 1;
        while b < n && b - a < per_entries && s.bounds[b].0 - start < per_bytes {
            b += 1;
        }
        let end = s.bounds.get(b).map_or(total, |e| e.0);
        s.chunk.clear();
        s.chunk
            .extend_from_slice(&u32::try_from(b - a).map_err(|_| corrupt())?.to_le_bytes());
        s.chunk.extend_from_slice(&s.merged[start..end]);
        let (_, ks, ke) = s.bounds[a];
        s.row.clear();
        s.row.extend_from_slice(prefix);
        s.row.extend_from_slice(&s.merged[ks..ke]);
        table.insert(s.row.as_slice(), s.chunk.as_slice())?;
        a = b;
    }
    Ok(())
}

/// Removes the chunks of `key_group`; returns the entries they held.
pub(super) fn clear_group(
    table: &mut Table<'_, Bytes, Bytes>,
    key_group: u32,
) -> Result<u64, redb::Error> {
    let (start, end) = group_bounds(key_group);
    let range = (Bound::Included(start.as_slice()), upper(&end));
    let mut n: u64 = 0;
    let mut bad = false;
    table.retain_in::<&[u8], _>(range, |_, v| {
        match count(v) {
            Ok(c) => n += c as u64,
            Err(_) => bad = true,
        }
        false
    })?;
    if bad {
        return Err(corrupt());
    }
    Ok(n)
}

/// Walks up to `budget` entries after the chunk `cursor` (wrapping around
/// once), moving `cursor`, and collects the row keys of those `expired`
/// says are, in key order.
pub(super) fn sweep(
    table: &Table<'_, Bytes, Bytes>,
    cursor: &mut Vec<u8>,
    budget: usize,
    mut expired: impl FnMut(&[u8]) -> bool,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), redb::Error> {
    let mut steps = 0;
    'passes: for _ in 0..2 {
        if steps >= budget {
            break;
        }
        for c in table.range::<&[u8]>((Bound::Excluded(cursor.as_slice()), Bound::Unbounded))? {
            let (k, v) = c?;
            let k = k.value();
            let prefix = k.get(..4).ok_or_else(corrupt)?;
            cursor.clear();
            cursor.extend_from_slice(k);
            for e in entries(v.value()) {
                let (key, payload) = e?;
                steps += 1;
                if expired(payload) {
                    let mut row = Vec::with_capacity(4 + key.len());
                    row.extend_from_slice(prefix);
                    row.extend_from_slice(key);
                    out.push(row);
                }
            }
            if steps >= budget {
                break 'passes;
            }
        }
        // Reached the end: start over.
        cursor.clear();
        steps += 1;
    }
    out.sort_unstable();
    out.dedup();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use redb::{Database, ReadableTableMetadata, TableDefinition};
    use std::collections::BTreeMap;

    const T: TableDefinition<'static, Bytes, Bytes> = TableDefinition::new("t");

    fn row(group: u32, key: u16) -> Vec<u8> {
        let mut r = group.to_be_bytes().to_vec();
        // Keys of different lengths, so chunk bytes vary.
        r.extend_from_slice(&key.to_be_bytes());
        r.extend(std::iter::repeat_n(b'k', usize::from(key % 5)));
        r
    }

    fn payload(v: u32) -> Vec<u8> {
        let mut p = v.to_be_bytes().to_vec();
        p.extend(std::iter::repeat_n(b'v', (v % 300) as usize));
        p
    }

    /// Applies `batches` to a table and to a `BTreeMap` model; checks every
    /// entry, the count and the chunk invariants after each batch.
    fn check(batches: &[Vec<(u32, u16, Option<u32>)>]) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Database::create(dir.path().join("c.redb")).expect("db");
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut held: i64 = 0;
        let mut s = Scratch::default();
        for batch in batches {
            let mut changes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for &(g, k, v) in batch {
                changes.insert(row(g, k), v.map(payload));
            }
            let list: Vec<Change<'_>> = changes
                .iter()
                .map(|(r, p)| Change {
                    row: r,
                    payload: p.as_deref(),
                })
                .collect();
            let txn = db.begin_write().expect("write");
            {
                let mut t = txn.open_table(T).expect("table");
                held += apply(&mut t, &list, &mut s).expect("apply");
            }
            txn.commit().expect("commit");
            for (r, p) in changes {
                match p {
                    Some(p) => model.insert(r, p),
                    None => model.remove(&r),
                };
            }
            let read = db.begin_read().expect("read");
            let t = read.open_table(T).expect("table");
            assert_eq!(held, model.len() as i64, "entry count");
            let mut all = Vec::new();
            for c in t.iter().expect("iter") {
                let (k, v) = c.expect("chunk");
                let (k, v) = (k.value(), v.value());
                let n = count(v).expect("count");
                let es: Vec<_> = entries(v).map(|e| e.expect("entry")).collect();
                assert_eq!(n, es.len());
                assert!(n > 0 && n <= MAX_CHUNK_ENTRIES, "chunk size {n}");
                assert_eq!(&k[4..], es[0].0, "a chunk's row key is its first entry's");
                for (key, p) in es {
                    let mut r = k[..4].to_vec();
                    r.extend_from_slice(key);
                    all.push((r, p.to_vec()));
                }
            }
            let expect: Vec<_> = model.clone().into_iter().collect();
            assert_eq!(all, expect, "entries in key order");
            for (r, p) in &model {
                let got = with_entry(&t, r, <[u8]>::to_vec).expect("get");
                assert_eq!(got.as_ref(), Some(p));
            }
            for g in 0..3 {
                for k in [0u16, 7, 500, u16::MAX] {
                    let r = row(g, k);
                    let got = with_entry(&t, &r, <[u8]>::to_vec).expect("get");
                    assert_eq!(got.as_ref(), model.get(&r));
                }
            }
            assert!(t.len().expect("len") as usize <= model.len());
        }
    }

    #[test]
    fn appends_in_key_order_fill_chunks() {
        let batches: Vec<Vec<_>> = (0..20u16)
            .map(|b| {
                (0..100u16)
                    .map(|i| (1, b * 100 + i, Some(u32::from(i))))
                    .collect()
            })
            .collect();
        check(&batches);
    }

    #[test]
    fn keys_before_the_first_chunk_and_removals() {
        check(&[
            (100..200u16).map(|k| (0, k, Some(1))).collect(),
            (0..50u16).map(|k| (0, k, Some(2))).collect(),
            (0..200u16).step_by(2).map(|k| (0, k, None)).collect(),
            (0..200u16).map(|k| (0, k, None)).collect(),
        ]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn matches_a_map(batches in prop::collection::vec(
            prop::collection::vec((0u32..3, 0u16..400, prop::option::weighted(0.8, 0u32..1000)), 0..300),
            1..6,
        )) {
            check(&batches);
        }
    }
}
