//! Waking a subtask from asynchronous code running on its arbiter.
//!
//! A subtask works in self-scheduled steps; an async source or sink (a
//! future waiting on a socket or a channel) must instead tell it when
//! progress is possible, without polling with timers. This module gives
//! such code two things while its subtask's chain is being built:
//!
//! - a [`SubtaskWaker`] ([`current_waker`]): a `std::task::Waker` source
//!   that sends the subtask one [`WakeSubtask`] per arming, however often
//!   it is woken, so a busy stream costs at most one actix message per
//!   poll;
//! - a place to register a [`OutputGate`] ([`register_gate`]): an async
//!   sink's *gate*, which reports backpressure while its queue to the sink
//!   is full and "not drained" while writes are in flight, exactly like a
//!   record writer, so the subtask stops taking input and does not finish
//!   before the sink has written everything.
//!
//! Both exist only while [`building`] runs the chain's builder on the
//! subtask's arbiter: that is where a subtask's sources and operators are
//! created.

use crate::error::Error;
use crate::writer::OutputGate;
use actix::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Tells a subtask that async code made progress: a source's future may
/// have records now, a sink's queue has room again or drained. With a
/// `failure`, the async code failed and the subtask fails with it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct WakeSubtask {
    /// The error the async code failed with, if it did.
    pub failure: Option<Error>,
}

/// Wakes one subtask; coalesces wake-ups between two [`rearm`](Self::rearm)s
/// into one message.
pub struct SubtaskWaker {
    subtask: Recipient<WakeSubtask>,
    sent: AtomicBool,
}

impl SubtaskWaker {
    /// A waker for the subtask behind `subtask`.
    pub fn new(subtask: Recipient<WakeSubtask>) -> Arc<Self> {
        Arc::new(SubtaskWaker {
            subtask,
            sent: AtomicBool::new(false),
        })
    }

    /// Lets the next wake-up send a message again. Call it right before
    /// polling the future this waker is given to: a wake-up after that
    /// point reaches the subtask, earlier ones were already delivered.
    pub fn rearm(&self) {
        self.sent.store(false, Ordering::Release);
    }

    /// Wakes the subtask (at most once per arming).
    pub fn wake_subtask(&self) {
        if !self.sent.swap(true, Ordering::AcqRel) {
            self.subtask.do_send(WakeSubtask { failure: None });
        }
    }

    /// Fails the subtask with `error` (async code the subtask relies on
    /// failed where no call of the subtask could return the error).
    pub fn fail_subtask(&self, error: Error) {
        self.subtask.do_send(WakeSubtask {
            failure: Some(error),
        });
    }

    /// A `std::task::Waker` that wakes the subtask.
    pub fn waker(self: &Arc<Self>) -> std::task::Waker {
        std::task::Waker::from(self.clone())
    }
}

impl std::task::Wake for SubtaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_subtask();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_subtask();
    }
}

struct Building {
    subtask: Recipient<WakeSubtask>,
    gates: Vec<Rc<RefCell<dyn OutputGate>>>,
}

thread_local! {
    static BUILDING: RefCell<Option<Building>> = const { RefCell::new(None) };
}

/// Runs `build` (a subtask's chain builder) with `subtask` as the current
/// subtask of this thread; returns its result and the gates registered
/// meanwhile. Called by the subtask actor only.
pub fn building<R>(
    subtask: Recipient<WakeSubtask>,
    build: impl FnOnce() -> R,
) -> (R, Vec<Rc<RefCell<dyn OutputGate>>>) {
    let outer = BUILDING.with(|b| {
        b.borrow_mut().replace(Building {
            subtask,
            gates: Vec::new(),
        })
    });
    // Restores the outer state even if `build` unwinds.
    struct Reset(Option<Option<Building>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                BUILDING.with(|b| *b.borrow_mut() = outer);
            }
        }
    }
    let mut reset = Reset(Some(outer));
    let r = build();
    let outer = reset.0.take().expect("reset runs once");
    let ours = BUILDING.with(|b| std::mem::replace(&mut *b.borrow_mut(), outer));
    (r, ours.map(|b| b.gates).unwrap_or_default())
}

/// A waker for the subtask whose chain is being built on this thread;
/// `None` outside a chain's build.
pub fn current_waker() -> Option<Arc<SubtaskWaker>> {
    BUILDING.with(|b| {
        b.borrow()
            .as_ref()
            .map(|b| SubtaskWaker::new(b.subtask.clone()))
    })
}

/// Registers `gate` with the subtask whose chain is being built on this
/// thread: the subtask takes no input while it is
/// [`backpressured`](OutputGate::backpressured) and does not finish
/// before it is [`drained`](OutputGate::drained). A gate wakes the
/// subtask (see [`current_waker`]) when either changes. Returns false
/// outside a chain's build.
pub fn register_gate(gate: Rc<RefCell<dyn OutputGate>>) -> bool {
    BUILDING.with(|b| match b.borrow_mut().as_mut() {
        Some(b) => {
            b.gates.push(gate);
            true
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sink(std::sync::Mutex<Vec<bool>>);
    impl Actor for SinkActor {
        type Context = Context<Self>;
    }
    struct SinkActor(Arc<Sink>);
    impl Handler<WakeSubtask> for SinkActor {
        type Result = ();
        fn handle(&mut self, msg: WakeSubtask, _: &mut Context<Self>) {
            self.0
                .0
                .lock()
                .expect("test lock")
                .push(msg.failure.is_some());
        }
    }

    #[test]
    fn wake_ups_between_two_arms_send_one_message() {
        let seen = Arc::new(Sink(std::sync::Mutex::new(Vec::new())));
        let sys = actix::System::new();
        let seen2 = seen.clone();
        sys.block_on(async move {
            let addr = SinkActor(seen2).start();
            let w = SubtaskWaker::new(addr.clone().recipient());
            let waker = w.waker();
            waker.wake_by_ref();
            waker.wake_by_ref();
            w.rearm();
            waker.wake_by_ref();
            // A message sent after the ones above arrives after them.
            let _ = addr
                .send(WakeSubtask {
                    failure: Some(Error::Runtime("x".into())),
                })
                .await;
        });
        assert_eq!(*seen.0.lock().expect("test lock"), vec![false, false, true]);
    }

    #[test]
    fn current_waker_exists_only_while_building() {
        let sys = actix::System::new();
        sys.block_on(async {
            let addr = SinkActor(Arc::new(Sink(Default::default()))).start();
            assert!(current_waker().is_none());
            let (inside, gates) = building(addr.recipient(), || current_waker().is_some());
            assert!(inside);
            assert!(gates.is_empty());
            assert!(current_waker().is_none());
        });
    }
}
