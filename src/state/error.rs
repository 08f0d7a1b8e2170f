//! The errors of keyed state: misuse, schema mismatches and bad snapshots.
//!
//! Every variant that concerns a registered state names the operator and the
//! state, so a failed restore says which descriptor disagrees with the stored
//! bytes.

/// What can go wrong when reading, writing, snapshotting or restoring state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Keyed state was requested where there is no current key (a non-keyed
    /// stream's `process`, or `on_end_of_input`).
    #[error("keyed state '{state}' is only available on keyed streams: use key_by(..).process(..)")]
    NotKeyed {
        /// The state asked for.
        state: String,
    },
    /// Keyed state was requested while no key is current: in
    /// `process_broadcast_element` of a keyed broadcast process function.
    #[error(
        "keyed state '{state}' was requested with no current key (process_broadcast_element has none): read keyed state in process_element"
    )]
    NoCurrentKey {
        /// The state asked for.
        state: String,
    },
    /// Operator (non-keyed) state was requested where there is none: in a
    /// keyed process function.
    #[error(
        "operator state '{state}' is only available in non-keyed process functions (DataStream::process)"
    )]
    NoOperatorState {
        /// The state asked for.
        state: String,
    },
    /// A state was registered (or restored) with other types than before.
    #[error(
        "state '{state}' of operator '{operator}' has type {found}, but the descriptor asks for {expected}"
    )]
    SchemaMismatch {
        /// The operator owning the state.
        operator: String,
        /// The state's name.
        state: String,
        /// What the descriptor declares.
        expected: String,
        /// What the registered or restored state holds.
        found: String,
    },
    /// A key belongs to a key group that this subtask does not own.
    #[error(
        "operator '{operator}': key group {key_group} is outside this subtask's range {start}..{end}"
    )]
    KeyGroupOutOfRange {
        /// The operator owning the state.
        operator: String,
        /// The key group.
        key_group: u32,
        /// First key group owned.
        start: u32,
        /// One past the last key group owned.
        end: u32,
    },
    /// Values could not be serialized or deserialized.
    #[error("operator '{operator}', state '{state}': {source}")]
    Serde {
        /// The operator owning the state.
        operator: String,
        /// The state's name (empty for a whole key group).
        state: String,
        /// The encoding's error (postcard's), kept as the error's source.
        #[source]
        source: BoxError,
    },
    /// A snapshot was written in a format this build cannot read.
    #[error("operator '{operator}': state snapshot format version {found}, expected {expected}")]
    FormatVersion {
        /// The operator owning the state.
        operator: String,
        /// The version in the bytes.
        found: u32,
        /// The version this build writes.
        expected: u32,
    },
    /// The storage of a backend (the redb database file) failed.
    #[error("operator '{operator}': state storage: {source}")]
    Storage {
        /// The operator owning the state.
        operator: String,
        /// What failed (the storage's error), kept as the error's source.
        #[source]
        source: BoxError,
    },
}

/// An underlying error kept as a source (postcard's, redb's, I/O).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
