//! Property tests of `BarrierHandler` through a simulated subtask.
//!
//! The simulator plays the subtask's side of the contract documented in
//! `floe_actors::barrier`: per-channel FIFO input queues, random arrival
//! interleavings and random processing choices, aligned barriers fed when
//! dequeued, unaligned ones (and any barrier on a recording channel) fed on
//! arrival, channel state recorded as the contract says. Each checkpoint's
//! snapshot is then compared with the oracle: the records that precede barrier
//! n on their channel (all records of a channel that ended without it).

use floe_actors::barrier::{BarrierAction, BarrierHandler};
use floe_actors::element::{Barrier, BarrierKind};
use floe_actors::ids::CheckpointId;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const CHECKPOINTS: u64 = 3;

/// What a channel carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    Record(u32),
    Barrier(u64),
    End,
}

/// The mode under test and the extra events the simulator may inject.
#[derive(Clone, Copy, Debug)]
struct Setup {
    kind: BarrierKind,
    timeouts: bool,
    aborts: bool,
}

/// One checkpoint's life as seen by the subtask.
#[derive(Debug, Default)]
struct Checkpoint {
    /// `Snapshot`s seen: (snapshot state, unaligned).
    snapshots: Vec<(BTreeSet<u32>, bool)>,
    /// Input channel state recorded for it (only while it is pending).
    channel_state: Vec<u32>,
    completed: usize,
    cancelled: usize,
    /// Set when an event arrives after it was completed or cancelled.
    event_after_end: bool,
    /// Set when `Complete` comes before any `Snapshot`.
    complete_before_snapshot: bool,
    started: bool,
}

struct Sim {
    setup: Setup,
    handler: BarrierHandler,
    /// What is still to arrive, per channel.
    inputs: Vec<VecDeque<Elem>>,
    /// Arrived, unprocessed elements, per channel.
    queues: Vec<VecDeque<Elem>>,
    processed: BTreeSet<u32>,
    checkpoints: BTreeMap<u64, Checkpoint>,
    /// The checkpoint whose channel state is being recorded.
    recording: Option<u64>,
}

impl Sim {
    fn barrier(&self, id: u64) -> Barrier {
        Barrier {
            checkpoint_id: CheckpointId(id),
            timestamp: id as i64,
            kind: self.setup.kind,
        }
    }

    fn apply(&mut self, actions: Vec<BarrierAction>, trigger: Option<usize>) {
        for action in actions {
            match action {
                BarrierAction::Snapshot { barrier, unaligned } => {
                    let id = barrier.checkpoint_id.0;
                    let state = self.processed.clone();
                    let mut channel_state = Vec::new();
                    if unaligned {
                        for c in 0..self.queues.len() {
                            if self.handler.is_recording(c) || trigger == Some(c) {
                                channel_state.extend(records_ahead(&self.queues[c], id));
                            }
                        }
                        self.recording = Some(id);
                    }
                    let cp = self.checkpoints.entry(id).or_default();
                    cp.started = true;
                    cp.event_after_end |= cp.completed + cp.cancelled > 0;
                    cp.snapshots.push((state, unaligned));
                    cp.channel_state = channel_state;
                }
                BarrierAction::Complete(id) => {
                    let cp = self.checkpoints.entry(id.0).or_default();
                    cp.event_after_end |= cp.completed + cp.cancelled > 0;
                    cp.completed += 1;
                    cp.complete_before_snapshot |= cp.snapshots.is_empty();
                    if self.recording == Some(id.0) {
                        self.recording = None;
                    }
                }
                BarrierAction::Cancelled(id) => {
                    let cp = self.checkpoints.entry(id.0).or_default();
                    cp.event_after_end |= cp.completed + cp.cancelled > 0;
                    cp.cancelled += 1;
                    cp.channel_state.clear();
                    if self.recording == Some(id.0) {
                        self.recording = None;
                    }
                }
            }
        }
        if let Some(id) = self.handler.pending() {
            self.checkpoints.entry(id.0).or_default().started = true;
        }
    }

    /// The next element of `channel` reaches the mailbox.
    fn arrive(&mut self, channel: usize) {
        let Some(elem) = self.inputs[channel].pop_front() else {
            return;
        };
        let recording = self.handler.is_recording(channel);
        if recording && let (Elem::Record(r), Some(id)) = (elem, self.recording) {
            let cp = self.checkpoints.entry(id).or_default();
            cp.channel_state.push(r);
        }
        match elem {
            Elem::Barrier(id) if recording || self.setup.kind == BarrierKind::Unaligned => {
                let actions = self.handler.on_barrier(channel, self.barrier(id));
                self.apply(actions, Some(channel));
            }
            _ => self.queues[channel].push_back(elem),
        }
    }

    /// The subtask processes the head of `channel`'s queue.
    fn process(&mut self, channel: usize) {
        assert!(!self.handler.is_blocked(channel));
        let Some(elem) = self.queues[channel].pop_front() else {
            return;
        };
        let actions = match elem {
            Elem::Record(r) => {
                self.processed.insert(r);
                return;
            }
            Elem::Barrier(id) => self.handler.on_barrier(channel, self.barrier(id)),
            Elem::End => self.handler.on_end_of_input(channel),
        };
        self.apply(actions, Some(channel));
    }

    fn timeout(&mut self) {
        let actions = self.handler.alignment_timeout();
        let snapshot = actions.iter().find_map(|a| match a {
            BarrierAction::Snapshot { barrier, .. } => Some(barrier.checkpoint_id.0),
            _ => None,
        });
        self.apply(actions, None);
        // Barriers of the timed-out checkpoint already queued on recording
        // channels overtake the elements ahead of them.
        if let Some(id) = snapshot {
            for c in 0..self.queues.len() {
                if !self.handler.is_recording(c) {
                    continue;
                }
                if let Some(pos) = self.queues[c].iter().position(|e| *e == Elem::Barrier(id)) {
                    self.queues[c].remove(pos);
                    let actions = self.handler.on_barrier(c, self.barrier(id));
                    self.apply(actions, Some(c));
                }
            }
        }
    }

    fn abort(&mut self, id: u64) {
        let actions = self.handler.abort(CheckpointId(id));
        self.apply(actions, None);
    }

    fn step(&mut self, choice: u16) {
        let pick = (choice >> 4) as usize;
        match choice % 16 {
            0..=6 => {
                let open: Vec<usize> = (0..self.inputs.len())
                    .filter(|&c| !self.inputs[c].is_empty())
                    .collect();
                if !open.is_empty() {
                    self.arrive(open[pick % open.len()]);
                }
            }
            7..=13 => {
                let ready = self.ready();
                if !ready.is_empty() {
                    self.process(ready[pick % ready.len()]);
                }
            }
            14 if self.setup.timeouts => self.timeout(),
            15 if self.setup.aborts && pick.is_multiple_of(4) => {
                self.abort(1 + (pick as u64 / 4) % 3)
            }
            _ => {}
        }
    }

    fn ready(&self) -> Vec<usize> {
        (0..self.queues.len())
            .filter(|&c| !self.queues[c].is_empty() && !self.handler.is_blocked(c))
            .collect()
    }

    /// Runs the random choices, then drains deterministically.
    fn run(&mut self, choices: &[u16]) {
        for &choice in choices {
            self.step(choice);
        }
        loop {
            if let Some(c) = (0..self.inputs.len()).find(|&c| !self.inputs[c].is_empty()) {
                self.arrive(c);
            } else if let Some(&c) = self.ready().first() {
                self.process(c);
            } else {
                break;
            }
        }
    }
}

/// Records ahead of barrier `id` in `elems` (all of them if it is not there).
fn records_ahead<'a>(
    elems: impl IntoIterator<Item = &'a Elem>,
    id: u64,
) -> impl Iterator<Item = u32> {
    elems
        .into_iter()
        .take_while(move |e| **e != Elem::Barrier(id))
        .filter_map(|e| match e {
            Elem::Record(r) => Some(*r),
            _ => None,
        })
}

/// The oracle: records that precede barrier `id` on their channel.
fn before_barrier(channels: &[Vec<Elem>], id: u64) -> BTreeSet<u32> {
    channels
        .iter()
        .flat_map(|ch| records_ahead(ch, id))
        .collect()
}

/// K channels; each carries barriers 1..=3 in order with records between,
/// or ends (`End`) after barrier `last` < 3; a channel carrying all barriers
/// may end too.
fn channels() -> impl Strategy<Value = Vec<Vec<Elem>>> {
    let channel = (
        prop::collection::vec(0usize..4, (CHECKPOINTS + 1) as usize),
        0..=CHECKPOINTS,
        any::<bool>(),
    );
    prop::collection::vec(channel, 1..=4).prop_map(|chs| {
        let mut next = 0u32;
        chs.into_iter()
            .map(|(segments, last, end)| {
                let mut ch = Vec::new();
                for (i, &len) in segments.iter().enumerate().take(last as usize + 1) {
                    for _ in 0..len {
                        ch.push(Elem::Record(next));
                        next += 1;
                    }
                    if (i as u64) < last {
                        ch.push(Elem::Barrier(i as u64 + 1));
                    }
                }
                if last < CHECKPOINTS || end {
                    ch.push(Elem::End);
                }
                ch
            })
            .collect()
    })
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![
            Just(BarrierKind::Aligned),
            Just(BarrierKind::Savepoint),
            Just(BarrierKind::Unaligned),
            Just(BarrierKind::AtLeastOnce),
        ],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(kind, timeouts, aborts)| Setup {
            kind,
            timeouts,
            aborts,
        })
}

fn simulate(channels: &[Vec<Elem>], setup: Setup, choices: &[u16]) -> Result<(), TestCaseError> {
    let mut sim = Sim {
        setup,
        handler: BarrierHandler::new(channels.len()),
        inputs: channels
            .iter()
            .map(|c| c.iter().copied().collect())
            .collect(),
        queues: vec![VecDeque::new(); channels.len()],
        processed: BTreeSet::new(),
        checkpoints: BTreeMap::new(),
        recording: None,
    };
    sim.run(choices);

    let all: BTreeSet<u32> = before_barrier(channels, u64::MAX);
    prop_assert_eq!(&sim.processed, &all, "every record is processed");
    prop_assert_eq!(sim.handler.pending(), None);
    prop_assert!((0..channels.len()).all(|c| !sim.handler.is_blocked(c)));

    for (&id, cp) in &sim.checkpoints {
        prop_assert!(cp.started);
        prop_assert!(!cp.event_after_end, "chk-{id}: event after its end");
        prop_assert!(
            !cp.complete_before_snapshot,
            "chk-{id}: complete before snapshot"
        );
        prop_assert_eq!(cp.completed + cp.cancelled, 1, "chk-{} resolved once", id);
        prop_assert!(cp.snapshots.len() <= 1, "chk-{id}: one snapshot at most");
        if cp.completed == 0 {
            continue;
        }
        let Some((state, unaligned)) = cp.snapshots.first() else {
            return Err(TestCaseError::fail(format!(
                "chk-{id}: completed without snapshot"
            )));
        };
        let expected = before_barrier(channels, id);
        let channel_state: BTreeSet<u32> = cp.channel_state.iter().copied().collect();
        prop_assert_eq!(
            channel_state.len(),
            cp.channel_state.len(),
            "no record twice"
        );
        match setup.kind {
            BarrierKind::AtLeastOnce => {
                prop_assert!(!unaligned);
                prop_assert!(channel_state.is_empty());
                prop_assert!(state.is_superset(&expected), "chk-{id}: missing records");
            }
            BarrierKind::Aligned | BarrierKind::Savepoint | BarrierKind::Unaligned => {
                if !unaligned {
                    prop_assert!(channel_state.is_empty());
                }
                if setup.kind == BarrierKind::Unaligned {
                    prop_assert!(*unaligned);
                }
                if setup.kind == BarrierKind::Savepoint || !setup.timeouts {
                    prop_assert_eq!(*unaligned, setup.kind == BarrierKind::Unaligned);
                }
                prop_assert!(state.is_disjoint(&channel_state), "chk-{id}: overlap");
                let union: BTreeSet<u32> = state.union(&channel_state).copied().collect();
                prop_assert_eq!(&union, &expected, "chk-{} is not exact", id);
            }
        }
    }
    // Aligned checkpoints are only cancelled by aborts or, once timed out, by
    // a newer barrier: a blocked channel cannot deliver the next barrier.
    if matches!(setup.kind, BarrierKind::Aligned | BarrierKind::Savepoint)
        && !setup.aborts
        && (!setup.timeouts || setup.kind == BarrierKind::Savepoint)
    {
        prop_assert!(sim.checkpoints.values().all(|cp| cp.cancelled == 0));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn barrier_handling_is_exact(
        channels in channels(),
        setup in setup(),
        choices in prop::collection::vec(any::<u16>(), 0..200),
    ) {
        simulate(&channels, setup, &choices)?;
    }
}

/// A scripted case: two channels, unaligned, the second one backpressured.
#[test]
fn unaligned_records_backpressured_channel() {
    let channels = vec![
        vec![Elem::Record(0), Elem::Barrier(1), Elem::Record(1)],
        vec![
            Elem::Record(2),
            Elem::Record(3),
            Elem::Barrier(1),
            Elem::Record(4),
        ],
    ];
    let setup = Setup {
        kind: BarrierKind::Unaligned,
        timeouts: false,
        aborts: false,
    };
    // Arrive r0, r2, barrier 1 on channel 0 (snapshot), r3, barrier 1 on 1.
    let choices = [0x00, 0x10, 0x00, 0x10, 0x10];
    simulate(&channels, setup, &choices).expect("exact");
}
