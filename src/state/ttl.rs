//! State time-to-live: values that expire after a processing-time interval.
//!
//! A value's timestamp is set when it is written (and, with
//! [`TtlUpdateType::OnReadAndWrite`], when it is read). A value whose timestamp
//! plus the TTL is at or before the backend clock's current time is expired:
//! it is never returned, it is removed when accessed, and every state access
//! also checks a few further entries (an incremental sweep) so that state of
//! keys that are never accessed again does not grow without bound.

use std::time::Duration;

/// When a value's TTL timestamp is refreshed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlUpdateType {
    /// On creation and on every write.
    OnCreateAndWrite,
    /// On creation, every write and every read.
    OnReadAndWrite,
}

/// The time-to-live of a state, set on its descriptor.
///
/// # Examples
/// ```
/// use floe::state::{StateTtlConfig, TtlUpdateType, ValueStateDescriptor};
/// use std::time::Duration;
///
/// let ttl = StateTtlConfig::new(Duration::from_secs(60))
///     .update_type(TtlUpdateType::OnReadAndWrite);
/// let desc = ValueStateDescriptor::<u64>::new("last-seen").with_ttl(ttl);
/// assert_eq!(desc.name(), "last-seen");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateTtlConfig {
    /// How long a value lives after its last refresh.
    pub ttl: Duration,
    /// What refreshes it.
    pub update_type: TtlUpdateType,
    /// How many further entries each access checks for expiry.
    pub cleanup_per_access: usize,
}

impl StateTtlConfig {
    /// A TTL refreshed on create and write, sweeping 5 entries per access.
    pub fn new(ttl: Duration) -> Self {
        StateTtlConfig {
            ttl,
            update_type: TtlUpdateType::OnCreateAndWrite,
            cleanup_per_access: 5,
        }
    }

    /// Sets what refreshes a value's TTL.
    pub fn update_type(mut self, update_type: TtlUpdateType) -> Self {
        self.update_type = update_type;
        self
    }

    /// Sets how many further entries each access checks for expiry.
    pub fn cleanup_per_access(mut self, entries: usize) -> Self {
        self.cleanup_per_access = entries;
        self
    }

    /// The TTL in milliseconds (saturating).
    pub(crate) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }
}
