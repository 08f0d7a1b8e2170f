//! What a subtask hands over when it takes part in a checkpoint.
//!
//! 1. **Capture (synchronous).** When a checkpoint's barrier is complete at a
//!    subtask (or the coordinator triggers a source), the actor walks its chain
//!    with a [`Control::Barrier`](crate::chain::Control::Barrier) event: each
//!    stateful operator adds an [`OperatorCapture`] whose `finish` closure
//!    holds cheap references (or already-encoded bytes) to its state.
//! 2. **Write (asynchronous).** The actor moves the captures to a blocking
//!    thread, where every `finish` serializes and a
//!    [`BlobSink`](super::storage::BlobSink) persists the bytes, named by
//!    [`operator_blob_name`](super::files::operator_blob_name) and
//!    [`channel_blob_name`](super::files::channel_blob_name); processing goes
//!    on meanwhile.
//! 3. **Ack.** The thread sends
//!    [`AcknowledgeCheckpoint`](super::messages::AcknowledgeCheckpoint) with
//!    the resulting [`BlobRef`]s to the coordinator.

use super::format::BlobRef;
use crate::element::StreamElement;
use crate::error::{Error, Result};
use serde::Serialize;

/// The serialized state of one operator in one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorBytes {
    /// Keyed state: a postcard `Vec<KeyGroupBytes>`-shaped blob (opaque
    /// here), or `None` without keyed state.
    pub keyed: Option<Vec<u8>>,
    /// Keyed state of earlier checkpoints this one builds on (incremental
    /// snapshots): restore applies them in order, then `keyed`.
    pub keyed_base: Vec<BlobRef>,
    /// Operator list state redistributed by even split (postcard `Vec<Vec<u8>>`).
    pub split_list: Option<Vec<u8>>,
    /// Operator list state every subtask gets whole (postcard `Vec<Vec<u8>>`).
    pub union_list: Option<Vec<u8>>,
}

/// The asynchronous part of one operator's snapshot.
pub type FinishCapture = Box<dyn FnOnce() -> Result<OperatorBytes> + Send>;

/// Told the keyed-state blobs of an operator's snapshot once they are
/// written (its `keyed_base` first, then the new one), before the ack.
pub type PersistedHook = Box<dyn FnOnce(&[BlobRef]) + Send>;

/// One operator's synchronous capture.
pub struct OperatorCapture {
    /// The operator's stable uid.
    pub uid: String,
    /// Serializes the captured state (runs off the actor's thread).
    pub finish: FinishCapture,
    /// Called with the keyed blobs once written (incremental snapshots).
    pub persisted: Option<PersistedHook>,
}

/// Everything a chain captured for one checkpoint.
#[derive(Default)]
pub struct ChainSnapshot {
    /// Per stateful operator.
    pub operators: Vec<OperatorCapture>,
    /// Unaligned checkpoints: output batches the barrier overtook, already
    /// encoded: `(writer, output channel, element bytes)` in queue order.
    pub output_channel_state: Vec<(u32, u32, Vec<u8>)>,
}

/// The persisted state of one operator in one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorHandles {
    /// The operator's uid.
    pub uid: String,
    /// Keyed state blobs, oldest first (see [`OperatorBytes::keyed_base`]).
    pub keyed: Vec<BlobRef>,
    /// Even-split list state.
    pub split_list: Option<BlobRef>,
    /// Union list state.
    pub union_list: Option<BlobRef>,
}

/// Encodes and decodes stream elements of one type: in-flight data of
/// unaligned checkpoints.
pub trait ElementCodec<T>: Send + Sync + 'static {
    /// The bytes of `element`.
    fn encode(&self, element: &StreamElement<T>) -> Result<Vec<u8>>;
    /// The element `bytes` encode.
    fn decode(&self, bytes: &[u8]) -> Result<StreamElement<T>>;
}

/// An [`ElementCodec`] for serde types, with postcard.
pub struct SerdeCodec;

impl<T: Serialize + serde::de::DeserializeOwned> ElementCodec<T> for SerdeCodec {
    fn encode(&self, element: &StreamElement<T>) -> Result<Vec<u8>> {
        postcard::to_allocvec(element)
            .map_err(|e| Error::Runtime(format!("cannot encode channel state: {e}")))
    }
    fn decode(&self, bytes: &[u8]) -> Result<StreamElement<T>> {
        postcard::from_bytes(bytes)
            .map_err(|e| Error::Runtime(format!("cannot decode channel state: {e}")))
    }
}
