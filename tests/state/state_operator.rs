//! Operator list state end to end: a non-keyed process function at
//! parallelism 2 keeps every record in two even-split list states (the
//! record, and the record tagged with the subtask that kept it) and the
//! multiples of ten in a union list state. A savepoint is taken while it
//! runs (`JobHandle::trigger_savepoint`), and jobs restored from it at
//! parallelism 3, 1 and 2 report what each subtask got back in `open`, then
//! go on with the rest of the input. Oracles, independent of where the
//! savepoint cut: each subtask holds ⌊n/p⌋ or ⌈n/p⌉ of the n restored
//! entries of a state (even split); restored plus later records are every
//! generated record exactly once; every subtask gets every restored multiple
//! of ten (union); at an unchanged parallelism each subtask gets back only
//! entries it kept itself. Restoring with another element type is a typed
//! `SchemaMismatch` naming operator and state.

use crate::gated;
use floe::StreamExecutionEnvironment;
use floe::operators::process::{OpenContext, ProcessContext, ProcessFunction};
use floe::state::{ListStateDescriptor, StateError};
use gated::{Gate, gated_generator};
use std::path::{Path, PathBuf};

const N: u64 = 20_000;

/// What a subtask saw: its index, its lists as `open` found them, and its
/// lists at the end of input.
#[derive(Clone, Debug, Default)]
struct Report {
    subtask: usize,
    opened: Lists,
    last: Lists,
    /// The operator and state a schema mismatch named.
    mismatch: Option<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Lists {
    numbers: Vec<u64>,
    /// `(subtask that kept it, record)`.
    tags: Vec<(usize, u64)>,
    seen: Vec<u64>,
}

#[derive(Clone)]
struct Keep {
    numbers: ListStateDescriptor<u64>,
    tags: ListStateDescriptor<(usize, u64)>,
    seen: ListStateDescriptor<u64>,
    report: Report,
}

impl Keep {
    fn new() -> Self {
        Keep {
            numbers: ListStateDescriptor::new("numbers"),
            tags: ListStateDescriptor::new("tags"),
            seen: ListStateDescriptor::new("seen"),
            report: Report::default(),
        }
    }

    fn lists(&self, ctx: &mut ProcessContext<'_, '_, Report>) -> floe::Result<Lists> {
        Ok(Lists {
            numbers: ctx.operator_list_state(&self.numbers)?.get().to_vec(),
            tags: ctx.operator_list_state(&self.tags)?.get().to_vec(),
            seen: ctx.union_list_state(&self.seen)?.get().to_vec(),
        })
    }
}

impl ProcessFunction<u64, Report> for Keep {
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> floe::Result<()> {
        self.report.subtask = ctx.subtask_index();
        self.report.opened = Lists {
            numbers: ctx.operator_list_state(&self.numbers)?.get().to_vec(),
            tags: ctx.operator_list_state(&self.tags)?.get().to_vec(),
            seen: ctx.union_list_state(&self.seen)?.get().to_vec(),
        };
        Ok(())
    }

    fn process_element(
        &mut self,
        x: u64,
        ctx: &mut ProcessContext<'_, '_, Report>,
    ) -> floe::Result<()> {
        ctx.operator_list_state(&self.numbers)?.add(x);
        ctx.operator_list_state(&self.tags)?
            .add((self.report.subtask, x));
        if x.is_multiple_of(10) {
            ctx.union_list_state(&self.seen)?.add(x);
        }
        Ok(())
    }

    fn on_end_of_input(&mut self, ctx: &mut ProcessContext<'_, '_, Report>) -> floe::Result<()> {
        self.report.last = self.lists(ctx)?;
        ctx.collect(self.report.clone());
        Ok(())
    }
}

/// Runs the job at parallelism 2 on a source that holds at a quarter of
/// its input, takes a savepoint into `dir` there (the job is running, with
/// records through, however fast the machine), and cancels the job.
fn savepoint_midway(dir: &Path) -> PathBuf {
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(2);
    env.set_batch_size(16);
    let gate = Gate::new();
    gated_generator(&env, &gate, N, &[0.25], |i| i)
        .uid("numbers")
        .process(Keep::new())
        .uid("keep")
        .collect();
    let handle = env.execute_async().expect("job starts");
    gate.wait_held(2);
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
    path
}

/// Runs `function` at `parallelism`, restored from `savepoint`, over the
/// rest of the input; the reports by subtask.
fn run_restored<P>(parallelism: usize, savepoint: &Path, function: P) -> floe::Result<Vec<Report>>
where
    P: ProcessFunction<u64, Report> + Clone + Sync,
{
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(parallelism);
    env.set_batch_size(64);
    env.restore_from(savepoint);
    let out = env
        .from_generator(N, |i| i)
        .uid("numbers")
        .process(function)
        .uid("keep")
        .collect();
    env.execute()?;
    let mut reports = out.take();
    reports.sort_by_key(|r| r.subtask);
    Ok(reports)
}

fn sorted<T: Ord + Clone>(v: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = v.into_iter().collect();
    v.sort();
    v
}

fn check_restored(after: &[Report], p: usize) {
    assert_eq!(after.len(), p);
    assert_eq!(
        after.iter().map(|r| r.subtask).collect::<Vec<_>>(),
        (0..p).collect::<Vec<_>>()
    );
    let restored = sorted(after.iter().flat_map(|r| r.opened.numbers.iter().copied()));
    let n = restored.len();
    assert!(n > 0, "nothing restored");
    // Both even-split states hold the same records.
    let tagged = sorted(after.iter().flat_map(|r| r.opened.tags.iter().map(|t| t.1)));
    assert_eq!(tagged, restored);
    let tens: Vec<u64> = restored.iter().copied().filter(|x| x % 10 == 0).collect();
    for r in after {
        // Even split, at a new parallelism: dealt evenly.
        for len in [r.opened.numbers.len(), r.opened.tags.len()] {
            assert!(
                p == 2 || len == n / p || len == n.div_ceil(p),
                "subtask {} of {p} got {len} of {n} entries",
                r.subtask
            );
        }
        // Union: every subtask gets all of them.
        assert_eq!(sorted(r.opened.seen.iter().copied()), tens);
        // The restored entries come first; the rest of the input follows.
        assert!(r.last.numbers.starts_with(&r.opened.numbers));
        if p == 2 {
            // Unchanged parallelism: each subtask gets its own entries back.
            assert!(r.opened.tags.iter().all(|t| t.0 == r.subtask));
        }
    }
    // Restored and later records: every record exactly once.
    let all = sorted(after.iter().flat_map(|r| r.last.numbers.iter().copied()));
    assert_eq!(all, (0..N).collect::<Vec<_>>(), "P=2 -> P={p}");
}

#[test]
fn operator_list_state_survives_a_rescaling_restore() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = savepoint_midway(dir.path());
    for p in [3, 1, 2] {
        let after = run_restored(p, &savepoint, Keep::new()).unwrap();
        check_restored(&after, p);
    }
}

/// Reads "numbers" as strings in `open` and reports the error it got.
#[derive(Clone)]
struct WrongType {
    numbers: ListStateDescriptor<String>,
    error: Option<(String, String)>,
    propagate: bool,
}

impl ProcessFunction<u64, Report> for WrongType {
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> floe::Result<()> {
        match ctx.operator_list_state(&self.numbers) {
            Err(floe::Error::State(StateError::SchemaMismatch {
                operator, state, ..
            })) if !self.propagate => {
                self.error = Some((operator, state));
                Ok(())
            }
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    fn process_element(
        &mut self,
        _: u64,
        _: &mut ProcessContext<'_, '_, Report>,
    ) -> floe::Result<()> {
        Ok(())
    }

    fn on_end_of_input(&mut self, ctx: &mut ProcessContext<'_, '_, Report>) -> floe::Result<()> {
        ctx.collect(Report {
            mismatch: self.error.clone(),
            ..Report::default()
        });
        Ok(())
    }
}

#[test]
fn restoring_with_another_type_is_a_schema_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = savepoint_midway(dir.path());
    let wrong = WrongType {
        numbers: ListStateDescriptor::new("numbers"),
        error: None,
        propagate: false,
    };
    let reports = run_restored(3, &savepoint, wrong.clone()).unwrap();
    assert_eq!(reports.len(), 3);
    for r in &reports {
        let (operator, state) = r.mismatch.clone().expect("a typed mismatch");
        assert_eq!(state, "numbers");
        assert!(operator.starts_with("Process["), "{operator}");
    }
    // Not caught, the mismatch fails the job, naming the state.
    let err = run_restored(
        3,
        &savepoint,
        WrongType {
            propagate: true,
            ..wrong
        },
    )
    .expect_err("the job fails");
    let msg = err.to_string();
    assert!(msg.contains("'numbers'") && msg.contains("u64"), "{msg}");
}

#[test]
fn operator_state_in_a_keyed_function_is_a_typed_error() {
    let env = StreamExecutionEnvironment::new();
    let desc = ListStateDescriptor::<u64>::new("buffer");
    let out = env
        .from_collection(vec![1u64, 2])
        .key_by(|x| *x)
        .process(move |_: u64, ctx: &mut ProcessContext<'_, '_, bool, u64>| {
            let typed = matches!(
                ctx.operator_list_state(&desc),
                Err(floe::Error::State(StateError::NoOperatorState { .. }))
            );
            ctx.collect(typed);
            Ok(())
        })
        .collect();
    env.execute().unwrap();
    assert_eq!(out.take(), vec![true, true]);
}
