//! One job per checkpoint prefix: the lease object `PREFIX/_lease`, what a
//! local checkpoint directory gets from its database's file lock.
//!
//! The lease names its holder (host, process id, a random nonce) and when
//! it expires. It is taken with a create-only write (`If-None-Match: *`)
//! and renewed, every third of its term, with a write conditional on the
//! version read (`If-Match: ETag`), so two jobs can never both believe they
//! hold it. A lease may be taken over when it expired, or when its holder
//! is a process of this host that no longer runs (a `kill -9`: the same
//! command restarted at once resumes without waiting for the term). A clean
//! stop deletes it. A holder that could not renew loses it: its commits
//! then fail, and no checkpoint of it can hide a newer holder's.

use super::client::{Bucket, block, spawn};
use crate::checkpoint::CheckpointError;
use object_store::{PutMode, UpdateVersion};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a lease holds without renewal.
const TERM: Duration = Duration::from_secs(30);

/// A held lease; dropping it releases it.
#[derive(Debug)]
pub(super) struct Lease {
    bucket: Bucket,
    key: String,
    state: Arc<LeaseState>,
}

#[derive(Debug)]
struct LeaseState {
    /// The version of the lease object this holder wrote last.
    etag: Mutex<Option<String>>,
    /// Renewal found the lease taken, or the holder released it.
    lost: AtomicBool,
    released: AtomicBool,
}

/// Who holds a lease, and until when.
#[derive(Debug, PartialEq, Eq)]
struct Holder {
    host: String,
    pid: u32,
    nonce: u64,
    expires_ms: u64,
}

impl Holder {
    fn encode(&self) -> Vec<u8> {
        format!(
            "host={}\npid={}\nnonce={}\nexpires_ms={}\n",
            self.host, self.pid, self.nonce, self.expires_ms
        )
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Holder> {
        let text = std::str::from_utf8(bytes).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        };
        Some(Holder {
            host: field("host")?.to_string(),
            pid: field("pid")?.parse().ok()?,
            nonce: field("nonce")?.parse().ok()?,
            expires_ms: field("expires_ms")?.parse().ok()?,
        })
    }

    /// Whether a new holder may take the lease from this one.
    fn vacant(&self, now_ms: u64) -> bool {
        self.expires_ms <= now_ms || (self.host == host_name() && !process_runs(self.pid))
    }
}

impl Lease {
    /// Takes the lease `key` of the prefix `prefix_url` (for messages), or
    /// says who holds it. Fails at once, with one line's worth of error,
    /// when the server cannot be reached or refuses the credentials.
    pub(super) fn acquire(
        bucket: &Bucket,
        key: String,
        prefix_url: &str,
    ) -> Result<Lease, CheckpointError> {
        let me = Holder {
            host: host_name(),
            pid: std::process::id(),
            nonce: nonce(),
            expires_ms: now_ms() + TERM.as_millis() as u64,
        };
        let etag = match bucket.put(&key, me.encode(), PutMode::Create, 1) {
            Ok(etag) => etag,
            Err(object_store::Error::AlreadyExists { .. }) => {
                let (bytes, etag) = bucket
                    .get(&key)
                    .map_err(|e| bucket.error("reading the lease", &key, &e))?;
                let holder = Holder::decode(&bytes);
                if let Some(h) = holder.as_ref().filter(|h| !h.vacant(now_ms())) {
                    return Err(CheckpointError::Storage {
                        location: prefix_url.to_string(),
                        message: format!(
                            "another job holds this checkpoint prefix (host {}, pid {}; its lease \
                             '{key}' expires in {} s unless renewed): one job per prefix",
                            h.host,
                            h.pid,
                            h.expires_ms.saturating_sub(now_ms()).div_ceil(1000)
                        ),
                    });
                }
                let update = PutMode::Update(UpdateVersion {
                    e_tag: etag,
                    version: None,
                });
                match bucket.put(&key, me.encode(), update, 1) {
                    Ok(etag) => {
                        tracing::warn!(
                            target: crate::RECOVERY_LOG_TARGET,
                            "object storage: took over the lease of {prefix_url} from {} (expired, or its process ended)",
                            holder.map_or("an unreadable holder".into(), |h| format!("host {} pid {}", h.host, h.pid))
                        );
                        etag
                    }
                    Err(object_store::Error::Precondition { .. }) => {
                        return Err(CheckpointError::Storage {
                            location: prefix_url.to_string(),
                            message: "another job took this checkpoint prefix's lease at the \
                                      same moment: one job per prefix"
                                .into(),
                        });
                    }
                    Err(e) => return Err(bucket.error("taking the lease", &key, &e)),
                }
            }
            Err(e) => return Err(bucket.error("taking the lease", &key, &e)),
        };
        let lease = Lease {
            bucket: bucket.clone(),
            key,
            state: Arc::new(LeaseState {
                etag: Mutex::new(etag),
                lost: AtomicBool::new(false),
                released: AtomicBool::new(false),
            }),
        };
        lease.renew_in_background(me);
        Ok(lease)
    }

    /// Err once the lease was lost or released: nothing may be committed
    /// any more.
    pub(super) fn check(&self) -> Result<(), CheckpointError> {
        if self.state.released.load(Ordering::Acquire) {
            return Err(CheckpointError::Storage {
                location: self.bucket.url(&self.key),
                message: "the job released its checkpoint prefix (it ended)".into(),
            });
        }
        if self.state.lost.load(Ordering::Acquire) {
            return Err(CheckpointError::Storage {
                location: self.bucket.url(&self.key),
                message: "this job lost its lease on the checkpoint prefix (not renewed in time, \
                          and another job took it)"
                    .into(),
            });
        }
        Ok(())
    }

    fn renew_in_background(&self, mut me: Holder) {
        let (bucket, key, state) = (self.bucket.clone(), self.key.clone(), self.state.clone());
        spawn(async move {
            loop {
                tokio::time::sleep(TERM / 3).await;
                if state.released.load(Ordering::Acquire) || state.lost.load(Ordering::Acquire) {
                    return;
                }
                me.expires_ms = now_ms() + TERM.as_millis() as u64;
                let etag = state.etag.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let update = PutMode::Update(UpdateVersion {
                    e_tag: etag,
                    version: None,
                });
                match bucket.put_async(&key, me.encode(), update, 1).await {
                    Ok(etag) => *state.etag.lock().unwrap_or_else(|e| e.into_inner()) = etag,
                    Err(object_store::Error::Precondition { .. })
                    | Err(object_store::Error::NotFound { .. }) => {
                        state.lost.store(true, Ordering::Release);
                        tracing::error!(
                            "object storage: lost the lease {}: another job took the prefix",
                            bucket.url(&key)
                        );
                        return;
                    }
                    Err(e) => tracing::warn!(
                        target: crate::RECOVERY_LOG_TARGET,
                        "object storage: cannot renew the lease {} ({}); trying again in {} s",
                        bucket.url(&key),
                        super::client::describe(&e),
                        (TERM / 3).as_secs()
                    ),
                }
            }
        });
    }
}

impl Lease {
    /// Gives the lease up (deletes it) unless lost; once only.
    pub(super) fn release(&self) {
        if self.state.released.swap(true, Ordering::AcqRel)
            || self.state.lost.load(Ordering::Acquire)
        {
            return;
        }
        let key = self.key.clone();
        let bucket = self.bucket.clone();
        // Best effort: an unreleased lease only makes the next job wait
        // for its term (or not at all, on this host).
        let _ = block(async move { bucket.delete_many_async(vec![key]).await });
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release();
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.write_u32(std::process::id());
    h.finish()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Whether process `pid` of this host runs (an unknown answer: it does).
fn process_runs(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        // SAFETY: signal 0 checks that the process exists; nothing is sent.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_round_trips_and_expires() {
        let h = Holder {
            host: "h".into(),
            pid: 7,
            nonce: 9,
            expires_ms: 1000,
        };
        assert_eq!(Holder::decode(&h.encode()), Some(h));
        assert_eq!(Holder::decode(b"garbage"), None);
        let other_host = Holder {
            host: format!("{}-elsewhere", host_name()),
            pid: std::process::id(),
            nonce: 1,
            expires_ms: 1000,
        };
        assert!(other_host.vacant(1000));
        assert!(!other_host.vacant(999));
        // This very process runs: its unexpired lease is not vacant.
        let me = Holder {
            host: host_name(),
            ..other_host
        };
        assert!(!me.vacant(0));
    }
}
