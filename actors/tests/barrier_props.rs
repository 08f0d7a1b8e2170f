//! Property tests of the subtask's input gate, the real one the actor runs.
//!
//! Random channel contents (batches, watermarks, idleness, barriers 1..=3,
//! end of input) reach an `InputGate` in random interleavings: arrivals,
//! dequeues of the channels it says are ready, alignment timers firing,
//! aborts, a clock that jumps past the alignment timeout. The test plays the
//! chain: it executes the `GateAction`s and checks them against oracles
//! computed from the channel contents alone:
//!
//! - each completed checkpoint's snapshot plus its input channel state is
//!   exactly the records that precede barrier n on their channel (aligned:
//!   no record after a barrier is processed before the snapshot, and there
//!   is no channel state; unaligned: every pre-barrier record is processed
//!   before the snapshot or recorded, never both);
//! - every record is processed exactly once;
//! - credit: each consumed batch (not one re-injected from channel state)
//!   is returned once, in groups below the threshold;
//! - the emitted watermark is the minimum over the channels that are active
//!   or ended, strictly increasing, and never missed after a watermark or
//!   status change; idleness is reported when every live channel is idle.

use floe_actors::element::{
    Barrier, BarrierKind, MAX_WATERMARK, MIN_WATERMARK, Record, StreamElement, Timestamp,
    WatermarkStatus,
};
use floe_actors::ids::{CheckpointId, SubtaskIndex, VertexId};
use floe_actors::metrics::QueueMetrics;
use floe_actors::snapshot::{ElementCodec, SerdeCodec};
use floe_actors::subtask::gate::{GateAction, InputGate, Timeout};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHECKPOINTS: u64 = 3;

/// What a channel carries.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Elem {
    Batch(Vec<u32>),
    Watermark(Timestamp),
    Idle,
    Active,
    Barrier(u64),
    End,
}

/// The mode under test and the extra events the test may inject.
#[derive(Clone, Copy, Debug)]
struct Setup {
    kind: BarrierKind,
    /// An element codec: channel state can be recorded.
    codec: bool,
    /// An alignment timeout is configured.
    timeouts: bool,
    aborts: bool,
    credits: u32,
    /// Batches at the head of each channel that come back as restored
    /// channel state (they took no credit).
    restored: usize,
}

impl Setup {
    /// Whether a checkpoint may be taken unaligned.
    fn may_be_unaligned(&self) -> bool {
        self.codec
            && (self.kind == BarrierKind::Unaligned
                || (self.timeouts && self.kind == BarrierKind::Aligned))
    }
}

/// One checkpoint's life as the chain sees it.
#[derive(Debug, Default)]
struct Checkpoint {
    /// `Snapshot`s seen: (records processed before it, unaligned).
    snapshots: Vec<(BTreeSet<u32>, bool)>,
    /// Records of the input channel state handed over on completion.
    channel_state: Vec<u32>,
    completed: usize,
    canceled: usize,
    event_after_end: bool,
    complete_before_snapshot: bool,
}

struct Sim {
    setup: Setup,
    gate: InputGate<u32>,
    codec: Arc<dyn ElementCodec<u32>>,
    /// What is still to arrive, per channel.
    inputs: Vec<VecDeque<Elem>>,
    /// The clock is past every alignment timeout.
    late: bool,
    /// Timers the gate armed and that have not fired.
    timers: Vec<Timeout>,
    out: Vec<GateAction<u32>>,
    processed: Vec<u32>,
    checkpoints: BTreeMap<u64, Checkpoint>,
    // Credit: per channel.
    threshold: u64,
    restored_left: Vec<usize>,
    consumed: Vec<u64>,
    returned: Vec<u64>,
    // The watermark oracle: per channel, from the elements dequeued.
    watermarks: Vec<Timestamp>,
    idle: Vec<bool>,
    ended: Vec<bool>,
    emitted: Timestamp,
    idle_out: bool,
    end_of_input: usize,
}

fn barrier(kind: BarrierKind, id: u64) -> Barrier {
    Barrier {
        checkpoint_id: CheckpointId(id),
        timestamp: 1_000 * id as i64,
        kind,
    }
}

fn element(e: &Elem, kind: BarrierKind) -> StreamElement<u32> {
    match e {
        Elem::Batch(rs) => StreamElement::Records(rs.iter().map(|&r| Record::new(r)).collect()),
        Elem::Watermark(w) => StreamElement::Watermark(*w),
        Elem::Idle => StreamElement::WatermarkStatus(WatermarkStatus::Idle),
        Elem::Active => StreamElement::WatermarkStatus(WatermarkStatus::Active),
        Elem::Barrier(id) => StreamElement::Barrier(barrier(kind, *id)),
        Elem::End => StreamElement::EndOfInput,
    }
}

impl Sim {
    fn new(channels: &[Vec<Elem>], setup: Setup) -> Self {
        let n = channels.len();
        let metrics = Arc::new(QueueMetrics::new(
            VertexId(0),
            "gate",
            SubtaskIndex(0),
            n,
            Instant::now(),
        ));
        let codec: Arc<dyn ElementCodec<u32>> = Arc::new(SerdeCodec);
        let timeout = setup.timeouts.then(|| Duration::from_millis(100));
        let mut gate = InputGate::new(n, setup.credits, metrics)
            .with_checkpoints(setup.codec.then(|| codec.clone()), timeout);
        let mut inputs: Vec<VecDeque<Elem>> = channels
            .iter()
            .map(|c| c.iter().cloned().collect())
            .collect();
        let mut restored_left = vec![0; n];
        for (c, input) in inputs.iter_mut().enumerate() {
            gate.connect(c);
            // Leading batches come back as restored channel state.
            while restored_left[c] < setup.restored
                && let Some(Elem::Batch(_)) = input.front()
            {
                let e = input.pop_front().expect("a batch heads it");
                assert!(gate.restore_element(c, element(&e, setup.kind)));
                restored_left[c] += 1;
            }
        }
        Sim {
            setup,
            gate,
            codec,
            inputs,
            late: false,
            timers: Vec::new(),
            out: Vec::new(),
            processed: Vec::new(),
            checkpoints: BTreeMap::new(),
            threshold: u64::from((setup.credits / 2).max(1)),
            restored_left,
            consumed: vec![0; n],
            returned: vec![0; n],
            watermarks: vec![MIN_WATERMARK; n],
            idle: vec![false; n],
            ended: vec![false; n],
            emitted: MIN_WATERMARK,
            idle_out: false,
            end_of_input: 0,
        }
    }

    /// The minimum over the channels that are active or ended.
    fn oracle_watermark(&self) -> Option<Timestamp> {
        (0..self.watermarks.len())
            .filter(|&c| !self.idle[c] || self.ended[c])
            .map(|c| self.watermarks[c])
            .min()
    }

    /// Plays the chain: executes the gate's actions, checking them.
    fn execute(&mut self, from: Option<usize>) -> Result<(), TestCaseError> {
        for action in std::mem::take(&mut self.out) {
            match action {
                GateAction::Process(batch) => {
                    let c = from.expect("batches are processed when dequeued");
                    if self.restored_left[c] > 0 {
                        self.restored_left[c] -= 1;
                    } else {
                        self.consumed[c] += 1;
                    }
                    self.processed.extend(batch.iter().map(|r| r.value));
                }
                GateAction::ReturnCredit { channel, credits } => {
                    prop_assert_eq!(Some(channel), from, "credit of the dequeued channel");
                    self.returned[channel] += u64::from(credits);
                }
                GateAction::Watermark(wm) => {
                    prop_assert!(wm > self.emitted, "watermark went back: {wm}");
                    prop_assert_eq!(Some(wm), self.oracle_watermark(), "not the minimum");
                    self.emitted = wm;
                }
                GateAction::WatermarkStatus(status) => {
                    let idle = status == WatermarkStatus::Idle;
                    prop_assert_ne!(idle, self.idle_out, "status repeated");
                    let mut live = (0..self.idle.len()).filter(|&c| !self.ended[c]).peekable();
                    let all_idle = live.peek().is_some() && live.all(|c| self.idle[c]);
                    prop_assert_eq!(idle, all_idle);
                    self.idle_out = idle;
                }
                GateAction::EndOfInput => {
                    prop_assert!(self.ended.iter().all(|&e| e));
                    self.end_of_input += 1;
                }
                GateAction::AlignmentStarted { .. } => {}
                GateAction::ScheduleTimeout { timer, .. } => self.timers.push(timer),
                GateAction::Snapshot {
                    barrier,
                    unaligned,
                    watermark,
                    ..
                } => {
                    prop_assert_eq!(watermark, self.emitted, "the chain's watermark");
                    let state = self.processed.iter().copied().collect();
                    let cp = self.checkpoints.entry(barrier.checkpoint_id.0).or_default();
                    cp.event_after_end |= cp.completed + cp.canceled > 0;
                    cp.snapshots.push((state, unaligned));
                }
                GateAction::Complete {
                    checkpoint,
                    input_channel_state,
                } => {
                    let mut records = Vec::new();
                    for (_, bytes) in &input_channel_state {
                        if let StreamElement::Records(batch) = self.codec.decode(bytes)? {
                            records.extend(batch.iter().map(|r| r.value));
                        }
                    }
                    let cp = self.checkpoints.entry(checkpoint.0).or_default();
                    cp.event_after_end |= cp.completed + cp.canceled > 0;
                    cp.completed += 1;
                    cp.complete_before_snapshot |= cp.snapshots.is_empty();
                    cp.channel_state = records;
                }
                GateAction::Canceled(id) => {
                    let cp = self.checkpoints.entry(id.0).or_default();
                    cp.event_after_end |= cp.completed + cp.canceled > 0;
                    cp.canceled += 1;
                }
            }
        }
        if let Some(c) = from {
            prop_assert!(
                self.returned[c] <= self.consumed[c],
                "credit returned twice"
            );
            prop_assert!(
                self.consumed[c] - self.returned[c] < self.threshold,
                "credit withheld"
            );
        }
        Ok(())
    }

    /// The next element of `channel` reaches the gate.
    fn arrive(&mut self, channel: usize) -> Result<(), TestCaseError> {
        let Some(e) = self.inputs[channel].pop_front() else {
            return Ok(());
        };
        let now = if self.late { i64::MAX / 2 } else { 0 };
        self.gate
            .arrive(channel, element(&e, self.setup.kind), || now, &mut self.out)?;
        self.execute(None)
    }

    /// The subtask takes the head of `channel` (one the gate said is ready).
    fn dequeue(&mut self, channel: usize) -> Result<(), TestCaseError> {
        prop_assert!(!self.gate.is_blocked(channel));
        let before = self.emitted;
        // The oracle's view of the channel, as of this element.
        let mut watermark_event = false;
        match self.gate.front(channel) {
            Some(StreamElement::Records(_)) => self.idle[channel] = false,
            Some(StreamElement::Watermark(w)) => {
                self.watermarks[channel] = self.watermarks[channel].max(*w);
                watermark_event = true;
            }
            Some(StreamElement::WatermarkStatus(status)) => {
                self.idle[channel] = *status == WatermarkStatus::Idle;
                watermark_event = true;
            }
            Some(StreamElement::EndOfInput) => {
                self.ended[channel] = true;
                self.watermarks[channel] = MAX_WATERMARK;
            }
            Some(StreamElement::Barrier(_)) | None => {}
        }
        self.gate.dequeue(channel, &mut self.out)?;
        self.execute(Some(channel))?;
        if watermark_event && let Some(min) = self.oracle_watermark() {
            prop_assert_eq!(self.emitted, before.max(min), "a watermark was missed");
        }
        Ok(())
    }

    fn step(&mut self, choice: u16) -> Result<(), TestCaseError> {
        let pick = (choice >> 4) as usize;
        match choice % 16 {
            0..=6 => {
                let open: Vec<usize> = (0..self.inputs.len())
                    .filter(|&c| !self.inputs[c].is_empty())
                    .collect();
                if !open.is_empty() {
                    self.arrive(open[pick % open.len()])?;
                }
            }
            7..=11 => {
                if let Some(c) = self.gate.next_ready() {
                    self.dequeue(c)?;
                }
            }
            12 | 13 if !self.timers.is_empty() => {
                let timer = self.timers.remove(pick % self.timers.len());
                self.gate.on_timeout(timer, &mut self.out)?;
                self.execute(None)?;
            }
            14 if self.setup.timeouts => self.late = !self.late,
            15 if self.setup.aborts && pick.is_multiple_of(4) => {
                self.gate
                    .abort(CheckpointId(1 + (pick as u64 / 4) % 3), &mut self.out);
                self.execute(None)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Runs the random choices, then drains deterministically.
    fn run(&mut self, choices: &[u16]) -> Result<(), TestCaseError> {
        for &choice in choices {
            self.step(choice)?;
        }
        loop {
            if let Some(c) = (0..self.inputs.len()).find(|&c| !self.inputs[c].is_empty()) {
                self.arrive(c)?;
            } else if let Some(c) = self.gate.next_ready() {
                self.dequeue(c)?;
            } else {
                break;
            }
        }
        prop_assert!(!self.gate.has_queued(), "a channel stayed blocked");
        Ok(())
    }
}

/// Records ahead of barrier `id` in `elems` (all of them if it is not there).
fn records_ahead(elems: &[Elem], id: u64) -> impl Iterator<Item = u32> + '_ {
    elems
        .iter()
        .take_while(move |e| **e != Elem::Barrier(id))
        .flat_map(|e| match e {
            Elem::Batch(rs) => rs.clone(),
            _ => Vec::new(),
        })
}

/// The oracle: records that precede barrier `id` on their channel.
fn before_barrier(channels: &[Vec<Elem>], id: u64) -> BTreeSet<u32> {
    channels
        .iter()
        .flat_map(|ch| records_ahead(ch, id))
        .collect()
}

/// One segment item before numbering: a batch of `n` records, a watermark,
/// or a status change.
fn item() -> impl Strategy<Value = Elem> {
    prop_oneof![
        4 => (1usize..4).prop_map(|n| Elem::Batch(vec![0; n])),
        2 => (0i64..100).prop_map(Elem::Watermark),
        1 => Just(Elem::Idle),
        1 => Just(Elem::Active),
    ]
}

/// 1..=4 channels; each carries barriers 1..=3 in order with items between,
/// or ends (`End`) after barrier `last` < 3; a channel carrying all barriers
/// may end too. Records are numbered uniquely.
fn channels() -> impl Strategy<Value = Vec<Vec<Elem>>> {
    let channel = (
        prop::collection::vec(
            prop::collection::vec(item(), 0..4),
            (CHECKPOINTS + 1) as usize,
        ),
        0..=CHECKPOINTS,
        any::<bool>(),
    );
    prop::collection::vec(channel, 1..=4).prop_map(|chs| {
        let mut next = 0u32;
        chs.into_iter()
            .map(|(segments, last, end)| {
                let mut ch = Vec::new();
                for (i, items) in segments.into_iter().enumerate().take(last as usize + 1) {
                    for item in items {
                        ch.push(match item {
                            Elem::Batch(rs) => Elem::Batch(
                                rs.iter()
                                    .map(|_| {
                                        next += 1;
                                        next
                                    })
                                    .collect(),
                            ),
                            other => other,
                        });
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
        prop::bool::weighted(0.8),
        any::<bool>(),
        any::<bool>(),
        1u32..8,
        0usize..3,
    )
        .prop_map(|(kind, codec, timeouts, aborts, credits, restored)| Setup {
            kind,
            codec,
            timeouts,
            aborts,
            credits,
            restored,
        })
}

fn simulate(channels: &[Vec<Elem>], setup: Setup, choices: &[u16]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(channels, setup);
    sim.run(choices)?;

    let all = before_barrier(channels, u64::MAX);
    let processed: BTreeSet<u32> = sim.processed.iter().copied().collect();
    prop_assert_eq!(processed.len(), sim.processed.len(), "a record twice");
    prop_assert_eq!(&processed, &all, "every record is processed");
    prop_assert_eq!(sim.gate.pending(), None);
    let all_end = channels.iter().all(|c| c.last() == Some(&Elem::End));
    prop_assert_eq!(sim.end_of_input, usize::from(all_end));
    for c in 0..channels.len() {
        prop_assert_eq!(sim.restored_left[c], 0, "restored batches consumed first");
    }

    for (&id, cp) in &sim.checkpoints {
        prop_assert!(!cp.event_after_end, "chk-{id}: event after its end");
        prop_assert!(
            !cp.complete_before_snapshot,
            "chk-{id}: complete before snapshot"
        );
        prop_assert_eq!(cp.completed + cp.canceled, 1, "chk-{} resolved once", id);
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
            "no record twice in channel state"
        );
        if setup.kind == BarrierKind::AtLeastOnce {
            prop_assert!(!unaligned);
            prop_assert!(channel_state.is_empty());
            prop_assert!(state.is_superset(&expected), "chk-{id}: missing records");
            continue;
        }
        if !setup.may_be_unaligned() {
            prop_assert!(!unaligned, "chk-{id}: unaligned without cause");
        }
        if setup.kind == BarrierKind::Unaligned && setup.codec {
            prop_assert!(*unaligned, "chk-{id}: unaligned barrier aligned");
        }
        if !unaligned {
            prop_assert!(channel_state.is_empty());
        }
        prop_assert!(state.is_disjoint(&channel_state), "chk-{id}: overlap");
        let union: BTreeSet<u32> = state.union(&channel_state).copied().collect();
        prop_assert_eq!(&union, &expected, "chk-{} is not exact", id);
    }
    // Aligned checkpoints are only canceled by aborts or, once timed out, by
    // a newer barrier: a blocked channel cannot deliver the next barrier.
    if matches!(setup.kind, BarrierKind::Aligned | BarrierKind::Savepoint)
        && !setup.aborts
        && !setup.may_be_unaligned()
    {
        prop_assert!(sim.checkpoints.values().all(|cp| cp.canceled == 0));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn input_gate_is_exact(
        channels in channels(),
        setup in setup(),
        choices in prop::collection::vec(any::<u16>(), 0..300),
    ) {
        simulate(&channels, setup, &choices)?;
    }
}

/// A scripted case: two channels, unaligned, the second one backpressured.
#[test]
fn unaligned_records_backpressured_channel() {
    let channels = vec![
        vec![Elem::Batch(vec![1]), Elem::Barrier(1), Elem::Batch(vec![2])],
        vec![
            Elem::Batch(vec![3]),
            Elem::Batch(vec![4]),
            Elem::Barrier(1),
            Elem::Batch(vec![5]),
        ],
    ];
    let setup = Setup {
        kind: BarrierKind::Unaligned,
        codec: true,
        timeouts: false,
        aborts: false,
        credits: 2,
        restored: 0,
    };
    // Arrive 1, 3, barrier 1 on channel 0 (snapshot), 4, barrier 1 on 1.
    let choices = [0x00, 0x10, 0x00, 0x10, 0x10];
    simulate(&channels, setup, &choices).expect("exact");
}

/// A scripted case: an aligned barrier queued behind data whose alignment
/// timeout expires overtakes that data, which becomes channel state.
#[test]
fn queued_barrier_overtakes_on_timeout() {
    let channels = vec![
        vec![Elem::Batch(vec![1]), Elem::Barrier(1), Elem::Batch(vec![2])],
        vec![Elem::Batch(vec![3]), Elem::Barrier(1)],
    ];
    let setup = Setup {
        kind: BarrierKind::Aligned,
        codec: true,
        timeouts: true,
        aborts: false,
        credits: 2,
        restored: 0,
    };
    let mut sim = Sim::new(&channels, setup);
    sim.arrive(0).and_then(|_| sim.arrive(0)).expect("arrives");
    assert_eq!(sim.timers.len(), 1, "the queued barrier armed its timer");
    let timer = sim.timers.remove(0);
    sim.gate.on_timeout(timer, &mut sim.out).expect("times out");
    sim.execute(None).expect("consistent");
    let cp = &sim.checkpoints[&1];
    assert_eq!(cp.snapshots, vec![(BTreeSet::new(), true)]);
    sim.run(&[]).expect("drains");
    assert_eq!(sim.checkpoints[&1].channel_state, vec![1, 3]);
}

/// A scripted case: the alignment timeout of a pending aligned checkpoint
/// finds its barrier queued on the other channel: that barrier overtakes, so
/// what arrives after it there is not channel state.
#[test]
fn alignment_timeout_takes_queued_barrier_out() {
    let channels = vec![
        vec![Elem::Barrier(1)],
        vec![Elem::Batch(vec![1]), Elem::Barrier(1), Elem::Batch(vec![2])],
    ];
    let setup = Setup {
        kind: BarrierKind::Aligned,
        codec: true,
        timeouts: true,
        aborts: false,
        credits: 2,
        restored: 0,
    };
    let mut sim = Sim::new(&channels, setup);
    sim.arrive(0).and_then(|_| sim.dequeue(0)).expect("aligns");
    sim.arrive(1).and_then(|_| sim.arrive(1)).expect("arrives");
    let timer = sim
        .timers
        .iter()
        .position(|t| *t == Timeout::Alignment(CheckpointId(1)))
        .expect("alignment timer armed");
    let timer = sim.timers.remove(timer);
    sim.gate.on_timeout(timer, &mut sim.out).expect("times out");
    sim.execute(None).expect("consistent");
    assert_eq!(sim.checkpoints[&1].completed, 1, "complete at the timeout");
    sim.run(&[]).expect("drains");
    assert_eq!(sim.checkpoints[&1].channel_state, vec![1]);
}
