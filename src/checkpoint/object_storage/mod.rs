//! Checkpoints and savepoints on S3-compatible object storage
//! (`s3://BUCKET/PREFIX`), through the `object_store` crate.
//!
//! Layout under `PREFIX` (the same names as in a local directory):
//! - `chk-<id>/<blob>`: the blobs of checkpoint `<id>`;
//! - `chk-<id>/_metadata`: its metadata (the `_metadata` encoding), the
//!   commit point;
//! - `shared/<blob>`: blobs later checkpoints may reference too;
//! - `_lease`: who writes here ([`lease`]);
//! - a savepoint: `SAVEPOINT_PREFIX/savepoint-<id>/<blob>` and
//!   `…/_metadata`, self-contained.
//!
//! Invariants, the local store's kept without rename or database:
//! - A checkpoint exists if and only if its `_metadata` object exists: it
//!   is written last, after every blob it names was checked to be there
//!   with its length, and with a create-only write (`If-None-Match: *`), so
//!   a second writer of the same id fails instead of replacing it. A
//!   `chk-<id>/` without `_metadata` is a checkpoint in progress, aborted,
//!   or whose upload was cut off: readers ignore it (a restore says so).
//! - Every blob carries its length and CRC-32, checked when read.
//! - Retention keeps the newest `retain` checkpoints: it deletes the
//!   metadata of older ones first (they stop existing), then every object
//!   under `chk-<id>/` older than the newest checkpoint and under `shared/`
//!   that no retained checkpoint references (an incremental checkpoint
//!   references its base's blobs by path: they stay while referenced).
//!   Objects of checkpoints newer than the newest complete one are in
//!   flight and left alone, so a checkpoint in progress never hides or
//!   loses the newest complete one.
//! - One job per prefix: a lease object ([`lease`]).
//! - Requests run on the storage's own runtime ([`client`]), in parallel
//!   across the subtasks' uploads and the checks of a commit, never on a
//!   thread that processes records; a transient failure is retried with a
//!   line saying so.

mod client;
mod lease;
mod savepoint;
mod storage;

pub use savepoint::ObjectSavepoint;
pub use storage::ObjectCheckpointStorage;

pub(crate) use savepoint::{is_single_snapshot, load_snapshot, open_savepoint};

use crate::checkpoint::{BlobRef, CheckpointError, CheckpointMetadata, CheckpointStorage};
use client::Bucket;
use floe_actors::checkpoint::files::corrupt;
use floe_actors::checkpoint::storage::BlobSource;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Opens the checkpoint storage `s3://BUCKET/PREFIX` named by `path`;
/// `lease`: for a job that writes (takes the prefix's lease), else to read.
pub(crate) fn open(
    path: &Path,
    lease: bool,
) -> Result<Arc<dyn CheckpointStorage>, CheckpointError> {
    let prefix = Prefix::parse(path)?;
    Ok(Arc::new(ObjectCheckpointStorage::open(prefix, lease)?))
}

/// A "directory" of a bucket: keys under `PREFIX/`.
#[derive(Clone, Debug)]
pub(crate) struct Prefix {
    bucket: Bucket,
    /// Without leading or trailing `/`; empty for the bucket's root.
    prefix: String,
}

impl Prefix {
    /// Parses `s3://BUCKET[/PREFIX]` and configures its client from the
    /// environment (no request yet).
    pub(crate) fn parse(path: &Path) -> Result<Prefix, CheckpointError> {
        let url = path.to_str().unwrap_or_default();
        let bad = |why: &str| CheckpointError::Storage {
            location: path.display().to_string(),
            message: format!("not an object storage URL ({why}): expected s3://BUCKET/PREFIX"),
        };
        let rest = url
            .strip_prefix(crate::checkpoint::location::S3_SCHEME)
            .ok_or_else(|| bad("no s3:// scheme"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty()
            || !bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        {
            return Err(bad("no valid bucket name"));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty()
            && prefix
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(bad("empty, `.` or `..` path component"));
        }
        Ok(Prefix {
            bucket: Bucket::from_env(bucket)?,
            prefix: prefix.to_string(),
        })
    }

    /// The key of `rel` (a `/`-separated path) under the prefix.
    pub(crate) fn key(&self, rel: &str) -> String {
        match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        }
    }

    /// The prefix's own "directory" key, ending with `/` (empty for the
    /// bucket's root).
    fn dir_key(&self) -> String {
        match self.prefix.is_empty() {
            true => String::new(),
            false => format!("{}/", self.prefix),
        }
    }

    /// `rel` relative to the prefix, for a key under it.
    fn relative<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.dir_key().as_str())
    }

    /// The prefix `rel` below this one.
    pub(crate) fn child(&self, rel: &str) -> Prefix {
        Prefix {
            bucket: self.bucket.clone(),
            prefix: self.key(rel),
        }
    }

    /// The prefix one level up (the bucket's root stays).
    fn parent(&self) -> Prefix {
        let prefix = self
            .prefix
            .rsplit_once('/')
            .map_or(String::new(), |(p, _)| p.to_string());
        Prefix {
            bucket: self.bucket.clone(),
            prefix,
        }
    }

    /// The last component of the prefix.
    fn name(&self) -> &str {
        self.prefix.rsplit('/').next().unwrap_or_default()
    }

    /// The URL of `rel` under the prefix (of the prefix when empty).
    pub(crate) fn url(&self, rel: &str) -> String {
        self.bucket.url(&self.key(rel))
    }

    /// The URL of `rel`, as a path (what errors and snapshots carry).
    fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(self.url(rel))
    }

    /// Checks every blob of `meta` (all read at once): present, with its
    /// length and checksum.
    fn verify_blobs(&self, meta: &CheckpointMetadata, label: &str) -> Result<(), CheckpointError> {
        let blobs: Vec<&BlobRef> = meta.blobs();
        for blob in &blobs {
            self.check_path(label, blob)?;
        }
        let keys = blobs.iter().map(|b| self.key(&b.path)).collect();
        for (blob, got) in blobs.iter().zip(self.bucket.get_many(keys)) {
            self.check_blob(label, blob, got)?;
        }
        Ok(())
    }

    fn check_path(&self, label: &str, blob: &BlobRef) -> Result<(), CheckpointError> {
        let plain = !blob.path.is_empty()
            && blob
                .path
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\\'));
        match plain {
            true => Ok(()),
            false => Err(corrupt(
                label,
                &self.path(""),
                format!("blob path '{}' is not a plain relative path", blob.path),
            )),
        }
    }

    /// The bytes of `blob` as read (`got`), checked.
    fn check_blob(
        &self,
        label: &str,
        blob: &BlobRef,
        got: object_store::Result<(Vec<u8>, Option<String>)>,
    ) -> Result<Vec<u8>, CheckpointError> {
        let path = self.path(&blob.path);
        let bytes = match got {
            Ok((bytes, _)) => bytes,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(corrupt(label, &path, "missing"));
            }
            Err(e) => return Err(self.bucket.error("GET", &self.key(&blob.path), &e)),
        };
        if bytes.len() as u64 != blob.len {
            return Err(corrupt(
                label,
                &path,
                format!("length {} bytes, expected {}", bytes.len(), blob.len),
            ));
        }
        let actual = crc32fast::hash(&bytes);
        if actual != blob.checksum {
            return Err(corrupt(
                label,
                &path,
                format!(
                    "checksum mismatch: {actual:08x}, expected {:08x}",
                    blob.checksum
                ),
            ));
        }
        Ok(bytes)
    }
}

impl BlobSource for Prefix {
    fn read_blob(&self, label: &str, blob: &BlobRef) -> Result<Vec<u8>, CheckpointError> {
        self.check_path(label, blob)?;
        let got = self.bucket.get(&self.key(&blob.path));
        self.check_blob(label, blob, got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_bucket_and_prefix() {
        let p = Prefix::parse(Path::new("s3://b/jobs/one/")).expect("parses");
        assert_eq!(p.key("chk-1/_metadata"), "jobs/one/chk-1/_metadata");
        assert_eq!(p.url(""), "s3://b/jobs/one");
        assert_eq!(p.child("savepoint-3").parent().prefix, "jobs/one");
        assert_eq!(p.relative("jobs/one/shared/x"), Some("shared/x"));
        let root = Prefix::parse(Path::new("s3://b")).expect("parses");
        assert_eq!(root.key("_lease"), "_lease");
        for bad in [
            "s3://",
            "s3:///p",
            "s3://b/a//c",
            "s3://b/../c",
            "/local/dir",
        ] {
            let e = Prefix::parse(Path::new(bad)).expect_err(bad);
            assert!(e.to_string().contains("s3://BUCKET/PREFIX"), "{bad}: {e}");
        }
    }
}
