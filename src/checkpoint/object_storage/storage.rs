//! [`ObjectCheckpointStorage`]: the [`CheckpointStorage`] of a checkpoint
//! prefix on object storage (layout and invariants: the module's parent).

use super::Prefix;
use super::client::ATTEMPTS;
use super::lease::Lease;
use crate::checkpoint::{
    BlobRef, BlobSink, CheckpointError, CheckpointId, CheckpointMetadata, CheckpointStorage,
    SnapshotKind,
};
use floe_actors::checkpoint::files::{
    METADATA_FILE, SHARED_DIR, check_blob_name, chk_dir_name, parse_chk_dir_name,
};
use floe_actors::checkpoint::metadata::{decode_metadata, encode_metadata};
use floe_actors::checkpoint::storage::BlobSource;
use object_store::PutMode;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The name of the lease object under a checkpoint prefix.
const LEASE: &str = "_lease";

/// Completed checkpoints on object storage, under one prefix.
///
/// `Send + Sync`, shared in an [`Arc`] like the local store. Opened for a
/// job it holds the prefix's lease until dropped; opened to read, it holds
/// nothing and refuses to commit.
#[derive(Debug)]
pub struct ObjectCheckpointStorage {
    prefix: Arc<Prefix>,
    lease: Option<Lease>,
    /// Serializes commit, retention and clear.
    commit_lock: Mutex<()>,
    /// Metadata of committed checkpoints, as written or read (immutable
    /// once written), so retention does not read it again.
    known: Mutex<BTreeMap<u64, CheckpointMetadata>>,
    /// Shared blobs written by this instance and not yet referenced by a
    /// committed checkpoint: retention leaves them alone.
    pending_shared: Mutex<HashSet<String>>,
}

/// What a listing of the prefix found.
pub(super) struct Scan {
    /// Checkpoints with their metadata, by id.
    pub complete: BTreeMap<u64, CheckpointMetadata>,
    /// `chk-<id>/` prefixes without usable metadata: each id and why.
    pub incomplete: Vec<(CheckpointId, CheckpointError)>,
}

impl ObjectCheckpointStorage {
    /// Opens the checkpoint prefix `prefix`. `lease`: take its lease (a job
    /// that writes); else only check that the bucket answers (to read).
    /// Either way a server that cannot be reached, or refuses the
    /// credentials, fails here at once, without retries.
    pub(crate) fn open(prefix: Prefix, lease: bool) -> Result<Self, CheckpointError> {
        let url = prefix.url("");
        let lease = if lease {
            Some(Lease::acquire(&prefix.bucket, prefix.key(LEASE), &url)?)
        } else {
            prefix
                .bucket
                .list(&prefix.dir_key(), 1)
                .map_err(|e| prefix.bucket.error("LIST", &prefix.dir_key(), &e))?;
            None
        };
        Ok(ObjectCheckpointStorage {
            prefix: Arc::new(prefix),
            lease,
            commit_lock: Mutex::new(()),
            known: Mutex::new(BTreeMap::new()),
            pending_shared: Mutex::new(HashSet::new()),
        })
    }

    fn metadata_key(&self, id: u64) -> String {
        self.prefix.key(&format!(
            "{}/{METADATA_FILE}",
            chk_dir_name(CheckpointId(id))
        ))
    }

    fn storage_error(&self, what: &str, key: &str, e: &object_store::Error) -> CheckpointError {
        self.prefix.bucket.error(what, key, e)
    }

    /// Writes `bytes` as `rel` under the prefix (overwriting: a retried
    /// upload writes the same bytes) and returns its reference.
    fn write(&self, rel: String, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        let key = self.prefix.key(&rel);
        self.prefix
            .bucket
            .put(&key, bytes.to_vec(), PutMode::Overwrite, ATTEMPTS)
            .map_err(|e| self.storage_error("PUT", &key, &e))?;
        Ok(BlobRef {
            path: rel,
            len: bytes.len() as u64,
            checksum: crc32fast::hash(bytes),
        })
    }

    /// Reads and decodes the metadata of every `chk-<id>/` under the
    /// prefix, all at once.
    pub(super) fn scan(&self) -> Result<Scan, CheckpointError> {
        let dir = self.prefix.dir_key();
        let ids: Vec<u64> = self
            .prefix
            .bucket
            .list_dirs(&dir)
            .map_err(|e| self.storage_error("LIST", &dir, &e))?
            .iter()
            .filter_map(|name| parse_chk_dir_name(name))
            .map(|id| id.0)
            .collect();
        let keys = ids.iter().map(|&id| self.metadata_key(id)).collect();
        let mut scan = Scan {
            complete: BTreeMap::new(),
            incomplete: Vec::new(),
        };
        for (&id, got) in ids.iter().zip(self.prefix.bucket.get_many(keys)) {
            let key = self.metadata_key(id);
            let file = PathBuf::from(self.prefix.bucket.url(&key));
            let label = id.to_string();
            let bytes = match got {
                Ok((bytes, _)) => bytes,
                Err(object_store::Error::NotFound { .. }) => {
                    let reason = "no metadata: in progress, aborted, or its upload was cut off";
                    scan.incomplete.push((
                        CheckpointId(id),
                        floe_actors::checkpoint::files::corrupt(&label, &file, reason),
                    ));
                    continue;
                }
                Err(e) => return Err(self.storage_error("GET", &key, &e)),
            };
            match decode_metadata(&bytes, &label, &file) {
                Ok(meta) if meta.id.0 == id && meta.kind == SnapshotKind::Checkpoint => {
                    scan.complete.insert(id, meta);
                }
                Ok(meta) => scan.incomplete.push((
                    CheckpointId(id),
                    floe_actors::checkpoint::files::corrupt(
                        &label,
                        &file,
                        format!("holds the metadata of {:?} {}", meta.kind, meta.id.0),
                    ),
                )),
                Err(e) => scan.incomplete.push((CheckpointId(id), e)),
            }
        }
        if let Ok(mut known) = self.known.lock() {
            known.extend(scan.complete.iter().map(|(&id, m)| (id, m.clone())));
        }
        Ok(scan)
    }

    /// Keeps the newest `retain` committed checkpoints (see the module's
    /// parent): deletes the metadata of the others, then every object no
    /// retained checkpoint references, except those of checkpoints in
    /// flight and shared blobs not yet committed.
    fn retain(&self, retain: usize) -> Result<(), CheckpointError> {
        let dir = self.prefix.dir_key();
        let objects = self
            .prefix
            .bucket
            .list(&dir, ATTEMPTS)
            .map_err(|e| self.storage_error("LIST", &dir, &e))?;
        let rels: Vec<String> = objects
            .iter()
            .filter_map(|o| {
                self.prefix
                    .relative(o.location.as_ref())
                    .map(str::to_string)
            })
            .collect();
        let committed: BTreeSet<u64> = rels
            .iter()
            .filter_map(|rel| {
                let (chk, file) = rel.split_once('/')?;
                (file == METADATA_FILE)
                    .then(|| parse_chk_dir_name(chk))
                    .flatten()
            })
            .map(|id| id.0)
            .collect();
        let Some(&newest) = committed.iter().next_back() else {
            return Ok(());
        };
        let cut = committed.len().saturating_sub(retain);
        let dropped: Vec<u64> = committed.iter().take(cut).copied().collect();
        let retained: BTreeSet<u64> = committed.iter().skip(cut).copied().collect();
        let mut referenced: HashSet<String> = HashSet::new();
        for &id in &retained {
            let meta = match self.known.lock().ok().and_then(|k| k.get(&id).cloned()) {
                Some(meta) => meta,
                None => self
                    .get(CheckpointId(id))?
                    .ok_or_else(|| CheckpointError::NotFound {
                        path: self.checkpoint_location(CheckpointId(id)),
                    })?,
            };
            referenced.extend(meta.blobs().into_iter().map(|b| b.path.clone()));
        }
        // First the metadata: a dropped checkpoint stops existing before
        // any of its blobs goes.
        let metadata: Vec<String> = dropped.iter().map(|&id| self.metadata_key(id)).collect();
        self.prefix
            .bucket
            .delete_many(metadata)
            .map_err(|e| self.storage_error("DELETE", &dir, &e))?;
        if let Ok(mut known) = self.known.lock() {
            known.retain(|id, _| retained.contains(id));
        }
        let pending = self
            .pending_shared
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        let garbage: Vec<String> = rels
            .iter()
            .filter(|rel| !referenced.contains(rel.as_str()))
            .filter(|rel| {
                let Some((top, _)) = rel.split_once('/') else {
                    return false;
                };
                if top == SHARED_DIR {
                    return !pending.contains(rel.as_str());
                }
                // Newer ones are in flight; retained ones stay whole.
                parse_chk_dir_name(top).is_some_and(|id| id.0 < newest && !retained.contains(&id.0))
            })
            .map(|rel| self.prefix.key(rel))
            .collect();
        self.prefix
            .bucket
            .delete_many(garbage)
            .map_err(|e| self.storage_error("DELETE", &dir, &e))
    }
}

impl BlobSink for ObjectCheckpointStorage {
    fn put(
        &self,
        checkpoint: CheckpointId,
        name: &str,
        bytes: &[u8],
    ) -> Result<BlobRef, CheckpointError> {
        check_blob_name(name, &checkpoint.0.to_string())?;
        self.write(format!("{}/{name}", chk_dir_name(checkpoint)), bytes)
    }
}

impl CheckpointStorage for ObjectCheckpointStorage {
    fn write_shared_blob(&self, name: &str, bytes: &[u8]) -> Result<BlobRef, CheckpointError> {
        check_blob_name(name, SHARED_DIR)?;
        let rel = format!("{SHARED_DIR}/{name}");
        if let Ok(mut p) = self.pending_shared.lock() {
            p.insert(rel.clone());
        }
        self.write(rel, bytes)
    }

    /// Checks that every blob of `meta` is there with its length (all at
    /// once), then writes its `_metadata` create-only: the checkpoint
    /// exists once that returned. Then retention (errors logged).
    fn commit(&self, meta: &CheckpointMetadata, retain: usize) -> Result<(), CheckpointError> {
        let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let id = meta.id;
        let failed = |message: String| CheckpointError::Failed {
            checkpoint: id,
            message,
        };
        floe_actors::checkpoint::metadata::check_committable(meta)?;
        match &self.lease {
            Some(lease) => lease.check()?,
            None => return Err(failed("the checkpoint storage was opened to read".into())),
        }
        let blobs = meta.blobs();
        let keys: Vec<String> = blobs.iter().map(|b| self.prefix.key(&b.path)).collect();
        for ((blob, key), size) in blobs
            .iter()
            .zip(&keys)
            .zip(self.prefix.bucket.sizes(keys.clone()))
        {
            match size {
                Ok(n) if n == blob.len => {}
                Ok(n) => {
                    return Err(failed(format!(
                        "blob '{}' has {n} bytes, expected {}",
                        self.prefix.bucket.url(key),
                        blob.len
                    )));
                }
                Err(e) => return Err(self.storage_error("HEAD", key, &e)),
            }
        }
        let encoded = encode_metadata(meta);
        let key = self.metadata_key(id.0);
        match self
            .prefix
            .bucket
            .put(&key, encoded.clone(), PutMode::Create, ATTEMPTS)
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                // A retried create whose first attempt did land reads back
                // its own bytes.
                match self.prefix.bucket.get(&key) {
                    Ok((bytes, _)) if bytes == encoded => {}
                    _ => return Err(failed("already committed".into())),
                }
            }
            Err(e) => return Err(self.storage_error("PUT", &key, &e)),
        }
        if let Ok(mut known) = self.known.lock() {
            known.insert(id.0, meta.clone());
        }
        if let Ok(mut pending) = self.pending_shared.lock() {
            for blob in &blobs {
                pending.remove(&blob.path);
            }
        }
        if let Err(e) = self.retain(retain.max(1)) {
            tracing::warn!(
                target: crate::RECOVERY_LOG_TARGET,
                checkpoint = id.0,
                "checkpoint retention failed (it runs again after the next checkpoint): {e}"
            );
        }
        Ok(())
    }

    fn discard(&self, id: CheckpointId) {
        let key = self.metadata_key(id.0);
        match self.prefix.bucket.size(&key, ATTEMPTS) {
            Err(object_store::Error::NotFound { .. }) => {}
            Ok(_) => {
                tracing::warn!(checkpoint = id.0, "not discarding a committed checkpoint");
                return;
            }
            Err(e) => {
                tracing::warn!(checkpoint = id.0, error = %self.storage_error("HEAD", &key, &e), "cannot discard checkpoint");
                return;
            }
        }
        let dir = self.prefix.key(&format!("{}/", chk_dir_name(id)));
        let removed = self.prefix.bucket.list(&dir, ATTEMPTS).and_then(|objects| {
            let keys = objects.iter().map(|o| o.location.to_string()).collect();
            self.prefix.bucket.delete_many(keys)
        });
        if let Err(e) = removed {
            tracing::warn!(checkpoint = id.0, error = %self.storage_error("DELETE", &dir, &e), "cannot discard checkpoint");
        }
    }

    fn list(&self) -> Result<Vec<CheckpointMetadata>, CheckpointError> {
        Ok(self.scan()?.complete.into_values().collect())
    }

    fn get(&self, id: CheckpointId) -> Result<Option<CheckpointMetadata>, CheckpointError> {
        if let Some(meta) = self.known.lock().ok().and_then(|k| k.get(&id.0).cloned()) {
            return Ok(Some(meta));
        }
        let key = self.metadata_key(id.0);
        let bytes = match self.prefix.bucket.get(&key) {
            Ok((bytes, _)) => bytes,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.storage_error("GET", &key, &e)),
        };
        let file = PathBuf::from(self.prefix.bucket.url(&key));
        decode_metadata(&bytes, &id.0.to_string(), &file).map(Some)
    }

    fn verified_metadata(&self, id: CheckpointId) -> Result<CheckpointMetadata, CheckpointError> {
        let Some(meta) = self.get(id)? else {
            return Err(CheckpointError::NotFound {
                path: self.checkpoint_location(id),
            });
        };
        self.prefix.verify_blobs(&meta, &id.0.to_string())?;
        Ok(meta)
    }

    fn read_blob(&self, id: CheckpointId, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        self.prefix.read_blob(&id.0.to_string(), blob)
    }

    fn clear(&self) -> Result<(), CheckpointError> {
        let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.prefix.dir_key();
        let objects = self
            .prefix
            .bucket
            .list(&dir, ATTEMPTS)
            .map_err(|e| self.storage_error("LIST", &dir, &e))?;
        let ours = |rel: &str| {
            let top = rel.split('/').next().unwrap_or_default();
            rel.contains('/') && (top == SHARED_DIR || parse_chk_dir_name(top).is_some())
        };
        let (metadata, rest): (Vec<String>, Vec<String>) = objects
            .iter()
            .map(|o| o.location.to_string())
            .filter(|k| self.prefix.relative(k).is_some_and(ours))
            .partition(|k| k.ends_with(&format!("/{METADATA_FILE}")));
        for keys in [metadata, rest] {
            self.prefix
                .bucket
                .delete_many(keys)
                .map_err(|e| self.storage_error("DELETE", &dir, &e))?;
        }
        if let Ok(mut k) = self.known.lock() {
            k.clear();
        }
        if let Ok(mut p) = self.pending_shared.lock() {
            p.clear();
        }
        Ok(())
    }

    /// The highest id under the prefix, committed or not: a new checkpoint
    /// never writes into the objects of an aborted one.
    fn max_id(&self) -> Result<CheckpointId, CheckpointError> {
        let dir = self.prefix.dir_key();
        let ids = self
            .prefix
            .bucket
            .list_dirs(&dir)
            .map_err(|e| self.storage_error("LIST", &dir, &e))?;
        Ok(ids
            .iter()
            .filter_map(|n| parse_chk_dir_name(n))
            .max()
            .unwrap_or(CheckpointId(0)))
    }

    fn location(&self) -> String {
        self.prefix.url("")
    }

    fn checkpoint_location(&self, id: CheckpointId) -> PathBuf {
        PathBuf::from(self.prefix.url(&chk_dir_name(id)))
    }

    fn blob_source(&self) -> Option<Arc<dyn BlobSource>> {
        Some(self.prefix.clone() as Arc<dyn BlobSource>)
    }

    /// Deletes the prefix's lease: the next job may start at once.
    fn release(&self) {
        if let Some(lease) = &self.lease {
            lease.release();
        }
    }
}
