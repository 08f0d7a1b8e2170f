//! The `_metadata` encoding of checkpoints and savepoints alike: the magic
//! bytes `FLOECKPT`, the format version ([`CHECKPOINT_FORMAT_VERSION`]) as a
//! `u32` LE, the body length as a `u64` LE, the CRC-32 of the body as a `u32`
//! LE, then the body: the postcard bytes of [`CheckpointMetadata`].

use super::error::CheckpointError;
use super::files::{corrupt, io_err, read_blob_checked};
use super::format::{CHECKPOINT_FORMAT_VERSION, CheckpointMetadata};
use std::fs;
use std::path::Path;

/// The magic bytes opening every `_metadata` file.
pub const METADATA_MAGIC: &[u8; 8] = b"FLOECKPT";

const HEADER_LEN: usize = 8 + 4 + 8 + 4;

/// Whether `meta` may be committed to a checkpoint store (local or object
/// storage): a checkpoint, not a savepoint, of this format version.
pub fn check_committable(meta: &CheckpointMetadata) -> Result<(), CheckpointError> {
    let failed = |message: String| CheckpointError::Failed {
        checkpoint: meta.id,
        message,
    };
    if meta.kind != super::format::SnapshotKind::Checkpoint {
        return Err(failed(
            "a savepoint cannot be committed to a checkpoint store".into(),
        ));
    }
    if meta.version != CHECKPOINT_FORMAT_VERSION {
        return Err(failed(format!(
            "metadata has format version {}, expected {CHECKPOINT_FORMAT_VERSION}",
            meta.version
        )));
    }
    Ok(())
}

/// Refuses a blob of checkpoint `checkpoint` given to savepoint
/// `savepoint`: a savepoint holds its own blobs.
pub fn check_savepoint_blob(
    savepoint: crate::ids::CheckpointId,
    checkpoint: crate::ids::CheckpointId,
) -> Result<(), CheckpointError> {
    if checkpoint == savepoint {
        return Ok(());
    }
    Err(CheckpointError::Failed {
        checkpoint,
        message: format!("a blob given to savepoint {}", savepoint.0),
    })
}

/// Encodes `meta` as a `_metadata` file (see the module documentation).
pub fn encode_metadata(meta: &CheckpointMetadata) -> Vec<u8> {
    let body = postcard::to_stdvec(meta).expect("postcard serializes plain data into a Vec");
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(METADATA_MAGIC);
    out.extend_from_slice(&CHECKPOINT_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes a `_metadata` file's bytes: checks the magic, the version
/// (`Version`), the length (truncated: `Corrupt`) and the checksum
/// (`Corrupt`). `checkpoint` and `file` name the snapshot in errors.
pub fn decode_metadata(
    bytes: &[u8],
    checkpoint: &str,
    file: &Path,
) -> Result<CheckpointMetadata, CheckpointError> {
    let bad = |reason: String| corrupt(checkpoint, file, reason);
    if bytes.len() < METADATA_MAGIC.len() || &bytes[..METADATA_MAGIC.len()] != METADATA_MAGIC {
        return Err(bad("not a floe checkpoint metadata file (bad magic)".into()));
    }
    if bytes.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated: {} bytes, shorter than the header",
            bytes.len()
        )));
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != CHECKPOINT_FORMAT_VERSION {
        return Err(CheckpointError::Version {
            checkpoint: checkpoint.to_string(),
            found: version,
            expected: CHECKPOINT_FORMAT_VERSION,
        });
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let checksum = u32_at(20);
    let body = &bytes[HEADER_LEN..];
    if body.len() as u64 != len {
        let what = if (body.len() as u64) < len {
            "truncated"
        } else {
            "trailing bytes"
        };
        return Err(bad(format!(
            "{what}: body has {} bytes, header says {len}",
            body.len()
        )));
    }
    let actual = crc32fast::hash(body);
    if actual != checksum {
        return Err(bad(format!(
            "checksum mismatch: {actual:08x}, expected {checksum:08x}"
        )));
    }
    let meta: CheckpointMetadata =
        postcard::from_bytes(body).map_err(|e| bad(format!("cannot decode: {e}")))?;
    if meta.version != CHECKPOINT_FORMAT_VERSION {
        return Err(CheckpointError::Version {
            checkpoint: checkpoint.to_string(),
            found: meta.version,
            expected: CHECKPOINT_FORMAT_VERSION,
        });
    }
    Ok(meta)
}

/// Reads and decodes the `_metadata` file `file`.
pub fn read_metadata_file(
    file: &Path,
    checkpoint: &str,
) -> Result<CheckpointMetadata, CheckpointError> {
    let bytes = match fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(checkpoint, file, "missing"));
        }
        Err(e) => return Err(io_err("read", file, e)),
    };
    decode_metadata(&bytes, checkpoint, file)
}

/// Checks every blob of `meta` under `root` (length and checksum).
pub fn verify_blobs(
    root: &Path,
    meta: &CheckpointMetadata,
    checkpoint: &str,
) -> Result<(), CheckpointError> {
    for blob in meta.blobs() {
        read_blob_checked(root, blob, checkpoint)?;
    }
    Ok(())
}
