//! Windows: assigners, aggregate functions and the keyed window operator.
//!
//! Event-time semantics are Flink's: a window fires when the watermark passes
//! its `max_timestamp` (`end - 1`); with allowed lateness `L` its state is kept
//! until the watermark passes `max_timestamp + L`, and a late-but-allowed record
//! makes it fire again with the updated result. A record is late — sent to the
//! late side output — when every window it belongs to is past
//! `max_timestamp + L`.

pub mod assigner;
pub mod function;
pub mod operator;
pub mod sliced;
pub mod trigger;
pub mod triggered;

pub use assigner::{TimeWindow, WindowAssigner};
pub use function::{AggregateError, AggregateFunction, Sum, WindowFunction};
pub use trigger::{
    ContinuousEventTimeTrigger, CountEvictor, CountTrigger, EventTimeTrigger, Evictor,
    NeverTrigger, ProcessingTimeTrigger, PurgingTrigger, TimeEvictor, Trigger, TriggerContext,
    TriggerResult,
};
