//! Broadcast state end to end: a rules stream (a threshold per event kind)
//! broadcast to a keyed event stream. An event whose rule has not arrived
//! yet waits in keyed list state until the final watermark, so the output
//! does not depend on how the two inputs interleave; it must equal an oracle
//! computed with a plain HashMap of the rules. A savepoint taken mid-stream
//! (once every subtask had every rule) is restored at parallelism 3 and 1:
//! every subtask's restored broadcast state must equal the rules, and every
//! event checked after the restore must match the oracle, none twice. Keyed state read in `process_broadcast_element`
//! is a typed error; the non-keyed variant gets every rule in every subtask.

use crate::gated;
use floe::StreamExecutionEnvironment;
use floe::operators::broadcast::{
    BroadcastContext, BroadcastProcessFunction, BroadcastStates, KeyedBroadcastProcessFunction,
    ReadOnlyContext,
};
use floe::operators::process::OnTimerContext;
use floe::state::{ListStateDescriptor, MapStateDescriptor, StateError, ValueStateDescriptor};
use gated::{Gate, gated_generator, wait_until};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// (user, kind, amount)
type Event = (String, u32, i64);
/// (kind, threshold)
type Rule = (u32, i64);

const EVENTS: u64 = 20_000;
const KINDS: u64 = 7;

fn event(i: u64) -> Event {
    let m = floe::text::mix64(i);
    (
        format!("u{}", m % 41),
        ((m >> 8) % KINDS) as u32,
        ((m >> 20) % 1000) as i64,
    )
}

/// Rules for every kind but the last, which never gets one.
fn rules() -> Vec<Rule> {
    (0..KINDS as u32 - 1)
        .map(|k| (k, 150 + 100 * k as i64))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Out {
    /// An event and whether it reached its kind's threshold (`None`: no rule).
    Checked(String, u32, i64, Option<bool>),
    /// A subtask's broadcast state at its first event.
    Rules(Vec<Rule>),
}

fn oracle() -> Vec<Out> {
    let thresholds: HashMap<u32, i64> = rules().into_iter().collect();
    let mut out: Vec<Out> = (0..EVENTS)
        .map(event)
        .map(|(u, k, a)| {
            let flag = thresholds.get(&k).map(|t| a >= *t);
            Out::Checked(u, k, a, flag)
        })
        .collect();
    out.sort();
    out
}

#[derive(Clone)]
struct Check {
    rules: MapStateDescriptor<u32, i64>,
    pending: ListStateDescriptor<Event>,
    /// Report the broadcast state at the first event.
    dump: bool,
    dumped: bool,
    /// Rules and events processed, over all subtasks.
    rules_seen: Arc<AtomicU64>,
    events_seen: Arc<AtomicU64>,
}

impl Check {
    fn new(dump: bool) -> Self {
        Check {
            rules: MapStateDescriptor::new("rules"),
            pending: ListStateDescriptor::new("pending"),
            dump,
            dumped: false,
            rules_seen: Arc::new(AtomicU64::new(0)),
            events_seen: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl KeyedBroadcastProcessFunction<String, Event, Rule, Out> for Check {
    fn process_element(
        &mut self,
        (user, kind, amount): Event,
        ctx: &mut ReadOnlyContext<'_, '_, Out, String>,
    ) -> floe::Result<()> {
        if self.dump && !self.dumped {
            self.dumped = true;
            let mut all: Vec<Rule> = ctx
                .broadcast_state(&self.rules)?
                .iter()
                .map(|(k, t)| (*k, *t))
                .collect();
            all.sort();
            ctx.collect(Out::Rules(all));
        }
        self.events_seen.fetch_add(1, Ordering::Relaxed);
        let threshold = ctx.broadcast_state(&self.rules)?.get(&kind).copied();
        match threshold {
            Some(t) => ctx.collect(Out::Checked(user, kind, amount, Some(amount >= t))),
            None => {
                // The rule may still come: wait for the end of the input.
                ctx.list_state(&self.pending)?.add((user, kind, amount))?;
                ctx.register_event_time_timer(i64::MAX);
            }
        }
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        (kind, threshold): Rule,
        ctx: &mut BroadcastContext<'_, '_, Out, String>,
    ) -> floe::Result<()> {
        ctx.broadcast_state(&self.rules)?.put(kind, threshold);
        self.rules_seen.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _: i64,
        ctx: &mut OnTimerContext<'_, '_, Out, String>,
        broadcast: &mut BroadcastStates<'_>,
    ) -> floe::Result<()> {
        let pending = ctx.list_state(&self.pending)?.get()?;
        ctx.list_state(&self.pending)?.clear()?;
        let rules = broadcast.get(&self.rules)?;
        let checked: Vec<Out> = pending
            .into_iter()
            .map(|(u, k, a)| {
                let flag = rules.get(&k).map(|t| a >= *t);
                Out::Checked(u, k, a, flag)
            })
            .collect();
        for o in checked {
            ctx.collect(o);
        }
        Ok(())
    }
}

fn env_for(parallelism: usize, restore: Option<&Path>) -> StreamExecutionEnvironment {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    env.set_batch_size(16);
    if let Some(path) = restore {
        env.restore_from(path);
    }
    env
}

/// The job's graph: rules broadcast to events keyed by user, into `function`;
/// `rate` throttles the events.
fn build(
    env: &StreamExecutionEnvironment,
    function: Check,
    gate: Option<&Arc<Gate>>,
) -> floe::connectors::collect::Collected<Out> {
    let rules = env.from_collection(rules()).uid("rules").broadcast_state();
    let events = match gate {
        Some(g) => gated_generator(env, g, EVENTS, &[0.25], event),
        None => env.from_generator(EVENTS, event),
    };
    events
        .uid("events")
        .key_by(|e: &Event| e.0.clone())
        .connect(&rules)
        .process(function)
        .uid("check")
        .collect()
}

fn run(env: &StreamExecutionEnvironment, function: Check) -> Vec<Out> {
    let out = build(env, function, None);
    env.execute().expect("job finishes");
    let mut got = out.take();
    got.sort();
    got
}

#[test]
fn rules_broadcast_to_keyed_events_match_the_oracle() {
    for p in [1, 3] {
        let got = run(&env_for(p, None), Check::new(false));
        assert_eq!(got, oracle(), "parallelism {p}");
    }
}

/// Runs the job at parallelism 2 with events that hold at a quarter of
/// their input; once every subtask has every rule and the events hold
/// (the job is running, however fast the machine), takes a savepoint into
/// `dir` and cancels. Returns it and the events processed by then.
fn savepoint_midway(dir: &Path) -> (PathBuf, u64) {
    let env = env_for(2, None);
    let check = Check::new(false);
    let (rules_seen, events_seen) = (check.rules_seen.clone(), check.events_seen.clone());
    let gate = Gate::new();
    build(&env, check, Some(&gate));
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(2);
    wait_until("every rule in every subtask", || {
        rules_seen.load(Ordering::Relaxed) >= 2 * rules().len() as u64
    });
    // A savepoint the runtime declines is taken again.
    let mut attempts = 0;
    let path = loop {
        match futures::executor::block_on(handle.trigger_savepoint(dir)) {
            Ok(path) => break path,
            Err(e) => {
                attempts += 1;
                assert!(attempts < 5, "savepoint failed: {e}");
            }
        }
    };
    handle.cancel();
    let _ = futures::executor::block_on(handle.wait());
    (path, events_seen.load(Ordering::Relaxed))
}

#[test]
fn broadcast_state_survives_a_rescaling_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (savepoint, processed) = savepoint_midway(dir.path());
    let oracle = oracle();
    let all_rules = rules();
    for p in [3, 1] {
        let after = run(&env_for(p, Some(&savepoint)), Check::new(true));
        let dumps: Vec<&Vec<Rule>> = after
            .iter()
            .filter_map(|o| match o {
                Out::Rules(r) => Some(r),
                Out::Checked(..) => None,
            })
            .collect();
        // Every subtask had every rule at the savepoint: the restored
        // broadcast state is all of them, in every subtask.
        assert!(!dumps.is_empty() && dumps.len() <= p);
        for d in dumps {
            assert_eq!(d, &all_rules, "P=2 -> P={p}");
        }
        // Every event checked after the restore (those after the cut, and
        // those restored pending) matches the oracle, none twice.
        let checked: Vec<&Out> = after
            .iter()
            .filter(|o| matches!(o, Out::Checked(..)))
            .collect();
        assert!(
            checked.len() as u64 >= EVENTS - processed,
            "{} checked, {processed} processed before",
            checked.len()
        );
        let mut left = oracle.clone();
        for c in checked {
            let at = left
                .binary_search(c)
                .unwrap_or_else(|_| panic!("{c:?} is not in the oracle (P=2 -> P={p})"));
            left.remove(at);
        }
    }
}

/// Reads keyed state in `process_broadcast_element` and reports the error.
#[derive(Clone)]
struct ReadsKeyedState(ValueStateDescriptor<u64>);

impl KeyedBroadcastProcessFunction<String, Event, Rule, bool> for ReadsKeyedState {
    fn process_element(
        &mut self,
        _: Event,
        _: &mut ReadOnlyContext<'_, '_, bool, String>,
    ) -> floe::Result<()> {
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        _: Rule,
        ctx: &mut BroadcastContext<'_, '_, bool, String>,
    ) -> floe::Result<()> {
        let typed = matches!(
            ctx.value_state(&self.0).map(|_| ()),
            Err(floe::Error::State(StateError::NoCurrentKey { .. }))
        );
        ctx.collect(typed);
        Ok(())
    }
}

#[test]
fn keyed_state_outside_a_key_is_a_typed_error() {
    let env = env_for(2, None);
    let rule_stream = env.from_collection(rules()).broadcast_state();
    let out = env
        .from_generator(10, event)
        .key_by(|e: &Event| e.0.clone())
        .connect(&rule_stream)
        .process(ReadsKeyedState(ValueStateDescriptor::new("count")))
        .collect();
    env.execute().unwrap();
    let got = out.take();
    // Every subtask gets every rule.
    assert_eq!(got.len(), rules().len() * 2);
    assert!(got.iter().all(|t| *t), "{got:?}");
}

/// The non-keyed variant: counts the rules each subtask sees, and reports
/// the count with each element's subtask-local view at the end.
#[derive(Clone)]
struct CountRules(MapStateDescriptor<u32, i64>);

impl BroadcastProcessFunction<u64, Rule, (u32, i64)> for CountRules {
    fn process_element(
        &mut self,
        _: u64,
        _: &mut ReadOnlyContext<'_, '_, (u32, i64)>,
    ) -> floe::Result<()> {
        Ok(())
    }

    fn process_broadcast_element(
        &mut self,
        (kind, threshold): Rule,
        ctx: &mut BroadcastContext<'_, '_, (u32, i64)>,
    ) -> floe::Result<()> {
        ctx.broadcast_state(&self.0)?.put(kind, threshold);
        ctx.collect((kind, threshold));
        Ok(())
    }
}

#[test]
fn plain_stream_connected_to_a_broadcast_sees_every_rule_in_every_subtask() {
    let env = env_for(3, None);
    let rule_stream = env.from_collection(rules()).broadcast_state();
    let out = env
        .from_generator(100, |i| i)
        .connect(&rule_stream)
        .process(CountRules(MapStateDescriptor::new("rules")))
        .collect();
    env.execute().unwrap();
    let mut got = out.take();
    got.sort();
    let mut expected: Vec<Rule> = rules().into_iter().flat_map(|r| [r; 3]).collect();
    expected.sort();
    assert_eq!(got, expected);
}
