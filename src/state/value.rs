//! [`ValueState`]: one value per key.

use super::scope::Bound;
use super::{StateError, StateKey, StateValue};

/// One value of the current key; obtained from `ctx.value_state(&desc)`.
///
/// # Examples
/// ```
/// use floe::state::{HeapStateBackend, KeyScope, ValueStateDescriptor};
///
/// let mut backend = HeapStateBackend::<u32>::single("op");
/// let desc = ValueStateDescriptor::<String>::new("name");
/// let mut s = KeyScope::new(&mut backend, &7).value_state(&desc)?;
/// assert_eq!(s.value()?, None);
/// s.update("seven".into())?;
/// assert_eq!(s.value()?.as_deref(), Some("seven"));
/// s.clear()?;
/// assert_eq!(s.value()?, None);
/// # Ok::<(), floe::state::StateError>(())
/// ```
pub struct ValueState<'s, K, T> {
    b: Bound<'s, K, T>,
}

impl<'s, K: StateKey, T: StateValue> ValueState<'s, K, T> {
    pub(crate) fn new(b: Bound<'s, K, T>) -> Self {
        ValueState { b }
    }

    /// The value, or `None` when unset or expired.
    pub fn value(&mut self) -> Result<Option<T>, StateError> {
        let b = &mut self.b;
        Ok(b.table.get(b.key_group, b.key, b.now)?.cloned())
    }

    /// Sets the value.
    pub fn update(&mut self, value: T) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.put(b.key_group, b.key, value, b.now)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<(), StateError> {
        let b = &mut self.b;
        b.table.take(b.key_group, b.key, b.now).map(drop)
    }
}
