//! Identifier newtypes.
//!
//! Every identifier that crosses a function boundary is a newtype with `Display`,
//! so an operator index can never be passed where a subtask index is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $inner:ty, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        // Serialized as the bare number: the JSON of `/status`, the events
        // and the checkpoint history stay plain numbers.
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// An operator of the job graph (one user transformation).
    OperatorId,
    u32,
    "op"
);
id_type!(
    /// The index of one parallel instance of an operator chain, `0..parallelism`.
    SubtaskIndex,
    u32,
    "#"
);
id_type!(
    /// The index of an input channel at its receiving subtask.
    ChannelId,
    u32,
    "ch"
);
id_type!(
    /// A checkpoint, numbered from 1 in trigger order.
    CheckpointId,
    u64,
    "chk-"
);
id_type!(
    /// A job vertex: one chain of operators, run by `parallelism` subtasks.
    VertexId,
    u32,
    "v"
);

impl SubtaskIndex {
    /// The index as a `usize`, for indexing vectors of subtasks.
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl ChannelId {
    /// The index as a `usize`, for indexing vectors of channels.
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}
