//! What a subtask hands over when it takes part in a checkpoint: the names
//! the subtask uses, kept where they were. The protocol lives in
//! [`crate::checkpoint`] (capture in [`crate::checkpoint::capture`], the
//! messages in [`crate::checkpoint::messages`]).

pub use crate::checkpoint::capture::{
    ChainSnapshot, ElementCodec, FinishCapture, OperatorBytes, OperatorCapture, OperatorHandles,
    PersistedHook, SerdeCodec,
};
pub use crate::checkpoint::format::BlobRef;
pub use crate::checkpoint::messages::{
    AcknowledgeCheckpoint, CheckpointLink, DeclineCheckpoint, NotifyCheckpoint, TriggerCheckpoint,
};
pub use crate::checkpoint::storage::BlobSink;
