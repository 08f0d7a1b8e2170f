//! Partitioners: which downstream channel(s) a record goes to.
//!
//! A partitioner is created per sending subtask, so stateful ones (round robin,
//! seeded shuffle) need no locking. `connected` says which downstream subtasks
//! an upstream subtask has channels to at all (forward and rescale connect to a
//! subset; the others to every downstream subtask).

use crate::keygroup::{key_group_of_hash, subtask_for_key_group};
use std::sync::Arc;

/// Where a partitioner sends one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// To the channel with this index (into the writer's channel list).
    One(usize),
    /// To every channel.
    All,
}

/// Chooses output channels for records of type `T`.
pub trait Partitioner<T>: Send {
    /// The channel for `value`, given `channels` connected channels.
    fn select(&mut self, value: &T, channels: usize) -> Target;
}

/// Which edge pattern a partitioner uses; decides the channels of each subtask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Upstream subtask i talks to downstream subtask i only.
    Pointwise,
    /// Upstream subtasks talk to a local subset of downstream subtasks.
    Rescale,
    /// Every upstream subtask talks to every downstream subtask.
    AllToAll,
}

/// What an edge of the stream graph does with records: one variant per
/// partitioner, so a plan decides by kind (a keyed edge bounds the
/// parallelism, a default forward edge may chain) rather than by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PartitionKind {
    /// Subtask i to subtask i ([`Forward`]).
    Forward,
    /// Round robin over every downstream subtask ([`RoundRobin`]).
    Rebalance,
    /// Round robin over a local subset of downstream subtasks.
    Rescale,
    /// A seeded random downstream subtask ([`Shuffle`]).
    Shuffle,
    /// Every record to every downstream subtask ([`Broadcast`]).
    Broadcast,
    /// By key group of the record's key ([`KeyGroups`]).
    Hash,
    /// A user function chooses the channel ([`Custom`]).
    Custom,
}

impl PartitionKind {
    /// The channels this kind of edge connects.
    pub fn pattern(self) -> Pattern {
        match self {
            PartitionKind::Forward => Pattern::Pointwise,
            PartitionKind::Rescale => Pattern::Rescale,
            PartitionKind::Rebalance
            | PartitionKind::Shuffle
            | PartitionKind::Broadcast
            | PartitionKind::Hash
            | PartitionKind::Custom => Pattern::AllToAll,
        }
    }

    /// The name shown in logs and in the job's status (`"hash"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PartitionKind::Forward => "forward",
            PartitionKind::Rebalance => "rebalance",
            PartitionKind::Rescale => "rescale",
            PartitionKind::Shuffle => "shuffle",
            PartitionKind::Broadcast => "broadcast",
            PartitionKind::Hash => "hash",
            PartitionKind::Custom => "custom",
        }
    }
}

/// The downstream subtasks upstream subtask `up` (of `up_p`) is connected to.
pub fn connected(pattern: Pattern, up: usize, up_p: usize, down_p: usize) -> Vec<usize> {
    match pattern {
        Pattern::Pointwise => vec![up],
        Pattern::AllToAll => (0..down_p).collect(),
        Pattern::Rescale => {
            if up_p >= down_p {
                // Several upstream subtasks share one downstream subtask.
                vec![up * down_p / up_p]
            } else {
                // Each upstream subtask feeds a contiguous block.
                let start = up * down_p / up_p;
                let end = (up + 1) * down_p / up_p;
                (start..end).collect()
            }
        }
    }
}

/// Forward: the one connected channel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Forward;

impl<T> Partitioner<T> for Forward {
    #[inline]
    fn select(&mut self, _: &T, _: usize) -> Target {
        Target::One(0)
    }
}

/// Round robin over the connected channels (rebalance and rescale).
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl RoundRobin {
    /// Starts at `start`, so that parallel senders do not all begin at channel 0.
    pub fn starting_at(start: usize) -> Self {
        RoundRobin { next: start }
    }
}

impl<T> Partitioner<T> for RoundRobin {
    #[inline]
    fn select(&mut self, _: &T, channels: usize) -> Target {
        let c = self.next % channels;
        self.next = c + 1;
        Target::One(c)
    }
}

/// Uniformly random channel from a seeded generator (splitmix64).
#[derive(Clone, Copy, Debug)]
pub struct Shuffle {
    state: u64,
}

impl Shuffle {
    /// A shuffle partitioner with a seed; equal seeds give equal choices.
    pub fn new(seed: u64) -> Self {
        Shuffle { state: seed }
    }
}

impl<T> Partitioner<T> for Shuffle {
    #[inline]
    fn select(&mut self, _: &T, channels: usize) -> Target {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let r = crate::keygroup::fmix64(self.state);
        Target::One((r % channels as u64) as usize)
    }
}

/// Every record to every channel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Broadcast;

impl<T> Partitioner<T> for Broadcast {
    #[inline]
    fn select(&mut self, _: &T, _: usize) -> Target {
        Target::All
    }
}

/// Key-group partitioning: the stable hash of the key picks a key group, the
/// key group picks the subtask that owns it.
pub struct KeyGroups<T> {
    hash: Arc<dyn Fn(&T) -> u64 + Send + Sync>,
    max_parallelism: u32,
    /// Owner subtask of each key group, for `owners_for` channels.
    owners: Vec<u32>,
    owners_for: usize,
}

impl<T> KeyGroups<T> {
    /// Partitions by `hash` (the stable hash of the record's key).
    pub fn new(hash: Arc<dyn Fn(&T) -> u64 + Send + Sync>, max_parallelism: u32) -> Self {
        KeyGroups {
            hash,
            max_parallelism,
            owners: Vec::new(),
            owners_for: 0,
        }
    }
}

impl<T> Partitioner<T> for KeyGroups<T> {
    #[inline]
    fn select(&mut self, value: &T, channels: usize) -> Target {
        if self.owners_for != channels {
            // One table lookup per record instead of a division.
            self.owners = (0..self.max_parallelism)
                .map(|kg| subtask_for_key_group(kg, self.max_parallelism, channels as u32))
                .collect();
            self.owners_for = channels;
        }
        let kg = key_group_of_hash((self.hash)(value), self.max_parallelism);
        Target::One(self.owners[kg as usize] as usize)
    }
}

/// A user function `(record, channels) -> channel`.
pub type ChooseChannel<T> = Arc<dyn Fn(&T, usize) -> usize + Send + Sync>;

/// A user function choosing the channel index from the record.
pub struct Custom<T> {
    f: ChooseChannel<T>,
}

impl<T> Custom<T> {
    /// Partitions by `f(record, channels)`, taken modulo the channel count.
    pub fn new(f: ChooseChannel<T>) -> Self {
        Custom { f }
    }
}

impl<T> Partitioner<T> for Custom<T> {
    #[inline]
    fn select(&mut self, value: &T, channels: usize) -> Target {
        Target::One((self.f)(value, channels) % channels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescale_connects_every_downstream_once() {
        for up_p in 1..6 {
            for down_p in 1..6 {
                let mut seen = vec![0; down_p];
                for up in 0..up_p {
                    for d in connected(Pattern::Rescale, up, up_p, down_p) {
                        seen[d] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n >= 1), "{up_p}->{down_p}: {seen:?}");
                if up_p <= down_p {
                    assert!(seen.iter().all(|&n| n == 1));
                }
            }
        }
    }

    #[test]
    fn round_robin_cycles() {
        let mut rr = RoundRobin::default();
        let got: Vec<_> = (0..5)
            .map(|_| Partitioner::<u8>::select(&mut rr, &0, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1].map(Target::One).to_vec(),);
    }

    #[test]
    fn shuffle_is_seeded() {
        let pick = |seed| {
            let mut s = Shuffle::new(seed);
            (0..32)
                .map(|_| Partitioner::<u8>::select(&mut s, &0, 4))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(7), pick(7));
        assert_ne!(pick(7), pick(8));
    }
}
