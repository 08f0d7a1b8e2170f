//! Operator list state: lists a non-keyed operator keeps per subtask, named by
//! descriptor and redistributed when the parallelism changes.
//!
//! As in Flink, an [`OperatorStateStore`] holds any number of named lists,
//! each registered on first use with a [`ListStateDescriptor`] and one of two
//! [`Redistribution`] modes:
//! - **even split** ([`OperatorStateStore::list_state`]): on restore at a new
//!   parallelism, the entries of every former subtask are dealt out over the
//!   new subtasks (round robin per state, so each new subtask gets ⌊n/p⌋ or
//!   ⌈n/p⌉ of a state's n entries); at the same parallelism each subtask gets
//!   its own entries back;
//! - **union** ([`OperatorStateStore::union_list_state`]): every new subtask
//!   gets the entries of all former subtasks.
//!
//! In a checkpoint each list element is one entry of the operator's
//! `split_list` or `union_list`: the bytes [`LIST_MAGIC`], a postcard header
//! `(name, type description, fingerprint)`, then the postcard element. The
//! name lets several states share the operator's lists and lets the restore
//! deal each state out separately; the fingerprint makes a restore with
//! other types a [`StateError::SchemaMismatch`] naming operator and state.
//! Restored entries stay serialized until their descriptor is first used, and
//! are carried unchanged into later snapshots if it never is.

use super::{ListStateDescriptor, StateDescriptor, StateError, StateMeta, StateValue};
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The first bytes of every operator list state entry.
pub const LIST_MAGIC: &[u8; 8] = b"floe.ols";

/// How an operator list state is redistributed on restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redistribution {
    /// The entries of all former subtasks are dealt out over the new ones.
    EvenSplit,
    /// Every new subtask gets the entries of all former subtasks.
    Union,
}

impl fmt::Display for Redistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Redistribution::EvenSplit => "even-split",
            Redistribution::Union => "union",
        })
    }
}

/// A registered list, type-erased.
trait ErasedList: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn len(&self) -> usize;
    /// Appends one entry per element to `out`.
    fn encode(
        &self,
        header: &[u8],
        meta: &StateMeta,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), StateError>;
}

struct TypedList<T>(Vec<T>);

impl<T: StateValue> ErasedList for TypedList<T> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn encode(
        &self,
        header: &[u8],
        meta: &StateMeta,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), StateError> {
        out.reserve(self.0.len());
        for v in &self.0 {
            let mut entry = Vec::with_capacity(header.len() + 16);
            entry.extend_from_slice(header);
            let entry = postcard::to_extend(v, entry).map_err(|e| StateError::Serde {
                operator: String::new(),
                state: meta.name.clone(),
                source: e.into(),
            })?;
            out.push(entry);
        }
        Ok(())
    }
}

struct Registered {
    meta: StateMeta,
    mode: Redistribution,
    list: Box<dyn ErasedList>,
}

/// Entries of one state restored but not registered yet.
struct Restored {
    mode: Redistribution,
    type_desc: String,
    fingerprint: u64,
    /// Whole entries, header included.
    entries: Vec<Vec<u8>>,
}

/// The header of an entry and the offset of its element bytes.
struct Header<'a> {
    name: &'a str,
    type_desc: &'a str,
    fingerprint: u64,
    value_at: usize,
}

fn parse_header(entry: &[u8]) -> Option<Header<'_>> {
    let rest = entry.strip_prefix(LIST_MAGIC.as_slice())?;
    let ((name, type_desc, fingerprint), tail): ((&str, &str, u64), &[u8]) =
        postcard::take_from_bytes(rest).ok()?;
    Some(Header {
        name,
        type_desc,
        fingerprint,
        value_at: entry.len() - tail.len(),
    })
}

/// The state name of an operator list state entry; `None` for entries other
/// operators wrote in their own format.
pub(crate) fn entry_state_name(entry: &[u8]) -> Option<&str> {
    parse_header(entry).map(|h| h.name)
}

/// Deals even-split list entries out over `parallelism` new subtasks.
///
/// `old` holds each former subtask's entries (by its index), `old_parallelism`
/// the former parallelism. When the parallelism is unchanged, every entry
/// goes back to its own subtask (a finished subtask restored without state
/// must not shift the others'). Otherwise entries of operator list states
/// (see [`LIST_MAGIC`]), in former-subtask order, are dealt round robin per
/// state, the deal going on from state to state so that the subtasks stay
/// balanced; other entries (sources and built-in operators writing their own
/// format) are dealt round robin over their concatenation.
pub(crate) fn deal_split_list(
    old: Vec<(u32, Vec<Vec<u8>>)>,
    old_parallelism: usize,
    parallelism: usize,
) -> Vec<Vec<Vec<u8>>> {
    let mut shares: Vec<Vec<Vec<u8>>> = vec![Vec::new(); parallelism.max(1)];
    let p = shares.len();
    let mut other = 0usize;
    let mut named: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (subtask, entries) in old {
        for e in entries {
            // Unchanged parallelism: every entry goes back to its own
            // subtask. Dealing them by position would hand a subtask another
            // one's entries as soon as a subtask recorded none (a finished
            // one, restored finished with no state).
            if old_parallelism == p && (subtask as usize) < p {
                shares[subtask as usize].push(e);
                continue;
            }
            match entry_state_name(&e).map(str::to_string) {
                None => {
                    shares[other % p].push(e);
                    other += 1;
                }
                Some(name) => named.entry(name).or_default().push(e),
            }
        }
    }
    let mut next = 0usize;
    for (_, entries) in named {
        for e in entries {
            shares[next % p].push(e);
            next += 1;
        }
    }
    shares
}

/// A subtask's operator list states.
///
/// # Examples
/// ```
/// use floe::state::{ListStateDescriptor, OperatorStateStore};
///
/// let offsets = ListStateDescriptor::<u64>::new("offsets");
/// let mut store = OperatorStateStore::new("reader");
/// store.list_state(&offsets).unwrap().add_all([3, 5]);
/// let snapshot = store.snapshot().unwrap();
///
/// let mut restored = OperatorStateStore::new("reader");
/// restored.restore(&snapshot.split, &snapshot.union).unwrap();
/// assert_eq!(restored.list_state(&offsets).unwrap().get(), &[3, 5]);
/// ```
pub struct OperatorStateStore {
    operator: String,
    states: HashMap<String, Registered>,
    restored: HashMap<String, Restored>,
}

/// The encoded entries of an [`OperatorStateStore`]: what goes into an
/// operator's `split_list` and `union_list`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorStateEntries {
    /// Entries of even-split states.
    pub split: Vec<Vec<u8>>,
    /// Entries of union states.
    pub union: Vec<Vec<u8>>,
}

impl OperatorStateStore {
    /// An empty store of operator `operator` (named in errors).
    pub fn new(operator: impl Into<String>) -> Self {
        OperatorStateStore {
            operator: operator.into(),
            states: HashMap::new(),
            restored: HashMap::new(),
        }
    }

    /// The operator the states belong to.
    pub fn operator(&self) -> &str {
        &self.operator
    }

    /// The even-split list named by `desc`, registered on first use (and
    /// filled with what was restored for it).
    pub fn list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>, StateError> {
        self.state(desc, Redistribution::EvenSplit)
    }

    /// The union list named by `desc`: on restore, every subtask gets the
    /// entries of all former subtasks.
    pub fn union_list_state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
    ) -> Result<OperatorListState<'_, T>, StateError> {
        self.state(desc, Redistribution::Union)
    }

    fn mismatch(&self, meta: &StateMeta, mode: Redistribution, found: String) -> StateError {
        StateError::SchemaMismatch {
            operator: self.operator.clone(),
            state: meta.name.clone(),
            expected: format!("{} ({mode})", meta.type_desc),
            found,
        }
    }

    fn state<T: StateValue>(
        &mut self,
        desc: &ListStateDescriptor<T>,
        mode: Redistribution,
    ) -> Result<OperatorListState<'_, T>, StateError> {
        let meta = desc.meta();
        if !self.states.contains_key(&meta.name) {
            let mut list = TypedList::<T>(Vec::new());
            if let Some(r) = self.restored.remove(&meta.name) {
                if r.fingerprint != meta.fingerprint || r.mode != mode {
                    let found = format!("{} ({})", r.type_desc, r.mode);
                    let err = self.mismatch(meta, mode, found);
                    self.restored.insert(meta.name.clone(), r);
                    return Err(err);
                }
                list.0.reserve(r.entries.len());
                for e in &r.entries {
                    let at = parse_header(e).map(|h| h.value_at).unwrap_or(e.len());
                    let v = postcard::from_bytes(&e[at..]).map_err(|err| StateError::Serde {
                        operator: self.operator.clone(),
                        state: meta.name.clone(),
                        source: err.into(),
                    })?;
                    list.0.push(v);
                }
            }
            self.states.insert(
                meta.name.clone(),
                Registered {
                    meta: meta.clone(),
                    mode,
                    list: Box::new(list),
                },
            );
        }
        let operator = &self.operator;
        let reg = self
            .states
            .get_mut(&meta.name)
            .expect("registered just above");
        let typed = if reg.meta.fingerprint == meta.fingerprint && reg.mode == mode {
            reg.list.as_any_mut().downcast_mut::<TypedList<T>>()
        } else {
            None
        };
        match typed {
            Some(list) => Ok(OperatorListState { list: &mut list.0 }),
            None => Err(StateError::SchemaMismatch {
                operator: operator.clone(),
                state: meta.name.clone(),
                expected: format!("{} ({mode})", meta.type_desc),
                found: format!("{} ({})", reg.meta.type_desc, reg.mode),
            }),
        }
    }

    /// Encodes every state: one entry per element, even-split and union
    /// states apart. Restored states never used are carried unchanged.
    pub fn snapshot(&self) -> Result<OperatorStateEntries, StateError> {
        let mut out = OperatorStateEntries::default();
        let mut names: Vec<&String> = self.states.keys().collect();
        names.sort();
        for name in names {
            let reg = &self.states[name];
            let mut header = LIST_MAGIC.to_vec();
            header = postcard::to_extend(
                &(
                    reg.meta.name.as_str(),
                    reg.meta.type_desc.as_str(),
                    reg.meta.fingerprint,
                ),
                header,
            )
            .map_err(|e| StateError::Serde {
                operator: self.operator.clone(),
                state: reg.meta.name.clone(),
                source: e.into(),
            })?;
            let target = match reg.mode {
                Redistribution::EvenSplit => &mut out.split,
                Redistribution::Union => &mut out.union,
            };
            reg.list
                .encode(&header, &reg.meta, target)
                .map_err(|e| match e {
                    StateError::Serde { state, source, .. } => StateError::Serde {
                        operator: self.operator.clone(),
                        state,
                        source,
                    },
                    other => other,
                })?;
        }
        let mut names: Vec<&String> = self.restored.keys().collect();
        names.sort();
        for name in names {
            let r = &self.restored[name];
            match r.mode {
                Redistribution::EvenSplit => out.split.extend(r.entries.iter().cloned()),
                Redistribution::Union => out.union.extend(r.entries.iter().cloned()),
            }
        }
        Ok(out)
    }

    /// Replaces every state with restored entries: this subtask's share of
    /// the even-split entries and all union entries. Entries not written by
    /// an operator state store are ignored. Every state is decoded when its
    /// descriptor is next used; a state registered before with other types
    /// than restored is a [`StateError::SchemaMismatch`] right away.
    pub fn restore(&mut self, split: &[Vec<u8>], union: &[Vec<u8>]) -> Result<(), StateError> {
        self.restored.clear();
        for (mode, entries) in [
            (Redistribution::EvenSplit, split),
            (Redistribution::Union, union),
        ] {
            for e in entries {
                let Some(h) = parse_header(e) else { continue };
                let r = self
                    .restored
                    .entry(h.name.to_string())
                    .or_insert_with(|| Restored {
                        mode,
                        type_desc: h.type_desc.to_string(),
                        fingerprint: h.fingerprint,
                        entries: Vec::new(),
                    });
                r.entries.push(e.clone());
            }
        }
        // Registered states are re-registered from the restored entries.
        let registered: Vec<(StateMeta, Redistribution)> =
            self.states.drain().map(|(_, r)| (r.meta, r.mode)).collect();
        for (meta, mode) in registered {
            if let Some(r) = self.restored.get(&meta.name)
                && (r.fingerprint != meta.fingerprint || r.mode != mode)
            {
                let found = format!("{} ({})", r.type_desc, r.mode);
                return Err(self.mismatch(&meta, mode, found));
            }
        }
        Ok(())
    }

    /// Whether no state holds an entry (restored ones included).
    pub fn is_empty(&self) -> bool {
        self.restored.values().all(|r| r.entries.is_empty())
            && self.states.values().all(|r| r.list.len() == 0)
    }
}

/// One operator list state of this subtask, from
/// `ctx.operator_list_state(&desc)` or `ctx.union_list_state(&desc)`.
///
/// It lives in memory: reads and writes cannot fail.
pub struct OperatorListState<'s, T> {
    list: &'s mut Vec<T>,
}

impl<T> OperatorListState<'_, T> {
    /// The entries, in insertion order.
    pub fn get(&self) -> &[T] {
        self.list
    }

    /// Iterates over the entries.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.list.iter()
    }

    /// Appends an entry.
    pub fn add(&mut self, value: T) {
        self.list.push(value);
    }

    /// Appends entries.
    pub fn add_all(&mut self, values: impl IntoIterator<Item = T>) {
        self.list.extend(values);
    }

    /// Replaces the entries.
    pub fn update(&mut self, values: Vec<T>) {
        *self.list = values;
    }

    /// Removes every entry and returns them.
    pub fn take(&mut self) -> Vec<T> {
        std::mem::take(self.list)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.list.clear();
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(store: &mut OperatorStateStore, values: &[u64]) -> OperatorStateEntries {
        let d = ListStateDescriptor::<u64>::new("a");
        store
            .list_state(&d)
            .unwrap()
            .add_all(values.iter().copied());
        store.snapshot().unwrap()
    }

    #[test]
    fn deal_keeps_own_entries_at_same_parallelism_and_balances_otherwise() {
        let mut s0 = OperatorStateStore::new("op");
        let mut s1 = OperatorStateStore::new("op");
        let e0 = entries(&mut s0, &[1, 2, 3]);
        let e1 = entries(&mut s1, &[4]);
        let same = deal_split_list(vec![(0, e0.split.clone()), (1, e1.split.clone())], 2, 2);
        assert_eq!(same[0], e0.split);
        assert_eq!(same[1], e1.split);
        let three = deal_split_list(vec![(0, e0.split.clone()), (1, e1.split.clone())], 2, 3);
        let sizes: Vec<usize> = three.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![2, 1, 1]);
        // Foreign entries keep the plain round robin.
        let foreign = deal_split_list(vec![(0, vec![vec![1], vec![2], vec![3]])], 1, 2);
        assert_eq!(foreign, vec![vec![vec![1], vec![3]], vec![vec![2]]]);
    }

    #[test]
    fn deal_at_same_parallelism_keeps_foreign_entries_with_their_subtask_when_one_has_none() {
        // Subtask 0 finished and recorded no state: subtask 1 and 2 keep
        // their own entries instead of shifting down by one.
        let old = vec![(1, vec![vec![1]]), (2, vec![vec![2], vec![3]])];
        let dealt = deal_split_list(old, 3, 3);
        assert_eq!(dealt, vec![vec![], vec![vec![1]], vec![vec![2], vec![3]]]);
    }

    #[test]
    fn restore_with_other_types_names_operator_and_state() {
        let mut s = OperatorStateStore::new("op");
        let e = entries(&mut s, &[7]);
        let mut r = OperatorStateStore::new("op");
        r.restore(&e.split, &e.union).unwrap();
        let as_string = ListStateDescriptor::<String>::new("a");
        let err = r.list_state(&as_string).err().unwrap();
        assert!(matches!(err, StateError::SchemaMismatch { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("'a'") && msg.contains("'op'") && msg.contains("u64"),
            "{msg}"
        );
        // Same type, other redistribution mode.
        let as_union = ListStateDescriptor::<u64>::new("a");
        assert!(r.union_list_state(&as_union).is_err());
        // The state is still there for the right descriptor.
        assert_eq!(r.list_state(&as_union).unwrap().get(), &[7]);
    }

    #[test]
    fn unused_restored_states_are_carried_into_the_next_snapshot() {
        let mut s = OperatorStateStore::new("op");
        let e = entries(&mut s, &[1, 2]);
        let mut r = OperatorStateStore::new("op");
        r.restore(&e.split, &e.union).unwrap();
        assert_eq!(r.snapshot().unwrap(), e);
        assert!(!r.is_empty());
    }
}
